//! What the loaded probes tell, read with `&self`: their counters and
//! statistics (for /metrics, status and the views), the floors, and how
//! they run on this kernel. A few map reads each, whatever the number of
//! sockets.

use super::abi::{
    self, stat, BloatdCcStats, BloatdFloor, BloatdPathKey, BloatdSockCounts, BloatdSvcKey,
    BloatdSvcStats,
};
use super::{map_iter, merge_cc_stats, Counters, NetnsReach, Probes, SamplerState, TRACEPOINTS};
use crate::error::Error;
use aya::programs::{BtfTracePoint, SockOps};
use std::os::fd::AsFd;
use std::sync::PoisonError;

impl Probes {
    /// Adaptive sampling as the probes run it: every CPU's state, and the
    /// sockets sampled every interval now.
    pub fn sampler(&self) -> Result<SamplerState, Error> {
        let cpus = self
            .sampler
            .get(&0, 0)
            .map_err(Error::map("sampler"))?
            .iter()
            .copied()
            .collect();
        let hot = self.hot.get(&0, 0).map_err(Error::map("hot"))?[0];
        Ok(SamplerState { cpus, hot })
    }

    /// The kernel's statistics by congestion control: (name, its entry
    /// summed over CPUs). Indexes that carry the same name (two CPUs met a
    /// new name at once) are summed into one.
    pub fn cc_stats(&self) -> Result<Vec<(String, BloatdCcStats)>, Error> {
        let mut out: Vec<(String, BloatdCcStats)> = Vec::new();
        for idx in 0..abi::limits::CC_MAX {
            let name = if idx == abi::limits::CC_MAX - 1 {
                "other".to_string()
            } else {
                let raw = self.cc_names.get(&idx, 0).map_err(Error::map("cc_names"))?;
                crate::text::cstr(&raw)
            };
            if name.is_empty() {
                continue;
            }
            let per_cpu = self.cc_stats.get(&idx, 0).map_err(Error::map("cc_stats"))?;
            let slot = match out.iter().position(|(n, _)| *n == name) {
                Some(i) => i,
                None => {
                    out.push((name, BloatdCcStats::default()));
                    out.len() - 1
                }
            };
            for cpu in per_cpu.iter() {
                merge_cc_stats(&mut out[slot].1, cpu);
            }
        }
        Ok(out)
    }

    /// Every per-service histogram the kernel keeps now, and its bound.
    pub fn svc_stats(&self) -> (Vec<(BloatdSvcKey, BloatdSvcStats)>, u32) {
        let map = self
            .svc_stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let entries = map.iter().filter_map(Result::ok).collect();
        (entries, self.service_entries)
    }

    /// Delete per-service histograms whose counts were folded (idle
    /// cgroups); returns those deleted.
    pub fn svc_delete(&self, keys: &[BloatdSvcKey]) -> Vec<BloatdSvcKey> {
        let mut map = self
            .svc_stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        keys.iter()
            .filter(|k| map.remove(k).is_ok())
            .copied()
            .collect()
    }

    /// Records alive now by congestion control index, role and state.
    pub fn sock_counts(&self) -> Result<BloatdSockCounts, Error> {
        self.sock_counts
            .get(&0, 0)
            .map_err(Error::map("sock_counts"))
    }

    /// The name behind a congestion control index of `sock_counts`.
    pub fn cc_name(&self, idx: u32) -> String {
        if idx == abi::limits::CC_MAX - 1 {
            return "other".into();
        }
        self.cc_names
            .get(&idx, 0)
            .map(|raw| crate::text::cstr(&raw))
            .unwrap_or_default()
    }

    pub fn map_capacity(&self) -> u32 {
        self.map_capacity
    }

    /// Every path floor the kernel keeps (peers and prefixes), in batches
    /// of each table.
    pub fn floors(&self) -> Result<Vec<(BloatdPathKey, BloatdFloor)>, Error> {
        let mut out = Vec::new();
        for m in &self.floors {
            out.extend(
                map_iter::hash_entries::<BloatdPathKey, BloatdFloor>(m.fd().as_fd(), 4096)
                    .map_err(Error::map("floors"))?,
            );
        }
        Ok(out)
    }

    /// How many floors the kernel keeps now, peers and prefixes.
    pub fn floors_count(&self) -> Result<u64, Error> {
        Ok(self.floors()?.len() as u64)
    }

    /// How reads reach other network namespaces, as a part `bloatd
    /// status`, top and /metrics show.
    pub fn netns_feature(&self) -> bloatd_model::Feature {
        use bloatd_model::FeatureState::{Fallback, Off, On};
        let (state, detail) = match self.reach {
            NetnsReach::OneWalk => (On, "the sockets of every network namespace in one walk of the socket storage map"),
            NetnsReach::Entering => (Fallback, "this kernel refuses map-element iterators: each read enters every network namespace with sockets (setns, CAP_SYS_ADMIN)"),
            NetnsReach::OwnOnly => (Off, "this kernel refuses map-element iterators and bloatd lacks CAP_SYS_ADMIN to enter network namespaces: sockets of other namespaces count in /metrics but sockets, top and paths list only bloatd's own namespace"),
        };
        bloatd_model::Feature {
            name: "netns_read".into(),
            state,
            detail: detail.into(),
        }
    }

    /// Why the sock_ops program is not attached, if it is not.
    pub fn sockops_error(&self) -> Option<&str> {
        self.sockops_error.as_deref()
    }

    /// What the kernel offers beyond the core, as detected at load.
    pub fn kernel(&self) -> &crate::probes::kernel::Kernel {
        &self.kernel
    }

    /// The tracepoint programs attached.
    pub fn tracepoints(&self) -> impl Iterator<Item = &'static str> + '_ {
        TRACEPOINTS.into_iter().filter(|&tp| {
            tp != crate::probes::kernel::CONG_STATE_TRACEPOINT || self.kernel.cong_state_tracepoint
        })
    }

    /// Probe counters summed over CPUs.
    pub fn counters(&self) -> Result<Counters, Error> {
        let mut out = [0u64; stat::MAX as usize];
        // tcp_probe's events are counted in the sampler's state (one
        // per-CPU lookup a segment).
        out[stat::PROBE as usize] = self.sampler()?.cpus.iter().map(|c| c.events).sum();
        for (i, slot) in out.iter_mut().enumerate() {
            let per_cpu = self
                .stats
                .get(&(i as u32), 0)
                .map_err(Error::map("stats"))?;
            *slot += per_cpu.iter().sum::<u64>();
        }
        Ok(Counters(out))
    }

    /// (tp, run_time_ns, run_count) from the kernel's BPF statistics;
    /// zeros unless kernel.bpf_stats_enabled is on.
    pub fn run_stats(&self) -> Vec<(&'static str, u64, u64)> {
        let mut runs: Vec<(&'static str, u64, u64)> = self
            .tracepoints()
            .filter_map(|tp| {
                let prog: &BtfTracePoint = self.ebpf.program(tp)?.try_into().ok()?;
                let info = prog.info().ok()?;
                Some((tp, info.run_time().as_nanos() as u64, info.run_count()))
            })
            .collect();
        if self.sockops_error.is_none() {
            let prog: Option<&SockOps> = self
                .ebpf
                .program("sock_ops")
                .and_then(|p| p.try_into().ok());
            if let Some(info) = prog.and_then(|p| p.info().ok()) {
                runs.push((
                    "sock_ops",
                    info.run_time().as_nanos() as u64,
                    info.run_count(),
                ));
            }
        }
        runs
    }
}
