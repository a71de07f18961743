//! What the kernel is given and what it gives back: rules resolved
//! against this system (algorithms the kernel has, cgroups as kernfs ids),
//! DRWA's lambda in the kernel's fixed point, a socket record's policy as
//! the view shows it, and the kernel's counters.

use super::rules::{cgroup_rel, rule_name};
use crate::probes::abi::{policy_action, policy_count, policy_flag, policy_match};
use crate::probes::abi::{BloatdPolicyCounts, BloatdPolicyRule, BloatdSock};
use bloatd_model::api::PolicyCounts;
use bloatd_model::policy::Rule;
use bloatd_model::{Drwa, SocketPolicy};
use std::path::{Path, PathBuf};

/// What the kernel is given: the rules with their cgroups resolved and
/// their algorithms checked against the kernel's.
#[derive(Clone, Debug, Default)]
pub struct Resolved {
    pub names: Vec<String>,
    pub kernel: Vec<BloatdPolicyRule>,
}

/// A cgroup path (absolute, or relative to the cgroup v2 root) as the
/// kernel knows it: (kernfs id = inode, depth below the root).
pub fn resolve_cgroup(path: &str, root: &Path) -> Result<(u64, u32), String> {
    use std::os::unix::fs::MetadataExt;
    let full: PathBuf = if Path::new(path).is_absolute() && Path::new(path).starts_with(root) {
        PathBuf::from(path)
    } else {
        root.join(cgroup_rel(path, root))
    };
    let canon = full.canonicalize().map_err(|_| {
        format!(
            "no cgroup '{path}' (looked for {}): create it, or name one under {}",
            full.display(),
            root.display()
        )
    })?;
    if !canon.starts_with(root) {
        return Err(format!(
            "cgroup '{path}' is not under the cgroup v2 root {}",
            root.display()
        ));
    }
    let meta = std::fs::metadata(&canon).map_err(|e| format!("cgroup '{path}': {e}"))?;
    if !meta.is_dir() || !canon.join("cgroup.procs").exists() {
        return Err(format!(
            "'{path}' ({}) is not a cgroup v2 directory",
            canon.display()
        ));
    }
    let level = canon
        .strip_prefix(root)
        .map(|r| r.components().count())
        .unwrap_or(0);
    Ok((meta.ino(), level as u32))
}

/// The checks against this system, for `start` (and `top`'s embedded
/// mode): every algorithm a rule names exists (bloatd's own only when this
/// bloatd registers it), every cgroup exists.
pub fn resolve(rules: &[Rule], registered: &[String]) -> Result<Resolved, String> {
    let mut out = Resolved::default();
    if rules.is_empty() {
        return Ok(out);
    }
    let available = bloatd_cc::kernel_available().unwrap_or_default();
    let root = crate::probes::cgroup2_root();
    for (i, r) in rules.iter().enumerate() {
        let name = rule_name(r, i);
        let mut k = BloatdPolicyRule {
            enabled: r.enabled as u8,
            ..Default::default()
        };
        if let Some(cc) = &r.cc {
            let ours = bloatd_cc::Algo::from_name(cc).is_some();
            if ours && !registered.iter().any(|x| x == cc) && !available.iter().any(|x| x == cc) {
                return Err(format!(
                    "policy rule '{name}': {cc} is registered by bloatd only when it is in `cc` (now: {}): add it, or drop --no-cc",
                    if registered.is_empty() { "none".into() } else { registered.join(", ") }
                ));
            }
            if !ours && !available.iter().any(|x| x == cc) {
                return Err(format!(
                    "policy rule '{name}': unknown congestion control '{cc}' (this kernel has: {}; bloatd adds bloatd_westwood and bloatd_cubic)",
                    available.join(" ")
                ));
            }
            k.actions |= policy_action::CC as u8;
            k.cc[..cc.len()].copy_from_slice(cc.as_bytes());
        }
        if r.drwa {
            k.actions |= policy_action::DRWA as u8;
        }
        if let Some(b) = r.notsent_lowat {
            k.actions |= policy_action::NOTSENT_LOWAT as u8;
            k.notsent_lowat = b.0.min(u32::MAX as u64) as u32;
        }
        if let Some(p) = r.dport {
            k.selectors |= policy_match::DPORT as u8;
            (k.dport_lo, k.dport_hi) = (p.lo, p.hi);
        }
        if let Some(p) = r.sport {
            k.selectors |= policy_match::SPORT as u8;
            (k.sport_lo, k.sport_hi) = (p.lo, p.hi);
        }
        if let Some(c) = &r.cgroup {
            let root = root.as_deref().ok_or_else(|| {
                format!(
                    "policy rule '{name}' selects a cgroup, but no cgroup v2 hierarchy is mounted"
                )
            })?;
            let (id, level) =
                resolve_cgroup(c, root).map_err(|e| format!("policy rule '{name}': {e}"))?;
            k.selectors |= policy_match::CGROUP as u8;
            (k.cgroup_id, k.cgroup_level) = (id, level);
        }
        if let Some(b) = r.bulk_bytes {
            k.selectors |= policy_match::BULK as u8;
            k.bulk_bytes = b.0;
        }
        out.names.push(name);
        out.kernel.push(k);
    }
    Ok(out)
}

/// What the policy did to a socket, from its record; None if nothing.
pub fn socket_policy(rec: &BloatdSock, names: &[String]) -> Option<SocketPolicy> {
    let p = &rec.pol;
    let flags = p.flags as u32;
    let name = |i: u8| -> Option<String> {
        (i > 0).then(|| {
            names
                .get(i as usize - 1)
                .cloned()
                .unwrap_or_else(|| format!("rule{i}"))
        })
    };
    let clamped = flags & policy_flag::DRWA_CLAMPED != 0;
    let drwa =
        (clamped || p.drwa_rounds > 0 || (p.drwa_rule > 0 && flags & policy_flag::DRWA_ARMED != 0))
            .then(|| {
                let mss = if rec.mss > 0 { rec.mss } else { 1448 };
                let clamp = if clamped { p.drwa_clamp } else { 0 };
                Drwa {
                    by: name(p.drwa_rule).unwrap_or_else(|| "switch".into()),
                    clamp_bytes: clamp,
                    clamp_segments: clamp.div_ceil(mss),
                    rcvd_per_rtt_bytes: p.drwa_rcvd_rtt,
                    rtt_us: p.drwa_rtt_us,
                    floor_us: p.drwa_floor_us,
                    rounds: p.drwa_rounds,
                }
            });
    let sp = SocketPolicy {
        cc_rule: name(p.cc_rule),
        bulk_rule: name(p.bulk_rule),
        bulk_waiting: flags & policy_flag::BULK_WAIT != 0,
        cc_failed: flags & policy_flag::CC_FAILED != 0,
        notsent_lowat_rule: name(p.lowat_rule),
        notsent_lowat_failed: flags & policy_flag::LOWAT_FAILED != 0,
        drwa,
    };
    (sp != SocketPolicy::default()).then_some(sp)
}

/// The policy's counters from the kernel's (bpf/policy.h, enum
/// bloatd_policy_count).
pub fn policy_counts(c: &BloatdPolicyCounts) -> PolicyCounts {
    let n = |i: u32| c.n[i as usize];
    let total = |i: u32| n(i).max(0) as u64;
    PolicyCounts {
        cc_sockets: n(policy_count::CC_SOCKETS).max(0),
        bulk_sockets: n(policy_count::BULK_SOCKETS).max(0),
        drwa_sockets: n(policy_count::DRWA_SOCKETS).max(0),
        cc_set_total: total(policy_count::CC_SET),
        bulk_switched_total: total(policy_count::BULK_SET),
        cc_failed_total: total(policy_count::CC_FAILED),
        drwa_rounds_total: total(policy_count::DRWA_ROUNDS),
        drwa_restored_total: total(policy_count::DRWA_RESTORED),
        drwa_failed_total: total(policy_count::DRWA_FAILED),
        notsent_lowat_set_total: total(policy_count::LOWAT_SET),
        notsent_lowat_failed_total: total(policy_count::LOWAT_FAILED),
    }
}

/// DRWA's lambda as the kernel takes it (8 fraction bits).
pub fn lambda_x256(lambda: f64) -> u32 {
    (lambda * 256.0).round() as u32
}

/// C functions of bpf/policy.h compiled for the host
/// (bpf/testing/policy_host.c, linked from the bloatd-bpf-testing crate):
/// the tests run the kernel's arithmetic.
#[cfg(test)]
mod c {
    use bloatd_bpf_testing as _;

    extern "C" {
        pub fn bloatd_drwa_window(
            cwnd_est: u32,
            floor_us: u32,
            rtt_us: u32,
            lambda_x256: u32,
            min_bytes: u32,
            resolution_us: u32,
        ) -> u32;
        pub fn bloatd_drwa_restore_clamp(
            orig: u32,
            now: u32,
            rcvbuf: u32,
            scaling_ratio: u32,
        ) -> u32;
        pub fn bloatd_policy_ports_match(
            r: *const super::BloatdPolicyRule,
            sport: u16,
            dport: u16,
        ) -> i32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(toml: &str) -> Rule {
        super::super::rules::rule_from_table(&toml.parse::<toml::Table>().unwrap()).unwrap()
    }

    #[test]
    fn the_records_policy_reaches_the_view() {
        let names = vec!["web".to_string(), "bulk".to_string()];
        let mut rec = BloatdSock {
            mss: 1000,
            ..Default::default()
        };
        assert_eq!(socket_policy(&rec, &names), None);
        rec.pol.cc_rule = 1;
        rec.pol.bulk_rule = 2;
        rec.pol.flags = policy_flag::BULK_WAIT as u8;
        let p = socket_policy(&rec, &names).unwrap();
        assert_eq!(
            (p.cc_rule.as_deref(), p.chose_cc(), p.mark().as_str()),
            (Some("web"), Some("web"), "R")
        );
        rec.pol.flags =
            (policy_flag::BULK_DONE | policy_flag::DRWA_CLAMPED | policy_flag::DRWA_ARMED) as u8;
        rec.pol.drwa_clamp = 10_500;
        rec.pol.drwa_rounds = 3;
        let p = socket_policy(&rec, &names).unwrap();
        assert_eq!((p.chose_cc(), p.mark().as_str()), (Some("bulk"), "BD"));
        let d = p.drwa.unwrap();
        assert_eq!(
            (d.by.as_str(), d.clamp_bytes, d.clamp_segments),
            ("switch", 10_500, 11)
        );
    }

    #[test]
    fn drwa_window_is_the_papers() {
        // SAFETY: pure C functions of plain integers.
        unsafe {
            // No queue (RTT at the floor): lambda x what arrived.
            assert_eq!(
                c::bloatd_drwa_window(100_000, 80_000, 80_000, 768, 5_000, 0),
                300_000
            );
            // A queue of 2 floors (RTT = 3 x floor): the window holds.
            assert_eq!(
                c::bloatd_drwa_window(300_000, 80_000, 240_000, 768, 5_000, 0),
                300_000
            );
            // A deep queue shrinks it, never below the minimum.
            assert_eq!(
                c::bloatd_drwa_window(300_000, 80_000, 960_000, 768, 5_000, 0),
                75_000
            );
            assert_eq!(
                c::bloatd_drwa_window(1_000, 80_000, 960_000, 768, 5_000, 0),
                5_000
            );
            // A floor above the RTT (a stale floor) counts as the RTT.
            assert_eq!(
                c::bloatd_drwa_window(100_000, 90_000, 80_000, 768, 0, 0),
                300_000
            );
            assert_eq!(c::bloatd_drwa_window(100_000, 80_000, 0, 768, 0, 0), 0);
            // Millisecond timestamps on a LAN: a 40 us floor against an RTT
            // that reads 500 us is no queue of 12 floors.
            assert_eq!(
                c::bloatd_drwa_window(100_000, 40, 500, 768, 0, 1000),
                300_000
            );
            assert_eq!(c::bloatd_drwa_window(100_000, 40, 500, 768, 0, 0), 24_000);
            // A window-limited sender delivers its window per RTT: from any
            // queue, one round lands on lambda x the BDP (16 Mbit/s x 80 ms
            // = 160 kB): a 400 kB window, 200 ms RTT.
            assert_eq!(
                c::bloatd_drwa_window(400_000, 80_000, 200_000, 768, 0, 0),
                480_000
            );
            assert_eq!(
                c::bloatd_drwa_window(1_000_000, 80_000, 500_000, 768, 0, 0),
                480_000
            );
            // Given back: what autotuning made of the buffer, not less than before.
            assert_eq!(
                c::bloatd_drwa_restore_clamp(65_535, 20_000, 6_291_456, 128),
                3_145_728
            );
            assert_eq!(c::bloatd_drwa_restore_clamp(65_535, 20_000, 0, 0), 65_535);
        }
    }

    #[test]
    fn kernel_rule_ports_match_as_the_probes_do() {
        let r = BloatdPolicyRule {
            selectors: (policy_match::SPORT | policy_match::DPORT) as u8,
            sport_lo: 8000,
            sport_hi: 8099,
            dport_lo: 1,
            dport_hi: 65535,
            ..Default::default()
        };
        // SAFETY: a valid rule, read only.
        unsafe {
            assert_eq!(c::bloatd_policy_ports_match(&r, 8050, 40000), 1);
            assert_eq!(c::bloatd_policy_ports_match(&r, 8100, 40000), 0);
        }
    }

    #[test]
    fn resolving_names_unknown_algorithms_and_cgroups() {
        let r = vec![rule("cc = \"vegas_nope\"")];
        let e = resolve(&r, &[]).unwrap_err();
        assert!(e.contains("unknown congestion control 'vegas_nope'"), "{e}");
        let r = vec![rule("cc = \"bloatd_westwood\"")];
        if !bloatd_cc::kernel_available()
            .unwrap_or_default()
            .iter()
            .any(|a| a == "bloatd_westwood")
        {
            assert!(resolve(&r, &[])
                .unwrap_err()
                .contains("only when it is in `cc`"));
        }
        assert!(resolve(&r, &["bloatd_westwood".into()]).is_ok());
        let r = vec![rule("cgroup = \"no/such/cgroup/here\"\ncc = \"reno\"")];
        if crate::probes::cgroup2_root().is_some() {
            let e = resolve(&r, &[]).unwrap_err();
            assert!(e.contains("no cgroup 'no/such/cgroup/here'"), "{e}");
        }
    }
}
