//! The `roofline:` line (`generate` firmware built with its `roofline`
//! feature, docs/benchmarks.md): where a token's instructions go, worked
//! out once from the firmware's counts ([`Roofline::from_counts`]), written
//! by the firmware and read back by xtask ([`Roofline::parse`]).
//!
//! ```text
//! roofline: macs_per_token=M measured_macs_per_token=M products_per_token=P
//!   kernel_instructions_per_token=K other_instructions_per_token=O
//!   timing_instructions_per_token=T read_instructions=I/W macs_per_kernel_instruction=X.XXX
//! ```
//! (one line). `K + O + T` is the run's `instructions_per_token` (to within
//! a rounding per term); `K + O` is what a build without the feature
//! spends, up to the few instructions per product the feature moves.

use core::fmt;

use crate::report::Fields;

/// Prefix of the line.
pub const ROOFLINE: &str = "roofline: ";

/// What the line says, per token (every field but the read costs and the
/// rate: those per product, and MACs per 1,000 kernel instructions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Roofline {
    /// The model's MACs per token (`Model::macs_per_token`).
    pub macs_per_token: u64,
    /// The MACs the products of the run counted, per token fed.
    pub measured_macs_per_token: u64,
    /// Matrix-vector products per token.
    pub products_per_token: u64,
    /// Instructions inside the products, the reads' share taken out.
    pub kernel_instructions_per_token: u64,
    /// Everything else of a token: norms, mixers' state updates and
    /// attention, activations' quantization, sampling, the text.
    pub other_instructions_per_token: u64,
    /// What timing the products cost (both reads and the bookkeeping).
    pub timing_instructions_per_token: u64,
    /// Instructions a product's reads add inside its span.
    pub read_inside: u64,
    /// Instructions timing one product costs in all.
    pub read_whole: u64,
    /// `macs_per_token / kernel_instructions_per_token`, times 1,000.
    pub macs_per_kilo_instruction: u64,
}

impl Roofline {
    /// The line of a run that fed `fed` tokens in `elapsed` instructions,
    /// whose products (`products` of them, `macs` in all) spent `ticks`
    /// instructions between their reads, each read pair costing `inside`
    /// of those and `whole` in all (`ferrite::roofline`).
    #[allow(clippy::too_many_arguments)]
    pub fn from_counts(
        macs_per_token: u64,
        fed: u64,
        elapsed: u64,
        products: u64,
        macs: u64,
        ticks: u64,
        inside: u64,
        whole: u64,
    ) -> Roofline {
        let fed = fed.max(1);
        let kernel = ticks.saturating_sub(products * inside);
        let timing = products * whole;
        let other = elapsed.saturating_sub(kernel + timing);
        let kernel_per_token = kernel / fed;
        Roofline {
            macs_per_token,
            measured_macs_per_token: macs / fed,
            products_per_token: products / fed,
            kernel_instructions_per_token: kernel_per_token,
            other_instructions_per_token: other / fed,
            timing_instructions_per_token: timing / fed,
            read_inside: inside,
            read_whole: whole,
            macs_per_kilo_instruction: (macs_per_token * 1000)
                .checked_div(kernel_per_token)
                .unwrap_or(0),
        }
    }

    /// Parses the rest of a `roofline:` line.
    pub fn parse(rest: &str) -> Option<Roofline> {
        let f = Fields(rest);
        let (inside, whole) = f.get("read_instructions")?.split_once('/')?;
        let (units, milli) = f.get("macs_per_kernel_instruction")?.split_once('.')?;
        if milli.len() != 3 {
            return None;
        }
        Some(Roofline {
            macs_per_token: f.number("macs_per_token")?,
            measured_macs_per_token: f.number("measured_macs_per_token")?,
            products_per_token: f.number("products_per_token")?,
            kernel_instructions_per_token: f.number("kernel_instructions_per_token")?,
            other_instructions_per_token: f.number("other_instructions_per_token")?,
            timing_instructions_per_token: f.number("timing_instructions_per_token")?,
            read_inside: inside.parse().ok()?,
            read_whole: whole.parse().ok()?,
            macs_per_kilo_instruction: units.parse::<u64>().ok()? * 1000
                + milli.parse::<u64>().ok()?,
        })
    }
}

impl fmt::Display for Roofline {
    /// The whole line, prefix included.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{ROOFLINE}macs_per_token={} measured_macs_per_token={} products_per_token={} kernel_instructions_per_token={} other_instructions_per_token={} timing_instructions_per_token={} read_instructions={}/{} macs_per_kernel_instruction={}.{:03}",
            self.macs_per_token,
            self.measured_macs_per_token,
            self.products_per_token,
            self.kernel_instructions_per_token,
            self.other_instructions_per_token,
            self.timing_instructions_per_token,
            self.read_inside,
            self.read_whole,
            self.macs_per_kilo_instruction / 1000,
            self.macs_per_kilo_instruction % 1000
        )
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::report::last_value;
    use std::format;

    /// 10 tokens of 3 products each (30 in all, 1,000 MACs per token) in
    /// 100,000 instructions; the products' spans held 31,500, of which 15
    /// per product were the reads'; timing cost 40 per product in all.
    #[test]
    fn counts_make_the_line_and_it_reads_back() {
        let r = Roofline::from_counts(1000, 10, 100_000, 30, 10_000, 31_500, 15, 40);
        assert_eq!(r.kernel_instructions_per_token, 3_105);
        assert_eq!(r.timing_instructions_per_token, 120);
        assert_eq!(r.other_instructions_per_token, 6_775);
        assert_eq!(
            r.kernel_instructions_per_token
                + r.other_instructions_per_token
                + r.timing_instructions_per_token,
            10_000
        );
        assert_eq!(r.macs_per_kilo_instruction, 322);
        let text = format!("text\n{r}\n");
        assert!(
            text.contains(" read_instructions=15/40 macs_per_kernel_instruction=0.322\n"),
            "{text}"
        );
        assert_eq!(
            Roofline::parse(last_value(&text, ROOFLINE).unwrap()),
            Some(r)
        );
        assert_eq!(Roofline::parse("macs_per_token=1"), None);
    }

    /// No kernel instructions (no clock): a rate of 0, not a division by zero.
    #[test]
    fn no_kernel_instructions_no_rate() {
        let r = Roofline::from_counts(1000, 0, 5, 0, 0, 0, 0, 0);
        assert_eq!(r.macs_per_kilo_instruction, 0);
        assert_eq!(r.other_instructions_per_token, 5);
    }
}
