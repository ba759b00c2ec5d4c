//! The board table (`ferrite_common::board`, shared with boards/build.rs)
//! as xtask uses it: lookups with an error, the flash and RAM budget of a
//! board's memory map, and the math a firmware runs.

use anyhow::{Context, Result};

pub use ferrite_common::target::{Target as Board, DEFAULT_MODEL};

/// The QEMU boards of the target table.
pub static BOARDS: std::sync::LazyLock<Vec<&'static Board>> =
    std::sync::LazyLock::new(|| ferrite_common::target::boards().collect());

use super::boards_dir;

/// The board called `name`, or an error that lists the boards.
pub fn named(name: &str) -> Result<&'static Board> {
    Board::named(name)
        .filter(|b| b.qemu().is_some())
        .with_context(|| {
            let names: Vec<_> = BOARDS.iter().map(|b| b.name).collect();
            format!("unknown board {name:?}; boards: {}", names.join(", "))
        })
}

/// What xtask adds to a row of the table.
pub trait BoardExt {
    /// What a firmware for this board runs with (`fast_math`) or without
    /// the runtime's `fast-math` feature.
    fn math(&self, fast_math: bool) -> Math;
    /// (flash, RAM) budget in bytes, read from the board's memory map.
    fn budget(&self) -> Result<(u64, u64)>;
}

impl BoardExt for Board {
    fn math(&self, fast_math: bool) -> Math {
        match (fast_math, self.hard_float()) {
            (false, _) => Math::Libm,
            (true, false) => Math::Int,
            (true, true) => Math::Float,
        }
    }

    fn budget(&self) -> Result<(u64, u64)> {
        let ferrite_common::target::Memory::Map(file) = self.memory else {
            anyhow::bail!("{}: no memory map", self.name)
        };
        let path = boards_dir().join("memory").join(file);
        let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
        let length = |region: &str| {
            ferrite_common::target::region_length(&text, region)
                .with_context(|| format!("{}: no {region} region with a LENGTH", path.display()))
        };
        Ok((length("FLASH")?, length("RAM")?))
    }
}

/// The `exp`/`sigmoid`/`silu` a build runs (`ferrite::math::FAST_MATH`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Math {
    /// `libm` (the runtime without `fast-math`).
    Libm,
    /// `math::fast_int` (`fast-math` on a target without hardware f32, or
    /// `fast-math-int`).
    Int,
    /// `math::fast_float` (`fast-math` on a target with hardware f32).
    Float,
}

impl Math {
    /// Its name in messages and ELF names.
    pub fn name(self) -> &'static str {
        match self {
            Math::Libm => "libm",
            Math::Int => "int",
            Math::Float => "float",
        }
    }

    /// The host CLI's cargo feature that gives the same module on the host
    /// (which has hardware f32).
    pub fn host_feature(self) -> Option<&'static str> {
        match self {
            Math::Libm => None,
            Math::Int => Some("fast-math-int"),
            Math::Float => Some("fast-math"),
        }
    }
}
