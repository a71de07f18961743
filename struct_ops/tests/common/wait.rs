//! Waiting for a condition, the tests' one way to: std only, so that the
//! TUI's terminal test (tui/tests/terminal.rs, no root, no BPF) includes
//! this file as the kernel tests do.

use std::time::{Duration, Instant};

/// Poll `cond` every 10 ms until it holds or `secs` pass; whether it held.
pub fn wait_for(secs: f64, cond: impl FnMut() -> bool) -> bool {
    wait_for_every(secs, Duration::from_millis(10), cond)
}

/// The same, polling every `every` (for a condition that costs a process).
pub fn wait_for_every(secs: f64, every: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(every);
    }
}
