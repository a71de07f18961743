//! Per-socket history: the last minute of samples the detail charts draw.

use crate::model::Sample;
use std::collections::VecDeque;

/// How far back the detail charts reach.
pub const HISTORY_WINDOW_MS: u64 = 60_000;
/// Daemon sampling intervals below this are treated as this when sizing
/// ring buffers, which bounds a history at 6000 samples.
const MIN_SAMPLE_INTERVAL_MS: u64 = 10;

/// The last minute of one socket's samples, a ring buffer sized from the
/// daemon's sampling interval.
#[derive(Clone, Debug, Default)]
pub struct History {
    samples: VecDeque<Sample>,
    /// When the history was last asked for or fed (for eviction), app ticks.
    pub(super) last_used: u64,
}

impl History {
    /// Samples, oldest first.
    pub fn samples(&self) -> &VecDeque<Sample> {
        &self.samples
    }

    /// Time of the newest sample: the client asks the daemon for samples
    /// after it.
    pub fn last_t_ms(&self) -> Option<u64> {
        self.samples.back().map(|s| s.t_ms)
    }

    /// Appends samples newer than the newest one kept (older ones are
    /// repeats of what the daemon already sent), then drops what fell out of
    /// the window or exceeds the ring's capacity.
    pub(super) fn extend(&mut self, samples: Vec<Sample>, interval_ms: u32) {
        for sample in samples {
            if self.last_t_ms().is_none_or(|t| sample.t_ms > t) {
                self.samples.push_back(sample);
            }
        }
        let capacity = Self::capacity(interval_ms);
        while self.samples.len() > capacity {
            self.samples.pop_front();
        }
        if let Some(newest) = self.last_t_ms() {
            while self
                .samples
                .front()
                .is_some_and(|s| s.t_ms + HISTORY_WINDOW_MS < newest)
            {
                self.samples.pop_front();
            }
        }
    }

    /// Samples in one window at the daemon's interval, plus the one at the
    /// window's start.
    pub(super) fn capacity(interval_ms: u32) -> usize {
        let interval_ms = (interval_ms as u64).max(MIN_SAMPLE_INTERVAL_MS);
        (HISTORY_WINDOW_MS / interval_ms) as usize + 1
    }
}
