//! The engine shared by the daemon and by `bloatd top`'s embedded mode:
//! probes in the kernel, the socket tracker fed from them, the metrics, and
//! the registered congestion controls.

use crate::authority::Viewer;
use crate::cc::CcSet;
use crate::clock::Clock;
use crate::config::Config;
use crate::metrics::{Metrics, Scrape};
use crate::probes::{abi, abi::stat, Probes};
use crate::tracker::{Rows, Tracker};
use bloatd_model::api::{CcInfo, FloorEntry, Floors, Status};
use bloatd_model::{FloorSource, Health, NetPath, Series, Snapshot, SnapshotRequest, Socket};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
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
/// with 10,000 busy sockets here), never older than WATCH_READ_MAX_AGE: past
/// that a list stops looking live, so with 100,000 sockets watching costs
/// more than 1% rather than showing rows half a minute old. The detail
/// socket's series and the most queued sockets' come from the probes at
/// every interval.
const WATCH_READ_SHARE: u32 = 100;
const WATCH_READ_MAX_AGE: Duration = Duration::from_secs(5);
/// API clients share a read for a sampling interval and for this many times
/// what it cost (reading, and making the rows and views from it), up to
/// API_READ_MAX_AGE: one client asking in a loop makes reads take at most
/// about a seventh of the core, however many sockets there are (a read of
/// 100,000 takes 0.3-0.7 s here), and each answer is at most that old.
const API_READ_SHARE: u32 = 6;
const API_READ_MAX_AGE: Duration = Duration::from_secs(5);

/// The last full read: when it started and what it cost.
struct Reading {
    started: Instant,
    cost: Duration,
}

/// Every socket of one read as the dashboard's `Socket`s, made once per read
/// for all the dashboards and requests that ask before the next.
struct ViewRows {
    read: u64,
    rows: Arc<Vec<Socket>>,
}

/// The views made from one read, for every request until the next: paths
/// (by peer and by prefix), services, and every socket for the policy's
/// list. A request for a view then costs its JSON, not a pass over every
/// socket.
#[derive(Default)]
struct Views {
    read: u64,
    paths: [Option<Arc<Vec<NetPath>>>; 2],
    services: Option<Arc<Vec<bloatd_model::ServiceView>>>,
    all: Option<Arc<Vec<Socket>>>,
}

/// Whether watchers need a new read, the last one being `age` old and
/// having cost `cost`: not within a sampling interval, nor within
/// WATCH_READ_SHARE times its cost, up to WATCH_READ_MAX_AGE.
fn watch_read_due(age: Duration, cost: Duration, interval: Duration) -> bool {
    read_due(age, cost, interval, WATCH_READ_SHARE, WATCH_READ_MAX_AGE)
}

/// The same for API requests (API_READ_SHARE).
fn api_read_due(age: Duration, cost: Duration, interval: Duration) -> bool {
    read_due(age, cost, interval, API_READ_SHARE, API_READ_MAX_AGE)
}

fn read_due(
    age: Duration,
    cost: Duration,
    interval: Duration,
    share: u32,
    max_age: Duration,
) -> bool {
    age >= interval.max((cost * share).min(max_age))
}

/// Why `GET /v1/series/{cookie}` has no answer.
#[derive(Debug, thiserror::Error)]
pub enum SeriesError {
    #[error("no socket with cookie {0} (bloatd sockets --json lists the cookies)")]
    Unknown(u64),
    #[error("bloatd already keeps the series of {0} sockets for API clients (each for a minute after its last request): ask again later")]
    Full(usize),
}

pub struct Core {
    probes: Probes,
    /// The policy's rules (their names, by kernel index) and DRWA's state.
    policy: crate::policy::Resolved,
    drwa: bloatd_model::policy::DrwaMode,
    tracker: Tracker,
    metrics: Option<Metrics>,
    cc: CcSet,
    cfg: Config,
    mode: &'static str,
    started_unix_ms: u64,
    /// When the tracker last read every record, if ever.
    last_read: Option<Reading>,
    /// Full reads made so far (which read `view_rows` was made from).
    reads: u64,
    view_rows: Option<ViewRows>,
    views: Views,
    /// Sockets watched for API series requests, until when.
    series_watch: HashMap<u64, Instant>,
    /// Each dashboard's detail socket, until when.
    viewers: HashMap<Viewer, (u64, Instant)>,
    /// A dashboard asked for a snapshot until this long ago.
    viewer_until: Option<Instant>,
    last_watch: Instant,
    last_housekeeping: Instant,
    /// The kernel's per-service histograms, folded into /metrics' bounded
    /// `service` label.
    service_labels: crate::service::labels::ServiceLabels,
}

/// Where the daemon pins DRWA's restore state (probes/policy.rs): reused if
/// a daemon that did not stop left it; made when DRWA is armed. None: no
/// pin (DRWA disabled and nothing left, or no BPF file system, which the
/// log names: then a crash leaves the clamps on the sockets).
fn drwa_saved_pin(cfg: &Config) -> Option<std::path::PathBuf> {
    use crate::probes::policy::{pinned_usable, prepare_pin, saved_pin};
    let pin = saved_pin(&cfg.run_dir);
    if pinned_usable(&pin) {
        return Some(pin);
    }
    if cfg.drwa == bloatd_model::policy::DrwaMode::Disabled {
        return None;
    }
    match prepare_pin(&pin) {
        Ok(()) => Some(pin),
        Err(e) => {
            tracing::warn!("DRWA's window clamps are not crash-safe: {e}; a bloatd that dies without stopping leaves them on the sockets it clamped");
            None
        }
    }
}

impl Core {
    /// Load the probes, read what exists, register the congestion controls.
    pub fn start(cfg: &Config, mode: &'static str, with_metrics: bool) -> anyhow::Result<Core> {
        use bloatd_model::policy::DrwaMode;
        let policy =
            crate::policy::resolve(&cfg.policy, &cfg.cc).map_err(|e| anyhow::anyhow!(e))?;
        let saved_pin = (mode == "daemon").then(|| drwa_saved_pin(cfg)).flatten();
        let probes = Probes::load(
            cfg,
            &crate::probes::policy::PolicyConfig {
                rules: policy.kernel.clone(),
                drwa_armed: cfg.drwa != DrwaMode::Disabled,
                drwa_on: cfg.drwa == DrwaMode::On,
                saved_pin,
            },
        )?;
        let mut cc = CcSet::register(&cfg.cc, &cfg.cc_options())?;
        if mode == "daemon" {
            cc.keep_default_in(&cfg.run_dir);
        }
        let mut tracker = Tracker::new(cfg.interval_ms, cfg.series_seconds);
        tracker.set_rule_names(policy.names.clone());
        let mut core = Core {
            probes,
            policy,
            drwa: cfg.drwa,
            tracker,
            metrics: with_metrics.then(Metrics::new),
            cc,
            cfg: cfg.clone(),
            mode,
            started_unix_ms: Clock::now().unix_ms,
            last_read: None,
            reads: 0,
            view_rows: None,
            views: Views::default(),
            series_watch: HashMap::new(),
            viewers: HashMap::new(),
            viewer_until: None,
            last_watch: Instant::now(),
            last_housekeeping: Instant::now(),
            service_labels: crate::service::labels::ServiceLabels::new(cfg.service_labels as usize),
        };
        core.read();
        Ok(core)
    }

    /// Read every record of the kernel, refreshed from its socket now, into
    /// the tracker, with the state of bloatd's congestion controls. The
    /// read is made in the last one's memory when no answer still holds
    /// it, so a read that fails leaves the tracker empty until the next.
    fn read(&mut self) {
        let started = Instant::now();
        let spare = self.tracker.take_records();
        match self.probes.read_all(spare) {
            Ok(recs) => {
                let states = if self.cc.is_empty() {
                    HashMap::new()
                } else {
                    self.cc.states()
                };
                self.tracker.refresh(recs, states);
            }
            Err(e) => tracing::warn!("{e}"),
        }
        self.reads += 1;
        self.last_read = Some(Reading {
            started,
            cost: started.elapsed(),
        });
    }

    /// Read again unless the last read is recent (`api_read_due`): one
    /// full read serves every request for sockets until then.
    fn read_if_stale(&mut self) {
        let interval = self.cfg.interval();
        if self
            .last_read
            .as_ref()
            .is_none_or(|r| api_read_due(r.started.elapsed(), r.cost, interval))
        {
            self.read();
        }
    }

    /// A view of the last read, made at most once per read (`Views`);
    /// making it counts in the read's cost.
    fn view<T>(
        &mut self,
        get: fn(&mut Views) -> &mut Option<Arc<T>>,
        make: impl FnOnce(&mut Self) -> T,
    ) -> Arc<T> {
        if self.views.read != self.reads {
            self.views = Views {
                read: self.reads,
                ..Views::default()
            };
        }
        if let Some(v) = get(&mut self.views) {
            return v.clone();
        }
        let t0 = Instant::now();
        let v = Arc::new(make(self));
        if let Some(r) = self.last_read.as_mut() {
            r.cost += t0.elapsed();
        }
        *get(&mut self.views) = Some(v.clone());
        v
    }

    /// Read for someone watching (dashboards, series) when the last read is
    /// due (`watch_read_due`).
    fn read_for_watchers(&mut self) {
        let interval = self.cfg.interval();
        let due = self
            .last_read
            .as_ref()
            .is_none_or(|r| watch_read_due(r.started.elapsed(), r.cost, interval));
        if due {
            self.read();
        }
    }

    /// Every socket of the last read as `Socket`s, shared by whoever asks
    /// before the next read. Making them counts in the read's cost.
    fn view_rows(&mut self) -> Arc<Vec<Socket>> {
        if let Some(v) = self.view_rows.as_ref().filter(|v| v.read == self.reads) {
            return v.rows.clone();
        }
        let t0 = Instant::now();
        let rows = Arc::new(self.tracker.sockets(&Clock::now(), false));
        if let Some(r) = self.last_read.as_mut() {
            r.cost += t0.elapsed();
        }
        self.view_rows = Some(ViewRows {
            read: self.reads,
            rows: rows.clone(),
        });
        rows
    }

    /// Called every sampling interval: take in the watched sockets' samples;
    /// now and then, update what is watched and tidy up. Nothing here grows
    /// with the number of sockets unless someone looks.
    pub fn tick(&mut self) {
        let clock = Clock::now();
        let tracker = &mut self.tracker;
        self.probes.drain(|x| tracker.apply(x, &clock));
        if self.last_watch.elapsed() >= WATCH_EVERY {
            self.update_watch();
            self.last_watch = Instant::now();
        }
        if self.last_housekeeping.elapsed() >= HOUSEKEEPING_EVERY {
            let watched = self.watched();
            self.tracker
                .sweep(&clock, self.cfg.series_seconds, &|c| watched.contains(&c));
            self.fold_services();
            self.last_housekeeping = Instant::now();
        }
    }

    /// Fold the kernel's per-service histograms into the `service` label's
    /// totals, and delete the entries of cgroups that stopped counting, so
    /// the kernel's bound holds the services active now (service/labels.rs).
    fn fold_services(&mut self) {
        let (entries, capacity) = self.probes.svc_stats();
        let names = self.tracker.services();
        names.learn(entries.iter().map(|(k, _)| k.cgroup_id));
        let idle = self.service_labels.fold(
            &entries,
            &|id| names.name(id),
            Instant::now(),
            capacity as usize,
        );
        let gone = self.probes.svc_delete(&idle);
        self.service_labels.forget(&gone);
    }

    /// What the probes should stream now: sockets watched on request, and
    /// while a dashboard looks, the most queued ones.
    fn watched(&self) -> HashSet<u64> {
        let now = Instant::now();
        let mut set: HashSet<u64> = self
            .series_watch
            .iter()
            .filter(|(_, until)| **until > now)
            .map(|(c, _)| *c)
            .chain(
                self.viewers
                    .values()
                    .filter(|(_, until)| *until > now)
                    .map(|(c, _)| *c),
            )
            .collect();
        if self.viewer_until.is_some_and(|t| t > now) {
            set.extend(self.tracker.most_queued(WATCH_MOST_QUEUED));
        }
        set
    }

    fn update_watch(&mut self) {
        let now = Instant::now();
        self.series_watch.retain(|_, until| *until > now);
        self.viewers.retain(|_, (_, until)| *until > now);
        let set = self.watched();
        if let Err(e) = self.probes.set_watched(&set) {
            tracing::warn!("{e}");
        }
    }

    /// Keep the series of `cookie` for an API client for a minute from
    /// now. Err when the API's share of the watch list is taken by other
    /// sockets (each for a minute after its last request).
    fn watch_series(&mut self, cookie: u64) -> Result<(), SeriesError> {
        let now = Instant::now();
        let new = !self.series_watch.contains_key(&cookie);
        if new {
            self.series_watch.retain(|_, until| *until > now);
            if self.series_watch.len() >= SERIES_WATCH_MAX {
                return Err(SeriesError::Full(SERIES_WATCH_MAX));
            }
        }
        self.series_watch.insert(cookie, now + SERIES_TTL);
        if new {
            self.update_watch();
        }
        Ok(())
    }

    /// Keep `viewer`'s detail socket `cookie` watched while it looks; a
    /// dashboard has one, so a new one replaces its last. Past
    /// VIEWERS_MAX dashboards the one that asked least recently goes.
    fn watch_for(&mut self, viewer: Viewer, cookie: u64) {
        let now = Instant::now();
        let changed = self.viewers.get(&viewer).is_none_or(|(c, _)| *c != cookie);
        if !self.viewers.contains_key(&viewer) && self.viewers.len() >= VIEWERS_MAX {
            let oldest = self
                .viewers
                .iter()
                .min_by_key(|(_, (_, until))| *until)
                .map(|(v, _)| *v);
            if let Some(v) = oldest {
                self.viewers.remove(&v);
            }
        }
        self.viewers.insert(viewer, (cookie, now + VIEWER_TTL));
        if changed {
            self.update_watch();
        }
    }

    /// Sockets with their numbers read from the kernel at most an interval
    /// ago (`read_if_stale`; not the last streamed sample), for `bloatd
    /// sockets` and scripts comparing with `ss`, to be turned into
    /// `Socket`s as they are sent. The one full read of each interval serves
    /// every request of /v1/sockets, /v1/paths, /v1/services and /v1/policy
    /// that comes in it: a read takes ~0.3 s at 100k sockets on the
    /// one-threaded runtime, and a client asking in a loop would otherwise
    /// starve the sampler and /metrics.
    pub fn socket_rows(&mut self, all: bool) -> Rows {
        self.read_if_stale();
        self.tracker.rows(&Clock::now(), all)
    }

    /// Sockets grouped by path, worst queue first (`prefix`: by the
    /// configured prefixes instead of by peer).
    pub fn paths(&mut self, prefix: bool) -> Arc<Vec<NetPath>> {
        self.read_if_stale();
        self.paths_view(prefix)
    }

    /// The paths of the last read (`Views`).
    fn paths_view(&mut self, prefix: bool) -> Arc<Vec<NetPath>> {
        let by = prefix.then_some((self.cfg.floor_prefix_v4, self.cfg.floor_prefix_v6));
        if prefix {
            self.view(
                |v| &mut v.paths[1],
                |c| crate::paths::paths_of(&c.view_rows(), by),
            )
        } else {
            self.view(
                |v| &mut v.paths[0],
                |c| crate::paths::paths_of(&c.view_rows(), by),
            )
        }
    }

    /// Sockets grouped by service, longest wait first.
    pub fn services(&mut self) -> Arc<Vec<bloatd_model::ServiceView>> {
        self.read_if_stale();
        self.services_view()
    }

    /// The services of the last read (`Views`).
    fn services_view(&mut self) -> Arc<Vec<bloatd_model::ServiceView>> {
        self.view(
            |v| &mut v.services,
            |c| crate::service::services_of(&c.view_rows()),
        )
    }

    /// Every floor the kernel keeps, as the probes would read it now.
    pub fn floors(&self) -> anyhow::Result<Floors> {
        let now_s = (Clock::now().mono_ns / 1_000_000_000) as u32;
        let window_s = self.cfg.floor_window_s;
        let raw = self.probes.floors()?;
        let c = self.probes.counters()?;
        let mut floors: Vec<FloorEntry> = raw
            .iter()
            .filter_map(|(k, f)| {
                let (floor_us, source) = crate::probes::floor_now(f, window_s, now_s)?;
                Some(FloorEntry {
                    netns: k.netns,
                    peer: crate::tracker::addr(k.family, &k.addr),
                    prefix_len: k.prefix_len,
                    floor_us,
                    floor_source: match source {
                        abi::floor_source::PREFIX => FloorSource::Prefix,
                        abi::floor_source::INFERRED => FloorSource::Inferred,
                        _ => FloorSource::Socket,
                    },
                    updated_s_ago: now_s.saturating_sub(f.updated_s),
                })
            })
            .collect();
        floors.sort_by_key(|f| (f.netns, f.peer, f.prefix_len));
        Ok(Floors {
            window_s,
            capacity: self.cfg.floor_entries,
            prefix_capacity: crate::probes::prefix_floor_entries(self.cfg.floor_entries),
            created: c.get(stat::FLOOR_NEW),
            evicted: c.floors_evicted(raw.len() as u64),
            floors,
        })
    }

    /// The parts beyond the core and how this kernel runs them.
    pub fn features(&self) -> Vec<bloatd_model::Feature> {
        let names = self.cc.names();
        let mut f = crate::probes::kernel::features(
            self.probes.kernel(),
            self.probes.sockops_error(),
            self.cc
                .registered_by()
                .map(|by| crate::probes::kernel::CcRegistration { names: &names, by }),
            self.cc.declined(),
        );
        f.push(self.probes.netns_feature());
        f.push(crate::probes::sampling_feature(self.cfg.sampling));
        f
    }

    pub fn health(&self) -> Health {
        let c = self.probes.counters().unwrap_or_default();
        Health {
            events_total: c.events(),
            dropped_total: c.dropped(),
            map_entries: c.map_entries(),
            map_capacity: self.probes.map_capacity() as u64,
            mode: self.mode.to_string(),
            features: self.features(),
        }
    }

    /// What the dashboard draws (`req`): the sockets as of the last read
    /// (`read_for_watchers`; `fresh`: a read at most one sampling interval
    /// old, the one `/v1/sockets` shares: asking in a loop cannot make the
    /// daemon read the kernel more than once an interval), all of them or,
    /// with a limit, the first rows in its sort order passing its filter
    /// with the host's summary (`bloatd_model::select::select_rows`), plus
    /// the samples of one socket newer than `since_ms`. A dashboard asking
    /// counts as someone looking. Err: a bad sort key or filter.
    pub fn snapshot(
        &mut self,
        req: &SnapshotRequest,
        fresh: bool,
        viewer: Viewer,
    ) -> Result<Snapshot, String> {
        let (mut snap, rows) = self.snapshot_parts(req, fresh, viewer)?;
        if let Some(rows) = rows {
            snap.sockets = rows.iter().collect();
        }
        Ok(snap)
    }

    /// The same, with every socket (no `limit`) left as `Rows` for the
    /// caller to stream: the snapshot's `sockets` is then empty.
    pub fn snapshot_parts(
        &mut self,
        req: &SnapshotRequest,
        fresh: bool,
        viewer: Viewer,
    ) -> Result<(Snapshot, Option<Rows>), String> {
        let first_look = self.viewer_until.is_none_or(|t| t <= Instant::now());
        self.viewer_until = Some(Instant::now() + VIEWER_TTL);
        if fresh {
            self.read_if_stale();
        } else {
            self.read_for_watchers();
        }
        // Only a socket the daemon knows is watched: a cookie made up
        // would hold a place in the kernel's watch map for nothing.
        if let Some(c) = req.series.filter(|&c| self.tracker.knows(c)) {
            self.watch_for(viewer, c);
        } else if first_look {
            self.update_watch();
        }
        let clock = Clock::now();
        let threshold_us = self.cfg.bloat_threshold_us();
        let (mut sockets, mut summary, mut matched, mut all) = (Vec::new(), None, None, None);
        let (mut paths, mut services) = (Vec::new(), Vec::new());
        if req.limit.is_some() || req.paths || req.services {
            if req.paths {
                paths = self.paths_view(false).as_ref().clone();
            }
            if req.services {
                services = self.services_view().as_ref().clone();
            }
            let rows = self.view_rows();
            if req.limit.is_some() {
                let (page, n, s) = bloatd_model::select::select_rows(&rows, req, threshold_us)?;
                (sockets, matched, summary) = (page, Some(n), Some(s));
            }
        }
        if req.limit.is_none() {
            all = Some(self.tracker.rows(&clock, false));
        }
        let snap = Snapshot {
            summary,
            matched,
            taken_ms: clock.unix_ms,
            interval_ms: self.cfg.interval_ms as u32,
            bloat_threshold_us: threshold_us,
            sockets,
            series: req
                .series
                .and_then(|c| self.tracker.series(c, req.since_ms))
                .into_iter()
                .collect::<Vec<Series>>(),
            health: self.health(),
            paths,
            policy: self.policy_state(),
            services,
        };
        Ok((snap, all))
    }

    /// One socket's samples newer than `since_ms` (API), and keep it watched
    /// for a minute: the first request starts its series. Err: no such
    /// socket (nothing is watched for it), or the API's share of the watch
    /// list is full.
    pub fn series(&mut self, cookie: u64, since_ms: u64) -> Result<Series, SeriesError> {
        self.read_for_watchers();
        let series = self
            .tracker
            .series(cookie, since_ms)
            .ok_or(SeriesError::Unknown(cookie))?;
        self.watch_series(cookie)?;
        Ok(series)
    }

    /// /metrics: the kernel's statistics of this moment. A few map reads,
    /// whatever the number of sockets.
    pub fn metrics_text(&mut self) -> String {
        if self.metrics.is_none() {
            return String::new();
        }
        let scrape = self.scrape();
        self.metrics
            .as_ref()
            .map(|m| m.encode(scrape))
            .unwrap_or_default()
    }

    /// Everything /metrics shows, read now.
    fn scrape(&mut self) -> Scrape {
        // The per-service histograms first, the per-cc statistics right
        // after: both count the same samples.
        self.fold_services();
        let probes = &self.probes;
        let services =
            crate::service::metrics::service_hists(&self.service_labels, &|i| probes.cc_name(i));
        let counters = self.probes.counters().unwrap_or_default();
        let per_cc = self.probes.cc_stats().unwrap_or_else(|e| {
            tracing::warn!("{e}");
            Vec::new()
        });
        let mut sockets = Vec::new();
        if let Ok(c) = self.probes.sock_counts() {
            for (cc, by_role) in c.n.iter().enumerate() {
                for (role, by_state) in by_role.iter().enumerate() {
                    for (state, &n) in by_state.iter().enumerate() {
                        if n > 0 {
                            sockets.push((self.probes.cc_name(cc as u32), role, state, n));
                        }
                    }
                }
            }
        }
        Scrape {
            per_cc,
            sockets,
            bloated_second: (Clock::now().mono_ns / 1_000_000_000).saturating_sub(1),
            counters,
            runs: self.probes.run_stats(),
            map_capacity: self.probes.map_capacity(),
            sampler: (self.cfg.sampling == crate::config::Sampling::Adaptive)
                .then(|| self.probes.sampler().ok())
                .flatten(),
            floors: self.probes.floors_count().unwrap_or(0),
            cc_export_failures: self.cc.export_failures(),
            westwood_cwnd_pipe: self.cc.westwood_cwnd_pipe_ratio(),
            features: self.features(),
            policy: self.policy_counts().map(|c| (c, self.drwa)),
            services,
        }
    }

    /// The programs attached, as `status` names them.
    fn probe_names(&self) -> Vec<String> {
        self.probes
            .tracepoints()
            .map(|h| format!("tp_btf/{h}"))
            .chain(
                self.probes
                    .sockops_error()
                    .is_none()
                    .then(|| "cgroup/sock_ops".to_string()),
            )
            .collect()
    }

    pub fn status(&self) -> Status {
        let health = self.health();
        Status {
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").into(),
            mode: self.mode.into(),
            started_unix_ms: self.started_unix_ms,
            interval_ms: self.cfg.interval_ms,
            sampling: self.cfg.sampling.as_str().into(),
            probes: self.probe_names(),
            cc_registered: self.cc.names(),
            default_cc: bloatd_cc::kernel_default().ok(),
            listen: self.metrics.as_ref().map(|_| self.cfg.listen.to_string()),
            sockets: health.map_entries as usize,
            health,
            sockops_error: self.probes.sockops_error().map(str::to_string),
            kernel: crate::probes::kernel::release(),
        }
    }

    /// bloatd's algorithms, those it registered, and the kernel's.
    pub fn cc_info(&self) -> anyhow::Result<CcInfo> {
        Ok(CcInfo {
            bloatd: bloatd_cc::Algo::ALL
                .iter()
                .map(|a| a.name().to_string())
                .collect(),
            registered: self.cc.names(),
            available: bloatd_cc::kernel_available()?,
            default: bloatd_cc::kernel_default()?,
        })
    }

    pub fn cc(&mut self) -> &mut CcSet {
        &mut self.cc
    }

    /// `GET /v1/policy`: the rules with the sockets each acts on now, DRWA,
    /// and the counters.
    pub fn policy_info(&mut self) -> bloatd_model::api::PolicyInfo {
        use crate::policy::{describe_actions, describe_selectors};
        use bloatd_model::api::{PolicyInfo, RuleInfo};
        self.read_if_stale();
        let socks = self.view(|v| &mut v.all, |c| c.tracker.sockets(&Clock::now(), true));
        let rules = self
            .policy
            .names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let rule = self.cfg.policy.get(i).cloned();
                let acts = |p: &bloatd_model::SocketPolicy| {
                    p.chose_cc() == Some(name.as_str())
                        || p.notsent_lowat_rule.as_deref() == Some(name.as_str())
                        || p.drwa.as_ref().is_some_and(|d| d.by == *name)
                };
                RuleInfo {
                    name: name.clone(),
                    selects: rule.as_ref().map(describe_selectors).unwrap_or_default(),
                    does: rule.as_ref().map(describe_actions).unwrap_or_default(),
                    enabled: self.probes.policy.enabled(i as u32),
                    sockets: socks
                        .iter()
                        .filter(|s| s.policy.as_ref().is_some_and(acts))
                        .count(),
                    waiting: socks
                        .iter()
                        .filter(|s| {
                            s.policy.as_ref().is_some_and(|p| {
                                p.bulk_waiting && p.bulk_rule.as_deref() == Some(name)
                            })
                        })
                        .count(),
                    rule,
                }
            })
            .collect();
        PolicyInfo {
            drwa: bloatd_model::api::DrwaInfo {
                mode: self.drwa.as_str().into(),
                lambda: self.cfg.drwa_lambda,
                min_bytes: self.cfg.drwa_min_bytes,
                saved_pin: self
                    .probes
                    .policy
                    .saved_pin()
                    .map(|p| p.display().to_string()),
            },
            rules,
            counts: self.policy_counts().unwrap_or_default(),
        }
    }

    /// The policy's counters, as the kernel keeps them.
    fn policy_counts(&self) -> Option<bloatd_model::api::PolicyCounts> {
        self.probes
            .policy
            .counts()
            .ok()
            .map(|c| crate::policy::policy_counts(&c))
    }

    /// The policy's state in a snapshot: None when there is no policy.
    fn policy_state(&self) -> Option<bloatd_model::PolicyState> {
        if self.policy.names.is_empty() && self.drwa == bloatd_model::policy::DrwaMode::Disabled {
            return None;
        }
        let c = self.policy_counts().unwrap_or_default();
        Some(bloatd_model::PolicyState {
            drwa: self.drwa.as_str().into(),
            rules: self.policy.names.len(),
            cc_sockets: c.cc_sockets,
            bulk_sockets: c.bulk_sockets,
            drwa_sockets: c.drwa_sockets,
            refused: None, // the server's to say, per reader
        })
    }

    /// From now on a panic gives DRWA's windows back (cmd/start.rs).
    pub fn arm_panic_give_back(&self) {
        self.probes.policy.arm_panic_give_back();
    }

    /// DRWA on or off, live, as user `uid` asked. Err: DRWA was not armed
    /// at start.
    pub fn set_drwa(&mut self, on: bool, uid: u32) -> Result<(), String> {
        use bloatd_model::policy::DrwaMode;
        if self.drwa == DrwaMode::Disabled {
            return Err("DRWA is disabled in this bloatd: start it with --drwa=off (armed, switched on live) or --drwa, or drwa = \"off\" in the config".into());
        }
        self.probes.policy.set_drwa(on).map_err(|e| e.to_string())?;
        self.drwa = if on { DrwaMode::On } else { DrwaMode::Off };
        tracing::info!("DRWA switched {} (asked by uid {uid})", self.drwa.as_str());
        Ok(())
    }

    /// A rule on or off, live, as user `uid` asked. Err: no rule of that
    /// name.
    pub fn set_rule_enabled(&mut self, name: &str, enabled: bool, uid: u32) -> Result<(), String> {
        let i = self
            .policy
            .names
            .iter()
            .position(|n| n == name)
            .ok_or_else(|| {
                format!(
                    "no policy rule named '{}' (rules: {})",
                    crate::text::printable(name),
                    if self.policy.names.is_empty() {
                        "none".into()
                    } else {
                        self.policy.names.join(", ")
                    }
                )
            })?;
        self.probes
            .policy
            .set_enabled(i as u32, enabled)
            .map_err(|e| e.to_string())?;
        tracing::info!(
            "policy rule {name} {} (asked by uid {uid})",
            if enabled { "enabled" } else { "disabled" }
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::watch_read_due;
    use std::time::Duration;

    #[test]
    fn watchers_share_a_read_in_proportion_to_its_cost_up_to_a_bound() {
        let ms = Duration::from_millis;
        let interval = ms(100);
        // A cheap read: every interval, as before.
        assert!(!watch_read_due(ms(99), ms(0), interval));
        assert!(watch_read_due(ms(100), ms(0), interval));
        // 20 ms (10,000 busy sockets): shared for 2 s.
        assert!(!watch_read_due(ms(1_999), ms(20), interval));
        assert!(watch_read_due(ms(2_000), ms(20), interval));
        // 300 ms (100,000 sockets): not 30 s, the bound.
        assert!(watch_read_due(ms(5_000), ms(300), interval));
        // An interval longer than the bound still holds.
        assert!(!watch_read_due(ms(5_000), ms(300), ms(10_000)));
    }
}
