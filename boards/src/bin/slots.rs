//! Snapshots in two flash slots, on the board (issue 25, item 3;
//! docs/snapshot-format.md, "Saving on a device"): the runtime's
//! `snapshot_slots` over a NOR flash that RAM stands in for under QEMU (as
//! the `ota` firmware's update slot does), with 4 KiB sectors and 8-byte
//! write units, whose power can be cut before any operation.
//!
//! The firmware generates from the build-time prompt with the greedy
//! sampler and takes two snapshots of the stream, A after `N` tokens and B
//! after `N` more, recording the tokens and logit bits that follow each. It
//! saves A, then saves B once with the power cut before each of the save's
//! operations in turn (a write unit programmed or a sector erased; the cut
//! unit or sector is torn, half done) and boots again after every cut: the
//! slots must hold A, or B when the cut left B written whole. Then it
//! restores the snapshot a boot loads after a cut half-way through the save
//! (A) and after the whole save (B) into a fresh session, resumes, and
//! compares the tokens and logit bits with those of the uninterrupted
//! stream. Prints `slots:` lines; exits with `status::CHECK_FAILED` when
//! any check fails.
#![no_std]
#![no_main]

use ferrite::snapshot_slots::SnapshotSlots;
use ferrite::{Model, Sampler, Session};
use ferrite_boards::ram_flash::{RamFlash, SECTOR, WRITE};
use ferrite_boards::{
    config, fail, instructions, platform, say, status, Fnv1a, IMAGE, IMAGE_BYTES, SESSION_LEN,
};

/// Bytes of a snapshot of the embedded model.
const SNAP: usize = match ferrite::snapshot_len(IMAGE_BYTES, 0) {
    Ok(n) => n,
    Err(_) => panic!("the image is not valid"),
};
/// One slot: the record header and the snapshot, in whole sectors.
const SLOT: usize = (SNAP + 32).div_ceil(SECTOR) * SECTOR;
/// Tokens before each snapshot, and resumed after it.
const N: usize = 8;

static mut FLASH: [u8; 2 * SLOT] = [0; 2 * SLOT];
/// The flash after A was saved, and after B was saved whole.
static mut AFTER_A: [u8; 2 * SLOT] = [0; 2 * SLOT];
static mut AFTER_B: [u8; 2 * SLOT] = [0; 2 * SLOT];
static mut SNAP_A: [u8; SNAP] = [0; SNAP];
static mut SNAP_B: [u8; SNAP] = [0; SNAP];
static mut LOADED: [u8; SNAP] = [0; SNAP];
static mut SESSION_BUF: [f32; SESSION_LEN] = [0.0; SESSION_LEN];

/// Two slots over `mem` (its two halves), the power cut before `budget`.
fn slots(mem: &mut [u8], budget: Option<usize>) -> SnapshotSlots<RamFlash<'_>> {
    let flash = RamFlash {
        mem,
        budget,
        ops: 0,
    };
    SnapshotSlots::new(flash, 0, SLOT as u32, SLOT as u32)
        .unwrap_or_else(|e| say_and_fail(format_args!("slots: {e}")))
}

fn say_and_fail(why: core::fmt::Arguments<'_>) -> ! {
    say!("{}", why);
    ferrite_boards::exit(status::CHECK_FAILED)
}

/// FNV-1a of `n` resumed steps' tokens and logit bits, and the last token.
fn resume(session: &mut Session<'_, '_>, n: usize) -> (u32, u32) {
    let (mut fnv, mut last) = (Fnv1a::new(), 0);
    session
        .resume_with(n, &mut Sampler::greedy(), |step| {
            fnv.word(step.token);
            step.logits.iter().for_each(|l| fnv.word(l.to_bits()));
            last = step.token;
            true
        })
        .unwrap_or_else(|e| fail(e.into()));
    (fnv.0, last)
}

/// Feeds `last` (the last generated token) and snapshots the stream into `out`.
fn snapshot(session: &mut Session<'_, '_>, last: u32, out: &mut [u8]) {
    session.feed(last).unwrap_or_else(|e| fail(e.into()));
    session.snapshot(out).unwrap_or_else(|e| fail(e));
}

#[platform::entry]
fn main() -> ! {
    let _p = platform::init();
    let model = Model::load(&IMAGE.0).unwrap_or_else(|e| fail(e));
    // SAFETY: the only references to these statics, taken once.
    let (flash, after_a, after_b, snap_a, snap_b, loaded, buf) = unsafe {
        (
            &mut *core::ptr::addr_of_mut!(FLASH),
            &mut *core::ptr::addr_of_mut!(AFTER_A),
            &mut *core::ptr::addr_of_mut!(AFTER_B),
            &mut *core::ptr::addr_of_mut!(SNAP_A),
            &mut *core::ptr::addr_of_mut!(SNAP_B),
            &mut *core::ptr::addr_of_mut!(LOADED),
            &mut *core::ptr::addr_of_mut!(SESSION_BUF),
        )
    };

    // The uninterrupted stream: N tokens, A, N tokens, B, N tokens.
    let (after_snap_a, after_snap_b) = {
        let mut session = Session::new(model, buf).unwrap_or_else(|e| fail(e));
        let mut ids = [0u32; config::PROMPT.len()];
        let k = model
            .tokenizer()
            .encode(config::PROMPT, &mut ids)
            .unwrap_or_else(|e| fail(e));
        let mut last = 0;
        session
            .generate_with(&ids[..k], N, &mut Sampler::greedy(), |step| {
                last = step.token;
                true
            })
            .unwrap_or_else(|e| fail(e.into()));
        snapshot(&mut session, last, snap_a);
        let (after_a, last) = resume(&mut session, N);
        snapshot(&mut session, last, snap_b);
        (after_a, resume(&mut session, N).0)
    };

    // A saved on an erased flash, then B whole: the operations of a save.
    flash.fill(0xFF);
    slots(flash, None)
        .save(snap_a)
        .unwrap_or_else(|e| say_and_fail(format_args!("slots: save A: {e}")));
    after_a.copy_from_slice(flash);
    let t0 = instructions();
    let mut whole = slots(flash, None);
    whole
        .save(snap_b)
        .unwrap_or_else(|e| say_and_fail(format_args!("slots: save B: {e}")));
    let save_instructions = instructions() - t0;
    let ops = whole.release().ops;
    after_b.copy_from_slice(flash);
    let t0 = instructions();
    let got = slots(flash, None).load(loaded);
    let load_instructions = instructions() - t0;
    match got {
        Ok(Some(l)) if l.sequence == 2 && loaded[..l.len] == snap_b[..] => {}
        other => say_and_fail(format_args!(
            "slots: B does not load after its save: {other:?}"
        )),
    }
    say!(
        "slots: a save of {SNAP} bytes is {ops} flash operations ({SECTOR} B sectors, {WRITE} B writes): {save_instructions} instructions; a load {load_instructions}"
    );

    // A cut before every operation of B's save, and a boot after it.
    let (mut kept, mut whole_b) = (0, 0);
    for k in 0..ops {
        flash.copy_from_slice(after_a);
        if slots(flash, Some(k)).save(snap_b).is_ok() {
            say_and_fail(format_args!("slots: the save cut at {k} reported success"));
        }
        let want_b = flash[..] == after_b[..];
        let (want_seq, want): (u32, &[u8]) = if want_b { (2, snap_b) } else { (1, snap_a) };
        match slots(flash, None).load(loaded) {
            Ok(Some(l)) if l.sequence == want_seq && loaded[..l.len] == *want => {}
            other => say_and_fail(format_args!(
                "slots: cut at {k} of {ops}: loaded {other:?}, want sequence {want_seq}"
            )),
        }
        kept += usize::from(!want_b);
        whole_b += usize::from(want_b);
    }
    say!("slots: cut at each of {ops} operations: {kept} boots loaded A, {whole_b} B (written whole)");

    // What a boot restores after a cut half-way, and after the whole save.
    for (cut, seq, want) in [(Some(ops / 2), 1, after_snap_a), (None, 2, after_snap_b)] {
        flash.copy_from_slice(after_a);
        let _ = slots(flash, cut).save(snap_b);
        let l = match slots(flash, None).load(loaded) {
            Ok(Some(l)) if l.sequence == seq => l,
            other => say_and_fail(format_args!("slots: cut {cut:?}: loaded {other:?}")),
        };
        let mut session = Session::new(model, buf).unwrap_or_else(|e| fail(e));
        session
            .restore(&loaded[..l.len])
            .unwrap_or_else(|e| fail(e));
        let same = resume(&mut session, N).0 == want;
        let at = if cut.is_some() {
            "a cut half-way"
        } else {
            "the whole save"
        };
        say!(
            "slots: after {at}, sequence {seq} restored: {N} tokens and logits as the uninterrupted stream: {}",
            if same { "yes" } else { "no" }
        );
        if !same {
            ferrite_boards::exit(status::CHECK_FAILED);
        }
    }
    ferrite_boards::exit(status::OK)
}
