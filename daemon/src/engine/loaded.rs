//! What bloatd loaded into the kernel and how it runs there: the probes
//! (their maps read with `&self`), the registered congestion controls, the
//! configuration. Status, health, features, floors and the cc list read it;
//! nothing here reads every socket.

use crate::cc::CcSet;
use crate::clock::Clock;
use crate::probes::{abi, abi::stat, Probes};
use crate::settings::Config;
use bloatd_model::api::{CcInfo, FloorEntry, Floors, Status};
use bloatd_model::{FloorSource, Health};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

pub struct Loaded {
    pub probes: Probes,
    /// bloatd's congestion controls: their states go into every read and
    /// /metrics reads their counters, side by side; only switching the
    /// default (control.rs) takes it alone.
    cc: RwLock<CcSet>,
    pub cfg: Config,
    pub mode: &'static str,
    started_unix_ms: u64,
    /// /metrics is served (the daemon; not `bloatd top`'s embedded mode).
    pub serves_metrics: bool,
    /// The flight recorder, once the daemon started it (after the probes:
    /// it runs without capabilities).
    pub recorder: std::sync::OnceLock<crate::recorder::Seam>,
    /// What kind of queue each path waits in (classify.rs).
    pub classifier: std::sync::Arc<super::classify::Classifier>,
}

impl Loaded {
    pub fn new(
        probes: Probes,
        cc: CcSet,
        cfg: &Config,
        mode: &'static str,
        serves_metrics: bool,
    ) -> Loaded {
        Loaded {
            probes,
            cc: RwLock::new(cc),
            cfg: cfg.clone(),
            mode,
            started_unix_ms: Clock::now().unix_ms,
            serves_metrics,
            recorder: std::sync::OnceLock::new(),
            classifier: std::sync::Arc::new(super::classify::Classifier::new(cfg.aqm_queue_ms)),
        }
    }

    /// The congestion controls, to read (map reads, shared).
    pub fn cc(&self) -> RwLockReadGuard<'_, CcSet> {
        self.cc.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The congestion controls, to switch the default (a sysctl).
    pub fn cc_mut(&self) -> RwLockWriteGuard<'_, CcSet> {
        self.cc.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The parts beyond the core and how this kernel runs them.
    pub fn features(&self) -> Vec<bloatd_model::Feature> {
        let cc = self.cc();
        let names = cc.names();
        let mut f = crate::probes::kernel::features(
            self.probes.kernel(),
            self.probes.sockops_error(),
            cc.registered_by()
                .map(|by| crate::probes::kernel::CcRegistration { names: &names, by }),
            cc.declined(),
        );
        f.push(self.probes.netns_feature());
        f.push(sampling_feature(self.cfg.sampling));
        f.extend(self.recorder.get().map(|r| r.feature()));
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
            cc_registered: self.cc().names(),
            default_cc: bloatd_cc::kernel_default().ok(),
            listen: self.serves_metrics.then(|| self.cfg.listen.to_string()),
            sockets: health.map_entries as usize,
            health,
            sockops_error: self.probes.sockops_error().map(str::to_string),
            kernel: crate::probes::kernel::release(),
        }
    }

    /// bloatd's algorithms, those it registered, and the kernel's.
    pub fn cc_info(&self) -> crate::error::Result<CcInfo> {
        Ok(CcInfo {
            bloatd: bloatd_cc::Algo::ALL
                .iter()
                .map(|a| a.name().to_string())
                .collect(),
            registered: self.cc().names(),
            available: bloatd_cc::kernel_available()?,
            default: bloatd_cc::kernel_default()?,
        })
    }

    /// Every floor the kernel keeps, as the probes would read it now.
    pub fn floors(&self) -> crate::error::Result<Floors> {
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
}

/// How the probes sample, as a part `bloatd status`, top and /metrics
/// (`bloatd_feature_enabled{feature="adaptive_sampling"}`) show.
pub fn sampling_feature(s: crate::settings::Sampling) -> bloatd_model::Feature {
    use crate::settings::Sampling;
    match s {
        Sampling::Adaptive => bloatd_model::Feature {
            name: "adaptive_sampling".into(),
            state: bloatd_model::FeatureState::On,
            detail: "on a busy CPU, sparse sockets looked at in a share of their segments, weighted; bloated, watched, acted-on and dense sockets (and those on a path just bloated) every interval".into(),
        },
        Sampling::Exact => bloatd_model::Feature {
            name: "adaptive_sampling".into(),
            state: bloatd_model::FeatureState::Off,
            detail: "sampling = \"exact\": every socket sampled every interval it carries traffic".into(),
        },
    }
}
