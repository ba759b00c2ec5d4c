//! `ferrite inspect`: what an image holds and the flash and RAM it needs.

use std::io::Write;

use anyhow::Result;
use ferrite::Tokenizer;
use ferrite_tools::fla;
use ferrite_tools::model_dir::SOURCE_DTYPES;
use ferrite_tools::writer;

use super::args::ImageArg;

/// Show an image's config, tensors, sizes and the RAM it needs, or what a
/// state snapshot (`generate --save-state`) belongs to, its position and
/// bytes.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    image: ImageArg,
}

/// Prints the header line, the source, one line per layer, a table of the
/// tensors, the multiply-accumulates of a token's products and the flash
/// and RAM totals.
pub fn run(args: Args) -> Result<()> {
    let image = args.image.read()?;
    let mut out = std::io::stdout().lock();
    if image.bytes().starts_with(&ferrite::snapshot::MAGIC) {
        return snapshot(image.bytes(), &mut out);
    }
    let model = image.model()?;
    let c = model.config();
    writeln!(
        out,
        "ferrite image v{}: vocab {} hidden {} intermediate {} layers {} norm_eps {:e} tied_head {} tokenizer {}",
        model.header().version,
        c.vocab_size,
        c.hidden_size,
        c.intermediate_size,
        c.num_layers,
        c.norm_eps,
        c.tie_word_embeddings,
        tokenizer_text(&model.tokenizer())
    )?;
    writeln!(out, "source: {}", provenance_text(c.provenance))?;
    writeln!(
        out,
        "signature: {}",
        signature_text(image.bytes(), model.header())
    )?;
    writeln!(out, "token path: {}", c.token_path.name())?;
    if c.final_norm != ferrite::block::NormKind::Rms {
        writeln!(out, "final norm: layernorm (with a bias)")?;
    }
    let mut memory_total = 0u64;
    for i in 0..c.num_layers as usize {
        let layer = model.layer(i).map_err(anyhow::Error::msg)?;
        let block = model.block(i).map_err(anyhow::Error::msg)?;
        // The layer's state: its mixer's and its block's (channel mixing).
        let words = model.layer_state_len(i, 0).map_err(anyhow::Error::msg)?;
        let block_text = if block == ferrite::block::BlockConfig::RMS_SWIGLU {
            String::new()
        } else {
            format!(
                "  block {:?} norm, {:?} mlp{}",
                block.norm,
                block.mlp,
                if block.pre_norm { ", pre-norm" } else { "" }
            )
        };
        writeln!(
            out,
            "layer {i}: {} state {} {} bytes{block_text}  {:?}",
            layer.kind_name(),
            layer.state_format().name(),
            4 * words,
            layer
        )?;
        if let ferrite::LayerConfig::Cross(cc) = layer {
            let bytes = memory_bytes(&model, i)?;
            memory_total += bytes;
            writeln!(
                out,
                "layer {i}: cross memories {} x {} slots, {bytes} bytes in flash (keys and values, read in place), {} bytes of state in RAM (the selected memory)",
                cc.memories,
                cc.memory_slots,
                4 * words
            )?;
        }
    }
    writeln!(
        out,
        "{:<44} {:>6} {:>5} {:>16} {:>9} {:>10} {:>6}",
        "tensor", "dtype", "group", "shape", "bytes", "rel_err", "layout"
    )?;
    for index in 0..model.tensor_count() {
        let e = model.entry(index).map_err(anyhow::Error::msg)?;
        let dims: Vec<String> = e
            .dims
            .iter()
            .filter(|&&d| d != 0)
            .map(u32::to_string)
            .collect();
        writeln!(
            out,
            "{:<44} {:>6} {:>5} {:>16} {:>9} {:>10.3e} {:>6}",
            writer::tensor_name(e.layer_index(), e.role),
            e.dtype.name(),
            e.group_size,
            dims.join("x"),
            u64::from(e.data_len) + u64::from(e.scale_len),
            e.quant_error,
            e.layout.name()
        )?;
    }
    // The products' cost per token (`Model::macs_per_token`): what the
    // boards' `roofline:` line divides by the kernels' instructions.
    writeln!(
        out,
        "products: macs_per_token={}",
        model.macs_per_token().map_err(anyhow::Error::msg)?
    )?;
    writeln!(
        out,
        "snapshots: model_hash={:#018x} math {} snapshot_bytes={}",
        ferrite::snapshot::model_hash(&model).map_err(anyhow::Error::msg)?,
        ferrite::math::FAST_MATH,
        model_snapshot_len(image.bytes())?
    )?;
    if memory_total > 0 {
        writeln!(out, "cross memories: flash_bytes={memory_total}")?;
    }
    writeln!(
        out,
        "flash_bytes={} ram_bytes={} state_bytes={}",
        image.bytes().len(),
        model.session_bytes(0).map_err(anyhow::Error::msg)?,
        model.state_bytes(0).map_err(anyhow::Error::msg)?
    )?;
    Ok(())
}

/// Bytes in the image of layer `layer`'s baked cross-attention memories
/// (`attn.memory_k` and `attn.memory_v`: payload and scales).
fn memory_bytes(model: &ferrite::Model<'_>, layer: usize) -> Result<u64> {
    let mut bytes = 0u64;
    for index in 0..model.tensor_count() {
        let e = model.entry(index).map_err(anyhow::Error::msg)?;
        if e.layer_index() == Some(layer as u16)
            && matches!(
                e.role,
                ferrite::image::Role::MemoryK | ferrite::image::Role::MemoryV
            )
        {
            bytes += u64::from(e.data_len) + u64::from(e.scale_len);
        }
    }
    Ok(bytes)
}

/// Bytes of a snapshot of a session over `image` (no pinned capacity).
fn model_snapshot_len(image: &[u8]) -> Result<usize> {
    ferrite::snapshot_len(image, 0).map_err(anyhow::Error::msg)
}

/// What a snapshot holds: the header and CRC checked (not what model it
/// belongs to: only a session of that model can tell), one line.
fn snapshot(bytes: &[u8], out: &mut impl Write) -> Result<()> {
    let h = ferrite::snapshot::parse_header(bytes).map_err(anyhow::Error::msg)?;
    writeln!(
        out,
        "ferrite snapshot v{}: model_hash={:#018x} math {} position {} stream_len {} pinned {} of {} logits {} bytes={}",
        h.version,
        h.model_hash,
        ferrite::snapshot::math_name(h.math),
        h.position,
        h.stream_len,
        h.pinned,
        h.pinned_max,
        if h.flags & ferrite::snapshot::FLAG_LOGITS != 0 { "yes" } else { "no" },
        h.total_len
    )?;
    // Version 2: the sampler section, the last SAMPLER_LEN bytes.
    if h.flags & ferrite::snapshot::FLAG_SAMPLER != 0 {
        let end = h.total_len as usize;
        let section = bytes
            .get(end.saturating_sub(ferrite::snapshot::SAMPLER_LEN)..end)
            .unwrap_or_default();
        let st = ferrite::snapshot::parse_sampler(section).map_err(anyhow::Error::msg)?;
        let c = st.config();
        writeln!(
            out,
            "sampler: temperature {} top_k {} top_p {} seed {} draws {}",
            c.temperature, c.top_k, c.top_p, c.seed, st.draws
        )?;
    }
    Ok(())
}

/// The signer's key id and the security counter, and whether the
/// signature verifies against the key the image names (only a firmware's
/// trusted keys decide whether it is accepted: `ferrite verify`).
fn signature_text(bytes: &[u8], header: &ferrite::image::Header) -> String {
    let Some(s) = ferrite::signature::section(bytes, header) else {
        return "none".to_string();
    };
    let verdict = match ferrite_tools::sign::check(bytes) {
        Ok(_) => "verifies against that key".to_string(),
        Err(e) => format!("does NOT verify: {e:#}"),
    };
    format!(
        "key {} security_counter {} ({verdict})",
        ferrite::signature::KeyId::of(s.public_key),
        s.security_counter
    )
}

/// Human-readable `ModelConfig::provenance`.
fn provenance_text(p: u32) -> String {
    let code = p & 0xFF;
    let fla_type = fla::MODEL_TYPES.iter().find(|&&(_, c)| c == code);
    let format = match fla_type {
        _ if code == fla::source::FERRITE => "ferrite model dir".to_string(),
        Some((name, _)) => format!("fla checkpoint, model_type {name}"),
        None => format!("unknown source format {code}"),
    };
    let dtype = SOURCE_DTYPES
        .get(((p >> 8) & 0xFF) as usize)
        .unwrap_or(&"unknown");
    format!("{format}, weights {dtype}")
}

/// `bytes (vocab 256)` or `bpe (vocab N, M merges)`.
fn tokenizer_text(t: &Tokenizer<'_>) -> String {
    match t {
        Tokenizer::Bytes(_) => "bytes (vocab 256)".to_string(),
        Tokenizer::Bpe(b) => format!(
            "bpe (vocab {}, {} merges, GPT-2 pre-tokenizer)",
            b.vocab_len(),
            b.merge_count()
        ),
    }
}
