//! `ferrite verify`: what a firmware with these trusted keys would decide.

use std::path::PathBuf;

use anyhow::Result;
use ferrite::signature::TrustPolicy;
use ferrite_tools::sign;

use super::args::ImageArg;

/// Check a signed image as firmware that trusts these public keys and
/// accepts this security counter and above would (`Model::load_signed`):
/// exits non-zero with the refusal otherwise.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    image: ImageArg,
    /// A trusted public key (64 hex digits or PEM); repeat for several.
    #[arg(long = "trust", value_name = "FILE", required = true)]
    trust: Vec<PathBuf>,
    /// The lowest security counter accepted.
    #[arg(long, value_name = "N", default_value_t = 0)]
    min_counter: u32,
}

/// Prints `verified: key <id> security_counter <n>`.
pub fn run(args: Args) -> Result<()> {
    let image = args.image.read()?;
    let keys = args
        .trust
        .iter()
        .map(|p| sign::read_public_key(p))
        .collect::<Result<Vec<_>>>()?;
    let policy = TrustPolicy {
        keys: &keys,
        min_counter: args.min_counter,
    };
    let v = ferrite::signature::verify(image.bytes(), &policy).map_err(anyhow::Error::msg)?;
    ferrite::Model::load_signed(image.bytes(), &policy).map_err(anyhow::Error::msg)?;
    println!(
        "verified: key {} security_counter {}",
        v.key_id, v.security_counter
    );
    Ok(())
}
