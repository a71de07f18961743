//! The bloat flight recorder (issue 32): bufferbloat episodes kept after
//! they drain, with their flows and their one-second series, and one row a
//! minute per active path, in a bounded SQLite journal that survives
//! restarts; `bloatd incidents`, `bloatd incident ID [--export DIR]`,
//! `bloatd history`, the API's `/v1/incidents` and `/v1/history`, the
//! dashboard's history view (H), `bloatd_episodes_total`.
//!
//! Three hops, as everywhere in bloatd: the engine's reads (engine/mod.rs hands
//! each read's sockets to the [`Seam`], at most one a second, never
//! waiting: a full queue drops the read), the [`episodes`] detector on the
//! recorder's own thread (paths and services at or above
//! `bloat_threshold_ms`), the [`journal`] (SQLite, written on the same
//! thread, so a slow or full disk slows nothing but the recorder).
//!
//! What it costs the engine: while nothing is bloated it asks for a read
//! when one is due at a thousandth of a core (the read's and the
//! recorder's own cost x 1000, at least a second, at most a minute apart:
//! the minute rows need one); when the kernel starts counting bloated
//! sockets, one read at once (a second after the last, whatever it cost;
//! at most one such onset in ONSET_MAX_AGE: an episode's onset is seen
//! within the second), a read a second for ONSET_FOLLOW after it while
//! nothing is above yet (the onset read may come before a path's median
//! crosses), then at a two-hundredth (at most ONSET_MAX_AGE apart); while a path or service is above the threshold, at a fiftieth
//! (every second where reads are cheap). Reads made for dashboards and
//! API clients feed it too.
//!
//! A journal it cannot write (full or read-only disk, another bloatd's
//! lock, a state directory refused) does not stop bloatd: the writes wait
//! in memory (MEMORY_WEIGHT points, the oldest dropped beyond), one warning
//! says why, and they are written when the journal can take them again.

#[cfg(test)]
mod bench;
pub mod episodes;
pub mod export;
mod flush;
mod gateway;
pub mod journal;

use crate::error::{Error, Result};
use bloatd_model::api::PolicyCounts;
use bloatd_model::journal::{
    Episode, EpisodeDetail, EpisodeKind, HistoryQuery, IncidentsQuery, MinuteRow,
};
use bloatd_model::{Feature, FeatureState, Socket};
use episodes::{Detector, Write};
use journal::{Bounds, Journal};
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Points and rows held in memory while the journal cannot be written.
const MEMORY_WEIGHT: usize = 500_000;
/// Writes per transaction when held ones go to the journal at last.
const CHUNK_WEIGHT: usize = 20_000;
/// A journal that failed is tried again this long after (feed time).
const RETRY_MS: u64 = 10_000;
/// Reads fed to the recorder at most this often.
pub const FEED_EVERY: Duration = Duration::from_secs(1);
/// A read this much short of FEED_EVERY old counts as a second old
/// (`Seam::read_due`).
const CHECK_SLACK: Duration = Duration::from_millis(100);
/// Shares of a core the reads made for the recorder may take (their cost
/// times this), and how old the last read may grow: quiet; when the kernel
/// counted a bloated socket but no path or service is above the threshold
/// at the last read (a socket's own spike, or an episode's onset); and
/// while one is.
const QUIET_SHARE: u32 = 1000;
const QUIET_MAX_AGE: Duration = Duration::from_secs(60);
const ONSET_SHARE: u32 = 200;
const ONSET_MAX_AGE: Duration = Duration::from_secs(10);
/// After an onset read, a read a second for this long while the kernel
/// counts bloated sockets and nothing is above yet (Onset::at_once).
const ONSET_FOLLOW: Duration = Duration::from_secs(5);
const HOT_SHARE: u32 = 50;
const HOT_MAX_AGE: Duration = Duration::from_secs(5);
/// How long the stop waits for the recorder's last writes.
const STOP_WAIT: Duration = Duration::from_secs(3);

/// DRWA's mode and the policy's counters at a read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PolicySnap {
    pub drwa: String,
    pub counts: PolicyCounts,
}

/// What the engine hands the recorder after a read.
pub struct Feed {
    /// When the read was made (Unix ms).
    pub t_ms: u64,
    pub sockets: Arc<Vec<Socket>>,
    pub policy: Option<PolicySnap>,
    /// A peer's bottleneck class and owner (netns, peer, interface), for
    /// the path episodes.
    pub class_of: Option<ClassOf>,
}

pub use crate::bottleneck::Verdict;

/// The classifier's `Verdict` on a peer (netns, peer, interface).
pub type ClassOf = Arc<dyn Fn(u32, IpAddr, &str) -> Option<Verdict> + Send + Sync>;

enum Msg {
    Feed(Feed),
    Stop,
}

/// The recorder's settings, from the config.
#[derive(Clone, Debug)]
pub struct Settings {
    pub state_dir: PathBuf,
    pub bounds: Bounds,
    pub detector: episodes::Settings,
}

impl Settings {
    pub fn of(cfg: &crate::settings::Config) -> Settings {
        Settings {
            state_dir: cfg.state_dir.clone(),
            bounds: Bounds {
                max_bytes: cfg.journal_max_mb.saturating_mul(1 << 20),
                max_age_ms: (cfg.journal_max_days as u64).saturating_mul(86_400_000),
            },
            detector: episodes::Settings {
                threshold_us: (cfg.bloat_threshold_ms * 1000).min(u32::MAX as u64) as u32,
                prefix: (cfg.floor_prefix_v4 > 0 || cfg.floor_prefix_v6 > 0).then(|| {
                    let full = |p: u8, max: u8| if p == 0 { max } else { p };
                    (
                        full(cfg.floor_prefix_v4, 32),
                        full(cfg.floor_prefix_v6, 128),
                    )
                }),
            },
        }
    }
}

/// Prepare the state directory (created with the API group, set-group-ID
/// so the journal's files take that group): before the capabilities go,
/// since giving a directory a group takes CAP_CHOWN. Err: the line to log;
/// bloatd records in memory then.
pub fn prepare(cfg: &crate::settings::Config) -> Result<()> {
    crate::rundir::RunDir::prepare_kind(
        &cfg.state_dir,
        cfg.api_gid().map(|(_, g)| g),
        &journal::STATE,
    )
    .map(|_| ())
}

/// What the thread publishes for the engine, the API and /metrics.
struct Shared {
    /// The detector and what waits for the journal.
    rec: Mutex<Recording>,
    /// Open episodes and the journal's state, for snapshots and status:
    /// cheap to read (an Arc) whatever the thread does.
    live: Mutex<Live>,
    hot: AtomicBool,
    /// The recorder's own CPU time for the last read it took, ns.
    cost_ns: AtomicU64,
    opened: [AtomicU64; 2],
    open: [AtomicU64; 2],
    feeds_dropped: AtomicU64,
    state_dir: PathBuf,
}

struct Live {
    open: Arc<Vec<Episode>>,
    feature: Feature,
}

struct Recording {
    detector: Detector,
    /// Written to the detector's output but not to the journal yet.
    pending: VecDeque<Write>,
    weight: usize,
    dropped: u64,
}

impl Recording {
    fn hold(&mut self, w: Vec<Write>) {
        for x in w {
            self.weight += x.weight();
            self.pending.push_back(x);
        }
        // Over the bound: the oldest points and rows go first, the
        // episodes' summaries last.
        while self.weight > MEMORY_WEIGHT {
            let i = self
                .pending
                .iter()
                .position(|w| !matches!(w, Write::Episode(_)))
                .unwrap_or(0);
            let Some(w) = self.pending.remove(i) else {
                break;
            };
            self.weight -= w.weight();
            self.dropped += w.weight() as u64;
        }
    }

    fn take(&mut self, max_weight: usize) -> Vec<Write> {
        let mut out = Vec::new();
        let mut w = 0;
        while let Some(x) = self.pending.front() {
            if !out.is_empty() && w + x.weight() > max_weight {
                break;
            }
            w += x.weight();
            out.push(self.pending.pop_front().expect("front"));
        }
        self.weight -= w;
        out
    }

    fn put_back(&mut self, writes: Vec<Write>) {
        for x in writes.into_iter().rev() {
            self.weight += x.weight();
            self.pending.push_front(x);
        }
    }
}

fn kind_index(k: EpisodeKind) -> usize {
    match k {
        EpisodeKind::Path => 0,
        EpisodeKind::Service => 1,
    }
}

fn feature(state: FeatureState, detail: String) -> Feature {
    Feature {
        name: "journal".into(),
        state,
        detail,
    }
}

/// The recorder: its thread, and what the engine and the API hold of it.
pub struct Recorder {
    shared: Arc<Shared>,
    tx: SyncSender<Msg>,
    done: Receiver<()>,
}

impl Recorder {
    /// Start the recorder's thread (after the capabilities are dropped:
    /// it needs none). `dir_error`: why `prepare` refused the directory.
    pub fn start(settings: Settings, dir_error: Option<Error>) -> std::io::Result<Recorder> {
        let (tx, rx) = std::sync::mpsc::sync_channel(2);
        let (done_tx, done) = std::sync::mpsc::sync_channel(1);
        let shared = Arc::new(Shared {
            rec: Mutex::new(Recording {
                detector: Detector::new(settings.detector.clone(), 1),
                pending: VecDeque::new(),
                weight: 0,
                dropped: 0,
            }),
            live: Mutex::new(Live {
                open: Arc::new(Vec::new()),
                feature: feature(FeatureState::On, "starting".into()),
            }),
            hot: AtomicBool::new(false),
            cost_ns: AtomicU64::new(0),
            opened: [AtomicU64::new(0), AtomicU64::new(0)],
            open: [AtomicU64::new(0), AtomicU64::new(0)],
            feeds_dropped: AtomicU64::new(0),
            state_dir: settings.state_dir.clone(),
        });
        let thread_shared = shared.clone();
        std::thread::Builder::new()
            .name("bloatd-recorder".into())
            .spawn(move || {
                Writer::new(thread_shared, settings, dir_error).run(rx);
                let _ = done_tx.send(());
            })?;
        Ok(Recorder { shared, tx, done })
    }

    /// The engine's side.
    pub fn seam(&self) -> Seam {
        Seam {
            tx: self.tx.clone(),
            shared: self.shared.clone(),
            last_fed: Mutex::new(None),
            last_check: Mutex::new(None),
            onset: Mutex::new(Onset {
                armed: true,
                last: None,
            }),
        }
    }

    /// The API's side.
    pub fn reader(&self) -> Reader {
        Reader {
            shared: self.shared.clone(),
            queries: Arc::new(tokio::sync::Semaphore::new(2)),
        }
    }

    /// At stop: the open episodes written as cut, the journal closed;
    /// waits STOP_WAIT at most (a disk that does not answer is left to
    /// the journal's log, which a crash does not corrupt).
    pub fn stop(self) {
        let deadline = Instant::now() + STOP_WAIT;
        let mut msg = Msg::Stop;
        loop {
            match self.tx.try_send(msg) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return,
                Err(TrySendError::Full(m)) if Instant::now() < deadline => {
                    msg = m;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(TrySendError::Full(_)) => break,
            }
        }
        if self
            .done
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .is_err()
        {
            tracing::warn!(
                "journal: the recorder did not finish writing within {}s at stop; the journal keeps what it committed",
                STOP_WAIT.as_secs()
            );
        }
    }
}

/// The engine's side of the recorder: feeds it reads without waiting, and
/// tells it when one is due.
pub struct Seam {
    tx: SyncSender<Msg>,
    shared: Arc<Shared>,
    /// The engine's read last fed (its count).
    last_fed: Mutex<Option<u64>>,
    /// When the engine last looked at the schedule.
    last_check: Mutex<Option<Instant>>,
    onset: Mutex<Onset>,
}

/// The read made at once when the kernel starts counting bloated sockets
/// and no path or service is above the threshold yet.
struct Onset {
    /// The kernel counted no bloated socket since the last such read.
    armed: bool,
    last: Option<Instant>,
}

impl Onset {
    /// Whether to read at `now`, the last read being `age` old; `bloat`:
    /// the kernel counts bloated sockets; `hot`: a path or service is
    /// above (its own schedule then). One read per onset, a second after
    /// the last read at least, and at most one onset in ONSET_MAX_AGE;
    /// then, while the kernel still counts bloated sockets and no path or
    /// service is above, a read a second for ONSET_FOLLOW: the onset read
    /// may come before the path's median crosses (the socket that tripped
    /// it alone above, its path's other flows not yet), and an episode's
    /// start is the read that sees it cross.
    fn at_once(&mut self, now: Instant, age: Duration, bloat: bool, hot: bool) -> bool {
        if !bloat {
            self.armed = true;
            return false;
        }
        if hot || age < FEED_EVERY {
            return false;
        }
        let since = self.last.map(|t| now.saturating_duration_since(t));
        if since.is_some_and(|d| d < ONSET_FOLLOW) {
            return true;
        }
        let due = self.armed && since.is_none_or(|d| d >= ONSET_MAX_AGE);
        if due {
            (self.armed, self.last) = (false, Some(now));
        }
        due
    }
}

impl Seam {
    /// Whether the recorder wants a read now, the last one being `age` old
    /// and having cost `cost`; `kernel_bloat`: the kernel counted a
    /// bloated socket in the last second.
    pub fn read_due(&self, age: Duration, cost: Duration, kernel_bloat: bool) -> bool {
        // The schedule is looked at once a second and a read starts a few
        // ms after the look that asked for it: a second later it is 0.99 s
        // old, and without this slack every other second would wait for
        // the next look (reads 2 s apart where one a second was meant:
        // test_recorder saw +1.9, +4.0, +4.9 s).
        let age = age.saturating_add(CHECK_SLACK);
        let cost = cost + Duration::from_nanos(self.shared.cost_ns.load(Ordering::Relaxed));
        let hot = self.shared.hot.load(Ordering::Relaxed);
        if self
            .onset
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .at_once(Instant::now(), age, kernel_bloat, hot)
        {
            tracing::debug!(
                "a read for the flight recorder: the kernel started counting bloated sockets; the last {:.1} s ago",
                age.as_secs_f64()
            );
            return true;
        }
        let (why, share, max_age) = if hot {
            (
                "a path or service above the threshold",
                HOT_SHARE,
                HOT_MAX_AGE,
            )
        } else if kernel_bloat {
            (
                "the kernel counted a bloated socket",
                ONSET_SHARE,
                ONSET_MAX_AGE,
            )
        } else {
            ("quiet", QUIET_SHARE, QUIET_MAX_AGE)
        };
        let due = crate::engine::reader::due(age, cost, FEED_EVERY, share, max_age);
        if due {
            tracing::debug!(
                "a read for the flight recorder: {why}; the last {:.1} s ago, it and the recorder cost {:.1} ms",
                age.as_secs_f64(),
                cost.as_secs_f64() * 1000.0
            );
        }
        due
    }

    /// Whether to look at the schedule now: at most once a second.
    pub fn check_due(&self) -> bool {
        let mut last = self
            .last_check
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if last.is_some_and(|t| t.elapsed() < FEED_EVERY) {
            return false;
        }
        *last = Some(Instant::now());
        true
    }

    /// Whether the engine's read number `read` is one not fed yet.
    pub fn wants(&self, read: u64) -> bool {
        self.last_fed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none_or(|r| r != read)
    }

    /// Hand the engine's read number `read` over; never waits (a recorder
    /// behind, on a slow disk, misses it: counted).
    pub fn feed(&self, read: u64, feed: Feed) {
        match self.tx.try_send(Msg::Feed(feed)) {
            Ok(()) => *self.last_fed.lock().unwrap_or_else(PoisonError::into_inner) = Some(read),
            Err(TrySendError::Full(_)) => {
                self.shared.feeds_dropped.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }

    /// The episodes open now.
    pub fn open(&self) -> Vec<Episode> {
        self.shared
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .open
            .as_ref()
            .clone()
    }

    /// Episodes opened since start and open now, by kind (path, service).
    pub fn counts(&self) -> ([u64; 2], [u64; 2]) {
        let load = |a: &[AtomicU64; 2]| [0, 1].map(|i| a[i].load(Ordering::Relaxed));
        (load(&self.shared.opened), load(&self.shared.open))
    }

    /// The journal as a part of bloatd (`status`, /metrics, top).
    pub fn feature(&self) -> Feature {
        self.shared
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .feature
            .clone()
    }
}

/// The recorder's thread: the detector, then the journal.
struct Writer {
    shared: Arc<Shared>,
    settings: Settings,
    journal: Option<Journal>,
    /// Why the journal is not written now, and when to try again.
    down: Option<(String, u64)>,
    warned: bool,
    dropped_warned: bool,
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime into a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Writer {
    fn new(shared: Arc<Shared>, settings: Settings, dir_error: Option<Error>) -> Writer {
        let mut w = Writer {
            shared,
            settings,
            journal: None,
            down: None,
            warned: false,
            dropped_warned: false,
        };
        let now = crate::clock::Clock::now().unix_ms;
        match dir_error {
            Some(e) => w.fail(e, now),
            None => w.open(now),
        }
        w
    }

    fn run(mut self, rx: Receiver<Msg>) {
        while let Ok(Msg::Feed(f)) = rx.recv() {
            let t0 = thread_cpu_ns();
            self.take(&f);
            self.flush(f.t_ms);
            self.shared
                .cost_ns
                .store(thread_cpu_ns().saturating_sub(t0), Ordering::Relaxed);
        }
        // Stopped, or the engine went away.
        let now = crate::clock::Clock::now().unix_ms;
        let writes = {
            let mut rec = self
                .shared
                .rec
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            rec.detector.finish(now)
        };
        self.log_closed(&writes);
        self.shared
            .rec
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .hold(writes);
        self.down = self.down.take().map(|(why, _)| (why, 0));
        self.flush(now);
        if let Some(j) = self.journal.take() {
            j.close();
        }
    }

    /// One read through the detector.
    fn take(&mut self, f: &Feed) {
        let writes = {
            let mut rec = self
                .shared
                .rec
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let writes =
                rec.detector
                    .observe(f.t_ms, &f.sockets, f.policy.as_ref(), &gateway::lookup);
            if let Some(class_of) = &f.class_of {
                rec.detector.classify(class_of.as_ref());
            }
            self.shared.hot.store(rec.detector.hot(), Ordering::Relaxed);
            for k in EpisodeKind::ALL {
                let i = kind_index(k);
                self.shared.opened[i].store(rec.detector.opened[i], Ordering::Relaxed);
            }
            let open = rec.detector.open_counts();
            for (i, n) in open.iter().enumerate() {
                self.shared.open[i].store(*n, Ordering::Relaxed);
            }
            let list = Arc::new(rec.detector.open());
            self.shared
                .live
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .open = list;
            rec.hold(writes.clone());
            if rec.dropped > 0 && !self.dropped_warned {
                self.dropped_warned = true;
                tracing::warn!(
                    "journal: held in memory too long ({MEMORY_WEIGHT} points at most): the oldest points and minute rows are dropped"
                );
            }
            writes
        };
        self.log_closed(&writes);
    }

    /// Each closed episode as one JSON line on standard error (the log:
    /// journald, Loki, Elastic collect it).
    fn log_closed(&self, writes: &[Write]) {
        use std::io::Write as _;
        for w in writes {
            if let Write::Episode(r) = w {
                if r.episode.open {
                    continue;
                }
                let mut v = serde_json::to_value(&r.episode).unwrap_or_default();
                if let Some(o) = v.as_object_mut() {
                    o.insert("event".into(), "bloatd_episode".into());
                    o.insert("duration_ms".into(), r.episode.duration_ms().into());
                    o.insert("grade".into(), r.episode.grade().into());
                    o.insert("rpm".into(), r.episode.rpm().into());
                    o.insert(
                        "top_flows".into(),
                        serde_json::to_value(r.flows.iter().map(|(_, f)| f).collect::<Vec<_>>())
                            .unwrap_or_default(),
                    );
                }
                let line = format!("{v}\n");
                let _ = std::io::stderr().lock().write_all(line.as_bytes());
            }
        }
    }

    fn publish_feature(&self, state: FeatureState, detail: String) {
        let mut live = self
            .shared
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if live.feature.state != state || live.feature.detail != detail {
            live.feature = feature(state, detail);
        }
    }
}

/// The API's side: queries, each on a connection of its own, with what
/// waits in memory for the journal and the episodes open now.
#[derive(Clone)]
pub struct Reader {
    shared: Arc<Shared>,
    /// At most two queries at once (a client asking in a loop gets its
    /// answers in turn).
    queries: Arc<tokio::sync::Semaphore>,
}

impl Reader {
    /// Run `f` on a blocking thread, two at most at once.
    pub async fn run<T: Send + 'static>(&self, f: impl FnOnce(&Reader) -> T + Send + 'static) -> T {
        let _permit = self.queries.acquire().await.expect("never closed");
        let me = self.clone();
        tokio::task::spawn_blocking(move || f(&me))
            .await
            .expect("query panicked")
    }

    fn disk(&self) -> Option<rusqlite::Connection> {
        journal::open_reader(&self.shared.state_dir).ok().flatten()
    }

    pub fn incidents(&self, q: &IncidentsQuery, since_ms: u64) -> Result<Vec<Episode>> {
        let mut by_id: HashMap<u64, Episode> = HashMap::new();
        if let Some(c) = self.disk() {
            for e in journal::incidents(&c, q, since_ms).map_err(Error::JournalRead)? {
                by_id.insert(e.id, e);
            }
        }
        let rec = self
            .shared
            .rec
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for w in &rec.pending {
            if let Write::Episode(r) = w {
                by_id.insert(r.episode.id, r.episode.clone());
            }
        }
        for e in rec.detector.open() {
            by_id.insert(e.id, e);
        }
        drop(rec);
        let mut out: Vec<Episode> = by_id
            .into_values()
            .filter(|e| (e.end_ms >= since_ms || e.open) && q.matches(e))
            .collect();
        out.sort_by(|a, b| b.start_ms.cmp(&a.start_ms).then(b.id.cmp(&a.id)));
        out.truncate(q.limit.unwrap_or(1000));
        Ok(out)
    }

    pub fn incident(&self, id: u64) -> Result<EpisodeDetail> {
        if let Some(d) = self
            .shared
            .rec
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .detector
            .detail(id)
        {
            return Ok(d);
        }
        let mut d = match self.disk() {
            Some(c) => journal::detail(&c, id).map_err(Error::JournalRead)?,
            None => None,
        };
        // What waits for the journal is newer than what it has.
        let rec = self
            .shared
            .rec
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for w in rec.pending.iter().filter(|w| w.episode_id() == Some(id)) {
            match w {
                Write::Episode(r) => {
                    let series = d.take().map(|d| (d.series, d.flow_series));
                    let (series, mut flow_series) = series.unwrap_or_default();
                    let flows: Vec<_> = r.flows.iter().map(|(_, f)| f.clone()).collect();
                    flow_series.retain(|s| flows.iter().any(|f| f.cookie == s.cookie));
                    d = Some(EpisodeDetail {
                        episode: r.episode.clone(),
                        flows,
                        series,
                        flow_series,
                    });
                }
                Write::Points { flow, points, .. } => {
                    if let Some(d) = d.as_mut() {
                        if *flow == 0 {
                            d.series.extend(points.iter().map(|p| p.path()));
                        } else if let Some(r) = rec.pending.iter().find_map(|w| match w {
                            Write::Episode(r) if r.episode.id == id => Some(r),
                            _ => None,
                        }) {
                            if let Some((_, f)) = r.flows.iter().find(|(i, _)| i == flow) {
                                match d.flow_series.iter_mut().find(|s| s.cookie == f.cookie) {
                                    Some(s) => s.points.extend(points.iter().map(|p| p.flow())),
                                    None => d.flow_series.push(bloatd_model::journal::FlowSeries {
                                        cookie: f.cookie,
                                        points: points.iter().map(|p| p.flow()).collect(),
                                    }),
                                }
                            }
                        }
                    }
                }
                Write::Prune { .. } | Write::Minutes(_) => {}
            }
        }
        d.ok_or(Error::NoSuchEpisode(id))
    }

    pub fn history(&self, q: &HistoryQuery, since_ms: u64) -> Result<Vec<MinuteRow>> {
        let each = HistoryQuery {
            worst: false.into(),
            ..q.clone()
        };
        let mut rows = match self.disk() {
            Some(c) => journal::history(&c, if q.worst.is_set() { q } else { &each }, since_ms)
                .map_err(Error::JournalRead)?,
            None => Vec::new(),
        };
        let mut held: Vec<MinuteRow> = Vec::new();
        for w in &self
            .shared
            .rec
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pending
        {
            if let Write::Minutes(m) = w {
                held.extend(m.iter().filter(|m| m.t_ms >= since_ms).cloned());
            }
        }
        if !held.is_empty() {
            held.retain(|m| q.matches(m));
            held.sort_by_key(|m| m.t_ms);
            if q.worst.is_set() {
                rows.extend(journal::worst_per_minute(held));
            } else {
                rows.extend(held);
            }
            rows.sort_by_key(|m| m.t_ms);
        }
        Ok(rows)
    }
}

/// Where the journal is kept, for commands that read it without a daemon.
pub fn journal_path(state_dir: &Path) -> PathBuf {
    state_dir.join(journal::FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_started_just_after_the_last_look_is_a_second_old_at_the_next() {
        let cfg = crate::settings::Config {
            state_dir: std::env::temp_dir().join("bloatd-test-never-made"),
            ..Default::default()
        };
        // A directory refused: the journal is never opened, all in memory.
        let rec = Recorder::start(Settings::of(&cfg), Some("test".into())).unwrap();
        let seam = rec.seam();
        let ms = Duration::from_millis;
        // Hot, cheap reads: one a second, the read 0.99 s old at the look.
        seam.shared.hot.store(true, Ordering::Relaxed);
        assert!(seam.read_due(ms(990), ms(2), true));
        assert!(!seam.read_due(ms(850), ms(2), true));
        // Quiet: a thousandth of a core, at least a second.
        seam.shared.hot.store(false, Ordering::Relaxed);
        assert!(seam.read_due(ms(995), ms(1), false));
        assert!(!seam.read_due(ms(995), ms(2), false));
        rec.stop();
    }

    #[test]
    fn an_onset_reads_at_once_one_read_per_onset() {
        let s = Duration::from_secs;
        let t0 = Instant::now();
        let mut o = Onset {
            armed: true,
            last: None,
        };
        assert!(!o.at_once(t0, s(5), false, false), "quiet: no read");
        assert!(!o.at_once(t0, s(5), true, true), "hot: its own schedule");
        assert!(
            !o.at_once(t0, Duration::from_millis(500), true, false),
            "a second apart"
        );
        assert!(
            o.at_once(t0 + s(1), s(1), true, false),
            "the onset: at once"
        );
        // Then a read a second while it lasts, nothing above yet, for
        // ONSET_FOLLOW; none once a path is above (the hot schedule).
        assert!(
            o.at_once(t0 + s(2), s(1), true, false),
            "followed a second apart"
        );
        assert!(
            !o.at_once(t0 + s(2), Duration::from_millis(300), true, false),
            "a second apart"
        );
        assert!(
            !o.at_once(t0 + s(3), s(1), true, true),
            "hot: its own schedule"
        );
        assert!(o.at_once(
            t0 + s(1) + ONSET_FOLLOW - Duration::from_millis(1),
            s(1),
            true,
            false
        ));
        assert!(
            !o.at_once(t0 + s(1) + ONSET_FOLLOW, s(1), true, false),
            "once per onset, followed for ONSET_FOLLOW"
        );
        // Another onset within ONSET_MAX_AGE waits; after, it reads.
        assert!(!o.at_once(t0 + s(7), s(2), false, false));
        assert!(
            !o.at_once(t0 + s(8), s(3), true, false),
            "at most one in ONSET_MAX_AGE"
        );
        assert!(o.at_once(t0 + s(1) + ONSET_MAX_AGE, s(3), true, false));
    }
}
