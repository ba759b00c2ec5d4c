//! Command-line options: one type per command, each built from the
//! arguments by [`Flags`], which refuses an option the command does not take
//! and values the firmware's build script would reject (one line each, not a
//! build-script panic).

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};

/// Options that take a value.
const VALUED: &[&str] = &[
    "--image",
    "--prompt",
    "-n",
    "--dtype",
    "--temperature",
    "--top-k",
    "--top-p",
    "--seed",
    "--text",
    "--bytes",
    "--chunk",
    "--pairs",
    "--seq-len",
    "--seconds",
    "--top",
    "--board",
    "--only",
    "--math",
    "--board-tokens",
    "--update",
    "--cut-at",
];

/// Options without a value.
const SWITCHES: &[&str] = &[
    "--mqar",
    "--defmt",
    "--corrupt",
    "--overwrite",
    "--record",
    "--math-calls",
];

/// The arguments after the command, split into options and positionals.
/// Each command's options type takes what it reads; [`Flags::finish`] then
/// refuses whatever is left.
#[derive(Debug, Default)]
pub struct Flags {
    values: BTreeMap<&'static str, String>,
    switches: Vec<&'static str>,
    positional: Vec<String>,
    /// `-h` / `--help` was given.
    pub help: bool,
}

impl Flags {
    /// Splits `args` (`--n` and `--tokens` are `-n`).
    pub fn parse(args: &[String]) -> Result<Flags> {
        let mut f = Flags::default();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let name = match a.as_str() {
                "--n" | "--tokens" => "-n",
                s => s,
            };
            if let Some(&key) = VALUED.iter().find(|&&k| k == name) {
                let v = it.next().with_context(|| format!("{key} needs a value"))?;
                f.values.insert(key, v.clone());
            } else if let Some(&key) = SWITCHES.iter().find(|&&k| k == name) {
                f.switches.push(key);
            } else if matches!(name, "-h" | "--help") {
                f.help = true;
            } else if name.starts_with('-') {
                bail!("unknown option {name}");
            } else {
                f.positional.push(a.clone());
            }
        }
        Ok(f)
    }

    /// The value of `key`, parsed.
    fn value<T: std::str::FromStr>(&mut self, key: &'static str) -> Result<Option<T>> {
        match self.values.remove(key) {
            None => Ok(None),
            Some(v) => v
                .parse()
                .ok()
                .map(Some)
                .with_context(|| format!("{key} {v}: not a valid value")),
        }
    }

    /// Whether switch `key` was given.
    fn switch(&mut self, key: &'static str) -> bool {
        let had = self.switches.contains(&key);
        self.switches.retain(|&s| s != key);
        had
    }

    /// The board: the first positional argument, or `--board`.
    fn board(&mut self) -> Result<Option<String>> {
        let flag = self.value::<String>("--board")?;
        match (self.positional.is_empty(), flag) {
            (true, b) => Ok(b),
            (false, None) => Ok(Some(self.positional.remove(0))),
            (false, Some(_)) => bail!("the board given twice"),
        }
    }

    /// `--math fast|libm`: the runtime's `fast-math` feature on or off.
    fn math(&mut self) -> Result<Option<bool>> {
        match self.value::<String>("--math")?.as_deref() {
            None => Ok(None),
            Some("fast") => Ok(Some(true)),
            Some("libm") => Ok(Some(false)),
            Some(other) => bail!("--math {other}: use fast or libm"),
        }
    }

    /// Refuses whatever `command` did not take.
    pub fn finish(self, command: &str) -> Result<()> {
        if let Some(p) = self.positional.first() {
            bail!("{command}: unexpected argument {p}");
        }
        if let Some(k) = self.values.keys().next() {
            bail!("{command} does not take {k}");
        }
        if let Some(k) = self.switches.first() {
            bail!("{command} does not take {k}");
        }
        Ok(())
    }
}

/// `-n`: at least one token (or MQAR sequence).
fn count(f: &mut Flags) -> Result<Option<usize>> {
    let n = f.value("-n")?;
    if n == Some(0) {
        bail!("-n 0: the firmware needs at least one token (or MQAR sequence)");
    }
    Ok(n)
}

/// `--prompt`: not empty.
fn prompt(f: &mut Flags) -> Result<Option<String>> {
    let p: Option<String> = f.value("--prompt")?;
    if p.as_deref() == Some("") {
        bail!("--prompt must not be empty");
    }
    Ok(p)
}

/// `--image F|DIR [--dtype D]`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ImageOpts {
    /// An image file or a model directory.
    pub image: Option<String>,
    /// The dtype a model directory is quantized to (default int8).
    pub dtype: Option<String>,
}

impl ImageOpts {
    fn take(f: &mut Flags) -> Result<ImageOpts> {
        Ok(ImageOpts {
            image: f.value("--image")?,
            dtype: f.value("--dtype")?,
        })
    }
}

/// `board` (and `demo`): build and run `generate`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct BoardOpts {
    /// The board's name.
    pub board: Option<String>,
    /// The image.
    pub image: ImageOpts,
    /// `--prompt`.
    pub prompt: Option<String>,
    /// `-n`: tokens to generate.
    pub n: Option<usize>,
    /// `--temperature`.
    pub temperature: Option<f32>,
    /// `--top-k`.
    pub top_k: Option<usize>,
    /// `--top-p`.
    pub top_p: Option<f32>,
    /// `--seed`.
    pub seed: Option<u64>,
    /// `--defmt`.
    pub defmt: bool,
    /// `--math fast|libm`.
    pub fast_math: Option<bool>,
}

impl BoardOpts {
    /// Takes `board`'s options from `f`.
    pub fn take(f: &mut Flags) -> Result<BoardOpts> {
        let o = BoardOpts {
            board: f.board()?,
            image: ImageOpts::take(f)?,
            prompt: prompt(f)?,
            n: count(f)?,
            temperature: f.value("--temperature")?,
            top_k: f.value("--top-k")?,
            top_p: f.value("--top-p")?,
            seed: f.value("--seed")?,
            defmt: f.switch("--defmt"),
            fast_math: f.math()?,
        };
        if let Some(t) = o.temperature {
            if !(t >= 0.0 && t.is_finite()) {
                bail!("--temperature {t}: must be a finite number >= 0");
            }
        }
        if let Some(p) = o.top_p {
            if !(p > 0.0 && p <= 1.0) {
                bail!("--top-p {p}: must be in (0, 1]");
            }
        }
        Ok(o)
    }
}

/// `eval-board`: MQAR accuracy or bits per byte on a board.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct EvalBoardOpts {
    /// The board's name.
    pub board: Option<String>,
    /// The image (required).
    pub image: ImageOpts,
    /// `--mqar`.
    pub mqar: bool,
    /// `-n`: MQAR sequences.
    pub n: Option<usize>,
    /// `--seed`: the MQAR seed.
    pub seed: Option<u64>,
    /// `--pairs`.
    pub pairs: Option<usize>,
    /// `--seq-len`.
    pub seq_len: Option<usize>,
    /// `--text FILE`.
    pub text: Option<String>,
    /// `--bytes`: score the first B bytes.
    pub bytes: Option<usize>,
    /// `--chunk`.
    pub chunk: Option<usize>,
    /// `--math fast|libm`.
    pub fast_math: Option<bool>,
}

impl EvalBoardOpts {
    /// Takes `eval-board`'s options from `f`.
    pub fn take(f: &mut Flags) -> Result<EvalBoardOpts> {
        let o = EvalBoardOpts {
            board: f.board()?,
            image: ImageOpts::take(f)?,
            mqar: f.switch("--mqar"),
            n: count(f)?,
            seed: f.value("--seed")?,
            pairs: f.value("--pairs")?,
            seq_len: f.value("--seq-len")?,
            text: f.value("--text")?,
            bytes: f.value("--bytes")?,
            chunk: f.value("--chunk")?,
            fast_math: f.math()?,
        };
        if let Some(c) = o.chunk {
            if c < 2 {
                bail!("--chunk {c}: needs at least 2 tokens per chunk");
            }
        }
        let pairs = o.pairs.unwrap_or(8);
        let seq_len = o.seq_len.unwrap_or(64);
        if !(1..=64).contains(&pairs) {
            bail!("--pairs {pairs}: MQAR takes 1 to 64 key-value pairs");
        }
        if seq_len < 4 * pairs {
            bail!(
                "--seq-len {seq_len}: MQAR with {pairs} pairs needs at least {}",
                4 * pairs
            );
        }
        Ok(o)
    }
}

/// `ota`: the OTA example.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct OtaOpts {
    /// The board's name.
    pub board: Option<String>,
    /// Model A, embedded (`--image`, default the board's model).
    pub image: ImageOpts,
    /// `--update B`: the image offered as the update (file or model dir,
    /// quantized to int8); none: no update is offered.
    pub update: Option<String>,
    /// `--corrupt`: flip a byte in the middle of the update.
    pub corrupt: bool,
    /// `--cut-at K`: the transfer stops after K bytes.
    pub cut_at: Option<usize>,
    /// `--prompt`.
    pub prompt: Option<String>,
    /// `-n`.
    pub n: Option<usize>,
}

impl OtaOpts {
    /// Takes `ota`'s options from `f`.
    pub fn take(f: &mut Flags) -> Result<OtaOpts> {
        let o = OtaOpts {
            board: f.board()?,
            image: ImageOpts::take(f)?,
            update: f.value("--update")?,
            corrupt: f.switch("--corrupt"),
            cut_at: f.value("--cut-at")?,
            prompt: prompt(f)?,
            n: count(f)?,
        };
        if o.update.is_none() && (o.corrupt || o.cut_at.is_some()) {
            bail!("--corrupt and --cut-at damage an update: give one with --update B.fer");
        }
        if o.corrupt && o.cut_at.is_some() {
            bail!("--corrupt and --cut-at: one damage at a time");
        }
        Ok(o)
    }
}

/// `profile`: instructions per function.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ProfileOpts {
    /// The board's name.
    pub board: Option<String>,
    /// The image.
    pub image: ImageOpts,
    /// `--prompt`.
    pub prompt: Option<String>,
    /// `-n` (default 8).
    pub n: Option<usize>,
    /// `--top`: functions listed (default 30).
    pub top: Option<usize>,
    /// `--math fast|libm`.
    pub fast_math: Option<bool>,
    /// `--math-calls`: the runtime's math functions out of line.
    pub math_calls: bool,
}

impl ProfileOpts {
    /// Takes `profile`'s options from `f`.
    pub fn take(f: &mut Flags) -> Result<ProfileOpts> {
        Ok(ProfileOpts {
            board: f.board()?,
            image: ImageOpts::take(f)?,
            prompt: prompt(f)?,
            n: count(f)?,
            top: f.value("--top")?,
            fast_math: f.math()?,
            math_calls: f.switch("--math-calls"),
        })
    }
}

/// `test-boards`: the QEMU suite.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SuiteOpts {
    /// `--overwrite`: record the expected outputs.
    pub overwrite: bool,
    /// `--only TEXT`: the checks whose name contains TEXT.
    pub only: Option<String>,
}

impl SuiteOpts {
    /// Takes `test-boards`' options from `f`.
    pub fn take(f: &mut Flags) -> Result<SuiteOpts> {
        Ok(SuiteOpts {
            overwrite: f.switch("--overwrite"),
            only: f.value("--only")?,
        })
    }
}

/// `bench-kernels`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct BenchOpts {
    /// `--board B` (or B): one board; every board without.
    pub board: Option<String>,
    /// `--record`: write the table into docs/benchmarks.md.
    pub record: bool,
}

impl BenchOpts {
    /// Takes `bench-kernels`' options from `f`.
    pub fn take(f: &mut Flags) -> Result<BenchOpts> {
        Ok(BenchOpts {
            board: f.board()?,
            record: f.switch("--record"),
        })
    }
}

/// `fuzz`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct FuzzOpts {
    /// `--seconds` (default 60).
    pub seconds: Option<u64>,
    /// `--only T`: the targets whose name contains T.
    pub only: Option<String>,
}

impl FuzzOpts {
    /// Takes `fuzz`'s options from `f`.
    pub fn take(f: &mut Flags) -> Result<FuzzOpts> {
        Ok(FuzzOpts {
            seconds: f.value("--seconds")?,
            only: f.value("--only")?,
        })
    }
}

/// `soak`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SoakOpts {
    /// `--tokens N`: host stream length (default 1,000,000).
    pub tokens: Option<u64>,
    /// `--board-tokens N`: the m4f stream (default 100,000; 0 skips it).
    pub board_tokens: Option<usize>,
    /// `--only T`: the rows whose label contains T.
    pub only: Option<String>,
    /// `--record`: write the table into docs/soak.md.
    pub record: bool,
}

impl SoakOpts {
    /// Takes `soak`'s options from `f`.
    pub fn take(f: &mut Flags) -> Result<SoakOpts> {
        Ok(SoakOpts {
            // `--tokens` is an alias of `-n` (Flags::parse).
            tokens: f.value("-n")?,
            board_tokens: f.value("--board-tokens")?,
            only: f.value("--only")?,
            record: f.switch("--record"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(args: &str) -> Flags {
        let args: Vec<String> = args.split_whitespace().map(str::to_string).collect();
        Flags::parse(&args).unwrap()
    }

    #[test]
    fn board_takes_its_options_and_refuses_others() {
        let mut f = flags("m3 --image x.fer --prompt Hi --tokens 5 --temperature 0.7 --seed 1 --math libm --defmt");
        let o = BoardOpts::take(&mut f).unwrap();
        f.finish("board").unwrap();
        assert_eq!(o.board.as_deref(), Some("m3"));
        assert_eq!(o.image.image.as_deref(), Some("x.fer"));
        assert_eq!((o.n, o.temperature, o.seed), (Some(5), Some(0.7), Some(1)));
        assert_eq!((o.defmt, o.fast_math), (true, Some(false)));

        let mut f = flags("m4f --record");
        BoardOpts::take(&mut f).unwrap();
        let e = f.finish("board").unwrap_err().to_string();
        assert_eq!(e, "board does not take --record");
        let mut f = flags("m4f extra");
        BoardOpts::take(&mut f).unwrap();
        assert!(f.finish("board").is_err());
    }

    #[test]
    fn bad_values_are_refused_before_building() {
        for (args, want) in [
            ("m4f -n 0", "-n 0"),
            ("m4f --prompt", "--prompt needs a value"),
            ("m4f --top-p 1.5", "--top-p 1.5"),
            ("m4f --temperature -1", "--temperature -1"),
            ("m4f --math fastest", "--math fastest"),
            ("m4f -n x", "-n x: not a valid value"),
        ] {
            let args: Vec<String> = args.split_whitespace().map(str::to_string).collect();
            let e = Flags::parse(&args)
                .and_then(|mut f| BoardOpts::take(&mut f))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{args:?}: {e}");
        }
        assert!(Flags::parse(&["--frobnicate".into()]).is_err());
        let mut f = flags("m4f --mqar --pairs 9 --seq-len 32");
        let e = EvalBoardOpts::take(&mut f).unwrap_err().to_string();
        assert!(e.contains("--seq-len 32"), "{e}");
        let mut f = flags("m4f --text t --chunk 1");
        assert!(EvalBoardOpts::take(&mut f).is_err());
    }

    #[test]
    fn each_command_reads_its_own() {
        let mut f = flags("--overwrite --only m0:");
        let o = SuiteOpts::take(&mut f).unwrap();
        f.finish("test-boards").unwrap();
        assert_eq!((o.overwrite, o.only.as_deref()), (true, Some("m0:")));
        let mut f = flags("--board m33 --record");
        let o = BenchOpts::take(&mut f).unwrap();
        f.finish("bench-kernels").unwrap();
        assert_eq!((o.board.as_deref(), o.record), (Some("m33"), true));
        let mut f = flags("m4f --update b.fer --corrupt -n 4");
        let o = OtaOpts::take(&mut f).unwrap();
        assert_eq!(
            (o.corrupt, o.n, o.update.as_deref()),
            (true, Some(4), Some("b.fer"))
        );
        let mut f = flags("m4f --update b.fer --cut-at 100");
        assert_eq!(OtaOpts::take(&mut f).unwrap().cut_at, Some(100));
        assert!(OtaOpts::take(&mut flags("m4f --corrupt")).is_err());
        assert!(OtaOpts::take(&mut flags("m4f --update b --corrupt --cut-at 1")).is_err());
        let mut f = flags("--seconds 5");
        assert_eq!(FuzzOpts::take(&mut f).unwrap().seconds, Some(5));
        let mut f = flags("--tokens 50000 --board-tokens 0 --record --only lm");
        let o = SoakOpts::take(&mut f).unwrap();
        f.finish("soak").unwrap();
        assert_eq!(
            (o.tokens, o.board_tokens, o.record),
            (Some(50_000), Some(0), true)
        );
        assert_eq!(o.only.as_deref(), Some("lm"));
        let mut f = flags("m3 --math-calls --top 10");
        let o = ProfileOpts::take(&mut f).unwrap();
        assert_eq!((o.math_calls, o.top), (true, Some(10)));
        let mut f = flags("m4f --board m3");
        assert!(BoardOpts::take(&mut f).is_err());
        let f = flags("-h");
        assert!(f.help);
        f.finish("x").unwrap();
    }
}
