//! Snapshots saved to two flash slots (`ferrite::snapshot_slots`, issue 25
//! item 3): a power cut at every write unit and erase sector of a save leaves
//! the previous snapshot loadable, bit for bit, and the next save works; a
//! rotted record is passed over and never the reason to erase the good one;
//! sequence numbers wrap; layouts that do not fit the flash are refused; and a
//! session's snapshot saved, loaded and restored continues as the
//! uninterrupted stream does.
//!
//! The flash is a simulation of NOR: programming a unit that is not erased
//! is an error (the slots must erase before they write), and a cut tears the
//! unit or sector it lands in (half of it programmed or erased).

use ferrite::snapshot_slots::{
    saves_per_lifetime, Loaded, SlotError, SnapshotSlots, HEADER_LEN, MAGIC, VERSION,
};
use ferrite::{Model, Sampler, Session};
use ferrite_tests::sim_flash::{SimError, SimFlash, SECTOR};
use ferrite_tests::{fixtures_dir, image_of};
use ferrite_tools::writer::WriteOptions;

const SLOT: u32 = 8 * SECTOR as u32;

/// Deterministic bytes, different for every `seed`.
fn payload(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// Two slots at sectors 0 and 8 of a flash with one spare sector after them.
fn slots<const W: usize>(flash: SimFlash<W>) -> SnapshotSlots<SimFlash<W>> {
    SnapshotSlots::new(flash, 0, SLOT, SLOT).unwrap()
}

fn flash<const W: usize>() -> SimFlash<W> {
    SimFlash::new(2 * SLOT as usize + SECTOR)
}

/// What a fresh boot loads from `flash`.
fn boot<const W: usize>(flash: &SimFlash<W>) -> Option<(Loaded, Vec<u8>)> {
    let mut s = slots(SimFlash {
        budget: None,
        ..flash.clone()
    });
    let mut buf = vec![0u8; s.capacity()];
    s.load(&mut buf)
        .unwrap()
        .map(|l| (l, buf[..l.len].to_vec()))
}

/// A save cut at every operation: B (the previous snapshot) loads after
/// every cut but the one after the last, which loads C; a save after any
/// cut works and loads.
fn cut_anywhere<const W: usize>() {
    let (a, b, c) = (payload(1000, 1), payload(777, 2), payload(1234, 3));
    let mut s = slots(flash::<W>());
    assert_eq!(s.save(&a).unwrap().sequence, 1);
    assert_eq!(s.save(&b).unwrap().sequence, 2);
    let after_b = s.release();

    let mut whole = slots(after_b.clone());
    let base = after_b.ops;
    let saved = whole.save(&c).unwrap();
    let done = whole.release();
    let ops = done.ops - base;
    assert!(ops >= 8 + 1234 / W, "W={W}: the save took {ops} operations");
    assert_eq!(saved.sequence, 3);

    let mut lucky_tears = 0;
    for k in 0..=ops {
        let mut s = slots(SimFlash {
            budget: Some(k),
            ..after_b.clone()
        });
        let result = s.save(&c);
        let cut = s.release();
        let (loaded, bytes) = boot(&cut).expect("a snapshot loads after the cut");
        let all_written = cut.mem == done.mem;
        if k < ops {
            assert_eq!(
                result,
                Err(SlotError::Flash(SimError::PowerCut)),
                "W={W} k={k}"
            );
            lucky_tears += usize::from(all_written);
        } else {
            assert_eq!(result.map(|l| l.sequence), Ok(3));
            assert!(all_written);
        }
        let (want_seq, want) = if all_written { (3, &c) } else { (2, &b) };
        assert!(
            loaded.sequence == want_seq && bytes == *want,
            "W={W}: cut at {k} of {ops} loaded sequence {} ({} bytes), expected {want_seq}",
            loaded.sequence,
            bytes.len()
        );
        let mut again = slots(SimFlash {
            budget: None,
            ..cut
        });
        let next = again.save(&a).unwrap();
        assert_eq!(next.sequence, loaded.sequence + 1, "W={W} k={k}");
        let (l, bytes) = boot(&again.release()).unwrap();
        assert!(l.sequence == next.sequence && bytes == a, "W={W} k={k}");
    }
    // Only a tear of the last unit can leave everything written.
    assert!(lucky_tears <= 1, "W={W}: {lucky_tears}");
}

#[test]
fn a_cut_anywhere_in_a_save_keeps_the_previous_snapshot() {
    cut_anywhere::<1>();
    cut_anywhere::<4>();
    cut_anywhere::<8>();
    cut_anywhere::<32>();
    cut_anywhere::<256>();
}

#[test]
fn a_cut_in_the_first_save_leaves_nothing_to_load() {
    let a = payload(300, 9);
    let mut whole = slots(flash::<4>());
    whole.save(&a).unwrap();
    let ops = whole.release().ops;
    for k in 0..ops {
        let mut s = slots(SimFlash {
            budget: Some(k),
            ..flash::<4>()
        });
        assert!(s.save(&a).is_err());
        assert_eq!(boot(&s.release()), None, "cut at {k} of {ops}");
    }
}

#[test]
fn a_rotted_record_is_passed_over_and_never_erases_the_good_one() {
    let (a, b, c) = (payload(500, 4), payload(600, 5), payload(700, 6));
    let mut s = slots(flash::<4>());
    assert_eq!(s.save(&a).unwrap().slot, 0);
    assert_eq!(s.save(&b).unwrap().slot, 1);
    let mut rotted = s.release();
    let data_at = SLOT as usize + HEADER_LEN;
    rotted.mem[data_at + 100] ^= 0x10;
    // B's payload fails its CRC: A loads.
    let (l, bytes) = boot(&rotted).unwrap();
    assert_eq!((l.slot, l.sequence, &bytes), (0, 1, &a));
    // The next save goes over B, not A ...
    let mut s = slots(rotted);
    let saved = s.save(&c).unwrap();
    assert_eq!((saved.slot, saved.sequence), (1, 2));
    let mut f = s.release();
    assert_eq!(boot(&f).map(|(l, v)| (l.sequence, v)), Some((2, c.clone())));
    // ... so A is still there when C rots too.
    f.mem[data_at] ^= 0x01;
    assert_eq!(boot(&f).map(|(l, v)| (l.sequence, v)), Some((1, a)));
}

#[test]
fn a_record_written_by_hand_from_the_documented_layout_loads_and_wraps() {
    let a = payload(64, 7);
    let mut f = flash::<4>();
    let crc = ferrite::image::CRC;
    let mut h = [0u8; HEADER_LEN];
    h[..4].copy_from_slice(&MAGIC);
    h[4..6].copy_from_slice(&VERSION.to_le_bytes());
    h[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    h[12..16].copy_from_slice(&(a.len() as u32).to_le_bytes());
    h[16..20].copy_from_slice(&crc.checksum(&a).to_le_bytes());
    let header_crc = crc.checksum(&h[..28]);
    h[28..].copy_from_slice(&header_crc.to_le_bytes());
    f.mem[..HEADER_LEN].copy_from_slice(&h);
    f.mem[HEADER_LEN..HEADER_LEN + a.len()].copy_from_slice(&a);
    let (l, bytes) = boot(&f).unwrap();
    assert_eq!((l.slot, l.sequence, &bytes), (0, u32::MAX, &a));
    // The next sequence number is 0, and 0 is newer than u32::MAX.
    let b = payload(65, 8);
    let mut s = slots(f);
    assert_eq!(s.save(&b).unwrap().sequence, 0);
    let (l, bytes) = boot(&s.release()).unwrap();
    assert_eq!((l.slot, l.sequence, bytes), (1, 0, b));
    // A header whose CRC does not match is no record.
    let mut g = flash::<4>();
    h[27] ^= 1;
    g.mem[..HEADER_LEN].copy_from_slice(&h);
    assert_eq!(boot(&g), None);
    h[27] ^= 1;
    // Nor is one of another magic or version, however valid its CRC.
    for (at, name) in [(0, "magic"), (4, "version")] {
        let mut bad = h;
        bad[at] ^= 0x40;
        let header_crc = crc.checksum(&bad[..28]);
        bad[28..].copy_from_slice(&header_crc.to_le_bytes());
        let mut g = flash::<4>();
        g.mem[..HEADER_LEN].copy_from_slice(&bad);
        g.mem[HEADER_LEN..HEADER_LEN + a.len()].copy_from_slice(&a);
        assert_eq!(boot(&g), None, "a header with another {name}");
    }
}

#[test]
fn layouts_that_do_not_fit_the_flash_and_oversized_snapshots_are_refused() {
    let layout = |a, b, len| match SnapshotSlots::new(flash::<4>(), a, b, len) {
        Err(SlotError::Layout(why)) => why,
        other => panic!("{a} {b} {len}: {other:?}"),
    };
    assert!(layout(1, SLOT, SLOT).contains("multiples of the erase size"));
    assert!(layout(0, SLOT, 0).contains("multiples of the erase size"));
    assert!(layout(0, SLOT - 256, SLOT).contains("overlap"));
    assert!(layout(0, SLOT + 512, SLOT).contains("past the flash"));
    let mut s = slots(flash::<4>());
    let capacity = s.capacity();
    assert_eq!(capacity, SLOT as usize - HEADER_LEN);
    assert_eq!(
        s.save(&payload(capacity + 1, 1)),
        Err(SlotError::TooLarge {
            len: capacity + 1,
            capacity
        })
    );
    s.save(&payload(capacity, 1)).unwrap();
    let mut small = vec![0u8; capacity - 1];
    assert_eq!(
        s.load(&mut small),
        Err(SlotError::BufferTooSmall {
            needed: capacity,
            got: capacity - 1
        })
    );
    // A 256-byte write size pads the header to one unit.
    assert_eq!(slots(flash::<256>()).capacity(), SLOT as usize - 256);
    assert_eq!(saves_per_lifetime(10_000), 20_000);
}

#[test]
fn a_session_saved_to_flash_and_restored_goes_on_as_the_uninterrupted_stream() {
    let image = image_of(
        &fixtures_dir().join("hybrid_all4_untied"),
        &WriteOptions::default(),
    );
    let prompt = [72, 105, 44, 32, 116, 104, 101];
    let run = |restore_from: Option<&[u8]>, n: usize| {
        let model = Model::load(image.bytes()).unwrap();
        let mut buf = vec![0.0f32; model.session_len(0).unwrap()];
        let mut s = Session::new(model, &mut buf).unwrap();
        let mut tokens = Vec::new();
        let on_step = |step: ferrite::session::Step<'_>| {
            tokens.push(step.token);
            true
        };
        match restore_from {
            None => s.generate_with(&prompt, n, &mut Sampler::greedy(), on_step),
            Some(snap) => {
                s.restore(snap).unwrap();
                s.resume_with(n, &mut Sampler::greedy(), on_step)
            }
        }
        .unwrap();
        tokens
    };
    let whole = run(None, 12);
    let first = run(None, 5);
    // The stream after 5 tokens, with the 5th fed (as `interrupted` in snapshot.rs).
    let snap = {
        let model = Model::load(image.bytes()).unwrap();
        let mut buf = vec![0.0f32; model.session_len(0).unwrap()];
        let mut s = Session::new(model, &mut buf).unwrap();
        s.generate_with(&prompt, 5, &mut Sampler::greedy(), |_| true)
            .unwrap();
        s.feed(first[4]).unwrap();
        let mut snap = vec![0u8; s.snapshot_len()];
        s.snapshot(&mut snap).unwrap();
        snap
    };
    let mut f = SimFlash::<8>::new(4 * 65_536);
    let len = u32::try_from(snap.len())
        .unwrap()
        .next_multiple_of(SECTOR as u32)
        + SECTOR as u32;
    let mut s = SnapshotSlots::new(f.clone(), 0, len, len).unwrap();
    s.save(&snap).unwrap();
    f = s.release();
    let mut s = SnapshotSlots::new(f, 0, len, len).unwrap();
    let mut buf = vec![0u8; s.capacity()];
    let loaded = s.load(&mut buf).unwrap().unwrap();
    assert_eq!(&buf[..loaded.len], &snap[..]);
    let rest = run(Some(&buf[..loaded.len]), 7);
    assert_eq!([first, rest].concat(), whole);
}

/// `v` to three significant digits.
fn three_digits(v: f64) -> String {
    let decimals = (2 - v.log10().floor() as i32).max(0) as usize;
    format!("{v:.decimals$}")
}

#[test]
fn the_flash_wear_table_in_the_docs_is_what_the_formula_gives() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/snapshot-format.md"
    ))
    .expect("docs/snapshot-format.md");
    let block = doc
        .split("<!-- flash-wear:start -->")
        .nth(1)
        .and_then(|b| b.split("<!-- flash-wear:end -->").next())
        .expect("the flash-wear block");
    let mut rows = 0;
    for line in block
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| saves"))
    {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let per_day: u64 = cells[0]
            .split_whitespace()
            .next()
            .unwrap()
            .replace(',', "")
            .parse()
            .unwrap();
        for (cell, cycles) in cells[1..].iter().zip([10_000u64, 100_000]) {
            let years = saves_per_lifetime(cycles) as f64 / (per_day as f64 * 365.0);
            assert_eq!(
                *cell,
                three_digits(years),
                "{per_day} saves a day, {cycles} cycles"
            );
        }
        rows += 1;
    }
    assert_eq!(rows, 4);
}

#[test]
fn every_slot_error_says_what_went_wrong() {
    let cases: [(SlotError<SimError>, &str); 5] = [
        (
            SlotError::Flash(SimError::PowerCut),
            "flash driver error: PowerCut",
        ),
        (
            SlotError::Layout("the two slots overlap"),
            "snapshot slots: the two slots overlap",
        ),
        (
            SlotError::TooLarge {
                len: 9,
                capacity: 8,
            },
            "the snapshot is 9 bytes, a slot holds 8",
        ),
        (
            SlotError::BufferTooSmall { needed: 7, got: 6 },
            "the stored snapshot is 7 bytes, the buffer holds 6",
        ),
        (
            SlotError::VerifyFailed,
            "the snapshot read back from flash differs from the one written",
        ),
    ];
    for (e, want) in cases {
        assert_eq!(e.to_string(), want);
    }
}
