//! FNV-1a over 32-bit words: the checksum the firmware prints for token ids
//! and logits (their f32 bit patterns), and xtask computes on the host's.

/// FNV-1a state over the little-endian bytes of 32-bit words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fnv1a(pub u32);

impl Fnv1a {
    /// The FNV-1a offset basis.
    pub const fn new() -> Self {
        Fnv1a(0x811c_9dc5)
    }

    /// Mixes in the four little-endian bytes of `word`. `#[inline]`: built
    /// in the crate that calls it, as if written there (the firmware's
    /// recorded sizes and instruction counts are those of a local function).
    #[inline]
    pub fn word(&mut self, word: u32) {
        for b in word.to_le_bytes() {
            self.0 = (self.0 ^ b as u32).wrapping_mul(0x0100_0193);
        }
    }
}

impl Default for Fnv1a {
    fn default() -> Self {
        Self::new()
    }
}

/// FNV-1a of `words`.
pub fn fnv1a(words: impl IntoIterator<Item = u32>) -> u32 {
    let mut h = Fnv1a::new();
    for w in words {
        h.word(w);
    }
    h.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Byte-wise FNV-1a 32, checked against the published vectors.
    fn bytes(data: &[u8]) -> u32 {
        data.iter().fold(0x811c_9dc5u32, |h, &b| {
            (h ^ b as u32).wrapping_mul(0x0100_0193)
        })
    }

    #[test]
    fn words_hash_as_their_little_endian_bytes() {
        assert_eq!(bytes(b""), 0x811c_9dc5);
        assert_eq!(bytes(b"a"), 0xe40c_292c);
        assert_eq!(bytes(b"foobar"), 0xbf9c_f968);
        assert_eq!(fnv1a([]), bytes(b""));
        let words = [u32::from_le_bytes(*b"foob"), u32::from_le_bytes(*b"ar\0\0")];
        assert_eq!(fnv1a(words), bytes(b"foobar\0\0"));
        assert_ne!(fnv1a([1, 2]), fnv1a([2, 1]));
    }
}
