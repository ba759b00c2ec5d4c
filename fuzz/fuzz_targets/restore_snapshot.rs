//! Fuzz `Session::restore` and `Session::restore_with_sampler`
//! (docs/fuzzing.md, docs/snapshot-format.md) on the committed seed images:
//! any bytes as a snapshot, and bytes made to pass the header, model, math,
//! capacity and CRC checks so that the deeper checks, the state itself and
//! the sampler section (format version 2) are reached.
//!
//! Input layout: `[image: u8][mode: u8][pinned_max: u8][rest...]`; `image`
//! picks a seed image, `pinned_max % 5` the session's pinned capacity.
//! Mode bit 0 clear: `rest` is the snapshot as it is. Set: `rest` is laid
//! over a valid snapshot of that session from byte 44 (pinned count,
//! position, stream length, state, logits, sampler section), then the CRC
//! is recomputed; mode bit 2 makes that snapshot version 2 (with a
//! sampler). Mode bit 1 restores with `restore_with_sampler` into a
//! sampler that has drawn, instead of `restore`.
//!
//! Asserted: restore never panics; a refused snapshot leaves the session
//! exactly as it was (its own snapshot, byte for byte) and the sampler as
//! it was (its state); an accepted one gives the session back the
//! snapshot's bytes (its snapshot is the input's first `total_len` bytes:
//! with the restored sampler for version 2 and `restore_with_sampler`, the
//! stream's bytes past the header otherwise; a version 1 snapshot leaves
//! the sampler as it was), and up to four tokens fed after it are
//! accepted (`PositionOverflow` only once the stream reaches `u64::MAX`;
//! restore refuses a snapshot already there) without a panic, whatever the
//! restored state holds.
#![no_main]

use std::sync::OnceLock;

use ferrite::{Model, Sampler, SamplerConfig, Session};
use libfuzzer_sys::fuzz_target;

const SEEDS: [&[u8]; 4] = [
    include_bytes!("../seeds/mini_f32.fer"),
    include_bytes!("../seeds/mini_int8.fer"),
    include_bytes!("../seeds/gdn_int8_int.fer"),
    include_bytes!("../seeds/bpe_int4.fer"),
];

fn models() -> &'static [Model<'static>] {
    static MODELS: OnceLock<Vec<Model<'static>>> = OnceLock::new();
    MODELS.get_or_init(|| {
        SEEDS
            .iter()
            .map(|bytes| {
                let mut words = vec![0u128; bytes.len().div_ceil(16)];
                bytemuck::cast_slice_mut::<u128, u8>(&mut words)[..bytes.len()]
                    .copy_from_slice(bytes);
                let words: &'static [u128] = Vec::leak(words);
                let image = &bytemuck::cast_slice::<u128, u8>(words)[..bytes.len()];
                Model::load(image).expect("a committed seed image loads")
            })
            .collect()
    })
}

fn snapshot_of(s: &Session<'_, '_>) -> Vec<u8> {
    let mut out = vec![0u8; s.snapshot_len()];
    s.snapshot(&mut out)
        .expect("a session snapshots into its snapshot_len");
    out
}

fn with_sampler_of(s: &Session<'_, '_>, sampler: &Sampler) -> Vec<u8> {
    let mut out = vec![0u8; s.snapshot_with_sampler_len()];
    s.snapshot_with_sampler(sampler, &mut out)
        .expect("a session snapshots into its snapshot_with_sampler_len");
    out
}

fuzz_target!(|data: &[u8]| {
    let [image, mode, pinned_max, rest @ ..] = data else {
        return;
    };
    let models = models();
    let model = models[*image as usize % models.len()];
    let pinned_max = *pinned_max as usize % 5;
    let words = model.session_len(pinned_max).unwrap();
    let mut buf = vec![0.5f32; words];
    let mut s = Session::with_pinned_capacity(model, &mut buf, pinned_max).unwrap();
    let vocab = model.config().vocab_size;
    for t in 0..3 {
        s.feed(t % vocab).unwrap();
    }
    let mut sampler = Sampler::new(SamplerConfig {
        temperature: 0.75,
        top_k: 4,
        top_p: 0.9,
        seed: 17,
    })
    .unwrap();
    for _ in 0..3 {
        sampler.sample(s.last_logits().unwrap());
    }
    let with_sampler = mode & 2 != 0;
    let snap = if mode & 1 == 0 {
        rest.to_vec()
    } else {
        let mut b = if mode & 4 != 0 {
            with_sampler_of(&s, &sampler)
        } else {
            snapshot_of(&s)
        };
        let n = rest.len().min(b.len().saturating_sub(44));
        b[44..44 + n].copy_from_slice(&rest[..n]);
        let crc = ferrite::image::CRC.checksum(&b[ferrite::snapshot::CRC_START..]);
        b[ferrite::snapshot::CRC_FIELD..ferrite::snapshot::CRC_FIELD + 4]
            .copy_from_slice(&crc.to_le_bytes());
        b
    };
    let before = snapshot_of(&s);
    let sampler_before = sampler.state();
    let result = if with_sampler {
        s.restore_with_sampler(&snap, &mut sampler)
    } else {
        s.restore(&snap).map(|()| false)
    };
    match result {
        Err(_) => {
            assert!(
                snapshot_of(&s) == before,
                "a refused snapshot changed the session"
            );
            assert!(
                sampler.state() == sampler_before,
                "a refused snapshot changed the sampler"
            );
        }
        Ok(restored) => {
            let version = ferrite::snapshot::parse_header(&snap)
                .expect("an accepted snapshot has a valid header")
                .version;
            assert!(restored == (with_sampler && version == 2));
            let after = snapshot_of(&s);
            if version == 1 {
                assert!(
                    snap.get(..after.len()) == Some(&after[..]),
                    "restore lost bytes"
                );
            } else {
                let h = ferrite::snapshot::HEADER_LEN;
                assert!(
                    snap.get(h..after.len()) == Some(&after[h..]),
                    "restore lost the stream's bytes"
                );
            }
            if restored {
                let again = with_sampler_of(&s, &sampler);
                assert!(
                    snap.get(..again.len()) == Some(&again[..]),
                    "restore_with_sampler lost bytes"
                );
            } else {
                assert!(
                    sampler.state() == sampler_before,
                    "a snapshot without a sampler changed the sampler"
                );
            }
            for t in 0..4 {
                let at_end = s.position() == u64::MAX;
                match s.feed((t * 7) % vocab) {
                    Ok(_) => assert!(!at_end, "a token was fed at position u64::MAX"),
                    Err(ferrite::StepError::PositionOverflow) if at_end => break,
                    Err(e) => panic!("a restored stream refused a token: {e}"),
                }
            }
        }
    }
});
