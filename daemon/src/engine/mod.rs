//! The engine shared by the daemon and by `bloatd top`'s embedded mode,
//! in parts by role, each behind its own lock, so a route takes only what
//! it uses (server.rs):
//!
//! - [`loaded`]: what bloatd loaded into the kernel (probes, congestion
//!   controls, the configuration): status, health, floors, the cc list;
//! - [`reader`]: the full reads of every socket and their schedule, the
//!   watched sockets' samples, who watches;
//! - [`views`]: what one read shows (rows, paths, services), each made once
//!   per read outside the reader's lock;
//! - [`control`]: the policy, DRWA and the default congestion control;
//! - [`scrape`]: /metrics, which waits on no read and no view;
//! - [`classify`]: what kind of queue each path waits in, from the reads;
//! - [`worker`]: the thread reads and views are made on, off the runtime's.

pub mod classify;
pub mod control;
pub mod loaded;
pub mod reader;
pub mod scrape;
pub mod views;
pub mod worker;

use crate::authority::Viewer;
use crate::cc::CcSet;
use crate::clock::Clock;
use crate::error::Result;
use crate::probes::Probes;
use crate::settings::Config;
use crate::tracker::{Rows, Tracker};
use bloatd_model::policy::DrwaMode;
use bloatd_model::{Snapshot, SnapshotRequest};
use control::Control;
use loaded::Loaded;
use reader::Reader;
use scrape::Scraper;
use std::sync::Arc;

/// The parts, shared: a clone is four `Arc`s.
#[derive(Clone)]
pub struct Engine {
    pub loaded: Arc<Loaded>,
    pub reader: Arc<Reader>,
    pub control: Arc<Control>,
    pub scrape: Arc<Scraper>,
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
    if cfg.drwa == DrwaMode::Disabled {
        return None;
    }
    match prepare_pin(&pin) {
        Ok(()) => Some(pin),
        Err(e) => {
            tracing::warn!("DRWA's window clamps are not crash-safe: {}; a bloatd that dies without stopping leaves them on the sockets it clamped", crate::error::Chain(&e));
            None
        }
    }
}

impl Engine {
    /// Load the probes, read what exists, register the congestion controls.
    pub fn start(cfg: &Config, mode: &'static str, with_metrics: bool) -> Result<Engine> {
        let policy = crate::policy::resolve(&cfg.policy, &cfg.cc)?;
        let saved_pin = (mode == "daemon").then(|| drwa_saved_pin(cfg)).flatten();
        let (probes, sockets) = Probes::load(
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
        let loaded = Arc::new(Loaded::new(probes, cc, cfg, mode, with_metrics));
        let reader = Arc::new(Reader::new(loaded.clone(), sockets, tracker));
        let control = Arc::new(Control::new(loaded.clone(), policy.names));
        let scrape = Arc::new(Scraper::new(loaded.clone(), control.clone()));
        Ok(Engine {
            loaded,
            reader,
            control,
            scrape,
        })
    }

    /// Called every sampling interval (reader.rs), with the services' fold
    /// now and then.
    pub fn tick(&self) {
        if self.reader.tick() {
            self.scrape.fold_services();
        }
        self.feed_recorder();
        let classes = self
            .loaded
            .classifier
            .take(&self.reader.views_if(|_, _| false));
        if let Some(classes) = classes {
            self.control.set_path_classes(&classes);
        }
    }

    /// From now on the reads (at most one a second) go to the flight
    /// recorder too, and the ticks read for it when it asks. Once.
    pub fn record_to(&self, seam: crate::recorder::Seam) {
        if self.loaded.recorder.set(seam).is_err() {
            tracing::warn!("a second flight recorder refused");
        }
    }

    /// Once a second, the last read to the recorder if it has not had it,
    /// a new one first if its schedule says so (recorder/mod.rs, "What it
    /// costs the engine"). Its rows are the view dashboards share; making
    /// them counts in the read's cost.
    fn feed_recorder(&self) {
        let Some(seam) = self.loaded.recorder.get() else {
            return;
        };
        if !seam.check_due() {
            return;
        }
        let bloat = self.kernel_bloat();
        let views = self
            .reader
            .views_if(|age, cost| seam.read_due(age, cost, bloat));
        if !seam.wants(views.read) {
            return;
        }
        let policy = self
            .control
            .policy_counts()
            .map(|counts| crate::recorder::PolicySnap {
                drwa: self.control.drwa().as_str().into(),
                counts,
            });
        seam.feed(
            views.read,
            crate::recorder::Feed {
                t_ms: views.taken_ms,
                sockets: views.sockets(),
                policy,
                class_of: Some({
                    let c = self.loaded.classifier.clone();
                    Arc::new(move |netns, peer, interface: &str| c.class_of(netns, peer, interface))
                }),
            },
        );
    }

    /// Whether the kernel counted a bloated socket in this second or the
    /// last (a few map reads).
    fn kernel_bloat(&self) -> bool {
        let now_s = Clock::now().mono_ns / 1_000_000_000;
        self.loaded.probes.cc_stats().is_ok_and(|per_cc| {
            per_cc.iter().flat_map(|(_, st)| st.role.iter()).any(|r| {
                (0..r.bloated.len()).any(|i| r.bloated[i] > 0 && r.bloated_sec[i] + 1 >= now_s)
            })
        })
    }

    /// What the dashboard draws (`req`): the sockets as of the last read
    /// (`fresh`: a read at most one sampling interval old, the one
    /// `/v1/sockets` shares: asking in a loop cannot make the daemon read
    /// the kernel more than once an interval), all of them or, with a
    /// limit, the first rows in its sort order passing its filter with the
    /// host's summary (`bloatd_model::select::select_rows`), plus the
    /// samples of one socket newer than `since_ms`. A dashboard asking
    /// counts as someone looking. Err: a bad sort key or filter.
    pub fn snapshot(&self, req: &SnapshotRequest, fresh: bool, viewer: Viewer) -> Result<Snapshot> {
        let (mut snap, rows) = self.snapshot_parts(req, fresh, viewer)?;
        if let Some(rows) = rows {
            snap.sockets = rows.iter().collect();
        }
        Ok(snap)
    }

    /// The same, with every socket (no `limit`) left as `Rows` for the
    /// caller to stream: the snapshot's `sockets` is then empty.
    pub fn snapshot_parts(
        &self,
        req: &SnapshotRequest,
        fresh: bool,
        viewer: Viewer,
    ) -> Result<(Snapshot, Option<Rows>)> {
        let (views, series) = self.reader.look(viewer, fresh, req.series, req.since_ms);
        let cfg = &self.loaded.cfg;
        let threshold_us = cfg.bloat_threshold_us();
        let (mut sockets, mut summary, mut matched) = (Vec::new(), None, None);
        let paths = if req.paths {
            views.paths(false).as_ref().clone()
        } else {
            Vec::new()
        };
        let services = if req.services {
            views.services().as_ref().clone()
        } else {
            Vec::new()
        };
        if req.limit.is_some() {
            let (page, n, s) =
                bloatd_model::select::select_rows(&views.sockets(), req, threshold_us)?;
            (sockets, matched, summary) = (page, Some(n), Some(s));
        }
        let all = req.limit.is_none().then(|| views.rows(false));
        let snap = Snapshot {
            summary,
            matched,
            taken_ms: Clock::now().unix_ms,
            interval_ms: cfg.interval_ms as u32,
            bloat_threshold_us: threshold_us,
            sockets,
            series: series.into_iter().collect(),
            health: self.loaded.health(),
            paths,
            policy: self.control.policy_state(),
            services,
            episodes: self
                .loaded
                .recorder
                .get()
                .map(|r| r.open())
                .unwrap_or_default(),
        };
        Ok((snap, all))
    }

    /// Stop: every part dropped here, the loaded probes and congestion
    /// controls last (their drops give DRWA's windows back, detach, restore
    /// the default). False if a part is still held elsewhere: then the
    /// kernel detaches it when the process ends.
    pub fn stop(self) -> bool {
        let Engine {
            loaded,
            reader,
            control,
            scrape,
        } = self;
        drop((scrape, control, reader));
        Arc::try_unwrap(loaded).map(drop).is_ok()
    }
}
