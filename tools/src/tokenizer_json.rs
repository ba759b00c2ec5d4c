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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A complete byte-level BPE in tokenizer.json's form: byte `b` is token
    /// `b` (spelled with GPT-2's character for it), then "Ġt" (256), "he"
    /// (257) and "Ġthe" (258) by three merges, and the special
    /// `<|endoftext|>` (259), an added token only.
    fn tokenizer() -> Value {
        let mut vocab: serde_json::Map<String, Value> = byte_to_char()
            .iter()
            .enumerate()
            .map(|(b, c)| (c.to_string(), json!(b)))
            .collect();
        for (token, id) in [("Ġt", 256), ("he", 257), ("Ġthe", 258)] {
            vocab.insert(token.into(), json!(id));
        }
        json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": [{"id": 259, "content": "<|endoftext|>", "special": true}],
            "normalizer": null,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
            "post_processor": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
            "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
            "model": {
                "type": "BPE", "dropout": null, "unk_token": null,
                "continuing_subword_prefix": "", "end_of_word_suffix": "",
                "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                "vocab": vocab,
                "merges": ["Ġ t", "h e", "Ġt he"]
            }
        })
    }

    /// `tokenizer()` with the field at `pointer` set to `value`, parsed.
    fn parse_with(pointer: &str, value: Value) -> Result<BpeSpec> {
        let mut v = tokenizer();
        *v.pointer_mut(pointer).expect(pointer) = value;
        parse(&v)
    }

    /// The error of parsing `tokenizer()` with `pointer` set to `value`.
    fn refusal(pointer: &str, value: Value) -> String {
        parse_with(pointer, value).unwrap_err().to_string()
    }

    /// GPT-2's `bytes_to_unicode` (encoder.py): the printable bytes '!'..='~',
    /// '¡'..='¬' and '®'..='ÿ' stand for themselves, the other 68 in order
    /// for U+0100, U+0101, ...: space is 'Ġ', newline 'Ċ', DEL 'ġ', NBSP 'ł',
    /// the soft hyphen 'Ń'.
    #[test]
    fn byte_to_char_is_gpt2s_bytes_to_unicode() {
        let bs: Vec<u32> = (0x21..=0x7E)
            .chain(0xA1..=0xAC)
            .chain(0xAE..=0xFF)
            .collect();
        let mut cs = bs.clone();
        let mut all = bs.clone();
        for b in 0..256 {
            if !bs.contains(&b) {
                all.push(b);
                cs.push(256 + cs.len() as u32 - bs.len() as u32);
            }
        }
        assert_eq!((bs.len(), all.len()), (188, 256));
        let table = byte_to_char();
        for (&b, &c) in all.iter().zip(&cs) {
            assert_eq!(table[b as usize] as u32, c, "byte {b:#04x}");
        }
        let named = [
            (0x00, 'Ā'),
            (0x0A, 'Ċ'),
            (0x20, 'Ġ'),
            (0x21, '!'),
            (0x7E, '~'),
        ];
        let more = [
            (0x7F, 'ġ'),
            (0xA0, 'ł'),
            (0xA1, '¡'),
            (0xAC, '¬'),
            (0xAD, 'Ń'),
            (0xAE, '®'),
            (0xFF, 'ÿ'),
        ];
        for (b, c) in named.into_iter().chain(more) {
            assert_eq!(table[b], c, "byte {b:#04x}");
        }
    }

    /// A vocabulary entry's characters back to its bytes; a character that
    /// stands for no byte is refused naming it.
    #[test]
    fn unmap_gives_the_bytes_back() {
        let inverse: BTreeMap<char, u8> = byte_to_char()
            .iter()
            .enumerate()
            .map(|(b, &c)| (c, b as u8))
            .collect();
        assert_eq!(unmap("Ġthe", &inverse).unwrap(), b" the");
        assert_eq!(unmap("ĊĀÿ", &inverse).unwrap(), [0x0A, 0x00, 0xFF]);
        assert_eq!(unmap("", &inverse).unwrap(), b"");
        let err = unmap("a b", &inverse).unwrap_err().to_string();
        assert_eq!(
            err,
            "vocabulary entry \"a b\" has character ' ', which is not byte-level"
        );
    }

    /// The tokens' bytes by id, the added token's content at its id, the
    /// merges as ids in rank order; the merges as pairs of strings give the
    /// same; optional fields at their accepted values or null change nothing.
    #[test]
    fn a_byte_level_bpe_parses_to_its_bytes_and_merges() {
        let spec = parse(&tokenizer()).unwrap();
        assert_eq!(spec.tokens.len(), 260);
        for b in 0..=255u8 {
            assert_eq!(spec.tokens[b as usize], [b]);
        }
        let tail: Vec<&[u8]> = spec.tokens[256..].iter().map(Vec::as_slice).collect();
        assert_eq!(tail, [&b" t"[..], b"he", b" the", b"<|endoftext|>"]);
        assert_eq!(
            spec.merges,
            [(32, 116, 256), (104, 101, 257), (256, 257, 258)]
        );
        let pairs = json!([["Ġ", "t"], ["h", "e"], ["Ġt", "he"]]);
        assert_eq!(parse_with("/model/merges", pairs).unwrap(), spec);
        for (pointer, value) in [
            ("/post_processor", Value::Null),
            ("/model/dropout", json!(0.0)),
            ("/model/byte_fallback", Value::Null),
            ("/model/continuing_subword_prefix", Value::Null),
        ] {
            assert_eq!(parse_with(pointer, value).unwrap(), spec, "{pointer}");
        }
    }

    /// Each field that would change the ids is refused with its value.
    #[test]
    fn fields_that_change_the_ids_are_refused_with_their_values() {
        let cases = [
            ("/model/type", json!("WordPiece"), "tokenizer.json: model.type = \"WordPiece\" is not supported (only byte-level \"BPE\")"),
            ("/pre_tokenizer", json!({"type": "Whitespace"}), "tokenizer.json: pre_tokenizer = {\"type\":\"Whitespace\"} is not supported (only ByteLevel with use_regex true)"),
            ("/pre_tokenizer/use_regex", json!(false), "tokenizer.json: pre_tokenizer.use_regex must be true (GPT-2 split; ferrite bounds pieces to 64 bytes)"),
            ("/pre_tokenizer/add_prefix_space", json!(true), "tokenizer.json: pre_tokenizer.add_prefix_space = true is not supported (it changes the ids of the first word)"),
            ("/decoder", json!({"type": "Metaspace"}), "tokenizer.json: decoder = {\"type\":\"Metaspace\"} is not supported (only ByteLevel)"),
            ("/normalizer", json!({"type": "NFC"}), "tokenizer.json: normalizer = {\"type\":\"NFC\"} is not supported (normalizers change the text before encoding)"),
            ("/truncation", json!({"max_length": 8}), "tokenizer.json: truncation = {\"max_length\":8} is not supported (truncation drops ids)"),
            ("/post_processor", json!({"type": "TemplateProcessing"}), "tokenizer.json: post_processor = {\"type\":\"TemplateProcessing\"} is not supported (it adds ids; only ByteLevel or null)"),
            ("/model/dropout", json!(0.1), "tokenizer.json: model.dropout = 0.1 is not supported (dropout makes encoding random)"),
            ("/model/byte_fallback", json!(true), "tokenizer.json: model.byte_fallback = true is not supported (byte-level BPE needs no byte fallback)"),
            ("/model/end_of_word_suffix", json!("</w>"), "tokenizer.json: model.end_of_word_suffix = \"</w>\" is not supported (not byte-level)"),
        ];
        for (pointer, value, message) in cases {
            assert_eq!(refusal(pointer, value), message);
        }
    }

    /// A special added token may name its vocabulary entry (same string and
    /// id) or a token whose bytes are its content; one that takes the id of
    /// another token, or is not special, is refused.
    #[test]
    fn added_tokens_keep_their_ids_or_are_refused() {
        let added = |content: &str, id: u32, special: bool| json!([{"id": id, "content": content, "special": special}]);
        let spec = parse(&tokenizer()).unwrap();
        let mut without = spec.clone();
        without.tokens.pop();
        let err = refusal("/added_tokens", added("<|endoftext|>", 259, false));
        assert_eq!(err, "tokenizer.json: added_tokens \"<|endoftext|>\" is not special: the encoder would have to match it in text (not supported)");
        // "Ġthe" is id 258's string (its bytes " the"); " " is id 32's bytes.
        for (content, id) in [("Ġthe", 258), (" ", 32)] {
            let got = parse_with("/added_tokens", added(content, id, true)).unwrap();
            assert_eq!(got, without, "{content:?}");
        }
        let err = refusal("/added_tokens", added("<|x|>", 33, true));
        assert_eq!(
            err,
            "tokenizer.json: added token \"<|x|>\" reuses id 33 of another token"
        );
        let err = refusal("/added_tokens", added("the", 258, true));
        assert_eq!(
            err,
            "tokenizer.json: added token \"the\" reuses id 258 of another token"
        );
    }

    /// Ids must run 0..count: the first id missing is named.
    #[test]
    fn ids_with_a_gap_are_refused_naming_the_first_missing() {
        let err = refusal("/model/vocab/Ġthe", json!(300));
        assert_eq!(
            err,
            "tokenizer.json: token ids are not dense (no token has id 258)"
        );
        let err = refusal("/added_tokens/0/id", json!(261));
        assert_eq!(
            err,
            "tokenizer.json: token ids are not dense (no token has id 259)"
        );
    }

    /// Every byte needs its own token.
    #[test]
    fn a_vocabulary_without_a_byte_is_refused_naming_it() {
        let mut v = tokenizer();
        let vocab = v
            .pointer_mut("/model/vocab")
            .unwrap()
            .as_object_mut()
            .unwrap();
        vocab.remove("A");
        vocab.insert("AA".into(), json!(0x41));
        let err = parse(&v).unwrap_err().to_string();
        assert_eq!(
            err,
            "tokenizer.json: the vocabulary lacks the byte 0x41 (not a complete byte-level BPE)"
        );
    }

    /// A merge is "left right" or a pair of strings of the vocabulary whose
    /// concatenation is a token too, each pair once.
    #[test]
    fn malformed_merges_are_refused() {
        let cases = [
            (
                json!(["Ġt"]),
                "tokenizer.json: merge \"Ġt\" is not \"left right\"",
            ),
            (
                json!([["Ġ", "t", "x"]]),
                "tokenizer.json: merge [\"Ġ\",\"t\",\"x\"] is not a pair",
            ),
            (
                json!([["Ġ"]]),
                "tokenizer.json: merge [\"Ġ\"] is not a pair",
            ),
            (
                json!([["Ġ", 5]]),
                "tokenizer.json: merge [\"Ġ\",5] is not a pair",
            ),
            (json!([7]), "tokenizer.json: merge 7 is not a pair"),
            (
                json!(["h e", "x y"]),
                "tokenizer.json: merge #1 names \"xy\", which is not in model.vocab",
            ),
            (
                json!(["h e", "Ġ t", "h e"]),
                "tokenizer.json: merge #2 (\"h\", \"e\") repeats an earlier merge",
            ),
        ];
        for (merges, message) in cases {
            assert_eq!(refusal("/model/merges", merges), message);
        }
    }

    /// A value is quoted whole up to 80 characters, longer ones cut to 77
    /// and "...".
    #[test]
    fn compact_cuts_values_past_80_characters() {
        // A JSON string of n characters is n + 2 with its quotes.
        let of = |n: usize| Value::String("x".repeat(n - 2));
        assert_eq!(compact(&json!({"type": "NFC"})), "{\"type\":\"NFC\"}");
        for n in [79, 80] {
            assert_eq!(compact(&of(n)), of(n).to_string());
        }
        for n in [81, 200] {
            assert_eq!(compact(&of(n)), format!("\"{}...", "x".repeat(76)));
        }
    }

    /// The image's section: the counts and the GPT-2 flag, each byte's id,
    /// the tokens' end offsets, the merges sorted by pair with their ranks,
    /// then the bytes padded to 4; the runtime reads it back and encodes
    /// " the" as the merged token.
    #[test]
    fn the_section_is_the_runtimes_layout() {
        let mut spec = parse(&tokenizer()).unwrap();
        // Byte 0x20 at id 259, "<|endoftext|>" at 32: the byte table is not
        // the identity.
        spec.tokens.swap(32, 259);
        spec.merges = vec![(259, 116, 256), (104, 101, 257), (256, 257, 258)];
        let section = spec.section();
        let words: Vec<u32> = section
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
            .collect();
        let nbytes = 255 + 13 + 2 + 2 + 4 + 1;
        assert_eq!(words[..4], [260, 3, BPE_FLAG_GPT2_SPLIT, nbytes]);
        let ids: Vec<u32> = (0..256).map(|b| if b == 32 { 259 } else { b }).collect();
        assert_eq!(words[4..260], ids);
        let offsets = &words[260..521];
        assert_eq!(offsets[..4], [0, 1, 2, 3]);
        assert_eq!(offsets[32..35], [32, 45, 46]);
        assert_eq!(
            offsets[256..],
            [nbytes - 9, nbytes - 7, nbytes - 5, nbytes - 1, nbytes]
        );
        assert_eq!(
            words[521..533],
            [104, 101, 257, 1, 256, 257, 258, 2, 259, 116, 256, 0]
        );
        let bytes = &section[4 * 533..];
        assert_eq!(bytes.len(), (nbytes as usize).next_multiple_of(4));
        assert_eq!(bytes[32..45], *b"<|endoftext|>");
        assert_eq!(bytes[nbytes as usize - 9..], *b" the the \0\0\0");
        let tok = ferrite::tokenizer::BpeTokenizer::parse(&section, 260).unwrap();
        let mut ids = [0; 8];
        let n = tok.encode(b"he the", &mut ids).unwrap();
        assert_eq!(ids[..n], [257, 258]);
        assert_eq!(tok.decode(32), b"<|endoftext|>");
    }
}
