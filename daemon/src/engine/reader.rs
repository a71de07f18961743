//! The reader: the kernel's socket records read in full, when and how
//! often (the schedule), the watched sockets' samples taken in between,
//! and who watches. One lock, held by a read and by the bookkeeping of
//! the watchers, never by a view (views.rs) nor a scrape (scrape.rs).

use super::loaded::Loaded;
use super::views::Views;
use crate::authority::Viewer;
use crate::clock::Clock;
use crate::error::{Chain, Error};
use crate::probes::SocketReads;
use crate::tracker::Tracker;
use bloatd_model::Series;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How long a dashboard counts as looking after its last snapshot, and an
/// API series request keeps its socket watched.
const VIEWER_TTL: Duration = Duration::from_secs(10);
const SERIES_TTL: Duration = Duration::from_secs(60);
/// The watch list's shares of the probes' `watch` map (256 entries):
/// sockets watched for API series requests, and dashboards (one detail
/// socket each). Neither can take the other's share, so no loop of series
/// requests pushes a dashboard's detail out; with the most queued while
/// someone looks, 64 + 128 + 32 = 224.
const SERIES_WATCH_MAX: usize = 64;
const VIEWERS_MAX: usize = 128;
/// While someone looks, the sockets with the longest queues have their
/// series kept, so opening one shows its last minute at once.
const WATCH_MOST_QUEUED: usize = 32;
const WATCH_EVERY: Duration = Duration::from_secs(1);
const HOUSEKEEPING_EVERY: Duration = Duration::from_secs(10);
/// Watching costs in proportion to what it shows: dashboards and series
/// share one full read for at least a sampling interval, and for as long as
/// it took (reading and making the rows) times this factor, so whatever
/// the number of sockets the reads for watchers take at most about 1% of a
/// core. The rows a dashboard draws are as old as that read (about a second
/// with 10,000 busy sockets here), never older than `watch_max_age_ms`
/// (5 s): past that a list stops looking live, so with 100,000 sockets
/// watching costs more than 1% rather than showing rows half a minute old. The detail
/// socket's series and the most queued sockets' come from the probes at
/// every interval.
const WATCH_READ_SHARE: u32 = 100;
/// API clients share a read for a sampling interval and for this many times
/// what it cost (reading, and making the rows and views from it), up to
/// API_READ_MAX_AGE: one client asking in a loop makes reads take at most
/// about a tenth of the core, however many sockets there are (a read of
/// 100,000 takes 0.3-0.7 s here), and each answer is at most that old.
/// With the answers' pace (stream::FLIGHT_PACE, 6) such a loop measured
/// 23% of a core at 100,000 sockets; with 6 and a pace of 5 it measured
/// 26-30%, once over the 30% test_security holds it to.
const API_READ_SHARE: u32 = 9;
const API_READ_MAX_AGE: Duration = Duration::from_secs(5);

/// Who asks for a read, and so how long the last one is shared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asker {
    /// Dashboards and series (WATCH_READ_SHARE).
    Watcher,
    /// API requests for sockets and their views (API_READ_SHARE).
    Api,
}

impl Asker {
    /// Whether this asker needs a new read, the last one being `age` old
    /// and having cost `cost`: not within a sampling interval, nor within
    /// its share times the cost, up to its bound (`watch_max_age` for
    /// watchers).
    fn read_due(
        self,
        age: Duration,
        cost: Duration,
        interval: Duration,
        watch_max_age: Duration,
    ) -> bool {
        let (share, max_age) = match self {
            Asker::Watcher => (WATCH_READ_SHARE, watch_max_age),
            Asker::Api => (API_READ_SHARE, API_READ_MAX_AGE),
        };
        due(age, cost, interval, share, max_age)
    }
}

/// Whether a read is due, the last being `age` old and having cost `cost`,
/// for one who shares a read for `share` times its cost, at least
/// `interval` and at most `max_age` (the askers here, the flight
/// recorder's schedule).
pub fn due(
    age: Duration,
    cost: Duration,
    interval: Duration,
    share: u32,
    max_age: Duration,
) -> bool {
    age >= interval.max((cost * share).min(max_age))
}

pub struct Reader {
    loaded: Arc<Loaded>,
    state: Mutex<State>,
}

struct State {
    sockets: SocketReads,
    tracker: Tracker,
    /// When the last full read started and what reading took.
    last_read: Option<(Instant, Duration)>,
    /// Full reads made so far.
    reads: u64,
    /// The views of the last read.
    views: Arc<Views>,
    watch: Watch,
    last_watch: Instant,
    last_housekeeping: Instant,
}

/// Who watches which sockets.
#[derive(Default)]
struct Watch {
    /// Sockets watched for API series requests, until when.
    series: HashMap<u64, Instant>,
    /// Each dashboard's detail socket, until when.
    viewers: HashMap<Viewer, (u64, Instant)>,
    /// A dashboard asked for a snapshot until this long ago.
    viewer_until: Option<Instant>,
}

impl Reader {
    /// The reader of `sockets`, with a first read made.
    pub fn new(loaded: Arc<Loaded>, sockets: SocketReads, tracker: Tracker) -> Reader {
        let views = Arc::new(Views::new(
            0,
            tracker.reading(),
            prefixes(&loaded),
            loaded.classifier.clone(),
        ));
        let reader = Reader {
            state: Mutex::new(State {
                sockets,
                tracker,
                last_read: None,
                reads: 0,
                views,
                watch: Watch::default(),
                last_watch: Instant::now(),
                last_housekeeping: Instant::now(),
            }),
            loaded,
        };
        reader.read(&mut reader.lock());
        reader
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Read every record of the kernel, refreshed from its socket now, into
    /// the tracker, with the state of bloatd's congestion controls. The
    /// read is made in the last one's memory when no answer still holds
    /// it, so a read that fails leaves the tracker empty until the next.
    fn read(&self, st: &mut State) {
        let started = Instant::now();
        let spare = st.tracker.take_records();
        match st.sockets.read_all(spare) {
            Ok(recs) => {
                let states = {
                    let cc = self.loaded.cc();
                    if cc.is_empty() {
                        HashMap::new()
                    } else {
                        cc.states()
                    }
                };
                st.tracker.refresh(recs, states);
            }
            Err(e) => tracing::warn!("{}", Chain(&e)),
        }
        st.reads += 1;
        st.last_read = Some((started, started.elapsed()));
        st.views = Arc::new(Views::new(
            st.reads,
            st.tracker.reading(),
            prefixes(&self.loaded),
            self.loaded.classifier.clone(),
        ));
    }

    /// Read again if `asker`'s schedule says the last read is too old.
    fn read_if_due(&self, st: &mut State, asker: Asker) {
        let cfg = &self.loaded.cfg;
        let (interval, max_age) = (cfg.interval(), Duration::from_millis(cfg.watch_max_age_ms));
        let views_cost = st.views.cost();
        if st.last_read.is_none_or(|(t, cost)| {
            asker.read_due(t.elapsed(), cost + views_cost, interval, max_age)
        }) {
            self.read(st);
        }
    }

    /// The views of the last read, or of a new one if `due` says so, given
    /// the last read's age and its cost (reading and its views): the
    /// flight recorder's schedule (recorder/mod.rs).
    pub fn views_if(&self, due: impl FnOnce(Duration, Duration) -> bool) -> Arc<Views> {
        let mut st = self.lock();
        let (age, cost) = st
            .last_read
            .map_or((Duration::MAX, Duration::ZERO), |(t, c)| (t.elapsed(), c));
        if due(age, cost + st.views.cost()) {
            self.read(&mut st);
        }
        st.views.clone()
    }

    /// The views of a read recent enough for `asker`: one full read serves
    /// every request until then.
    pub fn views(&self, asker: Asker) -> Arc<Views> {
        let mut st = self.lock();
        self.read_if_due(&mut st, asker);
        st.views.clone()
    }

    /// A dashboard looks (`fresh`: at sockets at most an interval old, the
    /// read `/v1/sockets` shares): the views of the read, and the samples
    /// of its detail socket `series` newer than `since_ms`, watched from
    /// now on. Only a socket the daemon knows is watched: a cookie made up
    /// would hold a place in the kernel's watch map for nothing.
    pub fn look(
        &self,
        viewer: Viewer,
        fresh: bool,
        series: Option<u64>,
        since_ms: u64,
    ) -> (Arc<Views>, Option<Series>) {
        let mut st = self.lock();
        let now = Instant::now();
        let first_look = st.watch.viewer_until.is_none_or(|t| t <= now);
        st.watch.viewer_until = Some(now + VIEWER_TTL);
        self.read_if_due(&mut st, if fresh { Asker::Api } else { Asker::Watcher });
        if let Some(c) = series.filter(|&c| st.tracker.knows(c)) {
            watch_for(&mut st, viewer, c);
        } else if first_look {
            update_watch(&mut st);
        }
        let samples = series.and_then(|c| st.tracker.series(c, since_ms));
        (st.views.clone(), samples)
    }

    /// One socket's samples newer than `since_ms` (API), and keep it watched
    /// for a minute: the first request starts its series. Err: no such
    /// socket (nothing is watched for it), or the API's share of the watch
    /// list is full.
    pub fn series(&self, cookie: u64, since_ms: u64) -> Result<Series, Error> {
        let mut st = self.lock();
        self.read_if_due(&mut st, Asker::Watcher);
        let series = st
            .tracker
            .series(cookie, since_ms)
            .ok_or(Error::UnknownSeries(cookie))?;
        watch_series(&mut st, cookie)?;
        Ok(series)
    }

    /// Called every sampling interval: take in the watched sockets' samples;
    /// now and then, update what is watched and tidy up. Nothing here grows
    /// with the number of sockets unless someone looks. True when it is
    /// time for the rest of the housekeeping (the services' fold).
    pub fn tick(&self) -> bool {
        let clock = Clock::now();
        let mut st = self.lock();
        let st = &mut *st;
        let tracker = &mut st.tracker;
        st.sockets.drain(|x| tracker.apply(x, &clock));
        if st.last_watch.elapsed() >= WATCH_EVERY {
            update_watch(st);
            st.last_watch = Instant::now();
        }
        if st.last_housekeeping.elapsed() < HOUSEKEEPING_EVERY {
            return false;
        }
        let watched = watched(st);
        st.tracker
            .sweep(&clock, self.loaded.cfg.series_seconds, &|c| {
                watched.contains(&c)
            });
        st.last_housekeeping = Instant::now();
        true
    }
}

/// The prefix lengths paths are grouped by (`bloatd paths --prefix`).
fn prefixes(loaded: &Loaded) -> (u8, u8) {
    (loaded.cfg.floor_prefix_v4, loaded.cfg.floor_prefix_v6)
}

/// What the probes should stream now: sockets watched on request, and
/// while a dashboard looks, the most queued ones.
fn watched(st: &State) -> HashSet<u64> {
    let now = Instant::now();
    let w = &st.watch;
    let mut set: HashSet<u64> = w
        .series
        .iter()
        .filter(|(_, until)| **until > now)
        .map(|(c, _)| *c)
        .chain(
            w.viewers
                .values()
                .filter(|(_, until)| *until > now)
                .map(|(c, _)| *c),
        )
        .collect();
    if w.viewer_until.is_some_and(|t| t > now) {
        set.extend(st.tracker.most_queued(WATCH_MOST_QUEUED));
    }
    set
}

fn update_watch(st: &mut State) {
    let now = Instant::now();
    st.watch.series.retain(|_, until| *until > now);
    st.watch.viewers.retain(|_, (_, until)| *until > now);
    let set = watched(st);
    if let Err(e) = st.sockets.set_watched(&set) {
        tracing::warn!("{}", Chain(&e));
    }
}

/// Keep the series of `cookie` for an API client for a minute from
/// now. Err when the API's share of the watch list is taken by other
/// sockets (each for a minute after its last request).
fn watch_series(st: &mut State, cookie: u64) -> Result<(), Error> {
    let now = Instant::now();
    let new = !st.watch.series.contains_key(&cookie);
    if new {
        st.watch.series.retain(|_, until| *until > now);
        if st.watch.series.len() >= SERIES_WATCH_MAX {
            return Err(Error::SeriesFull(SERIES_WATCH_MAX));
        }
    }
    st.watch.series.insert(cookie, now + SERIES_TTL);
    if new {
        update_watch(st);
    }
    Ok(())
}

/// Keep `viewer`'s detail socket `cookie` watched while it looks; a
/// dashboard has one, so a new one replaces its last. Past VIEWERS_MAX
/// dashboards the one that asked least recently goes.
fn watch_for(st: &mut State, viewer: Viewer, cookie: u64) {
    let now = Instant::now();
    let viewers = &mut st.watch.viewers;
    let changed = viewers.get(&viewer).is_none_or(|(c, _)| *c != cookie);
    if !viewers.contains_key(&viewer) && viewers.len() >= VIEWERS_MAX {
        let oldest = viewers
            .iter()
            .min_by_key(|(_, (_, until))| *until)
            .map(|(v, _)| *v);
        if let Some(v) = oldest {
            viewers.remove(&v);
        }
    }
    viewers.insert(viewer, (cookie, now + VIEWER_TTL));
    if changed {
        update_watch(st);
    }
}

#[cfg(test)]
mod tests {
    use super::Asker;
    use std::time::Duration;

    #[test]
    fn watchers_share_a_read_in_proportion_to_its_cost_up_to_a_bound() {
        let ms = Duration::from_millis;
        let interval = ms(100);
        let bound = ms(crate::settings::Config::default().watch_max_age_ms);
        let due = |age, cost, interval| Asker::Watcher.read_due(age, cost, interval, bound);
        // A cheap read: every interval, as before.
        assert!(!due(ms(99), ms(0), interval));
        assert!(due(ms(100), ms(0), interval));
        // 20 ms (10,000 busy sockets): shared for 2 s.
        assert!(!due(ms(1_999), ms(20), interval));
        assert!(due(ms(2_000), ms(20), interval));
        // 300 ms (100,000 sockets): not 30 s, the bound.
        assert!(due(ms(5_000), ms(300), interval));
        // An interval longer than the bound still holds.
        assert!(!due(ms(5_000), ms(300), ms(10_000)));
        // A bound set lower (`watch_max_age_ms`) holds whatever the cost.
        assert!(!Asker::Watcher.read_due(ms(999), ms(300), interval, ms(1_000)));
        assert!(Asker::Watcher.read_due(ms(1_000), ms(300), interval, ms(1_000)));
        // API requests share a read nine times its cost.
        assert!(!Asker::Api.read_due(ms(179), ms(20), interval, bound));
        assert!(Asker::Api.read_due(ms(180), ms(20), interval, bound));
    }
}
