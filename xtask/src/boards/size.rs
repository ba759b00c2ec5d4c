//! Flash and RAM of a firmware ELF (`llvm-size -A`).

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

/// Flash and RAM of an ELF, from `llvm-size -A`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// .vector_table + .text + .rodata + .data (the initial values live in flash).
    pub flash: u64,
    /// .data + .bss + .uninit (+ .heap): static RAM, without the stack.
    pub ram: u64,
}

/// [`Sizes`] of an ELF, by `llvm-size -A`.
pub fn sizes(elf: &Path) -> Result<Sizes> {
    let out = Command::new(crate::setup::llvm_size()?)
        .arg("-A")
        .arg(elf)
        .output()
        .context("running llvm-size")?;
    if !out.status.success() {
        bail!(
            "llvm-size -A {}: {}",
            elf.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(parse_llvm_size(&String::from_utf8_lossy(&out.stdout)))
}

/// [`Sizes`] from the output of `llvm-size -A`: sections by name, the
/// stack (a NOLOAD section of its own on RISC-V) not counted.
pub fn parse_llvm_size(text: &str) -> Sizes {
    let (mut flash, mut ram) = (0, 0);
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(name), Some(size)) = (f.next(), f.next()) else {
            continue;
        };
        let Ok(size) = size.parse::<u64>() else {
            continue;
        };
        match name {
            ".vector_table" | ".text" | ".rodata" | ".init" | ".trap" | ".srodata"
            | ".eh_frame" => flash += size,
            ".data" | ".sdata" => {
                flash += size;
                ram += size;
            }
            ".bss" | ".sbss" | ".uninit" | ".heap" => ram += size,
            _ => {}
        }
    }
    Sizes { flash, ram }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_flash_and_ram_sections() {
        let arm = "app.elf  :\nsection              size         addr\n\
                   .vector_table         1024            0\n\
                   .text               120000         1024\n\
                   .rodata              27000       121024\n\
                   .data                   16    536870912\n\
                   .bss                 10264    536870928\n\
                   .uninit                  0    536881192\n\
                   .ARM.attributes         58            0\n\
                   .debug_info         900000            0\n\
                   Total               1058362\n";
        assert_eq!(
            parse_llvm_size(arm),
            Sizes {
                flash: 1024 + 120000 + 27000 + 16,
                ram: 16 + 10264
            }
        );
        let rv = ".text 5000 0\n.srodata 8 0\n.sdata 4 0\n.sbss 12 0\n.stack 2048 0\n";
        assert_eq!(
            parse_llvm_size(rv),
            Sizes {
                flash: 5012,
                ram: 16
            }
        );
    }
}
