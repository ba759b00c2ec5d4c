//! The firmware's exit statuses (QEMU exits with them through semihosting),
//! which xtask tells apart.

/// Ran to the end.
pub const OK: i32 = 0;
/// A self-check found a wrong result (the `kernels` and `bench` firmware).
pub const CHECK_FAILED: i32 = 1;
/// The runtime returned an error (bad image, buffer too small, ...).
pub const RUNTIME_ERROR: i32 = 2;
/// A CPU fault (HardFault, illegal instruction, bus error, ...).
pub const FAULT: i32 = 3;
/// A panic: a bug in the firmware or the runtime.
pub const PANIC: i32 = 101;
/// What `timeout` exits with when the firmware hung (not the firmware's own).
pub const TIMED_OUT: i32 = 124;

/// What an exit status means, for error messages; `None` for a status the
/// firmware does not use.
pub fn describe(status: i32) -> Option<&'static str> {
    Some(match status {
        OK => "ok",
        CHECK_FAILED => "a self-check failed",
        RUNTIME_ERROR => "runtime error",
        FAULT => "CPU fault",
        PANIC => "panic",
        TIMED_OUT => "timed out (hung?)",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_has_a_distinct_description() {
        let all = [OK, CHECK_FAILED, RUNTIME_ERROR, FAULT, PANIC, TIMED_OUT];
        for (i, a) in all.iter().enumerate() {
            let d = describe(*a).unwrap();
            assert!(all[..i].iter().all(|b| describe(*b) != Some(d)));
        }
        assert_eq!(describe(7), None);
    }
}
