//! What the kernel is given and what it gives back: rules resolved
//! against this system (algorithms the kernel has, cgroups as kernfs ids),
//! DRWA's lambda in the kernel's fixed point, a socket record's policy as
//! the view shows it, and the kernel's counters.

use super::rules::{cgroup_rel, rule_name};
use crate::error::{Error, Result};
use crate::probes::abi::{
    drwa_base, path_class, policy_action, policy_count, policy_flag, policy_match,
};
use crate::probes::abi::{BloatdPolicyCounts, BloatdPolicyRule, BloatdSock};
use bloatd_model::api::PolicyCounts;
use bloatd_model::policy::Rule;
use bloatd_model::{BottleneckClass, Drwa, FloorSource, SocketPolicy};
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
pub fn resolve_cgroup(path: &str, root: &Path) -> Result<(u64, u32)> {
    use std::os::unix::fs::MetadataExt;
    let full: PathBuf = if Path::new(path).is_absolute() && Path::new(path).starts_with(root) {
        PathBuf::from(path)
    } else {
        root.join(cgroup_rel(path, root))
    };
    let canon = full.canonicalize().map_err(|_| {
        Error::invalid(format!(
            "no cgroup '{path}' (looked for {}): create it, or name one under {}",
            full.display(),
            root.display()
        ))
    })?;
    if !canon.starts_with(root) {
        return Err(Error::invalid(format!(
            "cgroup '{path}' is not under the cgroup v2 root {}",
            root.display()
        )));
    }
    let meta =
        std::fs::metadata(&canon).map_err(|e| Error::context(format!("cgroup '{path}'"), e))?;
    if !meta.is_dir() || !canon.join("cgroup.procs").exists() {
        return Err(Error::invalid(format!(
            "'{path}' ({}) is not a cgroup v2 directory",
            canon.display()
        )));
    }
    let level = canon
        .strip_prefix(root)
        .map(|r| r.components().count())
        .unwrap_or(0);
    Ok((meta.ino(), level as u32))
}

/// A class as the kernel's `path_classes` map holds it (enum
/// bloatd_path_class).
pub fn kernel_class(c: BottleneckClass) -> u32 {
    match c {
        BottleneckClass::Clear => path_class::CLEAR,
        BottleneckClass::Droptail => path_class::DROPTAIL,
        BottleneckClass::Aqm => path_class::AQM,
        BottleneckClass::EcnAqm => path_class::ECN_AQM,
        BottleneckClass::Unknown => path_class::UNKNOWN,
    }
}

/// The checks against this system, for `start` (and `top`'s embedded
/// mode): every algorithm a rule names exists (bloatd's own only when this
/// bloatd registers it), every cgroup exists.
pub fn resolve(rules: &[Rule], registered: &[String]) -> Result<Resolved> {
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
                return Err(Error::invalid(format!(
                    "policy rule '{name}': {cc} is registered by bloatd only when it is in `cc` (now: {}): add it, or drop --no-cc",
                    if registered.is_empty() { "none".into() } else { registered.join(", ") }
                )));
            }
            if !ours && !available.iter().any(|x| x == cc) {
                return Err(Error::invalid(format!(
                    "policy rule '{name}': unknown congestion control '{cc}' (this kernel has: {}; bloatd adds bloatd_westwood and bloatd_cubic)",
                    available.join(" ")
                )));
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
                Error::invalid(format!(
                    "policy rule '{name}' selects a cgroup, but no cgroup v2 hierarchy is mounted"
                ))
            })?;
            let (id, level) = resolve_cgroup(c, root)
                .map_err(|e| Error::context(format!("policy rule '{name}'"), e))?;
            k.selectors |= policy_match::CGROUP as u8;
            (k.cgroup_id, k.cgroup_level) = (id, level);
        }
        if let Some(p) = &r.path {
            k.selectors |= policy_match::PATH as u8;
            k.path_classes = p.0.iter().fold(0u8, |m, c| m | 1 << kernel_class(*c));
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
                    min_rtt_us: p.drwa_base_us,
                    min_rtt_source: drwa_base_source(p.drwa_base_src),
                    held_rounds_left: p.drwa_retry,
                    rounds: p.drwa_rounds,
                    held: p.drwa_held,
                }
            });
    let sp = SocketPolicy {
        cc_rule: name(p.cc_rule),
        // A bulk rule waiting or switched; one the gate held back is none.
        bulk_rule: name(p.bulk_rule)
            .filter(|_| flags & (policy_flag::BULK_WAIT | policy_flag::BULK_DONE) != 0),
        bulk_waiting: flags & policy_flag::BULK_WAIT != 0,
        cc_failed: flags & policy_flag::CC_FAILED != 0,
        notsent_lowat_rule: name(p.lowat_rule),
        notsent_lowat_failed: flags & policy_flag::LOWAT_FAILED != 0,
        drwa,
        gated: flags & policy_flag::GATED != 0,
    };
    (sp != SocketPolicy::default()).then_some(sp)
}

/// The policy's counters from the kernel's (bpf/policy.h, enum
/// bloatd_policy_count).
/// Where DRWA's RTT_min came from (bloatd_policy_sock.drwa_base_src): a
/// floor's source, the other receivers on the path, or None (held at the
/// RTT of a cut taken back, or no round yet).
fn drwa_base_source(src: u8) -> Option<FloorSource> {
    match src as u32 {
        drwa_base::RECEIVERS => Some(FloorSource::Receivers),
        v => crate::tracker::floor_source_of(v),
    }
}

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
        drwa_held_total: total(policy_count::DRWA_HELD),
        drwa_recovered_total: total(policy_count::DRWA_RECOVERED),
        notsent_lowat_set_total: total(policy_count::LOWAT_SET),
        notsent_lowat_failed_total: total(policy_count::LOWAT_FAILED),
        bulk_gated_total: total(policy_count::BULK_GATED),
        drwa_gated_total: total(policy_count::DRWA_GATED),
    }
}

/// C functions of bpf/policy.h compiled for the host
/// (bpf/testing/policy_host.c, linked from the bloatd-bpf-testing crate):
/// the tests run the kernel's arithmetic.
#[cfg(test)]
mod c {
    use crate::probes::abi::{BloatdDrwaPath, BloatdDrwaSaved, BloatdPolicySock, DrwaMeasure};
    use bloatd_bpf_testing as _;
    extern "C" {
        pub fn bloatd_drwa_path_floor(
            l: *const BloatdDrwaPath,
            now_us: u64,
            fresh_us: u64,
            held: *mut u32,
        ) -> u32;
        pub fn bloatd_drwa_path_tell(
            l: *mut BloatdDrwaPath,
            p: *const BloatdPolicySock,
            now_us: u64,
        );
        pub fn bloatd_drwa_round(p: *mut BloatdPolicySock, m: *const DrwaMeasure, prev: u32)
            -> u32;
        pub fn bloatd_drwa_give_back(sv: *const BloatdDrwaSaved, rcvbuf: u32, ratio: u32) -> u32;
        pub fn bloatd_drwa_saw_clamp(
            sv: *mut BloatdDrwaSaved,
            clamp_now: u32,
            rcvbuf: u32,
            ratio: u32,
        );
        pub fn bloatd_policy_ports_match(
            r: *const super::BloatdPolicyRule,
            sport: u16,
            dport: u16,
        ) -> i32;
        pub fn bloatd_policy_path_match(r: *const super::BloatdPolicyRule, cls: u32) -> i32;
        pub fn bloatd_policy_aqm_gated(cls: u32, act_on_aqm: u32) -> i32;
        pub fn bloatd_path_class_key(
            k: *mut crate::probes::abi::BloatdPathKey,
            s: *const crate::probes::abi::BloatdFloorSubject,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::abi::{BloatdDrwaSaved, BloatdPolicySock, DrwaMeasure};

    fn rule(toml: &str) -> Rule {
        super::super::rules::rule_from_table(&toml.parse::<toml::Table>().unwrap()).unwrap()
    }

    /// `path = ...` as the kernel gets it, and the kernel's matching:
    /// a rule without `path` selects every class, one with it only its
    /// own; an absent entry (unknown) only a rule naming unknown.
    #[test]
    fn a_path_rule_selects_its_classes_in_the_kernel() {
        let resolved = resolve(
            &[
                rule("name = \"dt\"\npath = \"droptail+unknown\"\ndrwa = true"),
                rule("name = \"any\"\ndrwa = true"),
            ],
            &[],
        )
        .unwrap();
        let (dt, any) = (&resolved.kernel[0], &resolved.kernel[1]);
        assert_ne!(dt.selectors & policy_match::PATH as u8, 0);
        assert_eq!(any.selectors & policy_match::PATH as u8, 0);
        let m = |r: &BloatdPolicyRule, c: BottleneckClass| unsafe {
            c::bloatd_policy_path_match(r, kernel_class(c)) != 0
        };
        for c in BottleneckClass::ALL {
            let want = matches!(c, BottleneckClass::Droptail | BottleneckClass::Unknown);
            assert_eq!(m(dt, c), want, "{c:?}");
            assert!(m(any, c), "{c:?}");
        }
        // A class the kernel does not know (a newer daemon's) selects nothing.
        assert_eq!(unsafe { c::bloatd_policy_path_match(dt, 9) }, 0);
        assert_eq!(unsafe { c::bloatd_policy_path_match(dt, 31) }, 0);
    }

    /// The gate: off on aqm and ecn-aqm unless act_on_aqm; every other
    /// class (unknown: no entry, a full map) acts as without it.
    #[test]
    fn the_aqm_gate_holds_only_aqm_paths_and_only_by_default() {
        for c in BottleneckClass::ALL {
            let aqm = matches!(c, BottleneckClass::Aqm | BottleneckClass::EcnAqm);
            let g = |act| unsafe { c::bloatd_policy_aqm_gated(kernel_class(c), act) != 0 };
            assert_eq!((g(0), g(1)), (aqm, false), "{c:?}");
        }
    }

    /// The kernel looks a peer's class up by the key the daemon writes it
    /// under: IPv4, IPv6, and an IPv4 peer of a dual-stack socket
    /// (::ffff:a.b.c.d), which the daemon shows as IPv4 (tracker.rs).
    #[test]
    fn the_kernel_finds_the_class_under_the_daemons_key() {
        use crate::probes::abi::{BloatdFloorSubject, BloatdPathKey};
        for (family, raw, shown) in [
            (2u16, "10.9.2.2", "10.9.2.2"),
            (10, "fd09:2::2", "fd09:2::2"),
            (10, "::ffff:10.9.2.2", "10.9.2.2"),
        ] {
            let mut subj = BloatdFloorSubject {
                netns: 4026531840,
                family,
                ..Default::default()
            };
            match raw.parse::<std::net::IpAddr>().unwrap() {
                std::net::IpAddr::V4(a) => subj.daddr[..4].copy_from_slice(&a.octets()),
                std::net::IpAddr::V6(a) => subj.daddr = a.octets(),
            }
            let mut k = BloatdPathKey::default();
            unsafe { c::bloatd_path_class_key(&mut k, &subj) };
            let daemon = crate::tracker::addr(family, &subj.daddr);
            assert_eq!(daemon.to_string(), shown);
            let theirs = crate::probes::policy::class_key((4026531840, daemon));
            assert_eq!(
                (k.netns, k.family, k.prefix_len, k.addr),
                (theirs.netns, theirs.family, theirs.prefix_len, theirs.addr),
                "{raw}"
            );
        }
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
        rec.pol.drwa_base_us = 40_000;
        rec.pol.drwa_held = 2;
        let p = socket_policy(&rec, &names).unwrap();
        assert_eq!((p.chose_cc(), p.mark().as_str()), (Some("bulk"), "BD"));
        let d = p.drwa.unwrap();
        assert_eq!(
            (
                d.by.as_str(),
                d.clamp_bytes,
                d.clamp_segments,
                d.min_rtt_us,
                d.held
            ),
            ("switch", 10_500, 11, 40_000, 2)
        );
    }

    const LAMBDA3: u32 = 768;

    /// One round of `drwa_round` as the kernel runs it.
    fn round(p: &mut BloatdPolicySock, rcvd: u64, dur_us: u32, rtt_us: u32, prev: u32) -> u32 {
        let m = DrwaMeasure {
            rcvd,
            dur_us,
            rtt_us,
            low_us: rtt_us,
            min_bytes: 2_896,
            resolution_us: 0,
            lambda_x256: LAMBDA3,
            ..Default::default()
        };
        // SAFETY: pure C over the two structs.
        unsafe { c::bloatd_drwa_round(p, &m, prev) }
    }

    #[test]
    fn drwa_round_is_the_papers_window() {
        // lambda x RTT_min / RTT_est x cwnd_est = lambda x RTT_min x rate.
        let sock = |min| BloatdPolicySock {
            drwa_min_us: min,
            ..Default::default()
        };
        // No queue (RTT at the minimum): lambda x what arrived.
        assert_eq!(
            round(&mut sock(80_000), 100_000, 80_000, 80_000, 0),
            300_000
        );
        // A queue of 2 minima (RTT = 3 x min): the window holds.
        assert_eq!(
            round(&mut sock(80_000), 300_000, 240_000, 240_000, 300_000),
            300_000
        );
        // A deep queue: one round lands on lambda x the BDP (16 Mbit/s x
        // 80 ms = 160 kB), whatever the window was.
        assert_eq!(
            round(&mut sock(80_000), 1_000_000, 500_000, 500_000, 0),
            480_000
        );
        // Never below the floor of 2 segments.
        assert_eq!(round(&mut sock(80_000), 1_000, 960_000, 960_000, 0), 2_896);
        // Below the target an application-limited round (a short response,
        // 3 kB in an RTT) does not shut the window it had.
        assert_eq!(
            round(&mut sock(80_000), 3_000, 80_000, 80_000, 300_000),
            300_000
        );
        // A round longer than its RTT counts its data per RTT.
        assert_eq!(
            round(&mut sock(80_000), 200_000, 160_000, 80_000, 0),
            300_000
        );
        // The minimum is the connection's own: a sample below it lowers it.
        let mut p = sock(0);
        round(&mut p, 100_000, 90_000, 90_000, 0);
        assert_eq!((p.drwa_min_us, p.drwa_base_us), (90_000, 90_000));
    }

    #[test]
    fn a_first_round_with_no_queue_keeps_the_window_the_socket_has() {
        // A receiver that got 64 kB, then went application-limited: 3 kB
        // in a round at the minimum RTT, no queue. Not clamped yet, it has
        // the kernel's window (the limit); lambda x what arrived (9 kB)
        // would shut it with nothing queued.
        let mut p = BloatdPolicySock {
            drwa_min_us: 80_000,
            ..Default::default()
        };
        let m = DrwaMeasure {
            rcvd: 3_000,
            dur_us: 80_000,
            rtt_us: 80_000,
            low_us: 80_000,
            min_bytes: 2_896,
            lambda_x256: LAMBDA3,
            limit: 3_000_000,
            ..Default::default()
        };
        // SAFETY: pure C.
        let w = unsafe { c::bloatd_drwa_round(&mut p, &m, 0) };
        assert!(w >= 3_000_000, "first round, no queue: clamped to {w}");
    }

    #[test]
    fn millisecond_timestamps_count_a_lan_minimum_at_their_resolution() {
        let mut p = BloatdPolicySock {
            drwa_min_us: 40,
            ..Default::default()
        };
        let m = DrwaMeasure {
            rcvd: 100_000,
            dur_us: 500,
            rtt_us: 500,
            low_us: 500,
            lambda_x256: LAMBDA3,
            resolution_us: 1_000,
            ..Default::default()
        };
        // SAFETY: pure C.
        let w = unsafe { c::bloatd_drwa_round(&mut p, &m, 0) };
        assert_eq!(w, 600_000, "a 40 us minimum against 500 us is no queue");
    }

    /// A window-limited bulk flow (CUBIC-like: its own window large, halved
    /// on overflow) over a link of `rate` bytes/s with a `buffer`, one RTT
    /// a step, its base RTT from `base_us(step)`. Returns the bytes each
    /// step delivered and the flow's state; `drwa` off leaves the window
    /// to the sender.
    struct Link {
        rate: f64,
        buffer: f64,
        cwnd: f64,
    }

    fn run_flow(
        link: &mut Link,
        steps: usize,
        base_us: impl Fn(usize) -> f64,
        drwa: Option<(&mut BloatdPolicySock, u32)>,
        floor: (u32, u32),
    ) -> Vec<(f64, f64)> {
        let mut out = Vec::new();
        let mut clamp = 0u32;
        let (mut p, lambda) = match drwa {
            Some((p, l)) => (Some(p), l),
            None => (None, 0),
        };
        for step in 0..steps {
            let base = base_us(step) / 1e6;
            let bdp = link.rate * base;
            let w = if clamp > 0 {
                link.cwnd.min(clamp as f64)
            } else {
                link.cwnd
            };
            let queue = (w - bdp).max(0.0);
            if queue > link.buffer {
                link.cwnd *= 0.7; // loss
            } else if w >= link.cwnd {
                link.cwnd += 1448.0 * (link.cwnd / 1448.0).sqrt(); // growing
            }
            let q = queue.min(link.buffer);
            let rtt = base + q / link.rate;
            let delivered = w.min(bdp + q);
            out.push((delivered, rtt));
            if let Some(p) = p.as_deref_mut() {
                let m = DrwaMeasure {
                    rcvd: delivered as u64,
                    dur_us: (rtt * 1e6) as u32,
                    rtt_us: (rtt * 1e6) as u32,
                    low_us: (rtt * 1e6) as u32,
                    min_bytes: 2_896,
                    resolution_us: 0,
                    lambda_x256: lambda,
                    floor_us: floor.0,
                    floor_src: floor.1,
                    ..Default::default()
                };
                // SAFETY: pure C.
                clamp = unsafe { c::bloatd_drwa_round(p, &m, clamp) };
            }
        }
        out
    }

    fn goodput(rounds: &[(f64, f64)]) -> f64 {
        let bytes: f64 = rounds.iter().map(|r| r.0).sum();
        let secs: f64 = rounds.iter().map(|r| r.1).sum();
        bytes / secs
    }

    /// Over `secs` of rounds from `from`.
    fn goodput_for(rounds: &[(f64, f64)], from: usize, secs: f64) -> f64 {
        let mut t = 0.0;
        let mut n = from;
        while n < rounds.len() && t < secs {
            t += rounds[n].1;
            n += 1;
        }
        goodput(&rounds[from..n])
    }

    #[test]
    fn drwa_keeps_a_flow_whose_path_got_longer_at_its_rate() {
        // 8 Mbit/s, 1.5 MB buffer, base RTT 40 ms, then 200 ms (a phone
        // from LTE to 3G on the same interface): with the 40 ms minimum
        // lambda x min / RTT = 0.6 a round, and the paper's window would
        // shrink to 2 segments for as long as the connection lives.
        let base = |s: usize| if s < 100 { 40_000.0 } else { 200_000.0 };
        let link = || Link {
            rate: 1e6,
            buffer: 1.5e6,
            cwnd: 14_480.0,
        };
        let off = run_flow(&mut link(), 200, base, None, (0, 0));
        for lambda in [512, LAMBDA3] {
            let mut p = BloatdPolicySock::default();
            let on = run_flow(&mut link(), 200, base, Some((&mut p, lambda)), (0, 0));
            let (g_on, g_off) = (goodput_for(&on, 100, 16.0), goodput_for(&off, 100, 16.0));
            assert!(
                g_on >= 0.9 * g_off,
                "lambda {lambda}: {g_on:.0} B/s with DRWA against {g_off:.0} without"
            );
            assert!(
                p.drwa_held >= 1,
                "the cut that drained nothing was taken back"
            );
            // And before the change DRWA did its job: the RTT near lambda x 40 ms.
            let rtt_before = on[90].1;
            assert!(rtt_before < 0.15, "RTT {rtt_before} s with DRWA at 40 ms");
        }
    }

    #[test]
    fn drwa_drains_a_real_queue_and_keeps_the_link_full() {
        // 16 Mbit/s, 80 ms, 1 MB: CUBIC fills the buffer, then DRWA.
        let mut link = Link {
            rate: 2e6,
            buffer: 1e6,
            cwnd: 1.1e6,
        };
        let mut p = BloatdPolicySock {
            drwa_min_us: 80_000,
            ..Default::default()
        };
        let on = run_flow(&mut link, 60, |_| 80_000.0, Some((&mut p, LAMBDA3)), (0, 0));
        let last = &on[40..];
        let rtt = last.iter().map(|r| r.1).sum::<f64>() / last.len() as f64;
        assert!(rtt <= 0.25, "RTT settles near lambda x 80 ms: {rtt}");
        assert!(goodput(last) >= 0.95 * 2e6, "the link stays full");
        assert_eq!(p.drwa_held, 0, "no cut was taken back");
    }

    /// One round of a web fetch opened behind a 1.25 s standing queue on a
    /// 150 ms path (its own minimum 1.4 s), the path's 150 ms from
    /// `floor_src`: the socket, the measure and the clamp it set (from
    /// 20 kB).
    fn web_fetch_behind_a_queue(floor_src: u32) -> (BloatdPolicySock, DrwaMeasure, u32) {
        let mut p = BloatdPolicySock {
            drwa_min_us: 1_400_000,
            ..Default::default()
        };
        let m = DrwaMeasure {
            rcvd: 13_000,
            dur_us: 1_400_000,
            rtt_us: 1_400_000,
            low_us: 1_400_000,
            min_bytes: 2_896,
            lambda_x256: LAMBDA3,
            floor_us: 150_000,
            floor_src,
            ..Default::default()
        };
        // SAFETY: pure C.
        let w = unsafe { c::bloatd_drwa_round(&mut p, &m, 20_000) };
        (p, m, w)
    }

    #[test]
    fn rtt_min_is_the_lowest_of_its_own_minimum_and_the_paths_floor() {
        use crate::probes::abi::floor_source;
        // A web fetch opened behind a 1.25 s standing queue on a 150 ms
        // path: its own minimum is the queue, the path's floor (learned by
        // the download before the queue formed) is not.
        let (p, m, w) = web_fetch_behind_a_queue(floor_source::PEER);
        assert_eq!(
            (p.drwa_base_us, p.drwa_base_src as u32),
            (150_000, floor_source::PEER)
        );
        // lambda x 150 ms x 9.3 kB/s: it cuts, where its own minimum (a
        // target of 4.2 s) would not have.
        assert_eq!(w, 4_176);
        // A floor above its own minimum is not taken.
        let mut p = BloatdPolicySock {
            drwa_min_us: 100_000,
            ..Default::default()
        };
        // SAFETY: pure C.
        unsafe { c::bloatd_drwa_round(&mut p, &m, 20_000) };
        assert_eq!(
            (p.drwa_base_us, p.drwa_base_src as u32),
            (100_000, floor_source::SOCKET)
        );
    }

    #[test]
    fn first_rounds_take_only_the_rtt_min_the_other_receivers_use() {
        use crate::probes::abi::{floor_source, BloatdDrwaPath};
        let floor = |l: Option<&BloatdDrwaPath>, now: u64| {
            let mut held = 0u32;
            let l = l.map_or(std::ptr::null(), |l| l as *const _);
            // SAFETY: pure C; a null slot is "no path known".
            let f = unsafe { c::bloatd_drwa_path_floor(l, now, 1_000_000, &mut held) };
            (f, held)
        };
        let tell = |l: &mut BloatdDrwaPath, base: u32, src: u32, now: u64| {
            let p = BloatdPolicySock {
                drwa_base_us: base,
                drwa_base_src: src as u8,
                ..Default::default()
            };
            // SAFETY: pure C.
            unsafe { c::bloatd_drwa_path_tell(l, &p, now) }
        };
        // No path known, or no receiver past its first rounds on it: none
        // (the connection's own minimum only).
        assert_eq!(floor(None, 5_000_000), (0, 0));
        let mut l = BloatdDrwaPath::default();
        assert_eq!(floor(Some(&l), 5_000_000), (0, 0));
        // A download on the path uses 150 ms: a web fetch's first rounds
        // take it.
        tell(&mut l, 150_000, floor_source::PEER, 4_500_000);
        assert_eq!(floor(Some(&l), 5_000_000), (150_000, 0));
        // Its last round more than a second ago: gone, nothing taken.
        assert_eq!(floor(Some(&l), 5_600_000), (0, 0));
        // A receiver holds at 600 ms after a cut that drained nothing (the
        // path got longer): that, and held, while it lasts, whoever else
        // tells its floor.
        tell(&mut l, 600_000, drwa_base::HELD, 6_000_000);
        tell(&mut l, 40_000, floor_source::PEER, 6_100_000);
        assert_eq!(floor(Some(&l), 6_200_000), (600_000, 1));
        assert_eq!(floor(Some(&l), 7_050_000), (40_000, 0));
        // Through a round: a fetch behind a 1.25 s queue cuts against it.
        let (mut p, _, w) = web_fetch_behind_a_queue(drwa_base::RECEIVERS);
        assert_eq!(w, 4_176);
        assert_eq!(
            drwa_base_source(p.drwa_base_src),
            Some(FloorSource::Receivers)
        );
        p.drwa_rounds = 1;
        let rec = BloatdSock {
            pol: p,
            ..Default::default()
        };
        let d = socket_policy(&rec, &[]).unwrap().drwa.unwrap();
        assert_eq!(d.min_rtt_from(), "other receivers");
    }

    #[test]
    fn a_share_given_to_a_receiver_drwa_cuts_too_is_no_cut_to_take_back() {
        use crate::probes::abi::floor_source;
        // 3g: 150 kbit/s (18.75 kB/s), 150 ms, a full 28 kB buffer (1.5 s).
        // A download and a web fetch share the link; the fetch's slow
        // start takes the download's share and holds the queue.
        let round = |p: &mut BloatdPolicySock, rcvd: u64, link: u64, prev: u32| {
            let m = DrwaMeasure {
                rcvd,
                path_rcvd: link,
                dur_us: 1_500_000,
                rtt_us: 1_500_000,
                low_us: 1_500_000,
                min_bytes: 2_896,
                lambda_x256: LAMBDA3,
                floor_us: 150_000,
                floor_src: floor_source::PEER,
                ..Default::default()
            };
            // SAFETY: pure C.
            unsafe { c::bloatd_drwa_round(p, &m, prev) }
        };
        let mut p = BloatdPolicySock {
            drwa_min_us: 150_000,
            ..Default::default()
        };
        let w = round(&mut p, 20_000, 28_000, 28_000);
        assert_eq!(w, 6_000, "lambda x 150 ms x 13.3 kB/s");
        // Its rate halves, the link's does not: cut on.
        let w = round(&mut p, 10_000, 28_000, w);
        assert_eq!((p.drwa_held, w), (0, 3_000));
        // The link's rate falls with its own (the path got longer, or a
        // flow DRWA does not cut took it): taken back.
        round(&mut p, 10_000, 14_000, w);
        assert_eq!(p.drwa_held, 1);
        // The link kept its rate, but a receiver on it is held (its cuts
        // drain nothing): what it would give up is not a sibling's to drain.
        let mut h = BloatdPolicySock {
            drwa_min_us: 150_000,
            ..Default::default()
        };
        let held = |p: &mut BloatdPolicySock, rcvd: u64, prev: u32| {
            let m = DrwaMeasure {
                rcvd,
                path_rcvd: 28_000,
                path_held: 1,
                dur_us: 1_500_000,
                rtt_us: 1_500_000,
                low_us: 1_500_000,
                min_bytes: 2_896,
                lambda_x256: LAMBDA3,
                ..Default::default()
            };
            // SAFETY: pure C.
            unsafe { c::bloatd_drwa_round(p, &m, prev) }
        };
        // It holds too (a_connection_beside_a_held_receiver_holds_while_it_does):
        // no cut, and no hold of its own counted.
        let w = held(&mut h, 20_000, 28_000);
        assert!(
            w >= 28_000 && h.drwa_held == 0 && h.drwa_retry > 0,
            "{h:?} {w}"
        );
        // Not known (no route, the slot another link's): as before.
        let mut q = BloatdPolicySock {
            drwa_min_us: 150_000,
            ..Default::default()
        };
        let w = round(&mut q, 20_000, 0, 28_000);
        round(&mut q, 10_000, 0, w);
        assert_eq!(q.drwa_held, 1);
    }

    /// A connection that has never held, on a path where another receiver
    /// holds its RTT_min (the path grew from 40 to 200 ms, the holder's
    /// queue on it), holds too, at its own RTT now: the window of its best
    /// recent rate at once, not the 2 segments a stale 40 ms floor cut it to
    /// (test_drwa_harm case 6), for as long as the other holds. It counts
    /// no hold of its own and does not hold the path. With no receiver
    /// held it cuts as before.
    #[test]
    fn a_connection_beside_a_held_receiver_holds_while_it_does() {
        let round = |p: &mut BloatdPolicySock, path_held: u32, prev: u32| {
            let m = DrwaMeasure {
                rcvd: 2_896,
                path_rcvd: 1_000_000,
                path_held,
                dur_us: 600_000,
                rtt_us: 600_000,
                low_us: 600_000,
                min_bytes: 2_896,
                lambda_x256: LAMBDA3,
                floor_us: 200_000,
                floor_src: drwa_base::RECEIVERS,
                ..Default::default()
            };
            // SAFETY: pure C.
            unsafe { c::bloatd_drwa_round(p, &m, prev) }
        };
        let fresh = || BloatdPolicySock {
            drwa_min_us: 200_000,
            drwa_max_rate: 100_000,
            ..Default::default()
        };
        let mut p = fresh();
        let w = round(&mut p, 1, 2_896);
        // Its best recent rate, decayed by 1/8 a round: 87.5 kB/s.
        assert_eq!(
            w,
            87_500 * 600 / 1000 * 3,
            "lambda x its RTT now x its best recent rate"
        );
        assert_eq!(
            (p.drwa_held, p.drwa_base_us, p.drwa_base_src as u32),
            (0, 600_000, drwa_base::RECEIVERS),
            "{p:?}"
        );
        // Held while the other holds, however long: no cut.
        let mut w2 = w;
        for _ in 0..40 {
            w2 = round(&mut p, 1, w2);
        }
        assert!(p.drwa_retry >= 1 && w2 >= w, "{p:?} {w2}");
        // The other lets go: it tries the lowest RTT_min again.
        round(&mut p, 0, w2);
        assert_eq!((p.drwa_retry, p.drwa_base_us), (0, 200_000), "{p:?}");
        let mut p = fresh();
        let w = round(&mut p, 0, 2_896);
        assert_eq!(
            (p.drwa_held, w),
            (0, 2_896),
            "no receiver held: cut, at the smallest window"
        );
    }

    #[test]
    fn cuts_that_reach_the_smallest_window_and_drain_nothing_are_taken_back() {
        use crate::probes::abi::floor_source;
        // A new connection beside a download DRWA holds, the path 200 ms,
        // its floor 40 ms (stale): the download keeps 400 ms of queue and
        // the link's rate, so the sibling rule never takes a cut back.
        let round = |p: &mut BloatdPolicySock, rcvd: u64, low: u32, prev: u32| {
            let m = DrwaMeasure {
                rcvd,
                path_rcvd: 1_000_000,
                dur_us: low,
                rtt_us: low,
                low_us: low,
                min_bytes: 2_896,
                lambda_x256: LAMBDA3,
                floor_us: 40_000,
                floor_src: floor_source::PEER,
                ..Default::default()
            };
            // SAFETY: pure C.
            unsafe { c::bloatd_drwa_round(p, &m, prev) }
        };
        let mut p = BloatdPolicySock {
            drwa_min_us: 600_000,
            ..Default::default()
        };
        let mut w = round(&mut p, 20_000, 600_000, 0);
        let mut rounds = 1;
        while w > 2_896 {
            w = round(&mut p, w as u64, 600_000, w);
            rounds += 1;
            assert_eq!(p.drwa_held, 0, "the sibling kept the link's rate");
        }
        assert!(
            rounds <= 4,
            "3 x 40 / 600 a round: {rounds} rounds to 2 segments"
        );
        // At 2 segments, the RTT where it was: taken back after 4 rounds.
        for _ in 0..3 {
            w = round(&mut p, 2_896, 600_000, w);
            assert_eq!((p.drwa_held, w), (0, 2_896));
        }
        let w = round(&mut p, 2_896, 600_000, w);
        assert_eq!((p.drwa_held, p.drwa_base_us), (1, 600_000));
        assert!(w > 2_896, "the window back: {w}");
        // Cuts that drained the queue (the RTT fell by more than 1/16 since
        // they began) stay at 2 segments: six receivers on a 3g buffer.
        let mut q = BloatdPolicySock {
            drwa_min_us: 150_000,
            ..Default::default()
        };
        let mut w = round(&mut q, 20_000, 1_400_000, 0);
        w = round(&mut q, 3_000, 1_200_000, w);
        for _ in 0..8 {
            w = round(&mut q, 2_896, 969_000, w);
        }
        assert_eq!((q.drwa_held, w), (0, 2_896));
        // Nor cuts at 2 segments while someone else's queue grows beside
        // them (a web fetch's slow start): the measure starts again.
        let mut r = BloatdPolicySock {
            drwa_min_us: 150_000,
            ..Default::default()
        };
        let mut w = round(&mut r, 20_000, 600_000, 0);
        for rtt in [700_000, 800_000, 900_000, 1_000_000, 1_100_000, 1_200_000] {
            w = round(&mut r, 2_896, rtt, w);
        }
        assert_eq!((r.drwa_held, w), (0, 2_896));
    }

    #[test]
    fn a_round_with_a_loss_in_it_takes_nothing_back() {
        // 3g, the download alone over a full 28 kB buffer: its slow start
        // overflowed it, and the round behind the loss delivered half.
        let round = |p: &mut BloatdPolicySock, rcvd: u64, holes: u32, prev: u32| {
            let m = DrwaMeasure {
                rcvd,
                dur_us: 1_500_000,
                rtt_us: 1_500_000,
                low_us: 1_500_000,
                min_bytes: 2_896,
                lambda_x256: LAMBDA3,
                holes,
                ..Default::default()
            };
            // SAFETY: pure C.
            unsafe { c::bloatd_drwa_round(p, &m, prev) }
        };
        let mut p = BloatdPolicySock {
            drwa_min_us: 150_000,
            ..Default::default()
        };
        let w = round(&mut p, 28_000, 0, 0);
        assert_eq!(w, 8_400, "lambda x 150 ms x 18.7 kB/s");
        let w2 = round(&mut p, 14_000, 5, w);
        assert_eq!(p.drwa_held, 0, "a round with holes judges nothing");
        // The cut is measured against the best recent rate (an eighth
        // forgotten), not the stalled one, and never raises the clamp.
        assert_eq!(w2, 7_347);
        // Without the holes the same round was a cut taken back.
        let mut q = BloatdPolicySock {
            drwa_min_us: 150_000,
            ..Default::default()
        };
        let w = round(&mut q, 28_000, 0, 0);
        round(&mut q, 14_000, 0, w);
        assert_eq!(q.drwa_held, 1);
    }

    #[test]
    fn a_floor_below_the_path_is_taken_back_as_a_stale_minimum_is() {
        use crate::probes::abi::floor_source;
        // 8 Mbit/s, 1.5 MB, the path 200 ms from the start; the floor 40 ms
        // (a prefix's, or one inferred wrong: issue 18's cases 2 and 3),
        // and 40 ms through the path's change (the floor's window keeps it:
        // case 1).
        let link = || Link {
            rate: 1e6,
            buffer: 1.5e6,
            cwnd: 14_480.0,
        };
        for (case, base) in [
            (
                "a floor below the path",
                (|_| 200_000.0) as fn(usize) -> f64,
            ),
            (
                "the path grew",
                |s| if s < 100 { 40_000.0 } else { 200_000.0 },
            ),
        ] {
            let off = run_flow(&mut link(), 200, base, None, (0, 0));
            for src in [
                floor_source::PREFIX,
                floor_source::INFERRED,
                floor_source::PEER,
            ] {
                let mut p = BloatdPolicySock::default();
                let on = run_flow(
                    &mut link(),
                    200,
                    base,
                    Some((&mut p, LAMBDA3)),
                    (40_000, src),
                );
                let (g_on, g_off) = (goodput_for(&on, 100, 16.0), goodput_for(&off, 100, 16.0));
                assert!(
                    g_on >= 0.9 * g_off,
                    "{case}, floor source {src}: {g_on:.0} B/s with DRWA against {g_off:.0}"
                );
                assert!(p.drwa_held >= 1, "{case}: the cut was taken back");
            }
        }
    }

    #[test]
    fn a_cut_that_drains_nothing_is_taken_back_and_the_minimum_tried_again() {
        // The minimum is stale (40 ms, the path now 200 ms, no queue): the
        // rate follows the window, the RTT stays.
        let mut p = BloatdPolicySock {
            drwa_min_us: 40_000,
            ..Default::default()
        };
        let w1 = round(&mut p, 120_000, 200_000, 200_000, 120_000);
        assert_eq!(w1, 72_000, "the paper cuts: 3 x 40 / 200");
        let w2 = round(&mut p, 72_000, 200_000, 200_000, w1);
        assert_eq!((p.drwa_held, p.drwa_base_us), (1, 200_000));
        // Held: no floor's source (BLOATD_DRWA_BASE_HELD), the view says so.
        assert_eq!(p.drwa_base_src as u32, drwa_base::HELD);
        assert_eq!(drwa_base_source(p.drwa_base_src), None);
        // Held at the RTT it has, the window back to what carried the best
        // recent rate (600 kB/s, an eighth forgotten): 3 x 0.2 s x 525 kB/s.
        assert_eq!(w2, 315_000, "the cut taken back");
        assert_eq!(p.drwa_retry, 16);
        for _ in 0..15 {
            round(&mut p, 200_000, 200_000, 200_000, 216_000);
        }
        assert_eq!(p.drwa_base_us, 200_000);
        round(&mut p, 200_000, 200_000, 200_000, 216_000);
        assert_eq!(
            (p.drwa_base_us, p.drwa_retry),
            (40_000, 0),
            "its own minimum, tried again"
        );
        // It fails again: held twice as long.
        round(&mut p, 200_000, 200_000, 200_000, 216_000);
        round(&mut p, 120_000, 200_000, 200_000, 120_000);
        assert_eq!((p.drwa_held, p.drwa_retry, p.drwa_fails), (2, 32, 2));
    }

    #[test]
    fn lambda_of_two_grows_the_window_as_fast_as_slow_start() {
        let mut p = BloatdPolicySock {
            drwa_min_us: 80_000,
            ..Default::default()
        };
        let m = DrwaMeasure {
            rcvd: 100_000,
            dur_us: 80_000,
            rtt_us: 80_000,
            low_us: 80_000,
            lambda_x256: 512,
            ..Default::default()
        };
        // SAFETY: pure C.
        assert_eq!(unsafe { c::bloatd_drwa_round(&mut p, &m, 0) }, 200_000);
    }

    #[test]
    fn drwa_gives_back_exactly_what_it_found() {
        let mut sv = BloatdDrwaSaved {
            orig_clamp: 32_768,
            orig_rcvbuf: 262_144,
            clamp: 20_000,
            rcvbuf: 262_144,
        };
        // SAFETY: pure C over a plain struct.
        unsafe {
            // An application's clamp, the buffer as it was: exactly that.
            assert_eq!(c::bloatd_drwa_give_back(&sv, 262_144, 128), 32_768);
            // Autotuning grew the buffer: the kernel would have moved the
            // clamp with it (tcp_win_from_space).
            assert_eq!(c::bloatd_drwa_give_back(&sv, 6_291_456, 128), 3_145_728);
            // The application set another clamp while DRWA held its own:
            // that is what it gets back.
            c::bloatd_drwa_saw_clamp(&mut sv, 16_384, 262_144, 128);
            assert_eq!(c::bloatd_drwa_give_back(&sv, 262_144, 128), 16_384);
            // Autotuning's clamp (the buffer grew) is not the application's.
            c::bloatd_drwa_saw_clamp(&mut sv, 500_000, 1_000_000, 128);
            assert_eq!(sv.orig_clamp, 16_384);
        }
    }

    #[test]
    fn an_applications_clamp_counts_when_the_buffer_grew_in_the_same_round() {
        let mut sv = BloatdDrwaSaved {
            orig_clamp: 100_000,
            orig_rcvbuf: 200_000,
            clamp: 50_000,
            rcvbuf: 200_000,
        };
        // SAFETY: pure C over a plain struct.
        let back = unsafe {
            // Autotuning doubled the buffer, then the application set its
            // own 30 kB (TCP_WINDOW_CLAMP), before DRWA's next round: the
            // clamp is not what the buffer gives (200 kB), so it is the
            // application's.
            c::bloatd_drwa_saw_clamp(&mut sv, 30_000, 400_000, 128);
            c::bloatd_drwa_give_back(&sv, 400_000, 128)
        };
        assert!(back <= 30_000, "the application's 30000 raised to {back}");
    }

    #[test]
    fn an_applications_clamp_set_back_after_autotuning_is_the_applications() {
        // DRWA holds the window at the application's 32 kB ceiling, so its
        // own clamp is 32768 too; autotuning grows the buffer (its clamp
        // becomes 400 kB) and the application sets its 32768 again before
        // DRWA's next round: the same value as DRWA's, the buffer not.
        let mut sv = BloatdDrwaSaved {
            orig_clamp: 32_768,
            orig_rcvbuf: 400_000,
            clamp: 32_768,
            rcvbuf: 400_000,
        };
        // SAFETY: pure C over a plain struct.
        let back = unsafe {
            c::bloatd_drwa_saw_clamp(&mut sv, 32_768, 800_000, 128);
            c::bloatd_drwa_give_back(&sv, 800_000, 128)
        };
        assert_eq!(back, 32_768, "the grown buffer's 400 kB became the ceiling");
        // DRWA's own clamp with the buffer as it was stays DRWA's.
        let mut sv = BloatdDrwaSaved {
            orig_clamp: 100_000,
            orig_rcvbuf: 200_000,
            clamp: 50_000,
            rcvbuf: 200_000,
        };
        // SAFETY: as above.
        unsafe { c::bloatd_drwa_saw_clamp(&mut sv, 50_000, 200_000, 128) };
        assert_eq!(sv.orig_clamp, 100_000);
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
        let e = resolve(&r, &[]).unwrap_err().to_string();
        assert!(e.contains("unknown congestion control 'vegas_nope'"), "{e}");
        let r = vec![rule("cc = \"bloatd_westwood\"")];
        if !bloatd_cc::kernel_available()
            .unwrap_or_default()
            .iter()
            .any(|a| a == "bloatd_westwood")
        {
            assert!(resolve(&r, &[])
                .unwrap_err()
                .to_string()
                .contains("only when it is in `cc`"));
        }
        assert!(resolve(&r, &["bloatd_westwood".into()]).is_ok());
        let r = vec![rule("cgroup = \"no/such/cgroup/here\"\ncc = \"reno\"")];
        if crate::probes::cgroup2_root().is_some() {
            let e = crate::error::Chain(&resolve(&r, &[]).unwrap_err()).to_string();
            assert!(
                e.starts_with("policy rule 'rule1': no cgroup 'no/such/cgroup/here'"),
                "{e}"
            );
        }
    }
}
