//! The engine shared by the daemon and by `bloatd top`'s embedded mode:
//! probes in the kernel, the socket model fed from them, the metrics, and
//! the registered congestion controls.

use crate::cc::CcSet;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::model::{Clock, Model};
use crate::api::{FloorEntry, Floors};
use crate::probes::{abi, abi::stat, ProbeConfig, Probes, HOOKS};
use bloatd_tui::model::{CcState, FloorSource, Health, Path, Series, Snapshot, Socket};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// How often the whole socket map is read to catch sockets whose close
/// record was lost and idle sockets the ring buffer never carries.
const REFRESH_EVERY: Duration = Duration::from_secs(10);
const SWEEP_EVERY: Duration = Duration::from_secs(5);

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Status {
    pub pid: u32,
    pub version: String,
    pub mode: String,
    pub started_unix_ms: u64,
    pub interval_ms: u64,
    pub hooks: Vec<String>,
    pub cc_registered: Vec<String>,
    pub default_cc: Option<String>,
    pub listen: Option<String>,
    pub sockets: usize,
    pub health: Health,
    /// Why senders that closed their end are not sampled (no sock_ops
    /// program on the cgroup v2 root), if they are not.
    #[serde(default)]
    pub sockops_error: Option<String>,
}

pub struct Core {
    probes: Probes,
    model: Model,
    metrics: Option<Metrics>,
    cc: CcSet,
    cfg: Config,
    mode: &'static str,
    started_unix_ms: u64,
    last_refresh: Instant,
    last_sweep: Instant,
}

impl Core {
    /// Load the probes, read what exists, register the congestion controls.
    pub fn start(cfg: &Config, mode: &'static str, with_metrics: bool) -> anyhow::Result<Core> {
        let probes = Probes::load(&ProbeConfig {
            interval: Duration::from_millis(cfg.interval_ms),
            map_capacity: cfg.map_entries,
            bpf_stats: cfg.bpf_stats,
            floor_window_s: cfg.floor_window_s,
            floor_entries: cfg.floor_entries,
            floor_prefix_v4: cfg.floor_prefix_v4,
            floor_prefix_v6: cfg.floor_prefix_v6,
            floor_infer: cfg.floor_infer,
        })?;
        let cc = CcSet::register(&cfg.cc)?;
        let mut core = Core {
            probes,
            model: Model::new(cfg.interval_ms, cfg.series_seconds),
            metrics: with_metrics.then(Metrics::new),
            cc,
            cfg: cfg.clone(),
            mode,
            started_unix_ms: Clock::now().unix_ms,
            last_refresh: Instant::now(),
            last_sweep: Instant::now(),
        };
        core.refresh(false);
        Ok(core)
    }

    /// Read the whole socket map into the model.
    fn refresh(&mut self, count_history: bool) {
        let recs = match self.probes.read_all() {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("{e}");
                return;
            }
        };
        for o in self.model.refresh(recs, count_history) {
            if let Some(m) = &self.metrics {
                m.observe(&o);
            }
        }
        self.last_refresh = Instant::now();
    }

    /// Called every sampling interval: take in the probes' samples.
    pub fn tick(&mut self) {
        let clock = Clock::now();
        let (model, metrics) = (&mut self.model, &self.metrics);
        self.probes.drain(|rec| {
            if let Some(o) = model.apply(rec, &clock) {
                if let Some(m) = metrics {
                    m.observe(&o);
                }
            }
        });
        if !self.cc.is_empty() {
            let states = self.cc.states();
            if let Some(m) = &self.metrics {
                for r in self.model.active(&clock, self.cfg.interval_ms * 1_000_000) {
                    if let Some(CcState::Westwood { pipe_segments, .. }) = states.get(&r.cookie) {
                        m.observe_westwood(r.cwnd, *pipe_segments);
                    }
                }
            }
            self.model.set_cc_states(states);
        }
        if self.last_refresh.elapsed() >= REFRESH_EVERY {
            self.refresh(true);
        }
        if self.last_sweep.elapsed() >= SWEEP_EVERY {
            self.model.sweep(&clock, self.cfg.series_seconds);
            self.last_sweep = Instant::now();
        }
    }

    /// Sockets with their numbers read from the kernel now (not the last
    /// sample), for `bloatd sockets` and scripts comparing with `ss`.
    pub fn sockets_fresh(&mut self, all: bool) -> Vec<Socket> {
        self.tick();
        self.refresh(true);
        self.model.sockets(&Clock::now(), all)
    }

    /// Sockets grouped by path, worst queue first (`prefix`: by the
    /// configured prefixes instead of by peer).
    pub fn paths(&mut self, prefix: bool) -> Vec<Path> {
        let socks = self.sockets_fresh(false);
        let by = prefix.then_some((self.cfg.floor_prefix_v4, self.cfg.floor_prefix_v6));
        crate::paths::paths_of(&socks, by)
    }

    /// Every floor the kernel keeps, as the probes would read it now.
    pub fn floors(&self) -> anyhow::Result<Floors> {
        let now_s = (Clock::now().mono_ns / 1_000_000_000) as u32;
        let window_s = self.cfg.floor_window_s;
        let raw = self.probes.floors()?;
        let c = self.probes.counters()?;
        let created = c[stat::FLOOR_NEW as usize];
        let mut floors: Vec<FloorEntry> = raw
            .iter()
            .filter_map(|(k, f)| {
                let (floor_us, source) = crate::probes::floor_now(f, window_s, now_s)?;
                Some(FloorEntry {
                    netns: k.netns,
                    peer: crate::model::addr(k.family, &k.addr),
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
        floors.sort_by(|a, b| (a.netns, a.peer, a.prefix_len).cmp(&(b.netns, b.peer, b.prefix_len)));
        Ok(Floors {
            window_s,
            capacity: self.cfg.floor_entries,
            created,
            evicted: crate::probes::floor_evictions(created, raw.len() as u64),
            floors,
        })
    }

    pub fn health(&self) -> Health {
        let c = self.probes.counters().unwrap_or([0; stat::MAX as usize]);
        Health {
            events_total: c[stat::PROBE as usize]
                + c[stat::STATE as usize]
                + c[stat::RETRANS as usize]
                + c[stat::CONG as usize],
            dropped_total: c[stat::DROP_MAP_FULL as usize] + c[stat::DROP_RINGBUF as usize],
            map_entries: c[stat::CREATED as usize].saturating_sub(c[stat::DELETED as usize]),
            map_capacity: self.probes.map_capacity() as u64,
            mode: self.mode.to_string(),
        }
    }

    /// What the dashboard draws: all sockets as of the last samples (or,
    /// `fresh`, as the kernel has them now), plus the samples of one socket
    /// newer than `since_ms`.
    pub fn snapshot(&mut self, series_for: Option<u64>, since_ms: u64, fresh: bool) -> Snapshot {
        if fresh {
            self.tick();
            self.refresh(true);
        }
        let clock = Clock::now();
        Snapshot {
            taken_ms: clock.unix_ms,
            interval_ms: self.cfg.interval_ms as u32,
            bloat_threshold_us: (self.cfg.bloat_threshold_ms * 1000) as u32,
            sockets: self.model.sockets(&clock, false),
            series: series_for
                .and_then(|c| self.model.series(c, since_ms))
                .into_iter()
                .collect::<Vec<Series>>(),
            health: self.health(),
        }
    }

    pub fn metrics_text(&mut self) -> String {
        let clock = Clock::now();
        let counters = self.probes.counters().unwrap_or([0; stat::MAX as usize]);
        let runs = self.probes.run_stats();
        let threshold_us = (self.cfg.bloat_threshold_ms * 1000) as u32;
        let Some(m) = self.metrics.as_mut() else { return String::new() };
        m.update_probes(&counters, &runs, self.probes.map_capacity());
        m.update_gauges(&self.model.sockets(&clock, true), threshold_us);
        m.encode()
    }

    pub fn status(&self) -> Status {
        Status {
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").into(),
            mode: self.mode.into(),
            started_unix_ms: self.started_unix_ms,
            interval_ms: self.cfg.interval_ms,
            hooks: HOOKS
                .iter()
                .map(|h| format!("tp_btf/{h}"))
                .chain(self.probes.sockops_error().is_none().then(|| "cgroup/sock_ops".to_string()))
                .collect(),
            cc_registered: self.cc.names(),
            default_cc: bloatd_cc::kernel_default().ok(),
            listen: self.metrics.as_ref().map(|_| self.cfg.listen.to_string()),
            sockets: self.model.len(),
            health: self.health(),
            sockops_error: self.probes.sockops_error().map(str::to_string),
        }
    }

    pub fn cc(&mut self) -> &mut CcSet {
        &mut self.cc
    }
}
