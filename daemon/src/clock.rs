//! A point in time on both clocks bloatd speaks: the probes stamp
//! CLOCK_MONOTONIC, the API speaks Unix time.

/// A point in time on both clocks.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    pub mono_ns: u64,
    pub unix_ms: u64,
}

impl Clock {
    pub fn now() -> Clock {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid pointer to a timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        let mono_ns = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Clock { mono_ns, unix_ms }
    }

    /// Unix milliseconds of a CLOCK_MONOTONIC timestamp in the past.
    pub fn unix_ms_of(&self, mono_ns: u64) -> u64 {
        self.unix_ms
            .saturating_sub(self.mono_ns.saturating_sub(mono_ns) / 1_000_000)
    }
}
