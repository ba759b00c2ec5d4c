//! Checks an image on the host, with the runtime's own loader, before a
//! firmware embeds it: a bad image is one line from `ferrite::Model::load`
//! instead of a rustc const-evaluation dump, and an image that does not fit
//! a board gets a hint that names a storage type that would.

use std::path::Path;

use anyhow::{Context, Result};
use ferrite::image::DType;

/// What the fit hint needs to know of a loaded image.
#[derive(Clone, Debug, PartialEq)]
pub struct ImageFacts {
    /// Bytes of the image file.
    pub bytes: u64,
    /// Elements of the tensors that may be quantized (weight matrices).
    pub matrix_params: u64,
    /// Rows of those matrices (a tiled matrix stores one f32 step per row).
    pub matrix_rows: u64,
    /// Elements of the tensors that stay f32 (norms, gates, biases).
    pub other_params: u64,
    /// Quantization group of the image's quantized tensors (32 when none is).
    pub group: u64,
    /// Whether the image carries a BPE tokenizer (the firmware then needs
    /// the runtime's `bpe` feature).
    pub bpe: bool,
    /// The mixer families the image's layers use, in the runtime's table
    /// order (the firmware then needs each one's feature of that name).
    pub mixers: Vec<&'static str>,
    /// Whether the image is on the integer token path (format 6; the
    /// firmware then needs the runtime's `int-path` feature).
    pub int_path: bool,
    /// Whether a layer's block has LayerNorms, RWKV-7's channel mixing or
    /// the pre-norm, or the final norm is a LayerNorm (format 8; the
    /// firmware then needs the runtime's `block-options` feature).
    pub block_options: bool,
    /// Whether some tensor runs the integer path (tiled layout): then a
    /// board's logits must equal the host's bit for bit.
    pub tiled: bool,
    /// Storage type of the image's largest weight matrix (what it "is").
    pub dtype: DType,
    /// The narrowest storage type of any weight matrix (`dtype` unless the
    /// image mixes types, as int4 images with an int8 embedding table do).
    pub narrowest: DType,
}

/// Loads `path` with [`ferrite::Model::load`]; the runtime's error is the message.
pub fn check(path: &Path) -> Result<ImageFacts> {
    let bytes = std::fs::read(path).with_context(|| format!("--image {}", path.display()))?;
    // Model::load wants the image on a 16-byte boundary, as in flash.
    let mut words = vec![0u128; bytes.len().div_ceil(16)];
    bytemuck::cast_slice_mut::<u128, u8>(&mut words)[..bytes.len()].copy_from_slice(&bytes);
    let aligned = &bytemuck::cast_slice::<u128, u8>(&words)[..bytes.len()];
    let model = ferrite::Model::load(aligned)
        .map_err(|e| anyhow::anyhow!("image {} is not usable: {e}", path.display()))?;
    let mut facts = ImageFacts {
        bytes: bytes.len() as u64,
        matrix_params: 0,
        matrix_rows: 0,
        other_params: 0,
        group: 32,
        bpe: model.tokenizer().kind_name() == "bpe",
        mixers: ferrite::LayerConfig::KIND_NAMES
            .iter()
            .copied()
            .filter(|&name| {
                (0..model.config().num_layers as usize)
                    .any(|i| model.layer(i).is_ok_and(|l| l.kind_name() == name))
            })
            .collect(),
        int_path: model.config().token_path == ferrite::TokenPath::Int,
        block_options: model.config().final_norm != ferrite::block::NormKind::Rms
            || (0..model.config().num_layers as usize)
                .any(|i| model.block(i).is_ok_and(|b| b.needs_feature())),
        tiled: false,
        dtype: DType::F32,
        narrowest: DType::F32,
    };
    let mut largest = 0;
    for index in 0..model.tensor_count() {
        let e = model.entry(index)?;
        let numel = e
            .dims
            .iter()
            .filter(|&&d| d != 0)
            .map(|&d| u64::from(d))
            .product::<u64>();
        let is_matrix = e.dtype.is_quantized() || e.dims[1] != 0 && e.dims[2] == 0;
        if is_matrix {
            facts.matrix_params += numel;
            facts.matrix_rows += u64::from(e.dims[0]);
            if e.dtype.payload_bytes(8) < facts.narrowest.payload_bytes(8) {
                facts.narrowest = e.dtype;
            }
            if numel > largest {
                largest = numel;
                facts.dtype = e.dtype;
            }
        } else {
            facts.other_params += numel;
        }
        if e.dtype.is_quantized() {
            facts.group = u64::from(e.group_size);
        }
        facts.tiled |= e.layout == ferrite::image::Layout::Tiled;
    }
    Ok(facts)
}

impl ImageFacts {
    /// The runtime features a firmware embedding this image needs (the
    /// boards' and the C API library's features of the same names): `bpe`,
    /// its mixer families, `int-path`, `block-options`.
    pub fn features(&self) -> Vec<&'static str> {
        let mut f = Vec::new();
        if self.bpe {
            f.push("bpe");
        }
        f.extend(self.mixers.iter().copied());
        if self.int_path {
            f.push("int-path");
        }
        if self.block_options {
            f.push("block-options");
        }
        f
    }

    /// Approximate image bytes at storage type `dtype` (payloads and scales;
    /// headers, tables and alignment are what the current image has on top).
    /// Scales as the image's layout stores them: tiled, one u8 multiplier
    /// per group and one f32 step per row; rows, one f32 per group.
    pub fn estimate(&self, dtype: DType) -> u64 {
        let groups = self.matrix_params / self.group.max(1);
        let scales = match self.tiled {
            true => groups + 4 * self.matrix_rows,
            false => 4 * groups,
        };
        let payload = dtype.payload_bytes(self.matrix_params as usize) as u64;
        payload + if dtype.is_quantized() { scales } else { 0 } + 4 * self.other_params
    }

    /// How to ask for every weight matrix at `name`: `--dtype` alone, or with
    /// rules when the image already holds matrices of that type beside wider
    /// ones (a dtype default kept those wider).
    fn every_matrix_at(&self, name: &str) -> String {
        match self.narrowest.name() == name && self.narrowest != self.dtype {
            true => format!(
                "with every weight matrix at {name} (`ferrite quantize --dtype {name}` and a \
                 `--rule GLOB={name}` for those now wider, then --image FILE)"
            ),
            false => format!("at --dtype {name}"),
        }
    }

    /// The widest storage type narrower than the image's whose image would
    /// take at most `limit` bytes, with its estimated bytes; and the int4
    /// estimate, for when none would.
    fn widest_within(&self, limit: u64) -> (Option<(&'static str, u64)>, u64) {
        let current = self.estimate(self.dtype).min(self.bytes);
        let overhead = self.bytes.saturating_sub(current);
        let fits = [DType::F16, DType::I8, DType::I4]
            .into_iter()
            .find(|&d| self.estimate(d) + overhead <= limit && self.estimate(d) < current)
            .map(|d| (d.name(), self.estimate(d) + overhead));
        (fits, self.estimate(DType::I4) + overhead)
    }

    /// A hint for an image that is `over` bytes too large for a board, the
    /// firmware's code included (the linker's overflow): the widest storage
    /// type whose image would fit, or that none would.
    pub fn fit_hint(&self, over: u64) -> String {
        let limit = self.bytes.saturating_sub(over);
        match self.widest_within(limit) {
            (Some((name, bytes)), _) => format!(
                "{} the image would take about {} KiB and fit",
                self.every_matrix_at(name),
                bytes.div_ceil(1024)
            ),
            (None, int4) => format!(
                "no storage type fits: even int4 takes about {} KiB of the {} KiB the image may use; \
                 use a smaller model or a board with more flash",
                int4.div_ceil(1024),
                limit / 1024
            ),
        }
    }

    /// A hint for an image that alone is larger than a `flash`-byte budget,
    /// before any build: the firmware's code is not known yet, so a narrower
    /// type under the budget is a candidate, not a promise of a fit.
    pub fn budget_hint(&self, flash: u64) -> String {
        match self.widest_within(flash) {
            (Some((name, bytes)), _) => format!(
                "{} the image alone would take about {} KiB (the firmware's code must fit \
                 beside it)",
                self.every_matrix_at(name),
                bytes.div_ceil(1024)
            ),
            (None, int4) => format!(
                "no storage type fits: even int4 takes about {} KiB; use a smaller model or a \
                 board with more flash",
                int4.div_ceil(1024)
            ),
        }
    }
}

/// The largest `overflowed by N bytes` of a linker's error output.
pub fn overflow_bytes(stderr: &str) -> Option<u64> {
    stderr
        .split("overflowed by ")
        .skip(1)
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(bytes: u64) -> ImageFacts {
        // 100k matrix params and 1k others, stored at f32.
        ImageFacts {
            bytes,
            matrix_params: 100_000,
            matrix_rows: 1_000,
            other_params: 1_000,
            group: 32,
            bpe: false,
            mixers: vec!["gdn"],
            int_path: false,
            block_options: false,
            tiled: false,
            dtype: DType::F32,
            narrowest: DType::F32,
        }
    }

    #[test]
    fn hint_names_the_widest_type_that_fits() {
        let f32_image = facts(404_000 + 2_000);
        // 210 KB too large: f16 (~206 KB) does not fit in 196 KB, int8 does.
        let hint = f32_image.fit_hint(210_000);
        assert!(hint.contains("--dtype int8"), "{hint}");
        // 100 KB too large: f16 fits.
        assert!(f32_image.fit_hint(100_000).contains("--dtype f16"));
        // Nothing fits when only 10 KB may remain.
        let hint = f32_image.fit_hint(396_000);
        assert!(hint.starts_with("no storage type fits"), "{hint}");
    }

    #[test]
    fn a_mixed_image_is_told_to_narrow_its_wider_matrices() {
        // int4 matrices beside an int8 embedding table (the int4 default):
        // --dtype int4 alone is what made it; the hint names the rules.
        let mixed = ImageFacts {
            matrix_params: 145_000,
            matrix_rows: 2_000,
            other_params: 6_000,
            tiled: true,
            dtype: DType::I8,
            narrowest: DType::I4,
            ..facts(120_000)
        };
        let hint = mixed.fit_hint(3_000);
        assert!(
            hint.starts_with(
                "with every weight matrix at int4 (`ferrite quantize --dtype int4` and a `--rule"
            ),
            "{hint}"
        );
        assert!(hint.ends_with("KiB and fit"), "{hint}");
        assert!(mixed.budget_hint(115_000).contains("--rule GLOB=int4"));
    }

    #[test]
    fn reads_the_linker_overflow() {
        let err = "rust-lld: error: section '.rodata' will not fit in region 'FLASH': overflowed by 2868 bytes\n\
                   rust-lld: error: section '.data' will not fit in region 'FLASH': overflowed by 2900 bytes\n";
        assert_eq!(overflow_bytes(err), Some(2900));
        assert_eq!(overflow_bytes("error: linking failed"), None);
    }

    #[test]
    fn the_budget_hint_promises_no_fit() {
        let f32_image = facts(404_000 + 2_000);
        // 196 KB of flash: int8 is the candidate, named as the image alone.
        let hint = f32_image.budget_hint(196_000);
        assert!(
            hint.starts_with("at --dtype int8 the image alone would take about"),
            "{hint}"
        );
        assert!(
            hint.contains("code must fit beside it") && !hint.contains("and fit"),
            "{hint}"
        );
        assert!(f32_image
            .budget_hint(10_000)
            .starts_with("no storage type fits"));
    }

    #[test]
    fn hint_starts_from_the_image_s_own_dtype() {
        // An int8 image of 145k matrix params (one group per row of 64),
        // 176 KB: 3 KB too large for its board. int4 fits; the overhead is
        // what the int8 estimate leaves of the file, not a guess from sizes.
        let int8 = ImageFacts {
            matrix_params: 145_000,
            matrix_rows: 2_000,
            other_params: 6_000,
            group: 64,
            tiled: true,
            dtype: DType::I8,
            narrowest: DType::I8,
            ..facts(176_000)
        };
        let hint = int8.fit_hint(3_000);
        assert!(hint.contains("--dtype int4"), "{hint}");
    }

    #[test]
    fn a_bad_image_is_the_runtime_error_in_one_line() {
        let dir = std::env::temp_dir().join(format!("xtask-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.fer");
        std::fs::write(&path, b"not an image at all").unwrap();
        let err = format!("{:#}", check(&path).unwrap_err());
        assert!(err.contains("is not usable"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
