//! Running a firmware under QEMU, instructions counted; the A/B update
//! example's delivery.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use super::{build, sizes, work_dir, Board, Firmware, Report, RunRequest, Sizes};

/// One finished QEMU run.
pub struct Run {
    pub board: &'static Board,
    pub status: i32,
    /// Everything the firmware wrote (decoded, for defmt).
    pub output: Vec<u8>,
    pub sizes: Sizes,
    /// What QEMU itself wrote (its fatal errors and register dumps).
    pub qemu_stderr: String,
}

/// `timeout <s> qemu-system-.. -machine .. -kernel <elf>` for a QEMU board,
/// instructions counted (`-icount shift=0,sleep=off`), semihosting on.
pub fn qemu_command(board: &Board, elf: &Path, timeout_s: u64) -> Result<Command> {
    let q = board
        .qemu()
        .with_context(|| format!("{} is not a QEMU board", board.name))?;
    let mut cmd = Command::new("timeout");
    cmd.arg(timeout_s.to_string())
        .arg(board.qemu_binary())
        .args(["-machine", q.machine])
        .args(q.args)
        .args(["-nographic", "-monitor", "none", "-serial", "none"])
        .args(["-semihosting-config", "enable=on,target=native"])
        .args(["-icount", "shift=0,sleep=off"])
        .arg("-kernel")
        .arg(elf)
        .stdin(Stdio::null());
    Ok(cmd)
}

/// Runs an ELF under QEMU inside `timeout`, with `cwd` as the semihosting
/// working directory; `defmt`: its output decoded by `defmt-print`.
pub fn run_qemu(
    board: &'static Board,
    elf: &Path,
    cwd: &Path,
    echo: bool,
    defmt: bool,
    timeout_s: u64,
) -> Result<Run> {
    let sizes = sizes(elf)?;
    if echo {
        eprintln!(
            "running it under QEMU ({} -machine {}, instructions counted) ...",
            board.qemu_binary(),
            board.qemu().map_or("?", |q| q.machine)
        );
    }
    let mut qemu = qemu_command(board, elf, timeout_s)?
        .current_dir(cwd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", board.qemu_binary()))?;
    // QEMU's own messages: passed on as they come, and kept (a lockup's
    // register dump names a stack overflow the firmware could not report).
    let mut qemu_err = qemu.stderr.take().unwrap();
    let stderr_thread = std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut chunk = [0u8; 1024];
        while let Ok(n) = qemu_err.read(&mut chunk) {
            if n == 0 {
                break;
            }
            let _ = std::io::stderr().write_all(&chunk[..n]);
            kept.extend_from_slice(&chunk[..n]);
        }
        String::from_utf8_lossy(&kept).into_owned()
    });
    let mut source: Box<dyn Read + Send> = Box::new(qemu.stdout.take().unwrap());
    let mut decoder = None;
    if defmt {
        let mut d = Command::new("defmt-print")
            .arg("-e")
            .arg(elf)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting defmt-print (install it with `cargo install defmt-print`)")?;
        let (mut to_decoder, mut raw) = (d.stdin.take().unwrap(), source);
        std::thread::spawn(move || std::io::copy(&mut raw, &mut to_decoder));
        source = Box::new(d.stdout.take().unwrap());
        decoder = Some(d);
    }
    let mut output = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = source.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        output.extend_from_slice(&chunk[..n]);
        if echo {
            let mut o = std::io::stdout().lock();
            o.write_all(&chunk[..n])?;
            o.flush()?;
        }
    }
    let status = qemu.wait()?.code().unwrap_or(-1);
    let qemu_stderr = stderr_thread.join().unwrap_or_default();
    if let Some(mut d) = decoder {
        // A decoder that failed leaves the log undecoded: never a silent pass.
        let decoded = d.wait().context("waiting for defmt-print")?;
        if !decoded.success() {
            bail!("defmt-print failed ({decoded}): the defmt log was not decoded");
        }
    }
    Ok(Run {
        board,
        status,
        output,
        sizes,
        qemu_stderr,
    })
}

/// A Cortex-M core that locked up with its stack pointer below RAM: the
/// stack outgrew RAM so far that the fault handler's own frame could not be
/// pushed (ARMv6-M and ARMv7-M lock up then, and QEMU ends with a register
/// dump), so the firmware's stack check never ran. Reads `R13` of QEMU's
/// dump against the RAM origin of the board's memory map.
fn lockup_below_ram(board: &Board, qemu_stderr: &str) -> Option<String> {
    if !qemu_stderr.contains("Lockup") {
        return None;
    }
    let sp = qemu_stderr
        .split("R13=")
        .nth(1)
        .and_then(|r| u64::from_str_radix(r.get(..8)?, 16).ok())?;
    let ram = ram_origin(board)?;
    (sp < ram).then(|| {
        format!(
            "stack overflow: the core locked up with its stack pointer at {sp:#010x}, below RAM \
             ({ram:#010x}): the stack outgrew RAM before the fault handler could run"
        )
    })
}

/// The RAM region's ORIGIN in the board's memory map (`boards/memory/*.x`).
fn ram_origin(board: &Board) -> Option<u64> {
    let ferrite_common::target::Memory::Map(file) = board.memory else {
        return None;
    };
    let text = std::fs::read_to_string(super::boards_dir().join("memory").join(file)).ok()?;
    region_origin(&text, "RAM")
}

/// `ORIGIN` of `region` in a linker memory map (hexadecimal).
fn region_origin(memory_x: &str, region: &str) -> Option<u64> {
    let line = memory_x.lines().find(|l| {
        let l = l.trim_start();
        l.strip_prefix(region)
            .is_some_and(|rest| rest.trim_start().starts_with(':'))
            && l.contains("ORIGIN")
    })?;
    let v = line.split("ORIGIN").nth(1)?.trim_start_matches([' ', '=']);
    let v = v.split([',', ' ']).next()?.trim();
    u64::from_str_radix(v.strip_prefix("0x")?, 16).ok()
}

/// Builds the firmware and runs it, with a timeout for the work it does.
pub fn build_and_run(req: &RunRequest<'_>) -> Result<Run> {
    let elf = build(req)?;
    let cwd = work_dir().join(req.board.name);
    let tokens = match (req.firmware, &req.opts.text) {
        (Firmware::Eval, Some(t)) => std::fs::metadata(t).map_or(0, |m| m.len() as usize),
        (Firmware::Eval, None) => req.n * req.opts.seq_len,
        _ => req.n,
    };
    run_qemu(
        req.board,
        &elf,
        &cwd,
        req.echo,
        req.defmt,
        timeout_for(tokens),
    )
}

/// A generous timeout: ~100M instructions take 0.15 s, the slowest board
/// (soft float) needs a few M instructions per token.
pub fn timeout_for(n: usize) -> u64 {
    super::DEFAULT_TIMEOUT_S + (n as u64) / 5
}

impl Run {
    /// The firmware's last lines, for error messages.
    pub fn tail(&self) -> String {
        let text = String::from_utf8_lossy(&self.output);
        let lines: Vec<_> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join("\n")
    }

    /// `Ok` if the firmware exited with 0, else the status and its last lines.
    pub fn succeeded(&self) -> Result<()> {
        match self.status {
            0 => Ok(()),
            s => match lockup_below_ram(self.board, &self.qemu_stderr) {
                Some(why) => bail!("{why}:\n{}", self.tail()),
                None => bail!("exit status {s}:\n{}", self.tail()),
            },
        }
    }

    /// Parses a successful `generate`, `ota` or `eval` run; a non-zero exit
    /// is an error with the reason.
    pub fn report(&self) -> Result<Report> {
        if self.status != ferrite_common::status::OK {
            let why = lockup_below_ram(self.board, &self.qemu_stderr).unwrap_or_else(|| {
                ferrite_common::status::describe(self.status)
                    .map_or_else(|| format!("exit status {}", self.status), str::to_string)
            });
            bail!(
                "{} firmware failed: {why}\n{}",
                self.board.name,
                self.tail()
            );
        }
        Report::parse(
            self.board.name,
            &String::from_utf8_lossy(&self.output),
            self.sizes,
        )
    }
}

/// What reaches the board of the update.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Delivery {
    /// No update is offered.
    None,
    /// The whole image.
    Intact,
    /// One byte in the middle flipped (a corrupted transfer).
    FlipByte,
    /// The transfer stops after this many bytes (an interrupted download).
    CutAt(usize),
}

/// What the `ota` firmware is offered in one run.
#[derive(Clone, Debug)]
pub struct OtaPlan<'a> {
    /// The update (`update.fer`), delivered as `delivery` says.
    pub update: Option<&'a Path>,
    pub delivery: Delivery,
    /// Trusted public keys (64 hex digits each, comma-separated): the
    /// firmware is built with `verify` and runs only signed updates.
    pub trusted_keys: Option<String>,
    /// A second update in the same boot (`update2.fer`, signed firmware only).
    pub second: Option<&'a Path>,
    /// Keep the rollback counter the previous run left (`counter.bin`): a
    /// simulated reset of the same device, rather than a new one.
    pub keep_counter: bool,
}

impl<'a> OtaPlan<'a> {
    /// `update` delivered as `delivery` to a firmware that trusts `trusted_keys`.
    pub fn new(update: Option<&'a Path>, delivery: Delivery, trusted_keys: Option<String>) -> Self {
        OtaPlan {
            update,
            delivery,
            trusted_keys,
            second: None,
            keep_counter: false,
        }
    }
}

/// Builds the `ota` firmware with model A, offers `plan`'s updates
/// (`update.fer`, `update2.fer` in the semihosting working directory), runs it.
pub fn run_ota(
    board: &'static Board,
    a: &Path,
    plan: &OtaPlan<'_>,
    prompt: &str,
    n: usize,
    echo: bool,
) -> Result<Run> {
    let verify = plan.trusted_keys.is_some();
    let elf = build(&RunRequest {
        prompt,
        n,
        echo,
        opts: super::BuildOpts {
            features: if verify { vec!["verify"] } else { Vec::new() },
            trusted_keys: plan.trusted_keys.clone(),
            ..super::BuildOpts::default()
        },
        ..RunRequest::new(board, Firmware::Ota, a)
    })?;
    let cwd = work_dir().join(board.name).join("ota");
    std::fs::create_dir_all(&cwd)?;
    for (name, file, delivery) in [
        ("update.fer", plan.update, plan.delivery),
        ("update2.fer", plan.second, Delivery::Intact),
    ] {
        let target = cwd.join(name);
        let _ = std::fs::remove_file(&target);
        let (Some(update), false) = (file, delivery == Delivery::None) else {
            continue;
        };
        let mut bytes = std::fs::read(update).with_context(|| update.display().to_string())?;
        match delivery {
            Delivery::None | Delivery::Intact => {}
            Delivery::FlipByte => {
                let i = bytes.len() / 2;
                bytes[i] ^= 0x40;
            }
            Delivery::CutAt(k) => bytes.truncate(k),
        }
        std::fs::write(&target, &bytes)?;
    }
    if !plan.keep_counter {
        let _ = std::fs::remove_file(cwd.join("counter.bin"));
    }
    run_qemu(board, &elf, &cwd, echo, false, timeout_for(n))
}

/// Builds and runs the `slots` firmware (its image: `image`, greedy from the
/// default prompt); its `slots:` lines and exit status say what it found.
pub fn run_slots(board: &'static Board, image: &Path) -> Result<Run> {
    let elf = build(&RunRequest::new(board, Firmware::Slots, image))?;
    let cwd = work_dir().join(board.name).join("slots");
    std::fs::create_dir_all(&cwd)?;
    // A cut and a boot for each of about 1,200 operations of a save.
    run_qemu(
        board,
        &elf,
        &cwd,
        false,
        false,
        4 * super::DEFAULT_TIMEOUT_S,
    )
}

/// The `ota` firmware's verdict line: `ota: accepted`, `ota: refused <reason>`
/// or `ota: no update` (the first update's).
pub fn verdict(run: &Run) -> Option<String> {
    verdicts(run).into_iter().next()
}

/// Every verdict line of the run, one per update offered.
pub fn verdicts(run: &Run) -> Vec<String> {
    String::from_utf8_lossy(&run.output)
        .lines()
        .filter(|l| {
            ["ota: accepted", "ota: refused", "ota: no update"]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lockup_below_ram_is_a_stack_overflow() {
        // QEMU's dump of the m0 (microbit: RAM at 0x20000000) of 2026-12-07.
        let dump = "qemu: fatal: Lockup: can't escalate 3 to HardFault (current priority -1)\n\n\
                    R00=00000001 R01=00019560 R02=00000000 R03=20000050\n\
                    R12=fffff52a R13=1ffffff8 R14=0000a28f R15=00000f5c\n";
        let m0 = crate::boards::named("m0").unwrap();
        let why = lockup_below_ram(m0, dump).unwrap();
        assert!(
            why.contains("stack overflow") && why.contains("0x1ffffff8"),
            "{why}"
        );
        // SP inside RAM, or no lockup: not a stack overflow.
        assert!(lockup_below_ram(m0, &dump.replace("1ffffff8", "20003ff0")).is_none());
        assert!(lockup_below_ram(m0, "qemu: fatal: something else R13=1ffffff8").is_none());
        let map = "MEMORY\n{\n  FLASH : ORIGIN = 0x00000000, LENGTH = 256K\n  RAM   : ORIGIN = 0x20000000, LENGTH = 16K\n}\n";
        assert_eq!(region_origin(map, "RAM"), Some(0x2000_0000));
        assert_eq!(region_origin(map, "FLASH"), Some(0));
        assert_eq!(region_origin(map, "ROM"), None);
    }
}
