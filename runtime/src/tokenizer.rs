//! Tokenizers. Version 1 images use the byte tokenizer: token id = byte value.

use crate::error::{Error, Result};

/// One token per byte (vocab 256): lossless for any text, UTF-8 included.
#[derive(Clone, Copy, Debug, Default)]
pub struct ByteTokenizer;

impl ByteTokenizer {
    /// Writes the token ids of `text` into `out`; returns how many.
    pub fn encode(&self, text: &[u8], out: &mut [u32]) -> Result<usize> {
        if text.len() > out.len() {
            return Err(Error::BadPrompt(
                "the prompt is longer than the token buffer",
            ));
        }
        for (o, &b) in out.iter_mut().zip(text) {
            *o = b as u32;
        }
        Ok(text.len())
    }

    /// The bytes of `token` (empty for ids outside 0..256, such as padding).
    pub fn decode(&self, token: u32) -> &'static [u8] {
        static BYTES: [u8; 256] = {
            let mut b = [0u8; 256];
            let mut i = 0;
            while i < 256 {
                b[i] = i as u8;
                i += 1;
            }
            b
        };
        match BYTES.get(token as usize) {
            Some(b) => core::slice::from_ref(b),
            None => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_utf8() {
        let text = "héllo, wörld".as_bytes();
        let mut ids = [0u32; 32];
        let n = ByteTokenizer.encode(text, &mut ids).unwrap();
        let back: heapless::Vec<u8, 32> = ids[..n]
            .iter()
            .flat_map(|&t| ByteTokenizer.decode(t).iter().copied())
            .collect();
        assert_eq!(&back[..], text);
        assert!(ByteTokenizer.encode(text, &mut ids[..3]).is_err());
        assert!(ByteTokenizer.decode(300).is_empty());
    }
}
