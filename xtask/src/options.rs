//! How a firmware is built beyond its target and image: the maths module
//! ([`Math`]) and the build-time parameters ([`BuildOpts`]). Below both the
//! firmware builds (`boards`) and the host CLI runs (`host`), which compare
//! like with like through them.

use std::path::PathBuf;

use ferrite_common::target::Target as Board;

/// The `exp`/`sigmoid`/`silu` a build runs (`ferrite::math::FAST_MATH`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Math {
    /// `libm` (the runtime without `fast-math`).
    Libm,
    /// `math::fast_int` (`fast-math` on a target without hardware f32).
    Int,
    /// `math::fast_float` (`fast-math` on a target with hardware f32).
    Float,
}

impl Math {
    /// What a build for `t` runs with or without the `fast-math` feature.
    pub fn of(t: &Board, fast_math: bool) -> Math {
        match (fast_math, t.hard_float()) {
            (false, _) => Math::Libm,
            (true, false) => Math::Int,
            (true, true) => Math::Float,
        }
    }

    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Math::Libm => "libm",
            Math::Int => "int",
            Math::Float => "float",
        }
    }

    /// The host CLI's cargo feature that gives the same module on the host.
    pub fn host_feature(self) -> Option<&'static str> {
        match self {
            Math::Libm => None,
            Math::Int => Some("fast-math-int"),
            Math::Float => Some("fast-math"),
        }
    }
}

/// The build-time parameters beyond prompt and N: `generate`'s sampler and
/// `eval`'s task (see boards/build.rs), and how the runtime is built.
#[derive(Clone, Debug, PartialEq)]
pub struct BuildOpts {
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub seed: u64,
    /// `eval`: the text to score (its whole content); `None`: MQAR.
    pub text: Option<PathBuf>,
    pub chunk: usize,
    pub mqar_seed: u64,
    pub pairs: usize,
    pub seq_len: usize,
    /// `bench`: the cases to time (`FERRITE_BENCH`); `None`: the firmware's default.
    pub bench: Option<String>,
    /// Forces the runtime's kernel module (`FERRITE_KERNELS`, e.g.
    /// `portable`), built in its own target directory; `None`: the target's.
    pub kernels: Option<&'static str>,
    /// Measurement only: the runtime's `math` functions out of line
    /// (`FERRITE_MATH_NOINLINE=1`, its own target directory).
    pub math_noinline: bool,
    /// The runtime's `fast-math` feature on or off; `None`: on.
    pub fast_math: Option<bool>,
    /// Firmware features beyond those the image and target choose
    /// (`sigbench`'s crate, the runtime's `verify`).
    pub features: Vec<&'static str>,
    /// Public keys the `ota` firmware trusts (`FERRITE_TRUSTED_KEYS`, hex,
    /// comma-separated); `None`: it verifies nothing.
    pub trusted_keys: Option<String>,
    /// `generate`: a baked snapshot to start from instead of feeding the
    /// prompt (`FERRITE_SNAPSHOT`, made by `ferrite bake`); `None`: none.
    pub snapshot: Option<PathBuf>,
    /// `generate`: write a snapshot in hex after this many tokens
    /// (`FERRITE_SNAPSHOT_AT`); 0: never.
    pub snapshot_at: usize,
    /// `generate` on a QEMU board: the `roofline` feature (every product
    /// timed, the `roofline:` line), built in a directory of its own.
    pub roofline: bool,
    /// `generate`: the baked memory selected in every `cross` layer
    /// (`FERRITE_MEMORY`, `ferrite generate --memory`); 0: memory 0.
    pub memory: u32,
}

impl Default for BuildOpts {
    fn default() -> Self {
        BuildOpts {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
            text: None,
            chunk: 512,
            mqar_seed: 0,
            pairs: 8,
            seq_len: 64,
            bench: None,
            kernels: None,
            math_noinline: false,
            fast_math: None,
            features: Vec::new(),
            trusted_keys: None,
            snapshot: None,
            snapshot_at: 0,
            roofline: false,
            memory: 0,
        }
    }
}

impl BuildOpts {
    /// The `exp`/`sigmoid`/`silu` of a firmware for `board` built with these options.
    pub fn math(&self, board: &Board) -> Math {
        Math::of(board, self.fast_math.unwrap_or(true))
    }

    /// `ferrite generate` arguments for the same sampler (and the same
    /// baked memory, when not 0).
    pub fn sampler_args(&self) -> Vec<String> {
        let (t, k, p, s) = (self.temperature, self.top_k, self.top_p, self.seed);
        let memory = self.memory.to_string();
        let memory = (self.memory != 0).then_some(["--memory", memory.as_str()]);
        ["--temperature", &t.to_string(), "--top-k", &k.to_string()]
            .into_iter()
            .chain(["--top-p", &p.to_string(), "--seed", &s.to_string()])
            .chain(memory.into_iter().flatten())
            .map(str::to_string)
            .collect()
    }

    /// The settings that build in a directory of their own
    /// (`kernels-portable`, `math-noinline`, `roofline`, joined by `-`);
    /// `None` for the default build.
    pub(crate) fn variant(&self) -> Option<String> {
        let kernels = self.kernels.map(|k| format!("kernels-{k}"));
        let noinline = self.math_noinline.then(|| "math-noinline".to_string());
        let roofline = self.roofline.then(|| "roofline".to_string());
        let parts: Vec<String> = kernels
            .into_iter()
            .chain(noinline)
            .chain(roofline)
            .collect();
        (!parts.is_empty()).then(|| parts.join("-"))
    }
}
