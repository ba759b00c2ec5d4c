//! Fuzz the sampler with hostile options and logits (docs/fuzzing.md):
//! every `SamplerConfig` edge (temperature 0, negative, NaN, tiny; top_k 0,
//! 1, huge; top_p 0, 1, NaN) and logits with NaN, infinities, all-equal
//! values and large vocabularies.
//!
//! Input layout: `[temperature: f32][top_k: u8][top_p: f32][seed: u64]
//! [mode: u8][logits...]` (little-endian). `mode % 4` picks how the rest
//! becomes logits: 0 raw f32s, 1 one f32 repeated (`mode / 4 + 1` times 64),
//! 2 raw f32s cycled to `2^(a % 17) + b` entries (`[a: u8][b: u8]` first;
//! up to 65 791), 3 one byte per
//! logit from a table of special values.
//!
//! Asserted: `Sampler::new` accepts exactly the documented options; every
//! draw is in range, never a NaN logit (unless all are NaN), never a token of
//! zero probability (computed in f64 from the documented distribution), and
//! within the top k; greedy draws are the first argmax; a sampler with the
//! same seed draws the same tokens. Every call must return (a hang is a
//! libFuzzer timeout).
#![no_main]

use ferrite::sampler::{argmax, MAX_TOP_K};
use ferrite::{Sampler, SamplerConfig};
use libfuzzer_sys::fuzz_target;

/// Draws per input (the PRNG advances between them); one above
/// [`MANY`] logits (top-p costs a pass over the logits per bisection step).
const DRAWS: usize = 4;
const MANY: usize = 4096;

/// Logits mode 3 draws from, one byte each.
const SPECIAL: [f32; 16] = [
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    0.0,
    -0.0,
    f32::MAX,
    f32::MIN,
    f32::MIN_POSITIVE,
    1e-45,
    1.0,
    -1.0,
    1e-30,
    88.7,
    -88.7,
    1e30,
    0.5,
];

fn f32_at(b: &[u8], at: usize) -> f32 {
    f32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn f32s(b: &[u8]) -> impl Iterator<Item = f32> + '_ {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
}

fn logits_of(mode: u8, rest: &[u8]) -> Vec<f32> {
    match mode % 4 {
        0 => f32s(rest).collect(),
        1 => {
            let v = if rest.len() >= 4 {
                f32_at(rest, 0)
            } else {
                0.0
            };
            vec![v; 64 * (usize::from(mode / 4) + 1)]
        }
        2 => {
            let [a, b, tail @ ..] = rest else {
                return Vec::new();
            };
            let n = (1usize << (a % 17)) + usize::from(*b);
            let vals: Vec<f32> = f32s(tail).collect();
            if vals.is_empty() {
                return vec![0.0; n];
            }
            vals.iter().copied().cycle().take(n).collect()
        }
        _ => rest.iter().map(|&b| SPECIAL[usize::from(b % 16)]).collect(),
    }
}

/// Whether `Sampler::new` must accept `c` (its documented contract).
fn valid(c: &SamplerConfig) -> bool {
    c.temperature.is_finite()
        && c.temperature >= 0.0
        && c.top_k <= MAX_TOP_K
        && c.top_p > 0.0
        && c.top_p <= 1.0
}

/// Whether token `id` has a probability above zero under the documented
/// distribution `p ∝ exp((l - max) / T)` (f64, before top-k/top-p): an
/// infinite logit takes all the mass; when no logit is above -inf every
/// non-NaN token counts as equally likely.
fn possible(logits: &[f32], id: usize, temperature: f32) -> bool {
    let l = logits[id];
    let max = logits
        .iter()
        .copied()
        .filter(|l| !l.is_nan())
        .fold(f32::NEG_INFINITY, f32::max);
    if l.is_nan() {
        return false;
    }
    if max.is_infinite() {
        return l == max;
    }
    ((f64::from(l) - f64::from(max)) / f64::from(temperature)).exp() > 0.0
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 18 {
        return;
    }
    let config = SamplerConfig {
        temperature: f32_at(data, 0),
        top_k: usize::from(data[4]),
        top_p: f32_at(data, 5),
        seed: u64::from_le_bytes(data[9..17].try_into().unwrap()),
    };
    let logits = logits_of(data[17], &data[18..]);
    let sampler = Sampler::new(config);
    assert_eq!(
        sampler.is_ok(),
        valid(&config),
        "Sampler::new({config:?}) disagrees with its documented options"
    );
    let mut samplers = vec![Sampler::greedy()];
    samplers.extend(sampler);
    let all_nan = logits.iter().all(|l| l.is_nan());
    if logits.is_empty() {
        return;
    }
    for (which, s) in samplers.iter_mut().enumerate() {
        let c = if which == 0 {
            SamplerConfig::default()
        } else {
            config
        };
        let mut twin = s.clone();
        for _ in 0..if logits.len() > MANY { 1 } else { DRAWS } {
            let id = s.sample(&logits);
            assert_eq!(id, twin.sample(&logits), "same seed, different draw");
            let i = id as usize;
            assert!(i < logits.len(), "token {id} of {} logits", logits.len());
            if all_nan {
                continue;
            }
            assert!(!logits[i].is_nan(), "picked a NaN logit ({c:?})");
            if c.temperature == 0.0 || c.top_k == 1 {
                assert_eq!(id, argmax(&logits), "greedy must be the first argmax");
                continue;
            }
            assert!(
                possible(&logits, i, c.temperature),
                "picked token {id} (logit {}) of zero probability ({c:?})",
                logits[i]
            );
            if c.top_k > 0 {
                let above = logits.iter().filter(|&&l| l > logits[i]).count();
                assert!(above < c.top_k, "token {id} is not in the top {}", c.top_k);
            }
        }
    }
});
