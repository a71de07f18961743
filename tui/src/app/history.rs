//! Per-socket history: the last minute of samples the detail charts draw,
//! kept for the selected socket and a few recently selected ones.

use bloatd_model::{Sample, Series, Socket};
use std::collections::{HashMap, HashSet, VecDeque};

/// How far back the detail charts reach.
pub const HISTORY_WINDOW_MS: u64 = 60_000;
/// Sockets whose history is kept (the selected one and recently selected ones,
/// so that going back to a socket does not start its charts from scratch).
pub(super) const MAX_HISTORIES: usize = 16;
/// Daemon sampling intervals below this are treated as this when sizing
/// ring buffers, which bounds a history at 6000 samples.
const MIN_SAMPLE_INTERVAL_MS: u64 = 10;

/// The last minute of one socket's samples, a ring buffer sized from the
/// daemon's sampling interval.
#[derive(Clone, Debug, Default)]
pub struct History {
    samples: VecDeque<Sample>,
    /// When the history was last fed (for eviction), in snapshots.
    last_used: u64,
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
    fn extend(&mut self, samples: Vec<Sample>, interval_ms: u32) {
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
    fn capacity(interval_ms: u32) -> usize {
        let interval_ms = (interval_ms as u64).max(MIN_SAMPLE_INTERVAL_MS);
        (HISTORY_WINDOW_MS / interval_ms) as usize + 1
    }
}

/// The histories kept, by socket cookie.
#[derive(Debug, Default)]
pub(super) struct Histories {
    by_cookie: HashMap<u64, History>,
    /// Snapshots taken in so far: the clock of `History::last_used`.
    snapshots: u64,
}

impl Histories {
    pub(super) fn get(&self, cookie: u64) -> Option<&History> {
        self.by_cookie.get(&cookie)
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.by_cookie.len()
    }

    /// Takes in a snapshot's series (samples of the sockets the dashboard
    /// asked for), taken at the daemon's `interval_ms`.
    pub(super) fn feed(&mut self, series: Vec<Series>, interval_ms: u32) {
        self.snapshots += 1;
        for s in series {
            let history = self.by_cookie.entry(s.cookie).or_default();
            history.last_used = self.snapshots;
            history.extend(s.samples, interval_ms);
        }
    }

    /// Keeps histories of live sockets (and of the pinned detail socket), at
    /// most MAX_HISTORIES, evicting the least recently used.
    pub(super) fn prune(&mut self, sockets: &[Socket], pinned: Option<u64>) {
        let alive: HashSet<u64> = sockets
            .iter()
            .map(|s| s.cookie)
            .filter(|c| self.by_cookie.contains_key(c))
            .chain(pinned)
            .collect();
        self.by_cookie.retain(|cookie, _| alive.contains(cookie));
        while self.by_cookie.len() > MAX_HISTORIES {
            let oldest = self
                .by_cookie
                .iter()
                .filter(|(c, _)| Some(**c) != pinned)
                .min_by_key(|(_, h)| h.last_used)
                .map(|(c, _)| *c);
            match oldest {
                Some(c) => self.by_cookie.remove(&c),
                None => break,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::sample;
    use super::*;

    #[test]
    fn ring_capacity_follows_the_daemon_interval() {
        assert_eq!(History::capacity(250), 241);
        assert_eq!(History::capacity(1000), 61);
        assert_eq!(History::capacity(0), 6001);
        let mut h = History::default();
        // Samples every 100 ms but the daemon says 1 s: the ring holds 61.
        h.extend((0..200).map(|i| sample(i * 100)).collect(), 1000);
        assert_eq!(h.samples().len(), 61);
        assert_eq!(h.last_t_ms(), Some(19_900));
    }
}
