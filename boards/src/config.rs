//! Build-time configuration: target, prompt, N, sampler, eval parameters
//! (written by `build.rs` from xtask's environment).

include!(concat!(env!("OUT_DIR"), "/build_config.rs"));
