//! State snapshots (`Session::snapshot` / `Session::restore`,
//! docs/snapshot-format.md): a snapshot at token k restored into a fresh
//! session continues with exactly the tokens and logit bits of the
//! uninterrupted run (f32 images of every mixer family, an int8 image, an
//! int8 image on the integer token path with int16 and int8-KV states, a
//! pinned prefix, large positions); every refusal leaves the session
//! untouched (its whole snapshot, so state, logits, position, stream length
//! and pinned count, compared byte for byte); and the committed corpus of
//! broken snapshots, `tests/corrupt-snapshot/`, is refused with exactly the
//! errors its MANIFEST gives (with `restore_with_sampler`, the sampler
//! untouched too). Sampled streams (format version 2, the sampler's state in
//! the snapshot) continue exactly as well, and hostile sampler sections are
//! refused with typed errors. Regenerate the corpus after a format change:
//!
//! ```text
//! FERRITE_OVERWRITE=1 cargo test -p ferrite-tests --test snapshot
//! ```

use std::path::{Path, PathBuf};

use ferrite::image::DType;
use ferrite::snapshot::{self, SnapshotError};
use ferrite::{
    Aligned, Error, Model, Sampler, SamplerConfig, SamplerState, Session, StateFormat, StepError,
    TokenPath,
};
use ferrite_tests::{fixtures_dir, image_of};
use ferrite_tools::run::AlignedImage;
use ferrite_tools::writer::WriteOptions;

const PROMPT: &[u32] = &[72, 105, 44, 32, 116, 104, 101];

fn int8() -> WriteOptions {
    WriteOptions {
        dtype: DType::I8,
        ..Default::default()
    }
}

fn int_path() -> WriteOptions {
    WriteOptions {
        token_path: TokenPath::Int,
        state: StateFormat::Int16,
        ..int8()
    }
}

/// The images the continuation tests run: every mixer family at f32, an
/// int8 image on the f32 path, and int8 on the integer token path (GDN
/// int16 and SWA int8-KV states, Mamba-2's f32 state).
fn images() -> Vec<(String, AlignedImage)> {
    let f = fixtures_dir();
    let mut out = Vec::new();
    for (name, opts) in [
        ("hybrid_all4_untied", WriteOptions::default()),
        ("mla_latent_window", WriteOptions::default()),
        ("swa_sinks_cache", WriteOptions::default()),
        ("hybrid_gdn_swa", int8()),
        ("hybrid_gdn_swa", int_path()),
        ("gdn_gate", int_path()),
        // Format 8: RWKV-7's channel-mixing state (the block's) and the
        // value carried across layers (scratch, not state); Mamba-2's f32
        // step on the integer token path.
        ("rwkv7_lm", WriteOptions::default()),
        ("mamba2_options", int_path()),
    ] {
        let label = format!("{name} {:?} {:?}", opts.dtype, opts.token_path);
        out.push((label, image_of(&f.join(name), &opts)));
    }
    out
}

/// One generated step: the token and the bits of the logits it came from.
type Recorded = (u32, Vec<u32>);

fn record(logits: &[f32], token: u32) -> Recorded {
    (token, logits.iter().map(|l| l.to_bits()).collect())
}

/// A buffer whose scratch is not zero, so that a restore that relied on
/// scratch left by earlier tokens would show.
fn dirty_buffer(model: &Model<'_>, pinned_max: usize) -> Vec<f32> {
    vec![7.25; model.session_len(pinned_max).unwrap()]
}

/// `generate_with(prompt, n)` from position `at`, greedy.
fn uninterrupted(image: &[u8], at: u64, n: usize) -> Vec<Recorded> {
    let model = Model::load(image).unwrap();
    let mut buf = dirty_buffer(&model, 0);
    let mut s = Session::new(model, &mut buf).unwrap();
    s.seek(at);
    let mut out = Vec::new();
    s.generate_with(PROMPT, n, &mut Sampler::greedy(), |step| {
        out.push(record(step.logits, step.token));
        true
    })
    .unwrap();
    out
}

/// The same stream cut after `k` generated tokens: `k` tokens, a feed of
/// the last one, a snapshot; restored into a fresh session, `n - k` more
/// from the snapshot's logits. Returns all `n` steps and the snapshot.
fn interrupted(image: &[u8], at: u64, k: usize, n: usize) -> (Vec<Recorded>, Vec<u8>) {
    let mut out = Vec::new();
    let snap = {
        let model = Model::load(image).unwrap();
        let mut buf = dirty_buffer(&model, 0);
        let mut s = Session::new(model, &mut buf).unwrap();
        s.seek(at);
        let mut last = 0;
        s.generate_with(PROMPT, k, &mut Sampler::greedy(), |step| {
            out.push(record(step.logits, step.token));
            last = step.token;
            true
        })
        .unwrap();
        s.feed(last).unwrap();
        let mut snap = vec![0u8; s.snapshot_len()];
        assert_eq!(s.snapshot(&mut snap).unwrap(), snap.len());
        assert_eq!(streamed(&s), snap, "snapshot_to differs from snapshot");
        snap
    };
    let model = Model::load(image).unwrap();
    let mut buf = dirty_buffer(&model, 0);
    let mut s = Session::new(model, &mut buf).unwrap();
    s.restore(&snap).unwrap();
    // A restored session snapshots to the same bytes.
    let mut again = vec![0u8; s.snapshot_len()];
    s.snapshot(&mut again).unwrap();
    assert_eq!(again, snap, "snapshot of the restored session differs");
    s.resume_with(n - k, &mut Sampler::greedy(), |step| {
        out.push(record(step.logits, step.token));
        true
    })
    .unwrap();
    (out, snap)
}

#[test]
fn a_restored_snapshot_continues_with_the_same_tokens_and_logit_bits() {
    let n = 24;
    for (name, image) in images() {
        let whole = uninterrupted(image.bytes(), 0, n);
        for k in [1, 2, 9, 23] {
            let (cut, snap) = interrupted(image.bytes(), 0, k, n);
            assert_eq!(cut.len(), n, "{name} k={k}");
            for (i, (a, b)) in whole.iter().zip(&cut).enumerate() {
                assert!(a == b, "{name}: cut at {k}, step {i} differs");
            }
            let model = Model::load(image.bytes()).unwrap();
            assert_eq!(
                snap.len(),
                ferrite::snapshot_len(image.bytes(), 0).unwrap(),
                "{name}"
            );
            assert_eq!(
                snap.len(),
                64 + model.state_bytes(0).unwrap() + 4 * model.config().vocab_size as usize
            );
        }
        println!(
            "{name}: {} snapshot bytes",
            ferrite::snapshot_len(image.bytes(), 0).unwrap()
        );
    }
}

#[test]
fn restore_after_seek_to_large_positions_continues_exactly() {
    let n = 12;
    let image = image_of(
        &fixtures_dir().join("hybrid_all4_untied"),
        &Default::default(),
    );
    let int = image_of(&fixtures_dir().join("hybrid_gdn_swa"), &int_path());
    for image in [&image, &int] {
        for at in [1u64 << 24, 1 << 32, 1 << 53, u64::MAX - 64] {
            let whole = uninterrupted(image.bytes(), at, n);
            let (cut, snap) = interrupted(image.bytes(), at, 5, n);
            assert!(whole == cut, "position {at}: the continuation differs");
            let h = snapshot::parse_header(&snap).unwrap();
            // PROMPT and the 5 generated tokens were fed.
            assert_eq!(h.stream_len, (PROMPT.len() + 5) as u64);
            assert_eq!(h.position, at + h.stream_len);
        }
    }
}

#[test]
fn a_stream_at_the_last_position_is_snapshotted_but_not_restored() {
    let image = image_of(&fixtures_dir().join("gdn_gate"), &Default::default());
    let model = Model::load(image.bytes()).unwrap();
    let mut buf = dirty_buffer(&model, 0);
    let mut s = Session::new(model, &mut buf).unwrap();
    s.seek(u64::MAX - 1);
    s.feed(3).unwrap();
    assert_eq!(s.feed(4).unwrap_err(), StepError::PositionOverflow);
    let mut snap = vec![0u8; s.snapshot_len()];
    s.snapshot(&mut snap).unwrap();
    let mut other_buf = dirty_buffer(&model, 0);
    let mut fresh = Session::new(model, &mut other_buf).unwrap();
    let before = snapshot_of(&fresh);
    assert_eq!(
        fresh.restore(&snap).unwrap_err(),
        Error::BadSnapshot(SnapshotError::PositionExhausted)
    );
    assert_eq!(snapshot_of(&fresh), before);
}

#[test]
fn a_snapshot_with_nothing_fed_keeps_the_position_and_has_no_logits() {
    let image = image_of(&fixtures_dir().join("gdn_gate"), &Default::default());
    let model = Model::load(image.bytes()).unwrap();
    let mut buf = dirty_buffer(&model, 0);
    let mut s = Session::new(model, &mut buf).unwrap();
    s.feed(1).unwrap();
    s.seek(1 << 40);
    let mut snap = vec![0u8; s.snapshot_len()];
    s.snapshot(&mut snap).unwrap();
    // Streamed, the logits section is the same zeros.
    assert_eq!(streamed(&s), snap);
    let mut other = dirty_buffer(&model, 0);
    let mut r = Session::new(model, &mut other).unwrap();
    r.feed(9).unwrap();
    r.restore(&snap).unwrap();
    assert_eq!((r.position(), r.stream_len()), (1 << 40, 0));
    assert!(r.last_logits().is_none());
    assert_eq!(
        r.resume_with(3, &mut Sampler::greedy(), |_| true)
            .unwrap_err(),
        StepError::NoLogits
    );
    assert!(r.state().iter().all(|&b| b == 0));
    // And it goes on as a fresh stream at that position would.
    let a = r.feed(5).unwrap().to_vec();
    let mut third = dirty_buffer(&model, 0);
    let mut t = Session::new(model, &mut third).unwrap();
    t.seek(1 << 40);
    assert_eq!(bits(&a), bits(t.feed(5).unwrap()));
}

/// [`Session::snapshot_to`]'s pieces, joined; each piece is non-empty.
fn streamed(s: &Session<'_, '_>) -> Vec<u8> {
    let mut out = Vec::new();
    let len = s
        .snapshot_to(|piece| {
            assert!(!piece.is_empty());
            out.extend_from_slice(piece)
        })
        .unwrap();
    assert_eq!(len, out.len());
    out
}

fn bits(l: &[f32]) -> Vec<u32> {
    l.iter().map(|v| v.to_bits()).collect()
}

/// Everything a session carries between tokens, as bytes: its snapshot.
fn snapshot_of(s: &Session<'_, '_>) -> Vec<u8> {
    let mut out = vec![0u8; s.snapshot_len()];
    s.snapshot(&mut out).unwrap();
    out
}

/// Recomputes a snapshot's CRC after an edit behind it.
fn reseal(b: &mut [u8]) {
    let total = u32::from_le_bytes(b[16..20].try_into().unwrap()) as usize;
    let end = total.min(b.len());
    let crc = ferrite::image::CRC.checksum(&b[snapshot::CRC_START..end]);
    b[snapshot::CRC_FIELD..snapshot::CRC_FIELD + 4].copy_from_slice(&crc.to_le_bytes());
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// What makes a broken snapshot from a valid one.
type Damage = dyn Fn(&mut Vec<u8>);

/// One broken snapshot: its name and how it is made from a valid one.
struct Case {
    name: &'static str,
    damage: Box<Damage>,
    /// Re-seal the CRC after the damage, so the deeper check fires.
    reseal: bool,
    /// Made from the version 2 snapshot (with a sampler section).
    v2: bool,
}

/// Offset of a version 2 snapshot's sampler section.
fn sampler_at(b: &[u8]) -> usize {
    b.len() - snapshot::SAMPLER_LEN
}

/// A broken version 1 snapshot.
fn c(name: &'static str, damage: impl Fn(&mut Vec<u8>) + 'static, reseal: bool) -> Case {
    Case {
        name,
        damage: Box::new(damage),
        reseal,
        v2: false,
    }
}

/// A broken version 2 snapshot.
fn v2(name: &'static str, damage: impl Fn(&mut Vec<u8>) + 'static, reseal: bool) -> Case {
    Case {
        v2: true,
        ..c(name, damage, reseal)
    }
}

/// A version 2 snapshot whose sampler section has `word` at byte `offset`
/// (the CRC resealed, so the sampler's own check fires).
fn sampler_word(name: &'static str, offset: usize, word: u32) -> Case {
    v2(
        name,
        move |b| {
            let at = sampler_at(b) + offset;
            put_u32(b, at, word);
        },
        true,
    )
}

fn cases() -> Vec<Case> {
    vec![
        c("empty", |b| b.clear(), false),
        c("truncated_header", |b| b.truncate(40), false),
        c("truncated_body", |b| b.truncate(b.len() - 3), false),
        c("bad_magic", |b| b[3] ^= 0x20, false),
        c("an_image", |b| b[..8].copy_from_slice(b"FERRITE\0"), false),
        c("version_0", |b| put_u32(b, 8, 0), true),
        c("version_newer", |b| put_u32(b, 8, 3), true),
        c("header_len", |b| put_u32(b, 12, 48), true),
        c("length_below_header", |b| put_u32(b, 16, 20), false),
        c("crc_flipped_state", |b| b[70] ^= 1, false),
        c(
            "crc_flipped_logits",
            |b| *b.last_mut().unwrap() ^= 0x80,
            false,
        ),
        c("crc_flipped_crc", |b| b[20] ^= 1, false),
        c("other_model", |b| b[24] ^= 1, true),
        c("other_math", |b| put_u32(b, 32, 3), true),
        c("unknown_flag", |b| put_u32(b, 36, 3), true),
        c("other_pinned_capacity", |b| put_u32(b, 40, 4), true),
        c("pinned_over_capacity", |b| put_u32(b, 44, 1), true),
        c("position_exhausted", |b| put_u64(b, 48, u64::MAX), true),
        c(
            "stream_longer_than_position",
            |b| put_u64(b, 56, 1 << 20),
            true,
        ),
        c(
            "logits_flag_without_stream",
            |b| {
                put_u64(b, 56, 0);
            },
            true,
        ),
        c(
            "longer_than_the_model",
            |b| {
                let n = b.len() as u32 + 4;
                b.extend_from_slice(&[0; 4]);
                put_u32(b, 16, n);
            },
            true,
        ),
        c(
            "shorter_than_the_model",
            |b| {
                let n = b.len() as u32 - 4;
                b.truncate(n as usize);
                put_u32(b, 16, n);
            },
            true,
        ),
        // Version 2: the sampler section (docs/snapshot-format.md).
        v2("v2_truncated_sampler", |b| b.truncate(b.len() - 5), false),
        v2(
            "v2_crc_flipped_sampler",
            |b| {
                let at = sampler_at(b) + 17;
                b[at] ^= 0x04;
            },
            false,
        ),
        v2(
            "v2_without_the_section",
            |b| {
                let n = sampler_at(b);
                b.truncate(n);
                put_u32(b, 16, n as u32);
            },
            true,
        ),
        v2(
            "v2_without_the_sampler_flag",
            |b| put_u32(b, 36, snapshot::FLAG_LOGITS),
            true,
        ),
        v2("v2_unknown_flag", |b| put_u32(b, 36, 7), true),
        sampler_word("v2_sampler_nan_temperature", 0, f32::NAN.to_bits()),
        sampler_word("v2_sampler_negative_temperature", 0, (-0.5f32).to_bits()),
        sampler_word("v2_sampler_top_k_over_max", 4, 65),
        sampler_word("v2_sampler_top_p_zero", 8, 0),
        sampler_word("v2_sampler_top_p_over_one", 8, 1.5f32.to_bits()),
        sampler_word("v2_sampler_reserved_word", 12, 1),
        sampler_word("v2_greedy_sampler_that_drew", 0, 0),
    ]
}

/// The committed image the corpus belongs to.
const IMAGE_LEN: usize = include_bytes!("../images/tiny_int8.fer").len();
static IMAGE: Aligned<[u8; IMAGE_LEN]> = Aligned(*include_bytes!("../images/tiny_int8.fer"));

/// A valid snapshot of the committed `tests/images/tiny_int8.fer`: the
/// prompt fed from position 1000.
fn base_snapshot() -> Vec<u8> {
    let model = Model::load(&IMAGE.0).unwrap();
    let mut buf = dirty_buffer(&model, 0);
    let mut s = Session::new(model, &mut buf).unwrap();
    s.seek(1000);
    for &t in PROMPT {
        s.feed(t).unwrap();
    }
    snapshot_of(&s)
}

/// The sampler the version 2 corpus snapshots carry: temperature 0.8,
/// top-k 5, top-p 0.9, seed 42, after 5 draws.
fn corpus_sampler() -> Sampler {
    let mut s = Sampler::new(SamplerConfig {
        temperature: 0.8,
        top_k: 5,
        top_p: 0.9,
        seed: 42,
    })
    .unwrap();
    for _ in 0..5 {
        s.sample(&[0.5, 0.25, 0.125, 1.0, 0.75, 0.0]);
    }
    s
}

/// [`base_snapshot`]'s stream with [`corpus_sampler`]: version 2.
fn base_snapshot_v2() -> Vec<u8> {
    let model = Model::load(&IMAGE.0).unwrap();
    let mut buf = dirty_buffer(&model, 0);
    let mut s = Session::new(model, &mut buf).unwrap();
    s.seek(1000);
    for &t in PROMPT {
        s.feed(t).unwrap();
    }
    with_sampler_of(&s, &corpus_sampler())
}

/// A session's snapshot with `sampler` (version 2), checked against the
/// streamed one and the lengths.
fn with_sampler_of(s: &Session<'_, '_>, sampler: &Sampler) -> Vec<u8> {
    let mut out = vec![0u8; s.snapshot_with_sampler_len()];
    assert_eq!(
        s.snapshot_with_sampler(sampler, &mut out).unwrap(),
        out.len()
    );
    assert_eq!(out.len(), s.snapshot_len() + snapshot::SAMPLER_LEN);
    let mut streamed = Vec::new();
    let n = s
        .snapshot_with_sampler_to(sampler, |piece| streamed.extend_from_slice(piece))
        .unwrap();
    assert_eq!((n, &streamed), (out.len(), &out), "streamed v2 differs");
    out
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corrupt-snapshot")
}

fn describe(e: &Error) -> (String, String) {
    let debug = match e {
        Error::BadSnapshot(inner) => format!("{inner:?}"),
        other => format!("{other:?}"),
    };
    let variant = debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or_default()
        .to_string();
    (variant, e.to_string())
}

/// Restores `bytes` into a session that holds a stream of its own, with
/// `restore` and with `restore_with_sampler` (a sampler of its own), checks
/// that both give the same outcome and that a refusal left the session and
/// the sampler untouched, and describes the outcome.
fn restore_untouched(bytes: &[u8]) -> (String, String) {
    let model = Model::load(&IMAGE.0).unwrap();
    let mut buf = dirty_buffer(&model, 0);
    let mut s = Session::new(model, &mut buf).unwrap();
    for t in [5, 6, 7] {
        s.feed(t).unwrap();
    }
    let mut sampler = Sampler::new(SamplerConfig {
        temperature: 1.5,
        top_k: 0,
        top_p: 0.5,
        seed: 9,
    })
    .unwrap();
    sampler.sample(&[1.0, 2.0, 3.0]);
    let before = with_sampler_of(&s, &sampler);
    let with = s.restore_with_sampler(bytes, &mut sampler);
    if let Err(e) = &with {
        assert_eq!(
            with_sampler_of(&s, &sampler),
            before,
            "a refusal ({e}) changed the session or the sampler"
        );
    }
    let plain = {
        let mut buf = dirty_buffer(&model, 0);
        let mut s = Session::new(model, &mut buf).unwrap();
        for t in [5, 6, 7] {
            s.feed(t).unwrap();
        }
        let before = snapshot_of(&s);
        let r = s.restore(bytes);
        if let Err(e) = &r {
            assert_eq!(
                snapshot_of(&s),
                before,
                "a refusal ({e}) changed the session"
            );
        }
        r
    };
    assert_eq!(
        plain.err(),
        with.err(),
        "restore and restore_with_sampler differ"
    );
    match with {
        Ok(_) => ("restores".into(), String::new()),
        Err(e) => describe(&e),
    }
}

fn generate() -> Vec<(&'static str, Vec<u8>)> {
    let base = base_snapshot();
    let base_v2 = base_snapshot_v2();
    assert_eq!(restore_untouched(&base).0, "restores");
    assert_eq!(restore_untouched(&base_v2).0, "restores");
    cases()
        .into_iter()
        .map(|c| {
            let mut b = if c.v2 { base_v2.clone() } else { base.clone() };
            (c.damage)(&mut b);
            if c.reseal {
                reseal(&mut b);
            }
            (c.name, b)
        })
        .collect()
}

#[test]
fn corrupt_snapshot_corpus_is_refused_with_the_manifest_errors_and_the_session_untouched() {
    let cases = generate();
    let dir = corpus_dir();
    if std::env::var_os("FERRITE_OVERWRITE").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        let mut manifest = String::from(
            "# file\tSnapshotError variant\tmessage (Display) — generated by tests/tests/snapshot.rs, FERRITE_OVERWRITE=1 to regenerate; every file is a broken snapshot of tests/images/tiny_int8.fer\n",
        );
        for (name, bytes) in &cases {
            let file = format!("{name}.snap");
            std::fs::write(dir.join(&file), bytes).unwrap();
            let (variant, message) = restore_untouched(bytes);
            manifest += &format!("{file}\t{variant}\t{message}\n");
        }
        std::fs::write(dir.join("MANIFEST"), manifest).unwrap();
    }
    let text =
        std::fs::read_to_string(dir.join("MANIFEST")).expect("tests/corrupt-snapshot/MANIFEST");
    let manifest: Vec<Vec<String>> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.splitn(3, '\t').map(str::to_string).collect())
        .collect();
    let names: Vec<String> = cases.iter().map(|(n, _)| format!("{n}.snap")).collect();
    let listed: Vec<String> = manifest.iter().map(|m| m[0].clone()).collect();
    assert_eq!(
        listed, names,
        "MANIFEST is out of date: FERRITE_OVERWRITE=1 cargo test -p ferrite-tests --test snapshot"
    );
    let mut failures = Vec::new();
    for (m, (_, generated)) in manifest.iter().zip(&cases) {
        let bytes = std::fs::read(dir.join(&m[0])).expect(&m[0]);
        if &bytes != generated {
            failures.push(format!(
                "{}: the committed file is not what the case makes",
                m[0]
            ));
        }
        let got = restore_untouched(&bytes);
        if got.0 == "restores" || (&got.0, &got.1) != (&m[1], &m[2]) {
            failures.push(format!("{}: want {} {:?}, got {got:?}", m[0], m[1], m[2]));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    // Every kind of refusal the format has is in the corpus.
    for want in [
        "BadMagic",
        "UnsupportedVersion",
        "Truncated",
        "CrcMismatch",
        "OtherModel",
        "OtherNumericPath",
        "OtherPinnedCapacity",
        "PositionExhausted",
        "BadField",
        "BadSampler",
    ] {
        assert!(
            manifest.iter().any(|m| m[1] == want),
            "no corrupt snapshot gives {want}"
        );
    }
}

#[test]
fn refused_snapshots_of_real_mismatches_leave_the_session_untouched() {
    let f = fixtures_dir();
    let pinned = image_of(&f.join("swa_pinned"), &Default::default());
    let model = Model::load(pinned.bytes()).unwrap();
    // A session with pinned capacity 4, 2 in use, mid-stream.
    let mut buf = dirty_buffer(&model, 4);
    let mut s = Session::with_pinned_capacity(model, &mut buf, 4).unwrap();
    s.reset_pinned(2).unwrap();
    for &t in PROMPT {
        s.feed(t).unwrap();
    }
    let before = snapshot_of(&s);

    // Another pinned capacity (same model).
    let mut b0 = dirty_buffer(&model, 0);
    let mut other_cap = Session::new(model, &mut b0).unwrap();
    other_cap.feed(1).unwrap();
    let snap0 = snapshot_of(&other_cap);
    assert_eq!(
        s.restore(&snap0).unwrap_err(),
        Error::BadSnapshot(SnapshotError::OtherPinnedCapacity {
            snapshot: 0,
            session: 4
        })
    );
    assert_eq!(snapshot_of(&s), before);

    // Another model: the same fixture at int8.
    let int8_image = image_of(&f.join("swa_pinned"), &int8());
    let m8 = Model::load(int8_image.bytes()).unwrap();
    let mut b8 = dirty_buffer(&m8, 4);
    let mut s8 = Session::with_pinned_capacity(m8, &mut b8, 4).unwrap();
    s8.feed(1).unwrap();
    let snap8 = snapshot_of(&s8);
    let err = s.restore(&snap8).unwrap_err();
    assert!(
        matches!(err, Error::BadSnapshot(SnapshotError::OtherModel { .. })),
        "{err}"
    );
    assert_eq!(snapshot_of(&s), before);

    // The pinned count is restored with the rest: a pinned stream cut and
    // restored goes on bit for bit.
    let mut b2 = dirty_buffer(&model, 4);
    let mut r = Session::with_pinned_capacity(model, &mut b2, 4).unwrap();
    r.restore(&before).unwrap();
    for t in [40, 41, 42, 43, 44, 45, 46, 47, 48, 49] {
        assert_eq!(bits(r.feed(t).unwrap()), bits(s.feed(t).unwrap()));
    }

    // Too small an output buffer: refused, the buffer untouched.
    let mut short = vec![0xA5u8; s.snapshot_len() - 1];
    assert_eq!(
        s.snapshot(&mut short).unwrap_err(),
        Error::BadSnapshot(SnapshotError::OutTooSmall {
            needed: s.snapshot_len(),
            got: s.snapshot_len() - 1
        })
    );
    assert!(short.iter().all(|&b| b == 0xA5));
}

#[test]
fn the_model_hash_covers_the_maths_and_not_the_provenance() {
    let image = image_of(&fixtures_dir().join("gdn_gate"), &int8());
    let model = Model::load(image.bytes()).unwrap();
    let mut buf = dirty_buffer(&model, 0);
    let mut s = Session::new(model, &mut buf).unwrap();
    s.feed(2).unwrap();
    let snap = snapshot_of(&s);
    let hash = snapshot::model_hash(&model).unwrap();
    let config_off = u32::from_le_bytes(image.bytes()[24..28].try_into().unwrap()) as usize;

    // The provenance word (model record word 7) changed: the same maths.
    let mut prov = image.bytes().to_vec();
    prov[config_off + 28] ^= 0x01;
    ferrite_tools::writer::seal(&mut prov);
    let prov = AlignedImage::new(&prov);
    let pm = Model::load(prov.bytes()).unwrap();
    assert_eq!(snapshot::model_hash(&pm).unwrap(), hash);
    let mut pb = dirty_buffer(&pm, 0);
    Session::new(pm, &mut pb).unwrap().restore(&snap).unwrap();

    // One bit near the end of the tensor data changed: another model.
    let mut weight = image.bytes().to_vec();
    let at = weight.len() - 40;
    weight[at] ^= 0x01;
    ferrite_tools::writer::seal(&mut weight);
    let weight = AlignedImage::new(&weight);
    let wm = Model::load(weight.bytes()).unwrap();
    assert_ne!(snapshot::model_hash(&wm).unwrap(), hash);
    let mut wb = dirty_buffer(&wm, 0);
    let mut ws = Session::new(wm, &mut wb).unwrap();
    let before = snapshot_of(&ws);
    assert!(matches!(
        ws.restore(&snap).unwrap_err(),
        Error::BadSnapshot(SnapshotError::OtherModel { .. })
    ));
    assert_eq!(snapshot_of(&ws), before);

    // The f32 and integer token paths of one model are other models.
    let int = image_of(&fixtures_dir().join("gdn_gate"), &int_path());
    let im = Model::load(int.bytes()).unwrap();
    assert_ne!(snapshot::model_hash(&im).unwrap(), hash);
}

/// Sampling options of the sampled continuation tests: temperature alone,
/// with top-k and top-p, with top-p alone.
const SAMPLERS: [SamplerConfig; 3] = [
    SamplerConfig {
        temperature: 2.5,
        top_k: 0,
        top_p: 1.0,
        seed: 7,
    },
    SamplerConfig {
        temperature: 8.0,
        top_k: 8,
        top_p: 0.95,
        seed: 3,
    },
    SamplerConfig {
        temperature: 30.0,
        top_k: 0,
        top_p: 0.9,
        seed: 11,
    },
];

/// `generate_with(PROMPT, n)` with a sampler of `config`.
fn uninterrupted_sampled(image: &[u8], config: SamplerConfig, n: usize) -> Vec<Recorded> {
    let model = Model::load(image).unwrap();
    let mut buf = dirty_buffer(&model, 0);
    let mut s = Session::new(model, &mut buf).unwrap();
    let mut sampler = Sampler::new(config).unwrap();
    let mut out = Vec::new();
    s.generate_with(PROMPT, n, &mut sampler, |step| {
        out.push(record(step.logits, step.token));
        true
    })
    .unwrap();
    out
}

/// The sampled stream cut after `k` tokens: the last one fed, a snapshot
/// with the sampler (version 2); restored with `restore_with_sampler` into
/// a fresh session and a greedy sampler, `n - k` more. Returns all `n`
/// steps, the snapshot and the steps a plain `restore` with a fresh sampler
/// of the same options gives (the generator not restored).
fn interrupted_sampled(
    image: &[u8],
    config: SamplerConfig,
    k: usize,
    n: usize,
) -> (Vec<Recorded>, Vec<u8>, Vec<Recorded>) {
    let mut out = Vec::new();
    let (snap, v1) = {
        let model = Model::load(image).unwrap();
        let mut buf = dirty_buffer(&model, 0);
        let mut s = Session::new(model, &mut buf).unwrap();
        let mut sampler = Sampler::new(config).unwrap();
        let mut last = 0;
        s.generate_with(PROMPT, k, &mut sampler, |step| {
            out.push(record(step.logits, step.token));
            last = step.token;
            true
        })
        .unwrap();
        s.feed(last).unwrap();
        assert_eq!(sampler.state().draws, k as u64);
        (with_sampler_of(&s, &sampler), snapshot_of(&s))
    };
    let h = snapshot::parse_header(&snap).unwrap();
    assert_eq!(h.version, 2);
    assert_eq!(h.flags, snapshot::FLAG_LOGITS | snapshot::FLAG_SAMPLER);
    assert_eq!(
        snap.len(),
        snapshot::snapshot_with_sampler_len(image, 0).unwrap()
    );
    // Past the header, version 2 is version 1 and the sampler section.
    assert_eq!(snap[64..v1.len()], v1[64..]);
    let model = Model::load(image).unwrap();
    let mut buf = dirty_buffer(&model, 0);
    let mut s = Session::new(model, &mut buf).unwrap();
    let mut sampler = Sampler::greedy();
    assert!(s.restore_with_sampler(&snap, &mut sampler).unwrap());
    assert_eq!(sampler.config(), config);
    assert_eq!(
        with_sampler_of(&s, &sampler),
        snap,
        "the restored snapshot differs"
    );
    s.resume_with(n - k, &mut sampler, |step| {
        out.push(record(step.logits, step.token));
        true
    })
    .unwrap();
    // A plain restore: the same stream, a sampler seeded afresh.
    let mut pbuf = dirty_buffer(&model, 0);
    let mut p = Session::new(model, &mut pbuf).unwrap();
    p.restore(&snap).unwrap();
    assert_eq!(snapshot_of(&p), v1, "restore of version 2 lost the stream");
    let mut fresh = Sampler::new(config).unwrap();
    let mut plain = Vec::new();
    p.resume_with(n - k, &mut fresh, |step| {
        plain.push(record(step.logits, step.token));
        true
    })
    .unwrap();
    (out, snap, plain)
}

#[test]
fn a_sampled_stream_restored_with_its_sampler_continues_exactly() {
    let n = 24;
    let mut fresh_differs = 0;
    for (name, image) in images() {
        let greedy = uninterrupted(image.bytes(), 0, n);
        for config in SAMPLERS {
            let whole = uninterrupted_sampled(image.bytes(), config, n);
            // The run samples: it is not the greedy stream.
            assert!(whole != greedy, "{name} {config:?} is the greedy stream");
            for k in [1, 9, 23] {
                let (cut, _, plain) = interrupted_sampled(image.bytes(), config, k, n);
                assert_eq!(cut.len(), n, "{name} k={k}");
                for (i, (a, b)) in whole.iter().zip(&cut).enumerate() {
                    assert!(a == b, "{name} {config:?}: cut at {k}, step {i} differs");
                }
                fresh_differs += usize::from(plain != whole[k..]);
            }
        }
    }
    // The generator's state matters (a fresh one goes on otherwise), so
    // the comparison can tell a sampler that was not restored.
    eprintln!("a fresh generator went on otherwise in {fresh_differs} of 72 cuts");
    assert!(
        fresh_differs >= 60,
        "a fresh generator differed only {fresh_differs} times"
    );
}

/// A session and a sampler of their own, what the refusals must leave.
fn own_session_and_sampler<'a, 'b>(
    model: Model<'a>,
    buf: &'b mut [f32],
) -> (Session<'a, 'b>, Sampler) {
    let mut s = Session::new(model, buf).unwrap();
    s.seek(77);
    for t in [9, 8, 7, 6] {
        s.feed(t).unwrap();
    }
    let mut sampler = Sampler::new(SamplerConfig {
        temperature: 0.5,
        top_k: 2,
        top_p: 1.0,
        seed: 1234,
    })
    .unwrap();
    for _ in 0..3 {
        sampler.sample(&[0.0, 1.0, 0.5]);
    }
    (s, sampler)
}

#[test]
fn hostile_sampler_sections_are_refused_and_leave_both_untouched() {
    let base = base_snapshot_v2();
    let at = sampler_at(&base);
    let good = snapshot::parse_sampler(&base[at..]).unwrap();
    assert_eq!(good, corpus_sampler().state());
    let bad_sampler = |r: &'static str| Error::BadSnapshot(SnapshotError::BadSampler(r));
    let temperature = bad_sampler("temperature must be finite and >= 0");
    let top_k = bad_sampler("top_k is larger than MAX_TOP_K (64)");
    let top_p = bad_sampler("top_p must be in (0, 1]");
    let greedy = bad_sampler("a greedy sampler (temperature 0 or top_k 1) never draws");
    let cases: Vec<(SamplerState, Error)> = vec![
        (
            SamplerState {
                temperature_bits: f32::NAN.to_bits(),
                ..good
            },
            temperature,
        ),
        (
            SamplerState {
                temperature_bits: f32::INFINITY.to_bits(),
                ..good
            },
            temperature,
        ),
        (
            SamplerState {
                temperature_bits: (-1.0f32).to_bits(),
                ..good
            },
            temperature,
        ),
        (SamplerState { top_k: 65, ..good }, top_k),
        (
            SamplerState {
                top_k: u32::MAX,
                ..good
            },
            top_k,
        ),
        (
            SamplerState {
                top_p_bits: 0,
                ..good
            },
            top_p,
        ),
        (
            SamplerState {
                top_p_bits: (-0.0f32).to_bits(),
                ..good
            },
            top_p,
        ),
        (
            SamplerState {
                top_p_bits: 1.0001f32.to_bits(),
                ..good
            },
            top_p,
        ),
        (
            SamplerState {
                top_p_bits: f32::NAN.to_bits(),
                ..good
            },
            top_p,
        ),
        (
            SamplerState {
                temperature_bits: 0,
                ..good
            },
            greedy,
        ),
        (
            SamplerState {
                top_k: 1,
                draws: u64::MAX,
                ..good
            },
            greedy,
        ),
    ];
    let model = Model::load(&IMAGE.0).unwrap();
    for (state, want) in cases {
        let mut b = base.clone();
        b[at..].copy_from_slice(&state.to_bytes());
        reseal(&mut b);
        let mut buf = dirty_buffer(&model, 0);
        let (mut s, mut sampler) = own_session_and_sampler(model, &mut buf);
        let before = with_sampler_of(&s, &sampler);
        assert_eq!(
            s.restore_with_sampler(&b, &mut sampler).unwrap_err(),
            want,
            "{state:?}"
        );
        assert_eq!(with_sampler_of(&s, &sampler), before, "{state:?}");
        assert_eq!(s.restore(&b).unwrap_err(), want, "{state:?}");
        assert_eq!(with_sampler_of(&s, &sampler), before, "{state:?}");
    }

    // A huge draw count is a state of the generator (its period is 2^64):
    // restored in at most 64 steps, and the next draw wraps to 0 draws.
    let mut b = base.clone();
    b[at..].copy_from_slice(
        &SamplerState {
            draws: u64::MAX,
            ..good
        }
        .to_bytes(),
    );
    reseal(&mut b);
    let mut buf = dirty_buffer(&model, 0);
    let (mut s, mut sampler) = own_session_and_sampler(model, &mut buf);
    assert!(s.restore_with_sampler(&b, &mut sampler).unwrap());
    assert_eq!(sampler.state().draws, u64::MAX);
    sampler.sample(s.last_logits().unwrap());
    assert_eq!(sampler.state(), SamplerState { draws: 0, ..good });

    // Other refusals of a version 2 snapshot leave both untouched too
    // (the corpus checks each of its files the same way), and a version 1
    // snapshot restores the stream and leaves the sampler as it is.
    let mut buf = dirty_buffer(&model, 0);
    let (mut s, mut sampler) = own_session_and_sampler(model, &mut buf);
    let before = with_sampler_of(&s, &sampler);
    let mut other_math = base.clone();
    put_u32(&mut other_math, 32, 1);
    reseal(&mut other_math);
    assert!(matches!(
        s.restore_with_sampler(&other_math, &mut sampler)
            .unwrap_err(),
        Error::BadSnapshot(SnapshotError::OtherNumericPath { .. })
    ));
    assert_eq!(with_sampler_of(&s, &sampler), before);
    let own = sampler.state();
    let v1 = base_snapshot();
    assert!(!s.restore_with_sampler(&v1, &mut sampler).unwrap());
    assert_eq!(sampler.state(), own);
    assert_eq!(snapshot_of(&s), v1);
}
