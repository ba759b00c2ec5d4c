//! The flash image format, versions 1 to 8 (`docs/image-format.md` is the
//! prose spec). Version 2 adds the byte-level BPE tokenizer section
//! ([`crate::tokenizer::BpeTokenizer`]); version 3 the tiled weight layout of
//! the integer kernels ([`Layout::Tiled`]); version 4 mixer options
//! ([`MIXER_OPTIONS_FORMAT_VERSION`]); version 5 BLA layers whose write
//! weights the runtime computes instead of reading a stored table
//! ([`COMPUTED_PHI_FORMAT_VERSION`]); version 6 the integer token path and
//! per-layer state formats ([`INTEGER_PATH_FORMAT_VERSION`]); version 7
//! the signature section ([`SIGNED_FORMAT_VERSION`], [`crate::signature`]);
//! version 8 the generalized block and the `mamba2` and `rwkv7` mixers
//! ([`BLOCK_FORMAT_VERSION`]). The tools write the lowest version that can
//! represent an image.
//!
//! ```text
//! offset 0   header (64 bytes, little-endian)
//!            magic "FERRITE\0" | version u32 | header_len u32 | file_len u32 | crc32 u32
//!            config_off u32 | config_len u32 | table_off u32 | tensor_count u32
//!            tokenizer_off u32 | tokenizer_len u32 | data_off u32 | data_len u32
//!            flags u32 | security_counter u32 (version 7; before: reserved, ignored)
//! config     model record (8 words) + one record of 16 words per layer
//! table      one 48-byte entry per tensor, in canonical order
//! tokenizer  (empty for the byte tokenizer; v2: BPE section, 4-byte aligned)
//! data       tensor payloads, each aligned to TENSOR_ALIGN bytes
//! signature  (v7, flag FLAG_SIGNED) public key 32 bytes | Ed25519 signature 64 bytes,
//!            the last SIGNATURE_SECTION_LEN bytes of the image
//! ```
//! The CRC-32 (ISO-HDLC) covers every byte after the `crc32` field up to
//! [`Header::signed_len`]: `file_len`, or the signature section's start in
//! a signed image (the signature covers every byte before it, CRC included).
//!
//! This module is the single definition of the format (with the roles and
//! record sizes of the private `format` module below it, re-exported here
//! and in [`crate::config`]): the tools write with these constants and
//! [`TensorEntry::encode`], the runtime reads with [`Header::parse`] and
//! [`TensorEntry::parse`].

use crate::error::{Error, Result};
use crate::format::{read_u16, read_u32};
pub use crate::format::{Role, StateFormat};

/// First eight bytes of every image.
pub const MAGIC: [u8; 8] = *b"FERRITE\0";
/// Newest format version this runtime reads and the tools write.
pub const FORMAT_VERSION: u32 = 8;
/// Version that first carries a tokenizer section (byte-level BPE).
pub const BPE_FORMAT_VERSION: u32 = 2;
/// Version that first stores weights in [`Layout::Tiled`].
pub const TILED_FORMAT_VERSION: u32 = 3;
/// Version that first carries the mixer options of the GDN family (DeltaNet,
/// linear attention, retention), GSA's short convolution, SWA's dilation and
/// the latent-compressed window `mla` (layer-record words, flag bits and a
/// mixer kind that version 3 readers refuse).
pub const MIXER_OPTIONS_FORMAT_VERSION: u32 = 4;
/// Version that first lets a `bla` layer record say that the runtime
/// computes the layer's write weights `phi` (flag bit 1,
/// [`crate::mixers::BlaPhiSource::Computed`]): the image then stores no
/// `attn.phi` table for it.
pub const COMPUTED_PHI_FORMAT_VERSION: u32 = 5;
/// Version that first carries the integer token path: the model record's
/// flag bit 1 ([`crate::config::TokenPath::Int`]) and a state format per
/// layer (layer-record word 15, [`crate::format::StateFormat`]).
pub const INTEGER_PATH_FORMAT_VERSION: u32 = 6;
/// Version that first carries the signature section and the security
/// counter (header words 14 and 15, [`FLAG_SIGNED`], [`crate::signature`]).
pub const SIGNED_FORMAT_VERSION: u32 = 7;
/// Header flag (version 7): the image ends with a signature section of
/// [`SIGNATURE_SECTION_LEN`] bytes.
pub const FLAG_SIGNED: u32 = 1;
/// Bytes of the signature section: the signer's Ed25519 public key (32)
/// and the signature (64).
pub const SIGNATURE_SECTION_LEN: usize = 96;
/// Version that first carries the generalized block (docs/spec.md §1.1):
/// per-layer block options in layer-record word 14 (LayerNorm with bias,
/// no MLP or RWKV-7's channel mixing, an extra pre-norm;
/// `block::BlockConfig`), a LayerNorm final norm (model flag bit 2), an
/// `intermediate_size` of 0 in a model without an MLP, and the `mamba2`
/// and `rwkv7` mixers.
pub const BLOCK_FORMAT_VERSION: u32 = 8;
/// Oldest format version this runtime reads.
pub const MIN_FORMAT_VERSION: u32 = 1;
/// Size of the fixed header.
pub const HEADER_LEN: usize = 64;
/// Size of one tensor table entry.
pub const TENSOR_ENTRY_LEN: usize = 48;
/// Alignment of every tensor payload, relative to the image start.
pub const TENSOR_ALIGN: usize = 32;
/// Alignment the image itself must have in memory.
pub const IMAGE_ALIGN: usize = 16;
/// Byte offset of the CRC field; the CRC covers `CRC_START..file_len`.
pub const CRC_FIELD: usize = 20;
/// First byte covered by the CRC.
pub const CRC_START: usize = 24;

/// CRC-32 used by the image format (ISO-HDLC, the zlib/PNG polynomial).
pub const CRC: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);

/// The parsed fixed header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Format version.
    pub version: u32,
    /// Total image length in bytes.
    pub file_len: u32,
    /// CRC-32 over `CRC_START..file_len`.
    pub crc32: u32,
    /// Offset of the config section.
    pub config_off: u32,
    /// Length of the config section.
    pub config_len: u32,
    /// Offset of the tensor table.
    pub table_off: u32,
    /// Number of tensor table entries.
    pub tensor_count: u32,
    /// Offset of the tokenizer section.
    pub tokenizer_off: u32,
    /// Length of the tokenizer section.
    pub tokenizer_len: u32,
    /// Offset of the tensor data section.
    pub data_off: u32,
    /// Length of the tensor data section.
    pub data_len: u32,
    /// Version 7: [`FLAG_SIGNED`] or 0 (0 for older images, whose word is
    /// reserved and ignored).
    pub flags: u32,
    /// Version 7: the model version that anti-rollback compares (signed
    /// images only; 0 otherwise).
    pub security_counter: u32,
}

/// Word `i` of the header after the magic.
const fn header_word(image: &[u8], i: usize) -> u32 {
    match read_u32(image, 8 + 4 * i) {
        Some(w) => w,
        None => 0,
    }
}

const fn section_fits(off: u32, len: u32, file_len: u32) -> bool {
    let end = off as u64 + len as u64;
    off as usize >= HEADER_LEN && end <= file_len as u64
}

impl Header {
    /// Parses and checks the header (magic, version, section bounds); does not check the CRC.
    pub const fn parse(image: &[u8]) -> Result<Header> {
        if image.len() < HEADER_LEN {
            return Err(Error::Truncated {
                needed: HEADER_LEN,
                len: image.len(),
            });
        }
        let mut i = 0;
        while i < MAGIC.len() {
            if image[i] != MAGIC[i] {
                return Err(Error::BadMagic);
            }
            i += 1;
        }
        let version = header_word(image, 0);
        if version < MIN_FORMAT_VERSION || version > FORMAT_VERSION {
            return Err(Error::UnsupportedVersion {
                found: version,
                min: MIN_FORMAT_VERSION,
                max: FORMAT_VERSION,
            });
        }
        if header_word(image, 1) as usize != HEADER_LEN {
            return Err(Error::BadHeader("header length is not 64"));
        }
        let v7 = version >= SIGNED_FORMAT_VERSION;
        let h = Header {
            version,
            file_len: header_word(image, 2),
            crc32: header_word(image, 3),
            config_off: header_word(image, 4),
            config_len: header_word(image, 5),
            table_off: header_word(image, 6),
            tensor_count: header_word(image, 7),
            tokenizer_off: header_word(image, 8),
            tokenizer_len: header_word(image, 9),
            data_off: header_word(image, 10),
            data_len: header_word(image, 11),
            flags: if v7 { header_word(image, 12) } else { 0 },
            security_counter: if v7 { header_word(image, 13) } else { 0 },
        };
        if (h.file_len as usize) > image.len() {
            return Err(Error::Truncated {
                needed: h.file_len as usize,
                len: image.len(),
            });
        }
        if h.flags & !FLAG_SIGNED != 0 {
            return Err(Error::BadHeader("unknown header flag"));
        }
        if !h.is_signed() && h.security_counter != 0 {
            return Err(Error::BadHeader("a security counter on an unsigned image"));
        }
        if h.is_signed() && (h.file_len as usize) < HEADER_LEN + SIGNATURE_SECTION_LEN {
            return Err(Error::BadHeader(
                "signed image shorter than its signature section",
            ));
        }
        // Every section lies before the signature section.
        let end = h.signed_len();
        if !section_fits(h.config_off, h.config_len, end) {
            return Err(Error::BadHeader("config section out of bounds"));
        }
        let table_len = h.tensor_count as u64 * TENSOR_ENTRY_LEN as u64;
        if table_len > u32::MAX as u64 || !section_fits(h.table_off, table_len as u32, end) {
            return Err(Error::BadHeader("tensor table out of bounds"));
        }
        if !section_fits(h.tokenizer_off, h.tokenizer_len, end) {
            return Err(Error::BadHeader("tokenizer section out of bounds"));
        }
        if !section_fits(h.data_off, h.data_len, end) {
            return Err(Error::BadHeader("data section out of bounds"));
        }
        if h.data_off as usize % TENSOR_ALIGN != 0 {
            return Err(Error::BadHeader("data section is not aligned"));
        }
        Ok(h)
    }

    /// Whether the image ends with a signature section (version 7, [`FLAG_SIGNED`]).
    pub const fn is_signed(&self) -> bool {
        self.flags & FLAG_SIGNED != 0
    }

    /// Bytes before the signature section (`file_len` when unsigned): what
    /// the signature and the CRC cover, and where every other section lies.
    pub const fn signed_len(&self) -> u32 {
        if self.is_signed() {
            self.file_len.saturating_sub(SIGNATURE_SECTION_LEN as u32)
        } else {
            self.file_len
        }
    }

    /// Writes the header into the first [`HEADER_LEN`] bytes of `out` (used by the tools).
    pub fn encode(&self, out: &mut [u8; HEADER_LEN]) {
        out.fill(0);
        out[..8].copy_from_slice(&MAGIC);
        let words = [
            self.version,
            HEADER_LEN as u32,
            self.file_len,
            self.crc32,
            self.config_off,
            self.config_len,
            self.table_off,
            self.tensor_count,
            self.tokenizer_off,
            self.tokenizer_len,
            self.data_off,
            self.data_len,
            self.flags,
            self.security_counter,
        ];
        for (i, w) in words.iter().enumerate() {
            out[8 + 4 * i..12 + 4 * i].copy_from_slice(&w.to_le_bytes());
        }
    }
}

/// Storage type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[repr(u8)]
pub enum DType {
    /// IEEE f32.
    F32 = 0,
    /// IEEE f16.
    F16 = 1,
    /// Signed 8-bit, symmetric, one f32 scale per group along the input dim.
    I8 = 2,
    /// Signed 4-bit (two per byte, low nibble first), one f32 scale per group.
    I4 = 3,
}

impl DType {
    /// Decodes a dtype code.
    pub const fn from_code(code: u8) -> Option<DType> {
        match code {
            0 => Some(DType::F32),
            1 => Some(DType::F16),
            2 => Some(DType::I8),
            3 => Some(DType::I4),
            _ => None,
        }
    }

    /// Lower-case name, as used on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::I8 => "int8",
            DType::I4 => "int4",
        }
    }

    /// Whether the dtype stores group-wise scales.
    pub const fn is_quantized(self) -> bool {
        matches!(self, DType::I8 | DType::I4)
    }

    /// Payload bytes of `n` elements (without scales); saturates rather than
    /// overflow (no payload is that long).
    pub const fn payload_bytes(self, n: usize) -> usize {
        match self {
            DType::F32 => n.saturating_mul(4),
            DType::F16 => n.saturating_mul(2),
            DType::I8 => n,
            DType::I4 => n.div_ceil(2),
        }
    }
}

/// How a quantized tensor's values and scales are laid out (byte 5 of its
/// table entry; 0 before format version 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[repr(u8)]
pub enum Layout {
    /// Row-major values, one f32 scale per group (formats 1 and 2; f32 and
    /// f16 tensors always). Run by the generic kernels, activations in f32.
    RowMajor = 0,
    /// The integer path's layout (int8 and int4 matrices only): rows padded
    /// to a multiple of 4 and cut into tiles of 4 rows x 16 columns, tiles in
    /// row-block-major order, each tile row-major (int4: per 8 columns, byte
    /// `j` holds column `j` in its low nibble and column `j + 4` in its high
    /// nibble). Scales in two levels: one f32 per (padded) row, then one u8
    /// multiplier per row and group, `w = d[row] * m[row][group] * q`.
    /// Run by the integer kernels against int8 activations.
    Tiled = 1,
}

impl Layout {
    /// Decodes a layout code.
    pub const fn from_code(code: u8) -> Option<Layout> {
        match code {
            0 => Some(Layout::RowMajor),
            1 => Some(Layout::Tiled),
            _ => None,
        }
    }

    /// Name, as shown by `ferrite inspect`.
    pub const fn name(self) -> &'static str {
        match self {
            Layout::RowMajor => "rows",
            Layout::Tiled => "tiled",
        }
    }
}

/// Marker in [`TensorEntry::layer`] for model-wide tensors.
pub const GLOBAL_LAYER: u16 = u16::MAX;

/// What the configuration expects of one tensor: the canonical table order is
/// the order in which [`crate::Model`] lists these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    /// Layer, or `None` for model-wide tensors.
    pub layer: Option<u16>,
    /// What the tensor is.
    pub role: Role,
    /// Shape, outermost first; unused trailing dims are 0.
    pub dims: [u32; 3],
    /// Whether this is a weight matrix (or the embedding table) that may be quantized.
    pub matrix: bool,
}

impl TensorSpec {
    /// Number of dims used.
    pub const fn ndim(&self) -> usize {
        if self.dims[2] != 0 {
            3
        } else if self.dims[1] != 0 {
            2
        } else {
            1
        }
    }

    /// Number of elements; saturates rather than overflow (a parsed config
    /// keeps every dimension at most [`crate::config::MAX_DIM`]).
    pub const fn numel(&self) -> usize {
        let mut n = 1usize;
        let mut i = 0;
        while i < self.ndim() {
            n = n.saturating_mul(self.dims[i] as usize);
            i += 1;
        }
        n
    }
}

/// One parsed tensor table entry.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TensorEntry {
    /// Layer index, or [`GLOBAL_LAYER`].
    pub layer: u16,
    /// Role code (see [`Role`]).
    pub role: Role,
    /// Storage type.
    pub dtype: DType,
    /// Layout of values and scales.
    pub layout: Layout,
    /// Group size along the input dim for quantized dtypes (0 otherwise).
    pub group_size: u16,
    /// Shape, unused trailing dims 0.
    pub dims: [u32; 3],
    /// Payload offset from the image start.
    pub data_off: u32,
    /// Payload length.
    pub data_len: u32,
    /// Offset of the f32 scales (quantized dtypes), else 0.
    pub scale_off: u32,
    /// Length of the scales in bytes, else 0.
    pub scale_len: u32,
    /// Relative RMS error of the stored weights against the source (0 when exact).
    pub quant_error: f32,
}

impl TensorEntry {
    /// Parses entry `index` of a table.
    #[inline(always)]
    pub fn parse(table: &[u8], index: u32) -> Result<TensorEntry> {
        let e = (index as usize)
            .checked_mul(TENSOR_ENTRY_LEN)
            .and_then(|base| table.get(base..base.checked_add(TENSOR_ENTRY_LEN)?))
            .ok_or(Error::BadHeader("tensor table truncated"))?;
        let w = |off: usize| read_u32(e, off).unwrap_or(0);
        let role_code = read_u16(e, 2).unwrap_or(0);
        let role = Role::from_code(role_code).ok_or(Error::BadTensor {
            index,
            reason: "unknown tensor role",
        })?;
        let dtype = DType::from_code(e[4]).ok_or(Error::UnknownDType { index, code: e[4] })?;
        let layout = Layout::from_code(e[5]).ok_or(Error::BadTensor {
            index,
            reason: "unknown tensor layout",
        })?;
        Ok(TensorEntry {
            layer: read_u16(e, 0).unwrap_or(0),
            role,
            dtype,
            layout,
            group_size: read_u16(e, 6).unwrap_or(0),
            dims: [w(8), w(12), w(16)],
            data_off: w(24),
            data_len: w(28),
            scale_off: w(32),
            scale_len: w(36),
            quant_error: f32::from_bits(w(40)),
        })
    }

    /// Encodes the entry (used by the tools).
    pub fn encode(&self) -> [u8; TENSOR_ENTRY_LEN] {
        let mut e = [0u8; TENSOR_ENTRY_LEN];
        e[0..2].copy_from_slice(&self.layer.to_le_bytes());
        e[2..4].copy_from_slice(&(self.role as u16).to_le_bytes());
        e[4] = self.dtype as u8;
        e[5] = self.layout as u8;
        e[6..8].copy_from_slice(&self.group_size.to_le_bytes());
        let words = [
            (8, self.dims[0]),
            (12, self.dims[1]),
            (16, self.dims[2]),
            (24, self.data_off),
            (28, self.data_len),
            (32, self.scale_off),
            (36, self.scale_len),
            (40, self.quant_error.to_bits()),
        ];
        for (off, v) in words {
            e[off..off + 4].copy_from_slice(&v.to_le_bytes());
        }
        e
    }

    /// Layer as an option.
    pub fn layer_index(&self) -> Option<u16> {
        (self.layer != GLOBAL_LAYER).then_some(self.layer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_and_payload_counts_saturate() {
        let spec = TensorSpec {
            layer: None,
            role: Role::Embeddings,
            dims: [u32::MAX; 3],
            matrix: true,
        };
        assert_eq!(spec.numel(), usize::MAX);
        assert_eq!(DType::F32.payload_bytes(usize::MAX / 2), usize::MAX);
        assert_eq!(DType::F16.payload_bytes(usize::MAX), usize::MAX);
        assert_eq!(DType::I4.payload_bytes(usize::MAX), usize::MAX / 2 + 1);
    }

    /// A header whose sections are all empty at the end of a `len`-byte image.
    fn empty_header(len: u32) -> Header {
        Header {
            version: FORMAT_VERSION,
            file_len: len,
            crc32: 0x1234_5678,
            config_off: len,
            config_len: 0,
            table_off: len,
            tensor_count: 0,
            tokenizer_off: len,
            tokenizer_len: 0,
            data_off: len,
            data_len: 0,
            flags: 0,
            security_counter: 0,
        }
    }

    fn encoded(h: &Header) -> [u8; HEADER_LEN] {
        let mut out = [0xAA; HEADER_LEN];
        h.encode(&mut out);
        out
    }

    #[test]
    fn a_header_alone_parses_and_round_trips() {
        // Exactly HEADER_LEN bytes: the shortest image the header accepts.
        let h = empty_header(HEADER_LEN as u32);
        let bytes = encoded(&h);
        assert_eq!(&bytes[..8], &MAGIC);
        assert_eq!(read_u32(&bytes, 12), Some(HEADER_LEN as u32));
        assert_eq!(read_u32(&bytes, 56), Some(0), "flags");
        assert_eq!(read_u32(&bytes, 60), Some(0), "reserved");
        assert_eq!(Header::parse(&bytes), Ok(h));
        assert_eq!(
            Header::parse(&bytes[..HEADER_LEN - 1]),
            Err(Error::Truncated {
                needed: HEADER_LEN,
                len: HEADER_LEN - 1
            })
        );
        // Every field lands in its own word.
        let mut image = [0u8; 256];
        let h = Header {
            version: MIN_FORMAT_VERSION,
            file_len: 256,
            crc32: 7,
            config_off: 64,
            config_len: 8,
            table_off: 72,
            tensor_count: 2,
            tokenizer_off: 168,
            tokenizer_len: 4,
            data_off: 192,
            data_len: 64,
            flags: 0,
            security_counter: 0,
        };
        image[..HEADER_LEN].copy_from_slice(&encoded(&h));
        assert_eq!(Header::parse(&image), Ok(h));
    }

    #[test]
    fn every_header_check_refuses_one_past_its_bound() {
        let mut image = [0u8; 128];
        let parse = |h: &Header, image: &mut [u8; 128]| {
            image[..HEADER_LEN].copy_from_slice(&encoded(h));
            Header::parse(&image[..])
        };
        let ok = empty_header(128);
        assert_eq!(parse(&ok, &mut image), Ok(ok));
        for (version, accepted) in [
            (0, false),
            (1, true),
            (6, true),
            (7, true),
            (8, true),
            (9, false),
        ] {
            let h = Header { version, ..ok };
            let got = parse(&h, &mut image);
            assert_eq!(got.is_ok(), accepted, "version {version}: {got:?}");
        }
        image[..HEADER_LEN].copy_from_slice(&encoded(&ok));
        image[7] = 1;
        assert_eq!(Header::parse(&image), Err(Error::BadMagic));
        image[..HEADER_LEN].copy_from_slice(&encoded(&ok));
        image[12] = 65;
        assert_eq!(
            Header::parse(&image),
            Err(Error::BadHeader("header length is not 64"))
        );
        let long = Header {
            file_len: 129,
            ..ok
        };
        assert_eq!(
            parse(&long, &mut image),
            Err(Error::Truncated {
                needed: 129,
                len: 128
            })
        );
        // A section may end at file_len and start at HEADER_LEN, not beyond.
        let fits = Header {
            config_off: 64,
            config_len: 64,
            table_off: 80,
            tensor_count: 1,
            tokenizer_off: 64,
            tokenizer_len: 64,
            data_off: 96,
            data_len: 32,
            ..ok
        };
        assert_eq!(parse(&fits, &mut image), Ok(fits));
        let cases = [
            (
                Header {
                    config_len: 65,
                    ..fits
                },
                "config section out of bounds",
            ),
            (
                Header {
                    config_off: 63,
                    config_len: 1,
                    ..fits
                },
                "config section out of bounds",
            ),
            (
                Header {
                    table_off: 81,
                    ..fits
                },
                "tensor table out of bounds",
            ),
            (
                // 3 * 2^32 bytes of table: 0 once truncated to u32.
                Header {
                    tensor_count: 1 << 28,
                    ..fits
                },
                "tensor table out of bounds",
            ),
            (
                Header {
                    tensor_count: u32::MAX,
                    ..fits
                },
                "tensor table out of bounds",
            ),
            (
                Header {
                    tokenizer_off: 65,
                    ..fits
                },
                "tokenizer section out of bounds",
            ),
            (
                Header {
                    data_len: 33,
                    ..fits
                },
                "data section out of bounds",
            ),
            (
                Header {
                    data_off: 112,
                    data_len: 0,
                    ..fits
                },
                "data section is not aligned",
            ),
        ];
        for (h, reason) in cases {
            assert_eq!(
                parse(&h, &mut image),
                Err(Error::BadHeader(reason)),
                "{h:?}"
            );
        }
    }

    #[test]
    fn version_7_reads_its_flags_and_counter_and_keeps_sections_before_the_signature() {
        let mut image = [0u8; 256];
        let parse = |h: &Header, image: &mut [u8; 256]| {
            image[..HEADER_LEN].copy_from_slice(&encoded(h));
            Header::parse(&image[..])
        };
        let signed = Header {
            flags: FLAG_SIGNED,
            security_counter: 9,
            config_off: 160,
            table_off: 160,
            tokenizer_off: 160,
            data_off: 160,
            ..empty_header(256)
        };
        assert_eq!(parse(&signed, &mut image), Ok(signed));
        assert!(signed.is_signed());
        assert_eq!(signed.signed_len(), 256 - SIGNATURE_SECTION_LEN as u32);
        // A section reaching into the signature section is out of bounds.
        let into = Header {
            data_len: 1,
            ..signed
        };
        assert_eq!(
            parse(&into, &mut image),
            Err(Error::BadHeader("data section out of bounds"))
        );
        let cases = [
            (Header { flags: 2, ..signed }, "unknown header flag"),
            (
                Header { flags: 0, ..signed },
                "a security counter on an unsigned image",
            ),
            (
                Header {
                    file_len: (HEADER_LEN + SIGNATURE_SECTION_LEN - 1) as u32,
                    ..signed
                },
                "signed image shorter than its signature section",
            ),
        ];
        for (h, reason) in cases {
            assert_eq!(
                parse(&h, &mut image),
                Err(Error::BadHeader(reason)),
                "{h:?}"
            );
        }
        // Before version 7 the two words are reserved: ignored, read as 0.
        let old = Header {
            version: INTEGER_PATH_FORMAT_VERSION,
            ..signed
        };
        let plain = Header {
            flags: 0,
            security_counter: 0,
            ..old
        };
        assert_eq!(parse(&old, &mut image), Ok(plain));
        assert!(!plain.is_signed());
        assert_eq!(plain.signed_len(), 256);
    }

    #[test]
    fn a_tensor_entry_round_trips_through_its_encoding() {
        let entry = TensorEntry {
            layer: 3,
            role: Role::MlpDown,
            dtype: DType::I4,
            layout: Layout::Tiled,
            group_size: 32,
            dims: [5, 6, 7],
            data_off: 0x100,
            data_len: 0x200,
            scale_off: 0x300,
            scale_len: 0x40,
            quant_error: 0.25,
        };
        let mut table = [0u8; 2 * TENSOR_ENTRY_LEN];
        table[TENSOR_ENTRY_LEN..].copy_from_slice(&entry.encode());
        assert_eq!(TensorEntry::parse(&table, 1), Ok(entry));
        assert_eq!(entry.layer_index(), Some(3));
        let global = TensorEntry {
            layer: GLOBAL_LAYER,
            ..entry
        };
        assert_eq!(global.layer_index(), None);
        let mut bad = entry.encode();
        bad[5] = 2;
        assert_eq!(
            TensorEntry::parse(&bad, 0),
            Err(Error::BadTensor {
                index: 0,
                reason: "unknown tensor layout"
            })
        );
        bad[4] = 4;
        assert_eq!(
            TensorEntry::parse(&bad, 0),
            Err(Error::UnknownDType { index: 0, code: 4 })
        );
    }

    #[test]
    fn dtypes_and_layouts_decode_their_codes_and_keep_their_names() {
        let dtypes = [
            (DType::F32, "f32", false, 12),
            (DType::F16, "f16", false, 6),
            (DType::I8, "int8", true, 3),
            (DType::I4, "int4", true, 2),
        ];
        for (code, (dtype, name, quantized, bytes_of_3)) in dtypes.into_iter().enumerate() {
            assert_eq!(DType::from_code(code as u8), Some(dtype));
            assert_eq!(dtype.name(), name);
            assert_eq!(dtype.is_quantized(), quantized);
            assert_eq!(dtype.payload_bytes(3), bytes_of_3);
        }
        assert_eq!(DType::from_code(4), None);
        assert_eq!(Layout::from_code(0), Some(Layout::RowMajor));
        assert_eq!(Layout::from_code(1), Some(Layout::Tiled));
        assert_eq!(Layout::from_code(2), None);
        assert_eq!(Layout::RowMajor.name(), "rows");
        assert_eq!(Layout::Tiled.name(), "tiled");
    }

    #[test]
    fn a_spec_counts_the_dims_it_uses() {
        let spec = |dims| TensorSpec {
            layer: Some(0),
            role: Role::QConv,
            dims,
            matrix: false,
        };
        assert_eq!((spec([4, 0, 0]).ndim(), spec([4, 0, 0]).numel()), (1, 4));
        assert_eq!((spec([4, 3, 0]).ndim(), spec([4, 3, 0]).numel()), (2, 12));
        assert_eq!((spec([4, 3, 2]).ndim(), spec([4, 3, 2]).numel()), (3, 24));
        assert_eq!((spec([4, 0, 2]).ndim(), spec([4, 0, 2]).numel()), (3, 0));
    }

    #[test]
    fn an_entry_index_past_the_table_is_an_error() {
        let table = [0u8; 2 * TENSOR_ENTRY_LEN];
        for index in [2, u32::MAX / 48 + 1, u32::MAX] {
            assert_eq!(
                TensorEntry::parse(&table, index),
                Err(Error::BadHeader("tensor table truncated"))
            );
        }
    }
}
