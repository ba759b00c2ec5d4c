//! The bits-per-byte sum: the negative log-likelihood of one token, summed in
//! f64 over the predicted tokens by `ferrite eval --text` on the host and by
//! the `eval` firmware on a board, which must get the same f64 bits.

/// `-ln p(target)` under the softmax of `logits` (`&[f32]`), `target` a
/// `u32` index: `ln(sum(exp(l - max))) + max - logits[target]`, in f64, with
/// `libm`'s `exp` and `log` (not the platform's), in one fixed order, so that
/// every target computes the same bits from the same f32 logits.
///
/// A macro, so that the firmware expands it in a function of its own (the
/// `eval` firmware's `nll`, kept out of line there): the code, and so the
/// instruction counts the suite records, is what it would be written in
/// place. The host calls [`nll`], the same expression.
///
/// Panics (out-of-bounds index) if `target` is not an index of `logits`.
#[macro_export]
macro_rules! nll {
    ($logits:expr, $target:expr) => {{
        let logits: &[f32] = $logits;
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let log_z = max
            + $crate::nll::libm::log(
                logits
                    .iter()
                    .map(|&l| $crate::nll::libm::exp(l as f64 - max))
                    .sum::<f64>(),
            );
        log_z - logits[$target as usize] as f64
    }};
}

#[doc(hidden)]
pub use libm;

/// [`nll!`](crate::nll!) as a function: `-ln p(target)` under the softmax
/// of `logits`.
///
/// # Panics
///
/// If `target` is not an index of `logits` (the caller feeds token ids the
/// model accepted, which are below its vocabulary size).
#[inline(never)]
pub fn nll(logits: &[f32], target: u32) -> f64 {
    crate::nll!(logits, target)
}

/// Bits per byte of a sum of `nats` over tokens that decode to `bytes`
/// bytes: `nats / bytes / ln 2`.
pub fn bits_per_byte(nats: f64, bytes: usize) -> f64 {
    nats / bytes as f64 / core::f64::consts::LN_2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_logits_cost_log_of_the_vocabulary() {
        let logits = [0.5f32; 256];
        let n = nll(&logits, 7);
        assert!((n - 256f64.ln()).abs() < 1e-12, "{n}");
        // A byte model at uniform: 8 bits per byte.
        assert!((bits_per_byte(n * 10.0, 10) - 8.0).abs() < 1e-12);
    }

    #[test]
    fn a_confident_right_guess_costs_almost_nothing() {
        let mut logits = [0.0f32; 16];
        logits[3] = 40.0;
        assert!(nll(&logits, 3) < 1e-15);
        assert!((nll(&logits, 4) - 40.0).abs() < 1e-9);
    }
}
