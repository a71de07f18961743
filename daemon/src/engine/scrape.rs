//! /metrics: the kernel's statistics of this moment, a few map reads
//! whatever the number of sockets. It takes no lock a read or a view holds
//! (reader.rs, views.rs): its own, for the services' fold, and the probes'
//! and the congestion controls' for as long as a map read.

use super::control::Control;
use super::loaded::Loaded;
use crate::clock::Clock;
use crate::error::Chain;
use crate::metrics::{Metrics, Scrape};
use crate::service::labels::ServiceLabels;
use crate::service::ServiceNames;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

pub struct Scraper {
    loaded: Arc<Loaded>,
    control: Arc<Control>,
    /// The kernel's per-service histograms, folded into /metrics' bounded
    /// `service` label, and the names of their cgroups.
    services: Mutex<(ServiceLabels, ServiceNames)>,
}

impl Scraper {
    pub fn new(loaded: Arc<Loaded>, control: Arc<Control>) -> Scraper {
        let labels = ServiceLabels::new(loaded.cfg.service_labels as usize);
        let names = ServiceNames::new(crate::probes::cgroup2_root());
        Scraper {
            loaded,
            control,
            services: Mutex::new((labels, names)),
        }
    }

    /// Fold the kernel's per-service histograms into the `service` label's
    /// totals, and delete the entries of cgroups that stopped counting, so
    /// the kernel's bound holds the services active now (service/labels.rs).
    /// The per-service histograms first, the per-cc statistics right after
    /// (`scrape`): both count the same samples.
    pub fn fold_services(&self) {
        let probes = &self.loaded.probes;
        let mut services = self.services.lock().unwrap_or_else(PoisonError::into_inner);
        let (labels, names) = &mut *services;
        let (entries, capacity) = probes.svc_stats();
        names.learn(entries.iter().map(|(k, _)| k.cgroup_id));
        let idle = labels.fold(
            &entries,
            &|id| names.name(id),
            Instant::now(),
            capacity as usize,
        );
        let gone = probes.svc_delete(&idle);
        labels.forget(&gone);
    }

    /// /metrics' text ("" where bloatd serves none: `top`'s embedded mode).
    pub fn text(&self) -> String {
        if !self.loaded.serves_metrics {
            return String::new();
        }
        Metrics::new().encode(self.scrape())
    }

    /// Everything /metrics shows, read now.
    fn scrape(&self) -> Scrape {
        self.fold_services();
        let probes = &self.loaded.probes;
        let services = {
            let s = self.services.lock().unwrap_or_else(PoisonError::into_inner);
            crate::service::metrics::service_hists(&s.0, &|i| probes.cc_name(i))
        };
        let counters = probes.counters().unwrap_or_default();
        let (bottlenecks, owners) = self.loaded.classifier.counts();
        let per_cc = probes.cc_stats().unwrap_or_else(|e| {
            tracing::warn!("{}", Chain(&e));
            Vec::new()
        });
        let mut sockets = Vec::new();
        if let Ok(c) = probes.sock_counts() {
            for (cc, by_role) in c.n.iter().enumerate() {
                for (role, by_state) in by_role.iter().enumerate() {
                    for (state, &n) in by_state.iter().enumerate() {
                        if n > 0 {
                            sockets.push((probes.cc_name(cc as u32), role, state, n));
                        }
                    }
                }
            }
        }
        let (cc_export_failures, westwood_cwnd_pipe) = {
            let cc = self.loaded.cc();
            (cc.export_failures(), cc.westwood_cwnd_pipe_ratio())
        };
        Scrape {
            per_cc,
            sockets,
            bloated_second: (Clock::now().mono_ns / 1_000_000_000).saturating_sub(1),
            counters,
            runs: probes.run_stats(),
            map_capacity: probes.map_capacity(),
            sampler: (self.loaded.cfg.sampling == crate::settings::Sampling::Adaptive)
                .then(|| probes.sampler().ok())
                .flatten(),
            floors: probes.floors_count().unwrap_or(0),
            cc_export_failures,
            westwood_cwnd_pipe,
            features: self.loaded.features(),
            policy: self
                .control
                .policy_counts()
                .map(|c| (c, self.control.drwa())),
            services,
            episodes: self.loaded.recorder.get().map(|r| r.counts()),
            bottlenecks,
            owners,
        }
    }
}
