//! The policy's maps (bpf/policy_ops.h): the rules the sock_ops program
//! applies, the live switches (DRWA on/off, stopping), and its counters.

use super::abi::{policy_count, BloatdPolicyCounts, BloatdPolicyCtl, BloatdPolicyRule};
use super::map_iter::MapIter;
use super::{errstr, ProbeError};
use aya::maps::{Array, MapData};
use aya::Ebpf;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// What the probes are loaded with.
#[derive(Clone, Debug, Default)]
pub struct PolicyConfig {
    /// The rules, in order (resolved: policy.rs).
    pub rules: Vec<BloatdPolicyRule>,
    /// Ask new connections for a callback per segment they send, so DRWA
    /// can act on them (drwa "on" or "off").
    pub drwa_armed: bool,
    /// DRWA switched on at start.
    pub drwa_on: bool,
    pub drwa_lambda_x256: u32,
    pub drwa_min_bytes: u64,
}

pub struct PolicyMaps {
    rules: Array<MapData, BloatdPolicyRule>,
    ctl: Array<MapData, BloatdPolicyCtl>,
    counts: Array<MapData, BloatdPolicyCounts>,
    armed: bool,
    /// iter/tcp `restore_windows`: gives idle receivers their windows back.
    restore: Option<MapIter>,
}

fn map_err(map: &'static str) -> impl Fn(aya::maps::MapError) -> ProbeError {
    move |e| ProbeError::Map {
        map,
        detail: errstr(e),
    }
}

impl PolicyMaps {
    /// Take the maps from the loaded object and write the rules and the
    /// switches, before the sock_ops program is attached.
    pub fn load(ebpf: &mut Ebpf, cfg: &PolicyConfig) -> Result<PolicyMaps, ProbeError> {
        let mut take = |name: &'static str| {
            ebpf.take_map(name)
                .ok_or_else(|| ProbeError::Object(format!("map {name} missing from object")))
        };
        let mut maps = PolicyMaps {
            rules: Array::try_from(take("policy_rules")?).map_err(map_err("policy_rules"))?,
            ctl: Array::try_from(take("policy_ctl")?).map_err(map_err("policy_ctl"))?,
            counts: Array::try_from(take("policy_counts")?).map_err(map_err("policy_counts"))?,
            armed: cfg.drwa_armed,
            restore: None,
        };
        for (i, r) in cfg.rules.iter().enumerate() {
            maps.rules
                .set(i as u32, *r, 0)
                .map_err(map_err("policy_rules"))?;
        }
        maps.set_drwa(cfg.drwa_on)?;
        Ok(maps)
    }

    /// The iterator that restores windows in one network namespace.
    pub fn set_restore(&mut self, it: MapIter) {
        self.restore = Some(it);
    }

    fn ctl(&self) -> Result<BloatdPolicyCtl, ProbeError> {
        self.ctl.get(&0, 0).map_err(map_err("policy_ctl"))
    }

    /// DRWA on or off for every armed receiver, now.
    pub fn set_drwa(&mut self, on: bool) -> Result<(), ProbeError> {
        let ctl = BloatdPolicyCtl {
            drwa_on: on as u32,
            ..self.ctl()?
        };
        self.ctl.set(0, ctl, 0).map_err(map_err("policy_ctl"))
    }

    /// A rule on or off, now.
    pub fn set_enabled(&mut self, index: u32, enabled: bool) -> Result<(), ProbeError> {
        let mut r = self.rules.get(&index, 0).map_err(map_err("policy_rules"))?;
        r.enabled = enabled as u8;
        self.rules.set(index, r, 0).map_err(map_err("policy_rules"))
    }

    pub fn enabled(&self, index: u32) -> bool {
        self.rules
            .get(&index, 0)
            .map(|r| r.enabled != 0)
            .unwrap_or(false)
    }

    pub fn counts(&self) -> Result<BloatdPolicyCounts, ProbeError> {
        self.counts.get(&0, 0).map_err(map_err("policy_counts"))
    }

    /// Before the sock_ops program goes: every receiver DRWA clamps gets
    /// its window back at its next ACK (`stopping`), so wait until none is
    /// clamped, at most `timeout`; then the TCP iterator restores the rest
    /// (receivers that sent no ACK meanwhile) in every network namespace
    /// it can enter. Returns how many are still clamped (sockets of a
    /// namespace no process or /run/netns holds).
    pub fn release_windows(&mut self, timeout: Duration) -> i64 {
        if !self.armed {
            return 0;
        }
        if let Ok(ctl) = self.ctl() {
            let _ = self.ctl.set(0, BloatdPolicyCtl { stopping: 1, ..ctl }, 0);
        }
        let clamped = |m: &Self| {
            m.counts()
                .map(|c| c.n[policy_count::DRWA_SOCKETS as usize])
                .unwrap_or(0)
        };
        let deadline = Instant::now() + timeout;
        while clamped(self) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if clamped(self) > 0 {
            if let Some(it) = &self.restore {
                restore_in_every_netns(it);
            }
        }
        clamped(self)
    }
}

/// Run the restore iterator in every network namespace: a TCP iterator
/// walks the namespace of the thread that creates it, and setns changes
/// only the calling thread, so a short-lived thread enters each in turn.
fn restore_in_every_netns(it: &MapIter) {
    let namespaces = bloatd_cc::network_namespaces();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for (label, _, f) in namespaces {
                // SAFETY: f is an open nsfs file; setns changes this thread only.
                if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    tracing::debug!(
                        "restoring DRWA windows: cannot enter {label}: {}",
                        std::io::Error::last_os_error()
                    );
                    continue;
                }
                if let Err(e) = it.read() {
                    tracing::warn!("restoring DRWA windows in {label}: {e}");
                }
            }
        });
    });
}
