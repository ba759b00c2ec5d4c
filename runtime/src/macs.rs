//! The multiply-accumulates of one token's matrix-vector products
//! ([`Model::macs_per_token`]): what a token's products cost, the
//! numerator of the boards' `roofline:` line and a line of `ferrite
//! inspect`.

use crate::config::LayerConfig;
use crate::error::Result;
use crate::format::Role;
use crate::model::{for_each_spec, Model};

impl Model<'_> {
    /// Multiply-accumulates of the matrix-vector products one token runs
    /// ([`crate::tensor::Tensor::matvec`] and, on the integer token path,
    /// `matvec_int`): `rows × cols` of every weight matrix of every layer
    /// (projections, low-rank factors, MLP), each multiplied once per
    /// token, and of the LM head (`vocab × hidden`: the embedding table's
    /// when tied). The same for every token of a stream and on every
    /// target, whatever the dtype.
    ///
    /// Not counted, as no matrix kernel runs them: the embedding lookup,
    /// vectors (norms, convolutions, gates, decays), attention over the
    /// window (scores and weighted sums, which grow with the position) and
    /// MLA's absorbed `kv_b` products (mixer code over an f32/f16 matrix
    /// read by columns), and of a `cross` layer its memories (attention
    /// over them, like a window's) and its `k_proj` and `v_proj` (stored
    /// for a memory encoder, not run per token).
    ///
    /// Errors only where the configuration does (never for a loaded
    /// model: [`Model::load`] walked the same specs).
    pub fn macs_per_token(&self) -> Result<u64> {
        let mut macs = 0u64;
        for_each_spec(self.config_section(), self.config(), |spec| {
            let cross = match spec.layer {
                Some(l) => matches!(self.layer(usize::from(l))?, LayerConfig::Cross(_)),
                None => false,
            };
            let skipped = cross
                && matches!(
                    spec.role,
                    Role::KProj | Role::VProj | Role::MemoryK | Role::MemoryV
                );
            if spec.matrix && spec.role != Role::Embeddings && !skipped {
                macs += spec_len(spec.dims);
            }
            Ok(())
        })?;
        let c = self.config();
        if c.tie_word_embeddings {
            macs += u64::from(c.vocab_size) * u64::from(c.hidden_size);
        }
        Ok(macs)
    }
}

/// Elements of a tensor of `dims` (unused trailing dims are 0).
fn spec_len(dims: [u32; 3]) -> u64 {
    dims.iter()
        .filter(|&&d| d != 0)
        .map(|&d| u64::from(d))
        .product()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_len_skips_unused_dims() {
        assert_eq!(spec_len([3, 4, 0]), 12);
        assert_eq!(spec_len([3, 4, 5]), 60);
        assert_eq!(spec_len([7, 0, 0]), 7);
    }
}
