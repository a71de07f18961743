//! The views of one read: every socket as the dashboard draws them, the
//! paths (by peer and by prefix), the services, and every socket in all
//! states for the policy's list. Each is made at most once per read, by
//! the first request that needs it, outside the reader's lock (a slow view
//! holds neither the next read nor anything a scrape needs); the requests
//! that follow until the next read share it.

use crate::clock::Clock;
use crate::tracker::{Reading, Rows};
use bloatd_model::{NetPath, ServiceView, Socket};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

pub struct Views {
    /// Which read (the reader's count) these are the views of.
    pub read: u64,
    /// When it was read (Unix ms, as it ended).
    pub taken_ms: u64,
    reading: Reading,
    /// Classes for the paths by peer.
    classifier: Arc<super::classify::Classifier>,
    /// The prefix lengths paths are grouped by with `prefix`.
    prefixes: (u8, u8),
    rows: OnceLock<Arc<Vec<Socket>>>,
    paths: [OnceLock<Arc<Vec<NetPath>>>; 2],
    services: OnceLock<Arc<Vec<ServiceView>>>,
    all: OnceLock<Arc<Vec<Socket>>>,
    /// What making the views took, added to the read's cost (the reader's
    /// schedule shares a read for longer when its views cost more).
    cost_us: std::sync::atomic::AtomicU64,
}

impl Views {
    pub fn new(
        read: u64,
        reading: Reading,
        prefixes: (u8, u8),
        classifier: Arc<super::classify::Classifier>,
    ) -> Views {
        Views {
            read,
            taken_ms: Clock::now().unix_ms,
            reading,
            classifier,
            prefixes,
            rows: OnceLock::new(),
            paths: [OnceLock::new(), OnceLock::new()],
            services: OnceLock::new(),
            all: OnceLock::new(),
            cost_us: Default::default(),
        }
    }

    /// `cell`'s view, made by `make` if no one has yet; its time counted.
    fn once<T>(&self, cell: &OnceLock<Arc<T>>, make: impl FnOnce() -> T) -> Arc<T> {
        cell.get_or_init(|| {
            let t0 = Instant::now();
            let v = Arc::new(make());
            self.cost_us.fetch_add(
                t0.elapsed().as_micros() as u64,
                std::sync::atomic::Ordering::Relaxed,
            );
            v
        })
        .clone()
    }

    /// What making the views has cost so far.
    pub fn cost(&self) -> Duration {
        Duration::from_micros(self.cost_us.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Sockets of the read to be made as they are sent (`all`: every
    /// state), in the order of this moment.
    pub fn rows(&self, all: bool) -> Rows {
        self.reading.rows(&Clock::now(), all)
    }

    /// The read's established and busy sockets as `Socket`s.
    pub fn sockets(&self) -> Arc<Vec<Socket>> {
        self.once(&self.rows, || self.reading.sockets(&Clock::now(), false))
    }

    /// Sockets grouped by path, worst queue first (`prefix`: by the
    /// configured prefixes instead of by peer), by peer with the kind of
    /// queue each waits in.
    pub fn paths(&self, prefix: bool) -> Arc<Vec<NetPath>> {
        let by = prefix.then_some(self.prefixes);
        self.once(&self.paths[prefix as usize], || {
            let mut paths = crate::paths::paths_of(&self.sockets(), by);
            if !prefix {
                self.classifier.annotate(&mut paths);
            }
            paths
        })
    }

    /// Sockets grouped by service, longest wait first.
    pub fn services(&self) -> Arc<Vec<ServiceView>> {
        self.once(&self.services, || {
            crate::service::services_of(&self.sockets())
        })
    }

    /// Every socket in every state (the policy's list).
    pub fn all(&self) -> Arc<Vec<Socket>> {
        self.once(&self.all, || self.reading.sockets(&Clock::now(), true))
    }
}
