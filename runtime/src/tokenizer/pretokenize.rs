//! GPT-2's byte-level pre-tokenization, by hand: the pieces that the regex
//!
//! ```text
//! 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//! ```
//!
//! finds, left to right (HF tokenizers' `ByteLevel` pre-tokenizer with
//! `use_regex: true`, Oniguruma semantics: the first alternative that matches
//! at a position wins). Every character belongs to exactly one of letter,
//! number, white space or other, so the pieces cover the text.
//!
//! The text is UTF-8; a byte that does not start a valid UTF-8 sequence counts
//! as one "other" character (HF tokenizers only takes valid UTF-8, so this
//! case has no reference behaviour; it keeps every byte sequence encodable).

use super::unicode::RANGES;

/// Character class for the regex.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// `\p{L}`.
    Letter,
    /// `\p{N}`.
    Number,
    /// `\s`: the Unicode White_Space property.
    Space,
    /// Everything else (and bytes that are not valid UTF-8).
    Other,
}

/// Decodes the character at the start of `s`: (code point, byte length).
/// Invalid UTF-8, and an empty `s`, give `(None, 1)`.
fn decode(s: &[u8]) -> (Option<u32>, usize) {
    let Some(&b0) = s.first() else {
        return (None, 1);
    };
    let (len, init) = match b0 {
        0x00..=0x7F => return (Some(b0 as u32), 1),
        0xC2..=0xDF => (2, (b0 & 0x1F) as u32),
        0xE0..=0xEF => (3, (b0 & 0x0F) as u32),
        0xF0..=0xF4 => (4, (b0 & 0x07) as u32),
        _ => return (None, 1),
    };
    let Some(tail) = s.get(1..len) else {
        return (None, 1);
    };
    let mut cp = init;
    for &b in tail {
        if b & 0xC0 != 0x80 {
            return (None, 1);
        }
        cp = (cp << 6) | (b & 0x3F) as u32;
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid.
    let min = [0, 0, 0x80, 0x800, 0x10000][len];
    if cp < min || (0xD800..=0xDFFF).contains(&cp) || cp > 0x10FFFF {
        return (None, 1);
    }
    (Some(cp), len)
}

/// Unicode White_Space (what Oniguruma's `\s` matches in UTF-8).
fn is_space(cp: u32) -> bool {
    matches!(
        cp,
        0x09..=0x0D
            | 0x20
            | 0x85
            | 0xA0
            | 0x1680
            | 0x2000..=0x200A
            | 0x2028
            | 0x2029
            | 0x202F
            | 0x205F
            | 0x3000
    )
}

/// Class of a code point.
pub(crate) fn class_of(cp: u32) -> Class {
    if cp < 0x80 {
        let c = cp as u8;
        return if c.is_ascii_alphabetic() {
            Class::Letter
        } else if c.is_ascii_digit() {
            Class::Number
        } else if is_space(cp) {
            Class::Space
        } else {
            Class::Other
        };
    }
    if is_space(cp) {
        return Class::Space;
    }
    // Last range starting at or before cp.
    let i = RANGES.partition_point(|&e| (e >> 11) <= cp);
    if i == 0 {
        return Class::Other;
    }
    let e = RANGES[i - 1];
    let (start, last) = (e >> 11, (e >> 1) & 0x3FF);
    if cp - start <= last {
        if e & 1 == 0 {
            Class::Letter
        } else {
            Class::Number
        }
    } else {
        Class::Other
    }
}

/// (class, byte length) of the character at the start of `s` (not empty).
fn char_at(s: &[u8]) -> (Class, usize) {
    match decode(s) {
        (Some(cp), len) => (class_of(cp), len),
        (None, len) => (Class::Other, len),
    }
}

/// Bytes of the longest run of characters of class `class` at the start of `s`.
fn run(s: &[u8], class: Class) -> usize {
    let mut n = 0;
    while n < s.len() {
        let (c, len) = char_at(&s[n..]);
        if c != class {
            break;
        }
        n += len;
    }
    n
}

/// The length of the piece at the start of `s` (not empty).
fn piece_len(s: &[u8]) -> usize {
    // 's|'t|'re|'ve|'m|'ll|'d
    if s[0] == b'\'' {
        for suffix in [&b"s"[..], b"t", b"re", b"ve", b"m", b"ll", b"d"] {
            if s[1..].starts_with(suffix) {
                return 1 + suffix.len();
            }
        }
    }
    //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+
    let lead = usize::from(s[0] == b' ');
    if lead < s.len() {
        let (class, _) = char_at(&s[lead..]);
        if class != Class::Space {
            return lead + run(&s[lead..], class);
        }
    }
    // \s+(?!\S) | \s+ : a run of white space; when a non-space follows a run
    // of two or more characters, the last one is left to start the next piece.
    let mut end = 0;
    let mut last = 0;
    while end < s.len() {
        let (c, len) = char_at(&s[end..]);
        if c != Class::Space {
            break;
        }
        last = len;
        end += len;
    }
    if end < s.len() && end > last {
        end - last
    } else {
        end
    }
}

/// Iterator over the pieces of a text, as byte slices that cover it in order.
pub(crate) struct Pieces<'t> {
    rest: &'t [u8],
}

impl<'t> Pieces<'t> {
    pub(crate) fn new(text: &'t [u8]) -> Self {
        Pieces { rest: text }
    }
}

impl<'t> Iterator for Pieces<'t> {
    type Item = &'t [u8];

    fn next(&mut self) -> Option<&'t [u8]> {
        if self.rest.is_empty() {
            return None;
        }
        // piece_len is at least one byte and at most the rest.
        let n = piece_len(self.rest).clamp(1, self.rest.len());
        let (piece, rest) = self.rest.split_at(n);
        self.rest = rest;
        Some(piece)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(text: &str) -> heapless::Vec<&str, 64> {
        Pieces::new(text.as_bytes())
            .map(|p| core::str::from_utf8(p).unwrap())
            .collect()
    }

    #[test]
    fn decodes_every_scalar_value_like_core_and_refuses_the_rest() {
        for c in (0..=0x10FFFF).filter_map(char::from_u32) {
            let mut buf = [0u8; 5];
            let len = c.encode_utf8(&mut buf).len();
            // A trailing byte must not change the answer.
            assert_eq!(decode(&buf[..len + 1]), (Some(c as u32), len), "{c:?}");
        }
        let invalid: [&[u8]; 12] = [
            &[0x80],                   // a lone continuation byte
            &[0xC0, 0x80],             // overlong (lead byte never valid)
            &[0xC2],                   // truncated
            &[0xC2, 0x41],             // not a continuation byte
            &[0xE0, 0x80, 0x80],       // overlong 3-byte form
            &[0xE0, 0xA0, 0xC0],       // bad second continuation
            &[0xED, 0xA0, 0x80],       // a surrogate
            &[0xF0, 0x80, 0x80, 0x80], // overlong 4-byte form
            &[0xF0, 0x90, 0x80],       // truncated
            &[0xF4, 0x90, 0x80, 0x80], // past U+10FFFF
            &[0xF5, 0x80, 0x80, 0x80], // lead byte past U+10FFFF
            &[0xFF],
        ];
        for s in invalid {
            assert_eq!(decode(s), (None, 1), "{s:02x?}");
            assert_eq!(core::str::from_utf8(s).ok(), None);
        }
    }

    #[test]
    fn classes_of_ascii_and_of_samples_from_each_category() {
        for c in 0..0x80u8 {
            let want = match c {
                b'a'..=b'z' | b'A'..=b'Z' => Class::Letter,
                b'0'..=b'9' => Class::Number,
                0x09..=0x0D | b' ' => Class::Space,
                _ => Class::Other,
            };
            assert_eq!(class_of(c as u32), want, "{c:#x}");
        }
        let samples = [
            ('\u{80}', Class::Other),
            ('é', Class::Letter),
            ('ß', Class::Letter),
            ('Ω', Class::Letter),
            ('ж', Class::Letter),
            ('中', Class::Letter),
            ('٣', Class::Number),
            ('²', Class::Number),
            ('Ⅻ', Class::Number),
            ('€', Class::Other),
            ('—', Class::Other),
            ('\u{301}', Class::Other),
            ('😀', Class::Other),
            ('\u{10FFFF}', Class::Other),
        ];
        for (c, want) in samples {
            assert_eq!(class_of(c as u32), want, "{c:?}");
        }
        let spaces = [
            0x85, 0xA0, 0x1680, 0x2000, 0x2005, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000,
        ];
        for cp in spaces {
            assert_eq!(class_of(cp), Class::Space, "{cp:#x}");
        }
        for cp in [
            0x84, 0x86, 0x1FFF, 0x200B, 0x2027, 0x202A, 0x202E, 0x2060, 0x3001,
        ] {
            assert_ne!(class_of(cp), Class::Space, "{cp:#x}");
        }
    }

    #[test]
    fn splits_like_the_gpt2_regex() {
        assert_eq!(
            pieces("Hello world, it's 2024!"),
            ["Hello", " world", ",", " it", "'s", " 2024", "!"]
        );
        assert_eq!(pieces("a   b"), ["a", "  ", " b"]);
        assert_eq!(pieces("a \n\n b"), ["a", " \n\n", " b"]);
        assert_eq!(pieces("end  "), ["end", "  "]);
        // One multi-byte space before a letter stays whole.
        assert_eq!(pieces("\u{3000}a"), ["\u{3000}", "a"]);
        assert_eq!(pieces("x\ty"), ["x", "\t", "y"]);
        assert_eq!(pieces("I'M don't"), ["I", "'", "M", " don", "'t"]);
        assert_eq!(pieces("café 日本語 ١٢٣"), ["café", " 日本語", " ١٢٣"]);
        assert_eq!(pieces("?!'s"), ["?!'", "s"]);
        assert_eq!(pieces("🙂🙂 ok"), ["🙂🙂", " ok"]);
    }

    #[test]
    fn classes() {
        assert_eq!(class_of('é' as u32), Class::Letter);
        assert_eq!(class_of('語' as u32), Class::Letter);
        assert_eq!(class_of('٣' as u32), Class::Number);
        assert_eq!(class_of('½' as u32), Class::Number);
        assert_eq!(class_of(0x3000), Class::Space);
        assert_eq!(class_of('🙂' as u32), Class::Other);
        assert_eq!(class_of(0x10FFFF), Class::Other);
    }

    #[test]
    fn invalid_utf8_is_one_other_byte_each() {
        let p: heapless::Vec<&[u8], 8> = Pieces::new(b"a\xff\xfeb \xc3").collect();
        assert_eq!(p, [&b"a"[..], b"\xff\xfe", b"b", b" \xc3"]);
    }
}
