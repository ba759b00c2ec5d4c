//! Byte-level BPE (GPT-2 style) read in place from an image's tokenizer
//! section (format v2, tokenizer kind 1; `docs/image-format.md`).
//!
//! ```text
//! word 0            V      tokens (256..=vocab_size)
//! word 1            M      merges
//! word 2            flags  bit 0: GPT-2 regex pre-tokenization (required); others 0
//! word 3            B      bytes of all token strings
//! words 4..260             byte_ids[256]: the token of each single byte
//! V + 1 words              offsets: token t is bytes[offsets[t]..offsets[t+1]]
//! 4 * M words              merges (left, right, merged, rank), sorted by (left, right)
//! B bytes, 0-padded to 4   token strings (raw bytes, GPT-2's unicode mapping undone)
//! ```
//!
//! Everything is checked once at load ([`BpeTokenizer::parse`]); encode and
//! decode then index without further checks failing.

use super::pretokenize::Pieces;
use crate::error::{Error, Result};
use crate::format::read_u32;

/// Words before the byte table.
pub const BPE_HEADER_WORDS: usize = 4;
/// Words per merge: left, right, merged, rank.
pub const BPE_MERGE_WORDS: usize = 4;
/// Flag bit: split the text with GPT-2's pre-tokenizer regex first.
pub const BPE_FLAG_GPT2_SPLIT: u32 = 1;
/// Longest pre-tokenized piece (bytes) merged as a whole. A longer piece
/// (e.g. a run of 100 spaces or dashes) is cut into pieces of this many bytes,
/// each merged on its own; only then can the ids differ from HF tokenizers'.
/// This bounds the stack (`4 * BPE_MAX_PIECE` bytes) and the work per piece
/// (at most `BPE_MAX_PIECE` merge rounds of `BPE_MAX_PIECE` binary searches).
pub const BPE_MAX_PIECE: usize = 64;

/// Bytes of a tokenizer section with `vocab` tokens, `merges` merges and
/// `bytes` bytes of token strings; `None` when that overflows a `usize`.
pub const fn section_len(vocab: usize, merges: usize, bytes: usize) -> Option<usize> {
    match (
        words_before_bytes(vocab, merges),
        bytes.checked_next_multiple_of(4),
    ) {
        (Some(words), Some(padded)) => match words.checked_mul(4) {
            Some(head) => head.checked_add(padded),
            None => None,
        },
        _ => None,
    }
}

/// Words of the section before the token bytes: header, byte table, offsets
/// (`vocab + 1`) and merges (checked).
const fn words_before_bytes(vocab: usize, merges: usize) -> Option<usize> {
    match (vocab.checked_add(1), merges.checked_mul(BPE_MERGE_WORDS)) {
        (Some(offsets), Some(merge_words)) => match offsets.checked_add(merge_words) {
            Some(w) => w.checked_add(BPE_HEADER_WORDS + 256),
            None => None,
        },
        _ => None,
    }
}

/// A validated byte-level BPE tokenizer borrowed from an image.
#[derive(Clone, Copy, Debug)]
pub struct BpeTokenizer<'a> {
    byte_ids: &'a [u32],
    offsets: &'a [u32],
    merges: &'a [u32],
    bytes: &'a [u8],
}

const fn bad(reason: &'static str) -> Error {
    Error::BadTokenizer(reason)
}

/// The counts in a tokenizer section's header.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SectionCounts {
    /// Tokens V.
    pub vocab: u32,
    /// Merges M.
    pub merges: u32,
    /// Bytes B of all token strings.
    pub bytes: u32,
}

/// Checks a section's header words against each other, the model's
/// vocabulary and the section's length (all arithmetic checked). `const`, so
/// that [`crate::session_len`] refuses what [`BpeTokenizer::parse`] would at
/// this stage; the tables themselves are checked by `parse` only.
pub(crate) const fn check_counts(section: &[u8], vocab_size: u32) -> Result<SectionCounts> {
    let mut head = [0u32; BPE_HEADER_WORDS];
    let mut i = 0;
    while i < BPE_HEADER_WORDS {
        head[i] = match read_u32(section, 4 * i) {
            Some(w) => w,
            None => return Err(bad("section shorter than its header")),
        };
        i += 1;
    }
    let (vocab, merges, flags, nbytes) = (head[0], head[1], head[2], head[3]);
    if vocab < 256 || vocab > vocab_size {
        return Err(bad("token count outside 256..=vocab_size"));
    }
    if merges >= vocab {
        return Err(bad("more merges than tokens"));
    }
    if flags & !BPE_FLAG_GPT2_SPLIT != 0 {
        return Err(bad("unknown flags"));
    }
    if flags & BPE_FLAG_GPT2_SPLIT == 0 {
        return Err(bad("only GPT-2 regex pre-tokenization is supported"));
    }
    // The counts are the image's u32s: on a 32-bit target the length can
    // overflow a usize.
    match section_len(vocab as usize, merges as usize, nbytes as usize) {
        Some(len) if len == section.len() => Ok(SectionCounts {
            vocab,
            merges,
            bytes: nbytes,
        }),
        Some(_) => Err(bad("section length does not match its counts")),
        None => Err(bad("token counts overflow")),
    }
}

impl<'a> BpeTokenizer<'a> {
    /// Parses and validates a tokenizer section. `section` must start on a
    /// 4-byte boundary; `vocab_size` is the model's vocabulary.
    pub fn parse(section: &'a [u8], vocab_size: u32) -> Result<Self> {
        let words: &'a [u32] =
            bytemuck::try_cast_slice(section.get(..section.len() & !3).unwrap_or(&[]))
                .map_err(|_| bad("section is not 4-byte aligned"))?;
        let SectionCounts {
            vocab,
            merges,
            bytes: nbytes,
        } = check_counts(section, vocab_size)?;
        let (v, m) = (vocab as usize, merges as usize);
        // The section is exactly as long as its counts say: nothing below is
        // out of bounds (and every product is at most `section.len()`).
        // Checked slicing all the same, so a wrong count is an error here
        // rather than a panic.
        let short = || bad("section shorter than its counts");
        let rest = words.get(BPE_HEADER_WORDS..).ok_or_else(short)?;
        let (byte_ids, rest) = rest.split_at_checked(256).ok_or_else(short)?;
        let (offsets, rest) = rest.split_at_checked(v + 1).ok_or_else(short)?;
        let (merges_w, _) = rest
            .split_at_checked(BPE_MERGE_WORDS * m)
            .ok_or_else(short)?;
        let bytes_at = 4 * (BPE_HEADER_WORDS + 256 + v + 1 + BPE_MERGE_WORDS * m);
        let bytes = section
            .get(bytes_at..bytes_at + nbytes as usize)
            .ok_or_else(short)?;
        if offsets.first() != Some(&0) || offsets.last() != Some(&nbytes) {
            return Err(bad("token offsets do not span the token bytes"));
        }
        if offsets.windows(2).any(|w| matches!(w, &[a, b] if a > b)) {
            return Err(bad("token offsets decrease"));
        }
        let tok = BpeTokenizer {
            byte_ids,
            offsets,
            merges: merges_w,
            bytes,
        };
        for (b, &id) in byte_ids.iter().enumerate() {
            if id >= vocab || tok.decode(id) != [b as u8] {
                return Err(bad("byte table entry is not that byte's token"));
            }
        }
        let mut prev: Option<(u32, u32)> = None;
        for mg in merges_w.chunks_exact(BPE_MERGE_WORDS) {
            let &[l, r, out, rank, ..] = mg else {
                return Err(short());
            };
            if l >= vocab || r >= vocab || out >= vocab {
                return Err(bad("merge names a token outside the vocabulary"));
            }
            if rank >= merges {
                return Err(bad("merge rank out of range"));
            }
            if prev.is_some_and(|p| p >= (l, r)) {
                return Err(bad("merges not sorted by (left, right)"));
            }
            prev = Some((l, r));
            let (lb, rb, ob) = (tok.decode(l), tok.decode(r), tok.decode(out));
            if ob.len() != lb.len() + rb.len() || ob.split_at_checked(lb.len()) != Some((lb, rb)) {
                return Err(bad("merged token is not its pair's bytes"));
            }
        }
        Ok(tok)
    }

    /// Tokens in the tokenizer (the model's vocabulary may be larger).
    pub fn vocab_len(&self) -> u32 {
        self.offsets.len().saturating_sub(1) as u32
    }

    /// Number of merges.
    pub fn merge_count(&self) -> u32 {
        (self.merges.len() / BPE_MERGE_WORDS) as u32
    }

    /// The bytes of `token` (empty for ids outside the tokenizer). A UTF-8
    /// character may be split across tokens: stream the bytes.
    pub fn decode(&self, token: u32) -> &'a [u8] {
        // `offsets[t..t + 2]` without computing `t + 1` (u32::MAX + 1
        // overflows a 32-bit usize).
        let pair = self.offsets.get(token as usize..).and_then(|o| o.get(..2));
        match pair {
            Some(&[a, b]) => self.bytes.get(a as usize..b as usize).unwrap_or(&[]),
            _ => &[],
        }
    }

    /// (rank, merged token) of the pair `(left, right)`, by binary search.
    fn merge(&self, left: u32, right: u32) -> Option<(u32, u32)> {
        let (mut lo, mut hi) = (0, self.merges.len() / BPE_MERGE_WORDS);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let m = self
                .merges
                .get(BPE_MERGE_WORDS * mid..BPE_MERGE_WORDS * (mid + 1));
            let Some(&[l, r, out, rank, ..]) = m else {
                return None; // within the table by construction
            };
            match (l, r).cmp(&(left, right)) {
                core::cmp::Ordering::Less => lo = mid + 1,
                core::cmp::Ordering::Greater => hi = mid,
                core::cmp::Ordering::Equal => return Some((rank, out)),
            }
        }
        None
    }

    /// Writes the token ids of `text` into `out`; returns how many. Never
    /// more ids than bytes, so `out.len() >= text.len()` always suffices.
    pub fn encode(&self, text: &[u8], out: &mut [u32]) -> Result<usize> {
        let mut n = 0;
        for piece in Pieces::new(text) {
            for chunk in piece.chunks(BPE_MAX_PIECE) {
                n = self.encode_piece(chunk, out, n)?;
            }
        }
        Ok(n)
    }

    /// Merges one piece (at most [`BPE_MAX_PIECE`] bytes) by lowest rank,
    /// leftmost first, as HF tokenizers does; appends its ids at `out[n..]`.
    fn encode_piece(&self, piece: &[u8], out: &mut [u32], n: usize) -> Result<usize> {
        let mut work = [0u32; BPE_MAX_PIECE];
        let mut len = piece.len().min(BPE_MAX_PIECE);
        for (w, &b) in work.iter_mut().zip(piece) {
            // The byte table has 256 entries (checked when parsed).
            *w = self.byte_ids.get(b as usize).copied().unwrap_or_default();
        }
        loop {
            let mut best: Option<(u32, usize, u32)> = None;
            let live = work.get(..len).unwrap_or_default();
            for (i, pair) in live.windows(2).enumerate() {
                let &[left, right] = pair else { continue };
                if let Some((rank, merged)) = self.merge(left, right) {
                    if best.is_none_or(|(r, _, _)| rank < r) {
                        best = Some((rank, i, merged));
                    }
                }
            }
            let Some((_, i, merged)) = best else { break };
            // The pair (i, i + 1) becomes `merged`; the rest moves left.
            // i + 1 < len <= BPE_MAX_PIECE, so every `get` below succeeds.
            let Some(slot) = work.get_mut(i) else { break };
            *slot = merged;
            for j in i + 1..len - 1 {
                let next = work.get(j + 1).copied().unwrap_or_default();
                if let Some(w) = work.get_mut(j) {
                    *w = next;
                }
            }
            len -= 1;
        }
        let too_long = Error::BadPrompt("the prompt is longer than the token buffer");
        let dst = out.get_mut(n..n + len).ok_or(too_long)?;
        for (d, w) in dst.iter_mut().zip(&work) {
            *d = *w;
        }
        Ok(n + len)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;

    #[test]
    fn section_len_is_none_when_it_overflows() {
        assert_eq!(section_len(256, 0, 1), Some(4 * (4 + 256 + 257) + 4));
        for (v, m, b) in [
            (usize::MAX, 0, 0),
            (0, usize::MAX / 4 + 1, 0),
            (usize::MAX / 4, 0, 0),
            (0, 0, usize::MAX),
            (0, 0, usize::MAX - 3),
            (usize::MAX / 8, 0, usize::MAX / 2),
        ] {
            assert_eq!(section_len(v, m, b), None, "{v} {m} {b}");
        }
    }

    /// A section header: V, M, flags, B (the tables are not looked at).
    fn head(v: u32, m: u32, b: u32) -> [u8; 16] {
        let mut out = [0u8; 16];
        for (i, w) in [v, m, BPE_FLAG_GPT2_SPLIT, b].into_iter().enumerate() {
            out[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// Counts near `u32::MAX` overflow a 32-bit `usize` (the targets'), and
    /// fit a 64-bit one as a length that cannot match the section.
    const HUGE_COUNTS: Error = Error::BadTokenizer(if usize::BITS == 32 {
        "token counts overflow"
    } else {
        "section length does not match its counts"
    });

    #[test]
    fn counts_at_their_limits_are_refused_without_overflow() {
        let bad = |s: &[u8], vocab| check_counts(s, vocab).map(|_| ()).unwrap_err();
        assert_eq!(bad(&head(u32::MAX, 0x4000_0000, 0), u32::MAX), HUGE_COUNTS);
        assert_eq!(
            bad(&head(u32::MAX, u32::MAX - 1, u32::MAX), u32::MAX),
            HUGE_COUNTS
        );
        assert_eq!(
            bad(&head(u32::MAX, 0, 0), 1 << 20),
            Error::BadTokenizer("token count outside 256..=vocab_size")
        );
        assert_eq!(
            bad(&head(300, 0, 0)[..12], 300),
            Error::BadTokenizer("section shorter than its header")
        );
    }

    /// A section's words: the 256 bytes as tokens 0..256, then `extra`
    /// tokens, and `merges` (left, right, merged, rank).
    fn section(extra: &[&[u8]], merges: &[[u32; 4]]) -> std::vec::Vec<u32> {
        let mut strings: std::vec::Vec<u8> = (0..=255u8).collect();
        let mut offsets: std::vec::Vec<u32> = (0..=256).collect();
        for t in extra {
            strings.extend_from_slice(t);
            offsets.push(strings.len() as u32);
        }
        let vocab = 256 + extra.len() as u32;
        let mut w = std::vec![vocab, merges.len() as u32, BPE_FLAG_GPT2_SPLIT];
        w.push(strings.len() as u32);
        w.extend(0..256u32);
        w.extend(offsets);
        w.extend(merges.iter().flatten());
        strings.resize(strings.len().next_multiple_of(4), 0);
        w.extend(
            strings
                .chunks(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
        w
    }

    #[test]
    fn a_section_with_an_empty_token_parses_and_merges_by_rank() {
        // Token 256 is empty (equal offsets); 257 = "ab", 258 = "bc".
        let (a, b, c) = (b'a' as u32, b'b' as u32, b'c' as u32);
        let words = section(&[b"", b"ab", b"bc"], &[[a, b, 257, 1], [b, c, 258, 0]]);
        let t = BpeTokenizer::parse(bytemuck::cast_slice(&words), 300).unwrap();
        assert_eq!((t.vocab_len(), t.merge_count()), (259, 2));
        assert_eq!(t.decode(256), b"");
        assert_eq!(t.decode(257), b"ab");
        assert_eq!(t.decode(259), b"");
        let mut out = [0u32; 8];
        // "bc" has the lower rank: a + bc, not ab + c.
        let n = t.encode(b"abc", &mut out).unwrap();
        assert_eq!(&out[..n], &[a, 258]);
        let n = t.encode(b"ab", &mut out).unwrap();
        assert_eq!(&out[..n], &[257]);
    }

    #[test]
    fn each_bad_merge_is_refused_with_its_reason() {
        let (a, b, c) = (b'a' as u32, b'b' as u32, b'c' as u32);
        let parse = |merge: [u32; 4]| {
            let words = section(&[b"ab"], &[merge]);
            BpeTokenizer::parse(bytemuck::cast_slice(&words), 300).map(|_| ())
        };
        assert_eq!(parse([a, b, 256, 0]), Ok(()));
        let outside = Err(bad("merge names a token outside the vocabulary"));
        assert_eq!(parse([257, b, 256, 0]), outside);
        assert_eq!(parse([a, 257, 256, 0]), outside);
        assert_eq!(parse([a, b, 257, 0]), outside);
        assert_eq!(parse([a, b, 256, 1]), Err(bad("merge rank out of range")));
        let not_its_pair = Err(bad("merged token is not its pair's bytes"));
        // "ab" from ("c", "b"): the lengths and the right part agree.
        assert_eq!(parse([c, b, 256, 0]), not_its_pair);
        // "ab" from ("a", "c"): the left part agrees.
        assert_eq!(parse([a, c, 256, 0]), not_its_pair);
        // "a" from ("ab", "c"): shorter than its left part.
        assert_eq!(parse([256, c, a, 0]), not_its_pair);
    }

    #[test]
    fn the_token_count_starts_at_256() {
        let err = |s: &[u8]| check_counts(s, 300).map(|_| ()).unwrap_err();
        assert_eq!(
            err(&head(255, 0, 0)),
            Error::BadTokenizer("token count outside 256..=vocab_size")
        );
        assert_eq!(
            err(&head(256, 0, 0)),
            Error::BadTokenizer("section length does not match its counts")
        );
        assert_eq!(
            err(&head(301, 0, 0)),
            Error::BadTokenizer("token count outside 256..=vocab_size")
        );
        let words = section(&[], &[]);
        assert!(check_counts(bytemuck::cast_slice(&words), 256).is_ok());
    }

    #[test]
    fn parse_refuses_a_section_with_overflowing_counts() {
        let words = [u32::MAX, u32::MAX - 1, BPE_FLAG_GPT2_SPLIT, u32::MAX];
        let err = BpeTokenizer::parse(bytemuck::cast_slice(&words), u32::MAX).unwrap_err();
        assert_eq!(err, HUGE_COUNTS);
    }
}
