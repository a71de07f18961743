//! The bottleneck classifier in the engine (bottleneck.rs has the rules):
//! on the tick, the sockets of a read it has not seen (reads are made for
//! those who ask and for the flight recorder; the classifier makes none of
//! its own), at most once a second and no more often than keeps it to
//! 1/`SHARE` of a core (`reader::due`, the readers' rule), but at least
//! every `MAX_AGE` when reads come; its classes on the paths view
//! (by peer) and its counts in /metrics. Its own lock, held for one
//! observation or one lookup: a scrape waits on no read.

use super::reader::due;
use super::views::Views;
use crate::bottleneck::Bottlenecks;
use crate::clock::Clock;
use bloatd_model::{BottleneckClass, NetPath};
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// At most one observation this often.
const EVERY: Duration = Duration::from_secs(1);
/// An observation waits for this many times what the last one cost
/// (0.05% of a core: issue 33's bound at 10,000 busy sockets)...
const SHARE: u32 = 2000;
/// ...but no longer than this.
const MAX_AGE: Duration = Duration::from_secs(5);

pub struct Classifier {
    state: Mutex<State>,
}

struct State {
    bottlenecks: Bottlenecks,
    /// The read last observed, when, and what observing it took.
    read: u64,
    at: Option<(Instant, Duration)>,
}

impl Classifier {
    pub fn new(aqm_queue_ms: u64) -> Classifier {
        Classifier {
            state: Mutex::new(State {
                bottlenecks: Bottlenecks::new(aqm_queue_ms),
                read: 0,
                at: None,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Take in `views`' read if it is new and the schedule says so. The
    /// read's rows are made (or shared, as the recorder's) outside the
    /// lock. Each peer's class after it, for the kernel's policy
    /// (`Bottlenecks::summary`), if it took one.
    pub fn take(&self, views: &Views) -> Option<Vec<((u32, IpAddr), BottleneckClass)>> {
        let due_now = |st: &State| {
            views.read > st.read
                && st
                    .at
                    .is_none_or(|(t, cost)| due(t.elapsed(), cost, EVERY, SHARE, MAX_AGE))
        };
        if !due_now(&self.lock()) {
            return None;
        }
        let socks = views.sockets();
        let mut st = self.lock();
        if !due_now(&st) {
            return None;
        }
        let t0 = Instant::now();
        st.bottlenecks.observe(views.taken_ms, &socks);
        let summary = st.bottlenecks.summary(views.taken_ms);
        st.read = views.read;
        st.at = Some((Instant::now(), t0.elapsed()));
        Some(summary.peer_classes)
    }

    /// Each path's class (paths by peer; a prefix's paths are not
    /// classified).
    pub fn annotate(&self, paths: &mut [NetPath]) {
        let now = Clock::now().unix_ms;
        let st = self.lock();
        for p in paths.iter_mut() {
            let full = if p.peer.is_ipv4() { 32 } else { 128 };
            if p.prefix_len >= full {
                p.bottleneck = st.bottlenecks.class_of(p.netns, p.peer, &p.interface, now);
            }
        }
    }

    /// One peer's class and owner (the flight recorder's path episodes
    /// ask).
    pub fn class_of(
        &self,
        netns: u32,
        peer: IpAddr,
        interface: &str,
    ) -> Option<crate::recorder::Verdict> {
        let now = Clock::now().unix_ms;
        self.lock()
            .bottlenecks
            .class_of(netns, peer, interface, now)
            .map(|b| (b.class, b.owner.map(|o| o.class)))
    }

    /// How many paths with traffic lately are of each class
    /// (`BottleneckClass::ALL`'s order), and with a standing queue of
    /// each owner (`OwnerClass::ALL`'s), as of now: each path's verdict
    /// was made when it was last observed, so a scrape looks at each
    /// path's cached verdict (0.1-0.2 ms at 10,000 paths) and judges
    /// again only those whose evidence has aged since.
    pub fn counts(&self) -> ([u64; 5], [u64; 5]) {
        let s = self.lock().bottlenecks.summary(Clock::now().unix_ms);
        (s.classes, s.owners)
    }
}
