//! Tokenizers: the byte tokenizer (token id = byte value, every format
//! version) and byte-level BPE (format v2, read in place from the image).
//! [`crate::Model::tokenizer`] gives the one an image carries.

#[cfg(feature = "bpe")]
mod bpe;
#[cfg(feature = "bpe")]
mod pretokenize;
#[cfg(feature = "bpe")]
mod unicode;

#[cfg(feature = "bpe")]
pub use bpe::{
    section_len, BpeTokenizer, BPE_FLAG_GPT2_SPLIT, BPE_HEADER_WORDS, BPE_MAX_PIECE,
    BPE_MERGE_WORDS,
};
#[cfg(feature = "bpe")]
pub use unicode::UNICODE_VERSION;

use crate::config::{ModelConfig, TokenizerKind};
use crate::error::{Error, Result};
use crate::image::{Header, BPE_FORMAT_VERSION};

/// What [`crate::Model::load`] checks of the tokenizer before reading its
/// tables: the kind against the vocabulary and the format version, and a BPE
/// section's alignment and counts. `const`, so that [`crate::session_len`]
/// refuses the same images at this stage.
pub(crate) const fn check_section(
    image: &[u8],
    header: &Header,
    config: &ModelConfig,
) -> Result<()> {
    match config.tokenizer {
        TokenizerKind::Bytes => {
            if config.vocab_size < 256 {
                return Err(Error::BadConfig {
                    layer: None,
                    reason: "the byte tokenizer needs vocab_size >= 256",
                });
            }
            if header.tokenizer_len != 0 {
                return Err(Error::BadHeader("byte tokenizer with a tokenizer section"));
            }
            Ok(())
        }
        TokenizerKind::Bpe => {
            if header.version < BPE_FORMAT_VERSION {
                return Err(Error::BadConfig {
                    layer: None,
                    reason: "a BPE tokenizer needs image format version 2",
                });
            }
            // The image starts on a 16-byte boundary (Model::load checks).
            if header.tokenizer_off % 4 != 0 {
                return Err(Error::BadTokenizer("section is not 4-byte aligned"));
            }
            let section = match image.split_at_checked(header.tokenizer_off as usize) {
                Some((_, rest)) => match rest.split_at_checked(header.tokenizer_len as usize) {
                    Some((section, _)) => section,
                    None => return Err(Error::BadHeader("tokenizer section out of bounds")),
                },
                None => return Err(Error::BadHeader("tokenizer section out of bounds")),
            };
            #[cfg(feature = "bpe")]
            return match bpe::check_counts(section, config.vocab_size) {
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            };
            #[cfg(not(feature = "bpe"))]
            {
                let _ = section;
                Err(Error::BadConfig {
                    layer: None,
                    reason: "the image has a BPE tokenizer: build ferrite with its `bpe` feature",
                })
            }
        }
    }
}

/// The tokenizer of a model: encode a prompt, decode generated tokens.
#[derive(Clone, Copy, Debug)]
pub enum Tokenizer<'a> {
    /// One token per byte.
    Bytes(ByteTokenizer),
    /// Byte-level BPE from the image (feature `bpe`).
    #[cfg(feature = "bpe")]
    Bpe(BpeTokenizer<'a>),
    /// Ties the lifetime when the BPE tokenizer is not built; never made.
    #[cfg(not(feature = "bpe"))]
    #[doc(hidden)]
    _Never(core::marker::PhantomData<&'a ()>, core::convert::Infallible),
}

impl<'a> Tokenizer<'a> {
    /// Writes the token ids of `text` into `out`; returns how many. Neither
    /// tokenizer makes more ids than bytes: `out.len() >= text.len()` suffices.
    pub fn encode(&self, text: &[u8], out: &mut [u32]) -> Result<usize> {
        match self {
            Tokenizer::Bytes(t) => t.encode(text, out),
            #[cfg(feature = "bpe")]
            Tokenizer::Bpe(t) => t.encode(text, out),
            #[cfg(not(feature = "bpe"))]
            Tokenizer::_Never(_, never) => match *never {},
        }
    }

    /// The bytes of `token` (empty for ids the tokenizer does not know, such
    /// as padding rows of a larger model vocabulary). A UTF-8 character may be
    /// split across tokens, so stream the bytes rather than each token's text.
    pub fn decode(&self, token: u32) -> &'a [u8] {
        match self {
            Tokenizer::Bytes(t) => t.decode(token),
            #[cfg(feature = "bpe")]
            Tokenizer::Bpe(t) => t.decode(token),
            #[cfg(not(feature = "bpe"))]
            Tokenizer::_Never(_, never) => match *never {},
        }
    }

    /// `"bytes"` or `"bpe"`.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Tokenizer::Bytes(_) => "bytes",
            #[cfg(feature = "bpe")]
            Tokenizer::Bpe(_) => "bpe",
            #[cfg(not(feature = "bpe"))]
            Tokenizer::_Never(_, never) => match *never {},
        }
    }

    /// Tokens the tokenizer knows (256 for bytes).
    pub fn vocab_len(&self) -> u32 {
        match self {
            Tokenizer::Bytes(_) => 256,
            #[cfg(feature = "bpe")]
            Tokenizer::Bpe(t) => t.vocab_len(),
            #[cfg(not(feature = "bpe"))]
            Tokenizer::_Never(_, never) => match *never {},
        }
    }
}

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

    #[test]
    fn the_byte_tokenizer_takes_any_vocabulary_of_at_least_256() {
        use crate::config::TokenPath;
        let header = Header {
            version: 1,
            file_len: 64,
            crc32: 0,
            config_off: 64,
            config_len: 0,
            table_off: 64,
            tensor_count: 0,
            tokenizer_off: 64,
            tokenizer_len: 0,
            data_off: 64,
            data_len: 0,
            flags: 0,
            security_counter: 0,
        };
        let config = |vocab_size| ModelConfig {
            vocab_size,
            hidden_size: 8,
            intermediate_size: 8,
            norm_eps: 1e-6,
            tie_word_embeddings: true,
            num_layers: 1,
            tokenizer: TokenizerKind::Bytes,
            provenance: 0,
            token_path: TokenPath::F32,
            final_norm: crate::block::NormKind::Rms,
        };
        let image = [0u8; 64];
        for vocab in [256, 257, 1 << 20] {
            assert_eq!(check_section(&image, &header, &config(vocab)), Ok(()));
        }
        assert_eq!(
            check_section(&image, &header, &config(255)),
            Err(Error::BadConfig {
                layer: None,
                reason: "the byte tokenizer needs vocab_size >= 256",
            })
        );
    }
}
