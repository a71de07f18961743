//! Prometheus metrics (prometheus-client, text format 0.0.4 on /metrics).
//!
//! Labels are bounded: `cc` (the algorithms loaded in the kernel, at most
//! 15 names plus "other"), `role` (sender/receiver) and `state` (TCP state);
//! probe self-metrics use `probe` and `reason`. A socket's addresses or ports
//! never become a label: a busy server would create a series per connection.
//!
//! The per-socket series are aggregated in the kernel where the sample is
//! taken (bpf/bloatd.h, `struct bloatd_cc_stats`: per-CPU log buckets by
//! congestion control and role, as Cloudflare's ebpf_exporter does) and
//! read here at scrape time: a scrape costs a few map reads whatever the
//! number of sockets, and no sample of a socket is handled in user space.
//! Histograms still count one observation per socket per sampling interval
//! while it carries traffic: a bucket's share is the share of socket-time
//! spent at that delay.
//!
//! One way in: `Core::metrics_text` reads a [`Scrape`] (the kernel's
//! statistics and counters, the congestion controls' state) and
//! [`Metrics::encode`] writes it out; nothing else feeds a series.

use crate::probes::abi::{hist, limits, stat, tcp_state_name, BloatdCcStats, BloatdRoleStats};
use crate::probes::Counters;
use bloatd_model::Role;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::sync::{Arc, Mutex};

extern "C" {
    // bpf/stats_host.c: the buckets the probes count into (stats.h).
    fn bloatd_delay_bound_us(i: u32) -> u32;
    fn bloatd_cwnd_bound(i: u32) -> u32;
}

/// Upper bounds of `n` buckets as the encoder wants them: bound(i) in the
/// metric's unit for all but the last, which is +Inf.
fn bounds(n: u32, bound: impl Fn(u32) -> f64) -> Vec<f64> {
    (0..n - 1).map(bound).chain([f64::INFINITY]).collect()
}

/// Upper bounds of the delay buckets, seconds.
fn delay_bounds_s() -> Vec<f64> {
    // SAFETY: a pure C function of an index below the bucket count.
    bounds(
        limits::DELAY_BUCKETS,
        |i| unsafe { bloatd_delay_bound_us(i) } as f64 / 1e6,
    )
}

/// Upper bounds of the cwnd buckets, segments.
fn cwnd_bounds() -> Vec<f64> {
    // SAFETY: as above.
    bounds(limits::CWND_BUCKETS, |i| unsafe { bloatd_cwnd_bound(i) }
        as f64)
}

/// Role labels in the kernel's order (`struct bloatd_cc_stats`: [0]
/// sender, [1] receiver).
const ROLES: [&str; 2] = [Role::ALL[0].name(), Role::ALL[1].name()];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CcRole {
    cc: String,
    role: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CcRoleState {
    cc: String,
    role: &'static str,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProbeLabel {
    probe: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CcLabel {
    pub cc: String,
}

/// Everything /metrics shows, read by `Core::metrics_text` at scrape time:
/// the one input of the metrics.
#[derive(Clone, Debug, Default)]
pub struct Scrape {
    /// Statistics by congestion control name, summed over CPUs.
    pub per_cc: Vec<(String, BloatdCcStats)>,
    /// Records alive: (cc, role index, state index, count).
    pub sockets: Vec<(String, usize, usize, i64)>,
    /// The second whose bloated sockets the gauge reports (the last whole
    /// second of CLOCK_MONOTONIC).
    pub bloated_second: u64,
    pub counters: Counters,
    /// (probe, run time ns, runs) from the kernel's BPF statistics.
    pub runs: Vec<(&'static str, u64, u64)>,
    pub map_capacity: u32,
    /// Path floors kept now.
    pub floors: u64,
    /// Per registered bloatd congestion control: state snapshots its map
    /// refused.
    pub cc_export_failures: Vec<(String, u64)>,
    /// The policy's counters and DRWA's state (policy.rs).
    pub policy: Option<(
        bloatd_model::api::PolicyCounts,
        bloatd_model::policy::DrwaMode,
    )>,
    /// bloatd_westwood's cwnd/pipe histogram as its struct_ops program
    /// counted it (None without bloatd_westwood).
    pub westwood_cwnd_pipe: Option<bloatd_cc::RatioHistogram>,
}

/// What the collector encodes: the last scrape.
#[derive(Debug, Default)]
struct State {
    scrape: Scrape,
}

/// The collector of every series: the registry holds it alone.
#[derive(Debug)]
struct Collector {
    state: Arc<Mutex<State>>,
}

pub struct Metrics {
    registry: Registry,
    state: Arc<Mutex<State>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("bloatd");
        let state = Arc::new(Mutex::new(State::default()));
        registry.register_collector(Box::new(Collector {
            state: state.clone(),
        }));
        Metrics { registry, state }
    }

    /// The exposition of `scrape` in Prometheus text format 0.0.4, which
    /// every scraper and `promtool check metrics` read.
    pub fn encode(&self, scrape: Scrape) -> String {
        self.state.lock().unwrap().scrape = scrape;
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("encoding to a String cannot fail");
        openmetrics_to_text(&out)
    }
}

/// A histogram's (sum, count, per-bucket counts) in the encoder's form.
fn histogram(counts: &[u64], bounds: &[f64], sum: f64) -> (f64, u64, Vec<(f64, u64)>) {
    let buckets: Vec<(f64, u64)> = bounds.iter().copied().zip(counts.iter().copied()).collect();
    (sum, counts.iter().sum(), buckets)
}

/// One histogram family over (cc, role) from the kernel's statistics;
/// label sets with no observation are left out, as a family that was never
/// observed would be.
/// A histogram as the encoder takes it: sum, count, (upper bound, cumulative count).
type Hist = (f64, u64, Vec<(f64, u64)>);

fn encode_histograms(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    view: &Scrape,
    pick: &dyn Fn(&BloatdRoleStats) -> Option<Hist>,
    roles: &[usize],
) -> Result<(), std::fmt::Error> {
    let mut m = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (cc, st) in &view.per_cc {
        for &r in roles {
            let Some((sum, count, buckets)) = pick(&st.role[r]) else {
                continue;
            };
            if count == 0 {
                continue;
            }
            let labels = CcRole {
                cc: cc.clone(),
                role: ROLES[r],
            };
            if roles.len() == 1 {
                m.encode_family(&CcLabel { cc: cc.clone() })?
                    .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
            } else {
                m.encode_family(&labels)?
                    .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
            }
        }
    }
    Ok(())
}

fn delay_hist(h: u32) -> impl Fn(&BloatdRoleStats) -> Option<Hist> {
    let bounds = delay_bounds_s();
    move |r: &BloatdRoleStats| {
        let h = h as usize;
        Some(histogram(
            &r.delay[h],
            &bounds,
            r.delay_sum_us[h] as f64 / 1e6,
        ))
    }
}

fn counter<L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    values: &[(L, u64)],
) -> Result<(), std::fmt::Error> {
    let mut m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in values {
        m.encode_family(labels)?
            .encode_counter::<NoLabelSet, _, u64>(v, None)?;
    }
    Ok(())
}

fn gauge<L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    values: &[(L, i64)],
) -> Result<(), std::fmt::Error> {
    let mut m = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in values {
        m.encode_family(labels)?.encode_gauge(v)?;
    }
    Ok(())
}

fn plain_gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    v: i64,
) -> Result<(), std::fmt::Error> {
    encoder
        .encode_descriptor(name, help, None, MetricType::Gauge)?
        .encode_gauge(&v)
}

fn plain_counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    v: u64,
) -> Result<(), std::fmt::Error> {
    encoder
        .encode_descriptor(name, help, None, MetricType::Counter)?
        .encode_counter::<NoLabelSet, _, u64>(&v, None)
}

impl prometheus_client::collector::Collector for Collector {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let state = self.state.lock().unwrap();
        // As a metric family would: nothing until the first observation.
        if let Some(w) = state
            .scrape
            .westwood_cwnd_pipe
            .as_ref()
            .filter(|w| w.count() > 0)
        {
            let (sum, count, buckets) =
                histogram(&w.counts, &bloatd_cc::RatioHistogram::bounds(), w.sum);
            e.encode_descriptor(
                "westwood_cwnd_pipe_ratio",
                "Westwood+ sockets: cwnd / (BWE x RTTmin / MSS), how far cwnd sits above the estimated pipe (one observation per socket per sampling interval in which it got ACKs, counted in the kernel).",
                None,
                MetricType::Histogram,
            )?
            .encode_family(&CcLabel { cc: "bloatd_westwood".into() })?
            .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
        }
        e.encode_descriptor("build", "bloatd build.", None, MetricType::Info)?
            .encode_info(&vec![("version", env!("CARGO_PKG_VERSION"))])?;
        let v = &state.scrape;
        let both = [0usize, 1];
        encode_histograms(
            &mut e,
            "tcp_queueing_delay_seconds",
            "Queueing delay per socket sample: srtt minus the path's floor for senders, the measured receiver RTT minus it for receivers",
            v,
            &delay_hist(hist::QUEUE),
            &both,
        )?;
        encode_histograms(
            &mut e,
            "tcp_srtt_seconds",
            "Smoothed RTT per socket sample (receivers: their RTT measured from echoed timestamps, else the kernel's estimate)",
            v,
            &delay_hist(hist::RTT),
            &both,
        )?;
        encode_histograms(
            &mut e,
            "tcp_min_rtt_seconds",
            "The floor each sample's queueing delay is measured against: the lowest RTT of the path (README, Path floors)",
            v,
            &delay_hist(hist::FLOOR),
            &both,
        )?;
        let cwnd = cwnd_bounds();
        encode_histograms(
            &mut e,
            "tcp_cwnd_segments",
            "Congestion window of sending sockets per sample, segments",
            v,
            &|r: &BloatdRoleStats| Some(histogram(&r.cwnd, &cwnd, r.cwnd_sum as f64)),
            &[0],
        )?;
        let mut retrans = Vec::new();
        let mut bloated = Vec::new();
        for (cc, st) in &v.per_cc {
            for r in both {
                let rs = &st.role[r];
                let labels = CcRole {
                    cc: cc.clone(),
                    role: ROLES[r],
                };
                if rs.retrans > 0 || rs.delay[0].iter().any(|&x| x > 0) {
                    retrans.push((labels.clone(), rs.retrans));
                }
                let slot = (v.bloated_second & 3) as usize;
                let n = if rs.bloated_sec[slot] == v.bloated_second {
                    rs.bloated[slot]
                } else {
                    0
                };
                if rs.delay[0].iter().any(|&x| x > 0) {
                    bloated.push((labels, n as i64));
                }
            }
        }
        counter(
            &mut e,
            "tcp_retransmits",
            "Segments retransmitted",
            &retrans,
        )?;
        let sockets: Vec<(CcRoleState, i64)> = v
            .sockets
            .iter()
            .map(|(cc, r, s, n)| {
                (
                    CcRoleState {
                        cc: cc.clone(),
                        role: ROLES[*r],
                        state: tcp_state_name(*s as u8),
                    },
                    *n,
                )
            })
            .collect();
        gauge(&mut e, "tcp_sockets", "TCP sockets tracked", &sockets)?;
        gauge(
            &mut e,
            "tcp_bloated_sockets",
            "Sockets whose queueing delay reached the bloat threshold in the last whole second",
            &bloated,
        )?;
        let c = &v.counters;
        let events: Vec<(ProbeLabel, u64)> = [
            (stat::PROBE, "tcp_probe"),
            (stat::STATE, "inet_sock_set_state"),
            (stat::RETRANS, "tcp_retransmit_skb"),
            (stat::CONG, "tcp_cong_state_set"),
            (stat::ITER, "iter_tcp"),
            (stat::SOCKOPS, "sock_ops"),
        ]
        .into_iter()
        .map(|(i, probe)| (ProbeLabel { probe }, c.get(i)))
        .collect();
        counter(&mut e, "probe_events", "Events seen by each probe", &events)?;
        let dropped: Vec<(ReasonLabel, u64)> = [
            (stat::DROP_MAP_FULL, "map_full"),
            (stat::DROP_RINGBUF, "ringbuf_full"),
        ]
        .into_iter()
        .map(|(i, reason)| (ReasonLabel { reason }, c.get(i)))
        .collect();
        counter(
            &mut e,
            "probe_dropped",
            "Losses: sockets not tracked because the socket map is full (map_full, each socket once), samples of watched sockets lost to a full ring buffer (ringbuf_full)",
            &dropped,
        )?;
        plain_gauge(
            &mut e,
            "probe_map_entries",
            "Entries in the kernel's socket map",
            c.map_entries() as i64,
        )?;
        plain_gauge(
            &mut e,
            "probe_map_capacity",
            "Capacity of the kernel's socket map",
            v.map_capacity as i64,
        )?;
        let mut m = e.encode_descriptor(
            "probe_run_time_seconds",
            "Time spent in each probe (kernel BPF stats; zero unless bpf_stats is enabled)",
            None,
            MetricType::Counter,
        )?;
        for &(probe, ns, _) in &v.runs {
            m.encode_family(&ProbeLabel { probe })?
                .encode_counter::<NoLabelSet, _, u64>(&(ns as f64 / 1e9), None)?;
        }
        let runs: Vec<(ProbeLabel, u64)> = v
            .runs
            .iter()
            .map(|&(probe, _, n)| (ProbeLabel { probe }, n))
            .collect();
        counter(
            &mut e,
            "probe_runs",
            "Runs of each probe (kernel BPF stats; zero unless bpf_stats is enabled)",
            &runs,
        )?;
        plain_gauge(
            &mut e,
            "path_floors",
            "Path floors the kernel keeps (peers and prefixes)",
            v.floors as i64,
        )?;
        plain_counter(
            &mut e,
            "path_floors_created",
            "Path floors created (peers and prefixes)",
            c.get(stat::FLOOR_NEW),
        )?;
        plain_counter(
            &mut e,
            "path_floors_evicted",
            "Path floors the bound (floor_entries) pushed out, least recently used first",
            c.floors_evicted(v.floors),
        )?;
        plain_counter(
            &mut e,
            "path_floors_inferred",
            "Floors inferred for a new peer from the queue its route's bottleneck held",
            c.get(stat::FLOOR_INFERRED),
        )?;
        plain_counter(
            &mut e,
            "path_floor_route_changes",
            "Floors started over because the peer is now reached through another interface or gateway",
            c.get(stat::FLOOR_ROUTE),
        )?;
        let failures: Vec<(CcLabel, u64)> = v
            .cc_export_failures
            .iter()
            .map(|(cc, n)| (CcLabel { cc: cc.clone() }, *n))
            .collect();
        counter(
            &mut e,
            "cc_export_failures",
            "State snapshots of bloatd's congestion controls that their map refused (full or out of memory); the socket's state stays stale until its next export",
            &failures,
        )?;
        if let Some((counts, drwa)) = &v.policy {
            crate::policy::encode_metrics(&mut e, counts, *drwa)?;
        }
        Ok(())
    }
}

/// prometheus-client writes OpenMetrics. The older text format differs in
/// metadata only: a counter's HELP/TYPE name carries the `_total` of its
/// samples, there is no `info` type (an info metric is a gauge of 1 named
/// `_info`), no `# UNIT` and no `# EOF`. Samples are the same.
pub fn openmetrics_to_text(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    let mut renamed: std::collections::HashMap<&str, String> = std::collections::HashMap::new();
    for line in om.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some((name, kind)) = rest.split_once(' ') {
                match kind {
                    "counter" => {
                        renamed.insert(name, format!("{name}_total"));
                    }
                    "info" => {
                        renamed.insert(name, format!("{name}_info"));
                    }
                    _ => {}
                }
            }
        }
    }
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find(|p| line.starts_with(p));
        match meta {
            Some(prefix) => {
                let rest = &line[prefix.len()..];
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let name = renamed.get(name).map(String::as_str).unwrap_or(name);
                let tail = if prefix == "# TYPE " && tail == "info" {
                    "gauge"
                } else {
                    tail
                };
                out.push_str(prefix);
                out.push_str(name);
                out.push(' ');
                out.push_str(tail);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> Scrape {
        let mut cubic = BloatdCcStats::default();
        // One sender sample at 250 ms of queue, 270 ms srtt, 20 ms floor,
        // cwnd 300; three retransmissions; bloated in second 41.
        let s = &mut cubic.role[0];
        s.delay[hist::QUEUE as usize][9] = 1; // <= 0.5 s
        s.delay_sum_us[hist::QUEUE as usize] = 250_000;
        s.delay[hist::RTT as usize][9] = 1;
        s.delay_sum_us[hist::RTT as usize] = 270_000;
        s.delay[hist::FLOOR as usize][5] = 1;
        s.delay_sum_us[hist::FLOOR as usize] = 20_000;
        s.cwnd[8] = 1; // <= 512
        s.cwnd_sum = 300;
        s.retrans = 3;
        s.bloated[41 & 3] = 1;
        s.bloated_sec[41 & 3] = 41;
        Scrape {
            per_cc: vec![("cubic".into(), cubic)],
            sockets: vec![("cubic".into(), 0, 1, 2)],
            bloated_second: 41,
            map_capacity: 64,
            floors: 3,
            cc_export_failures: vec![("bloatd_cubic".into(), 2)],
            ..Default::default()
        }
    }

    #[test]
    fn policy_counts_encode_with_the_action_label_only() {
        let counts = bloatd_model::api::PolicyCounts {
            cc_sockets: 2,
            drwa_sockets: 1,
            bulk_switched_total: 5,
            drwa_held_total: 3,
            drwa_recovered_total: 4,
            ..Default::default()
        };
        let text = Metrics::new().encode(Scrape {
            policy: Some((counts, bloatd_model::policy::DrwaMode::On)),
            ..view()
        });
        for line in [
            r#"bloatd_policy_sockets{action="cc"} 2"#,
            r#"bloatd_policy_sockets{action="drwa"} 1"#,
            r#"bloatd_policy_actions_total{action="bulk"} 5"#,
            r#"bloatd_policy_actions_total{action="drwa_held"} 3"#,
            r#"bloatd_policy_actions_total{action="drwa_recovered"} 4"#,
            r#"bloatd_policy_failures_total{action="drwa"} 0"#,
            "# TYPE bloatd_policy_actions_total counter",
            "bloatd_drwa_enabled 1",
        ] {
            assert!(text.contains(line), "missing {line}\n{text}");
        }
    }

    #[test]
    fn kernel_histograms_encode_with_cc_and_role_only() {
        let text = Metrics::new().encode(view());
        for line in [
            r#"bloatd_tcp_queueing_delay_seconds_bucket{le="0.5",cc="cubic",role="sender"} 1"#,
            r#"bloatd_tcp_queueing_delay_seconds_bucket{le="0.2",cc="cubic",role="sender"} 0"#,
            r#"bloatd_tcp_queueing_delay_seconds_bucket{le="+Inf",cc="cubic",role="sender"} 1"#,
            r#"bloatd_tcp_queueing_delay_seconds_sum{cc="cubic",role="sender"} 0.25"#,
            r#"bloatd_tcp_min_rtt_seconds_bucket{le="0.02",cc="cubic",role="sender"} 1"#,
            r#"bloatd_tcp_cwnd_segments_bucket{le="512.0",cc="cubic"} 1"#,
            r#"bloatd_tcp_retransmits_total{cc="cubic",role="sender"} 3"#,
            r#"bloatd_tcp_sockets{cc="cubic",role="sender",state="ESTAB"} 2"#,
            r#"bloatd_tcp_bloated_sockets{cc="cubic",role="sender"} 1"#,
            "# TYPE bloatd_tcp_retransmits_total counter",
            "# TYPE bloatd_build_info gauge",
            "bloatd_path_floors 3",
            r#"bloatd_cc_export_failures_total{cc="bloatd_cubic"} 2"#,
        ] {
            assert!(text.contains(line), "missing {line}\n{text}");
        }
        assert!(
            !text.contains("role=\"receiver\""),
            "no observation, no series"
        );
        assert!(!text.contains("# EOF"));
    }

    #[test]
    fn westwood_ratio_is_the_kernels_histogram() {
        let m = Metrics::new();
        let text = m.encode(view());
        assert!(
            !text.contains("westwood_cwnd_pipe_ratio"),
            "no observation, no series\n{text}"
        );
        let text = m.encode(Scrape {
            westwood_cwnd_pipe: Some(bloatd_cc::RatioHistogram {
                counts: vec![0, 0, 3, 1, 0, 0, 0, 0, 0, 0, 1],
                sum: 33.5,
            }),
            ..view()
        });
        for line in [
            "# TYPE bloatd_westwood_cwnd_pipe_ratio histogram",
            r#"bloatd_westwood_cwnd_pipe_ratio_bucket{le="0.75",cc="bloatd_westwood"} 0"#,
            r#"bloatd_westwood_cwnd_pipe_ratio_bucket{le="1.0",cc="bloatd_westwood"} 3"#,
            r#"bloatd_westwood_cwnd_pipe_ratio_bucket{le="1.25",cc="bloatd_westwood"} 4"#,
            r#"bloatd_westwood_cwnd_pipe_ratio_bucket{le="20.0",cc="bloatd_westwood"} 4"#,
            r#"bloatd_westwood_cwnd_pipe_ratio_bucket{le="+Inf",cc="bloatd_westwood"} 5"#,
            r#"bloatd_westwood_cwnd_pipe_ratio_count{cc="bloatd_westwood"} 5"#,
            r#"bloatd_westwood_cwnd_pipe_ratio_sum{cc="bloatd_westwood"} 33.5"#,
            r#"bloatd_build_info{version=""#,
        ] {
            assert!(text.contains(line), "missing {line}\n{text}");
        }
    }

    #[test]
    fn bucket_bounds_are_the_probes() {
        extern "C" {
            fn bloatd_delay_bucket(us: u32) -> u32;
            fn bloatd_cwnd_bucket(cwnd: u32) -> u32;
        }
        let delay = delay_bounds_s();
        assert_eq!((delay[0], delay[7], delay[14]), (0.0005, 0.1, 16.0));
        for (i, b) in delay.iter().enumerate().take(delay.len() - 1) {
            let us = (b * 1e6).round() as u32;
            // SAFETY: pure C functions.
            unsafe {
                assert_eq!(bloatd_delay_bucket(us), i as u32, "{us} us");
                assert_eq!(bloatd_delay_bucket(us + 1), i as u32 + 1, "{} us", us + 1);
            }
        }
        let cwnd = cwnd_bounds();
        assert_eq!((cwnd[0], cwnd[12], cwnd[13]), (2.0, 8192.0, f64::INFINITY));
        for (i, b) in cwnd.iter().enumerate().take(cwnd.len() - 1) {
            // SAFETY: as above.
            unsafe { assert_eq!(bloatd_cwnd_bucket(*b as u32), i as u32) };
        }
    }

    #[test]
    fn bloated_gauge_reads_only_the_second_asked_for() {
        let mut v = view();
        v.bloated_second = 45; // slot 1 again, but an older second
        let text = Metrics::new().encode(v);
        assert!(
            text.contains(r#"bloatd_tcp_bloated_sockets{cc="cubic",role="sender"} 0"#),
            "{text}"
        );
    }
}
