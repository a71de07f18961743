//! Notices: a socket starting to bloat is announced in the header for a few
//! seconds. The state keeps what happened (typed); the view words it.

use bloatd_model::sort::SortKey;
use bloatd_model::Socket;
use std::collections::{HashMap, HashSet, VecDeque};

/// How long a notice stays on screen.
pub const NOTICE_TTL_MS: u64 = 5_000;
/// A socket that leaves and re-enters bloat within this time is not announced
/// again: a queue hovering around the threshold would otherwise flood the
/// notice line.
pub const NOTICE_COOLDOWN_MS: u64 = 30_000;
/// Notices kept at once; a snapshot in which more sockets start bloating adds
/// one summary notice for the rest.
pub const MAX_NOTICES: usize = 4;

/// Something the header announces, and when it happened.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    pub event: Event,
    /// When the notice was raised (the app's clock), for expiry.
    pub at_ms: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A socket's queueing delay reached the bloat threshold: the socket as
    /// it was then.
    BloatStarted(Box<Socket>),
    /// More sockets started bloating in one snapshot than notices are kept:
    /// how many more.
    MoreBloatStarted(usize),
}

impl Notice {
    /// The socket the notice is about, if one.
    pub fn cookie(&self) -> Option<u64> {
        match &self.event {
            Event::BloatStarted(s) => Some(s.cookie),
            Event::MoreBloatStarted(_) => None,
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Notices {
    /// Sockets bloated in the last snapshot: bloat "starts" on a socket
    /// that is bloated now and was not then.
    bloated: HashSet<u64>,
    /// When each socket was last announced (for the cooldown).
    last_notice_ms: HashMap<u64, u64>,
    /// Newest first.
    active: VecDeque<Notice>,
}

impl Notices {
    /// Active notices, newest first.
    pub(super) fn active(&self) -> &VecDeque<Notice> {
        &self.active
    }

    /// Announces the sockets of a new snapshot that started bloating: the
    /// worst first; the rest of a burst becomes one notice.
    pub(super) fn scan(&mut self, sockets: &[Socket], threshold_us: u32, now_ms: u64) {
        let mut bloated_now = HashSet::with_capacity(self.bloated.len());
        let mut started: Vec<&Socket> = Vec::new();
        for s in sockets.iter().filter(|s| s.is_bloated(threshold_us)) {
            bloated_now.insert(s.cookie);
            let cooling = self
                .last_notice_ms
                .get(&s.cookie)
                .is_some_and(|at| now_ms.saturating_sub(*at) < NOTICE_COOLDOWN_MS);
            if !self.bloated.contains(&s.cookie) && !cooling {
                started.push(s);
            }
        }
        started.sort_unstable_by(|a, b| SortKey::QueueDelay.compare(a, b));
        let mut fresh: Vec<Notice> = started
            .iter()
            .take(MAX_NOTICES)
            .map(|s| Notice {
                event: Event::BloatStarted(Box::new((*s).clone())),
                at_ms: now_ms,
            })
            .collect();
        if started.len() > MAX_NOTICES {
            fresh.push(Notice {
                event: Event::MoreBloatStarted(started.len() - MAX_NOTICES),
                at_ms: now_ms,
            });
        }
        for s in &started {
            self.last_notice_ms.insert(s.cookie, now_ms);
        }
        for notice in fresh.into_iter().rev() {
            self.active.push_front(notice);
        }
        self.active.truncate(MAX_NOTICES + 1);
        self.bloated = bloated_now;
    }

    /// Expires notices and notice cooldowns.
    pub(super) fn expire(&mut self, now_ms: u64) {
        self.active
            .retain(|n| now_ms.saturating_sub(n.at_ms) < NOTICE_TTL_MS);
        self.last_notice_ms
            .retain(|_, at| now_ms.saturating_sub(*at) < NOTICE_COOLDOWN_MS);
    }
}
