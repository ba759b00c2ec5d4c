//! Reading a HuggingFace `tokenizer.json` (byte-level BPE) and writing it as
//! an image's tokenizer section (`ferrite::tokenizer::BpeTokenizer`,
//! `docs/image-format.md`).
//!
//! Accepted: `model.type` `"BPE"` with a `ByteLevel` pre-tokenizer
//! (`use_regex: true`, `add_prefix_space: false`) and a `ByteLevel` decoder.
//! Anything else that would change the ids is refused with a one-line reason
//! naming the field. Special added tokens are kept as vocabulary entries but
//! never matched in text (HF's `encode_special_tokens = True`).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use ferrite::tokenizer::{section_len, BPE_FLAG_GPT2_SPLIT, BPE_MAX_PIECE};
use serde_json::Value;

/// A byte-level BPE tokenizer, in ids and raw bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct BpeSpec {
    /// Raw bytes of every token, by id (dense).
    pub tokens: Vec<Vec<u8>>,
    /// Merges in rank order: (left, right, merged).
    pub merges: Vec<(u32, u32, u32)>,
}

/// GPT-2's `bytes_to_unicode`: the printable character that stands for each byte.
pub fn byte_to_char() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..256u32 {
        let printable = (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
        table[b as usize] = if printable {
            char::from_u32(b).unwrap()
        } else {
            n += 1;
            char::from_u32(255 + n).unwrap()
        };
    }
    table
}

/// Undoes the byte-to-unicode mapping of a vocabulary entry.
fn unmap(token: &str, inverse: &BTreeMap<char, u8>) -> Result<Vec<u8>> {
    token
        .chars()
        .map(|c| {
            inverse.get(&c).copied().with_context(|| {
                format!("vocabulary entry {token:?} has character {c:?}, which is not byte-level")
            })
        })
        .collect()
}

fn field<'v>(v: &'v Value, path: &str) -> &'v Value {
    path.split('.')
        .fold(v, |v, key| v.get(key).unwrap_or(&Value::Null))
}

/// Requires `path` to be absent, null, or one of `allowed`.
fn require(v: &Value, path: &str, allowed: &[Value], why: &str) -> Result<()> {
    let got = field(v, path);
    if got.is_null() || allowed.contains(got) {
        return Ok(());
    }
    bail!("tokenizer.json: {path} = {got} is not supported ({why})")
}

/// Parses a `tokenizer.json` value.
pub fn parse(v: &Value) -> Result<BpeSpec> {
    let model_type = field(v, "model.type");
    if model_type != "BPE" {
        bail!(
            "tokenizer.json: model.type = {model_type} is not supported (only byte-level \"BPE\")"
        );
    }
    let pre = field(v, "pre_tokenizer");
    if field(pre, "type") != "ByteLevel" {
        bail!(
            "tokenizer.json: pre_tokenizer = {} is not supported (only ByteLevel with use_regex true)",
            compact(pre)
        );
    }
    if field(pre, "use_regex") != &Value::Bool(true) {
        bail!("tokenizer.json: pre_tokenizer.use_regex must be true (GPT-2 split; ferrite bounds pieces to {BPE_MAX_PIECE} bytes)");
    }
    if field(pre, "add_prefix_space") != &Value::Bool(false) {
        bail!("tokenizer.json: pre_tokenizer.add_prefix_space = true is not supported (it changes the ids of the first word)");
    }
    let dec = field(v, "decoder");
    if field(dec, "type") != "ByteLevel" {
        bail!(
            "tokenizer.json: decoder = {} is not supported (only ByteLevel)",
            compact(dec)
        );
    }
    let f = Value::Bool(false);
    let empty = Value::String(String::new());
    require(
        v,
        "normalizer",
        &[],
        "normalizers change the text before encoding",
    )?;
    require(v, "truncation", &[], "truncation drops ids")?;
    require(v, "padding", &[], "padding adds ids")?;
    let post = field(v, "post_processor");
    if !post.is_null() && field(post, "type") != "ByteLevel" {
        bail!(
            "tokenizer.json: post_processor = {} is not supported (it adds ids; only ByteLevel or null)",
            compact(post)
        );
    }
    require(
        v,
        "model.dropout",
        &[Value::from(0.0)],
        "dropout makes encoding random",
    )?;
    require(
        v,
        "model.byte_fallback",
        std::slice::from_ref(&f),
        "byte-level BPE needs no byte fallback",
    )?;
    require(
        v,
        "model.ignore_merges",
        std::slice::from_ref(&f),
        "whole-word lookup is not implemented",
    )?;
    require(
        v,
        "model.continuing_subword_prefix",
        std::slice::from_ref(&empty),
        "not byte-level",
    )?;
    require(v, "model.end_of_word_suffix", &[empty], "not byte-level")?;

    let inverse: BTreeMap<char, u8> = byte_to_char()
        .iter()
        .enumerate()
        .map(|(b, &c)| (c, b as u8))
        .collect();
    let vocab = field(v, "model.vocab")
        .as_object()
        .context("tokenizer.json: model.vocab is not an object")?;
    let mut by_id: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
    let mut id_of: BTreeMap<String, u32> = BTreeMap::new();
    for (token, id) in vocab {
        let id = id
            .as_u64()
            .and_then(|i| u32::try_from(i).ok())
            .with_context(|| format!("tokenizer.json: model.vocab[{token:?}] is not an id"))?;
        if by_id.insert(id, unmap(token, &inverse)?).is_some() {
            bail!("tokenizer.json: model.vocab gives id {id} twice");
        }
        id_of.insert(token.clone(), id);
    }
    if let Some(added) = field(v, "added_tokens").as_array() {
        for t in added {
            let content = field(t, "content")
                .as_str()
                .context("tokenizer.json: added_tokens entry without content")?;
            let id = field(t, "id")
                .as_u64()
                .and_then(|i| u32::try_from(i).ok())
                .context("tokenizer.json: added_tokens entry without id")?;
            if field(t, "special") != &Value::Bool(true) {
                bail!("tokenizer.json: added_tokens {content:?} is not special: the encoder would have to match it in text (not supported)");
            }
            // Special tokens are never matched in text; decoding gives their content.
            match by_id.get(&id) {
                Some(bytes) if id_of.get(content) == Some(&id) || bytes == content.as_bytes() => {}
                Some(_) => {
                    bail!("tokenizer.json: added token {content:?} reuses id {id} of another token")
                }
                None => {
                    by_id.insert(id, content.as_bytes().to_vec());
                }
            }
        }
    }
    let count = by_id.len() as u32;
    if let Some((&last, _)) = by_id.last_key_value() {
        if last + 1 != count {
            let gap = (0..count).find(|i| !by_id.contains_key(i)).unwrap_or(count);
            bail!("tokenizer.json: token ids are not dense (no token has id {gap})");
        }
    }
    let tokens: Vec<Vec<u8>> = by_id.into_values().collect();
    for b in 0..=255u8 {
        if !tokens.iter().any(|t| t == &[b]) {
            bail!("tokenizer.json: the vocabulary lacks the byte {b:#04x} (not a complete byte-level BPE)");
        }
    }

    let mut merges = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let list = field(v, "model.merges")
        .as_array()
        .context("tokenizer.json: model.merges is not a list")?;
    for (rank, m) in list.iter().enumerate() {
        let (l, r) = match m {
            Value::String(s) => s
                .split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .with_context(|| format!("tokenizer.json: merge {s:?} is not \"left right\""))?,
            Value::Array(a) if a.len() == 2 && a.iter().all(Value::is_string) => (
                a[0].as_str().unwrap().to_string(),
                a[1].as_str().unwrap().to_string(),
            ),
            other => bail!("tokenizer.json: merge {other} is not a pair"),
        };
        let id = |s: &str| {
            id_of.get(s).copied().with_context(|| {
                format!("tokenizer.json: merge #{rank} names {s:?}, which is not in model.vocab")
            })
        };
        let (li, ri, oi) = (id(&l)?, id(&r)?, id(&format!("{l}{r}"))?);
        if !seen.insert((li, ri)) {
            bail!("tokenizer.json: merge #{rank} ({l:?}, {r:?}) repeats an earlier merge");
        }
        merges.push((li, ri, oi));
    }
    Ok(BpeSpec { tokens, merges })
}

fn compact(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 80 {
        format!("{}...", s.chars().take(77).collect::<String>())
    } else {
        s
    }
}

/// Reads and parses `path`.
pub fn read(path: &Path) -> Result<BpeSpec> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let v: Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON", path.display()))?;
    parse(&v)
}

impl BpeSpec {
    /// The tokenizer section of an image (a multiple of 4 bytes).
    pub fn section(&self) -> Vec<u8> {
        let mut words: Vec<u32> = Vec::new();
        let nbytes: usize = self.tokens.iter().map(Vec::len).sum();
        words.extend([
            self.tokens.len() as u32,
            self.merges.len() as u32,
            BPE_FLAG_GPT2_SPLIT,
            nbytes as u32,
        ]);
        for b in 0..=255u8 {
            let id = self.tokens.iter().position(|t| t == &[b]).unwrap_or(0);
            words.push(id as u32);
        }
        let mut off = 0u32;
        words.push(0);
        for t in &self.tokens {
            off += t.len() as u32;
            words.push(off);
        }
        let mut sorted: Vec<(u32, u32, u32, u32)> = self
            .merges
            .iter()
            .enumerate()
            .map(|(rank, &(l, r, o))| (l, r, o, rank as u32))
            .collect();
        sorted.sort_unstable();
        for (l, r, o, rank) in sorted {
            words.extend([l, r, o, rank]);
        }
        let mut bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        for t in &self.tokens {
            bytes.extend_from_slice(t);
        }
        bytes.resize(bytes.len().next_multiple_of(4), 0);
        debug_assert_eq!(
            Some(bytes.len()),
            section_len(self.tokens.len(), self.merges.len(), nbytes)
        );
        bytes
    }
}
