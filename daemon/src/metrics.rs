//! Prometheus metrics (prometheus-client, OpenMetrics text on /metrics).
//!
//! Labels are bounded: `cc` (the algorithms loaded in the kernel), `role`
//! (sender/receiver) and `state` (TCP state); probe self-metrics use `probe`
//! (four hooks) and `reason` (two). A socket's addresses or ports never
//! become a label: a busy server would create a series per connection.
//!
//! Histograms are fed by the probes' periodic samples (one per socket per
//! interval while it carries traffic), so `rate(..._sum) / rate(..._count)`
//! is a time average and a bucket's share is the share of time sockets
//! spent at that queueing delay.

use crate::model::Observation;
use crate::probes::{abi::stat, Counters};
use bloatd_tui::model::{Role, Socket};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum RoleLabel {
    sender,
    receiver,
}

impl From<Role> for RoleLabel {
    fn from(r: Role) -> Self {
        match r {
            Role::Sender => RoleLabel::sender,
            Role::Receiver => RoleLabel::receiver,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CcRole {
    pub cc: String,
    pub role: RoleLabel,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CcRoleState {
    pub cc: String,
    pub role: RoleLabel,
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeLabel {
    pub probe: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CcLabel {
    pub cc: String,
}

type Hist<L> = Family<L, Histogram, fn() -> Histogram>;

fn delay_histogram() -> Histogram {
    // 0.5 ms .. 16 s: a LAN's queue to a bloated cellular buffer.
    Histogram::new([
        0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0,
    ])
}

fn cwnd_histogram() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(2.0, 2.0, 13))
}

fn ratio_histogram() -> Histogram {
    Histogram::new([0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0])
}

pub struct Metrics {
    registry: Registry,
    queue_delay: Hist<CcRole>,
    srtt: Hist<CcRole>,
    min_rtt: Hist<CcRole>,
    cwnd: Hist<CcLabel>,
    retrans: Family<CcRole, Counter>,
    sockets: Family<CcRoleState, Gauge>,
    bloated: Family<CcRole, Gauge>,
    events: Family<ProbeLabel, Counter>,
    dropped: Family<ReasonLabel, Counter>,
    map_entries: Gauge,
    map_capacity: Gauge,
    run_time: Family<ProbeLabel, Counter<f64, AtomicU64>>,
    runs: Family<ProbeLabel, Counter>,
    westwood_cwnd_pipe: Hist<CcLabel>,
    last_counters: Counters,
    last_runs: HashMap<&'static str, (u64, u64)>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("bloatd");
        let m = Metrics {
            queue_delay: Family::new_with_constructor(delay_histogram),
            srtt: Family::new_with_constructor(delay_histogram),
            min_rtt: Family::new_with_constructor(delay_histogram),
            cwnd: Family::new_with_constructor(cwnd_histogram),
            retrans: Family::default(),
            sockets: Family::default(),
            bloated: Family::default(),
            events: Family::default(),
            dropped: Family::default(),
            map_entries: Gauge::default(),
            map_capacity: Gauge::default(),
            run_time: Family::default(),
            runs: Family::default(),
            westwood_cwnd_pipe: Family::new_with_constructor(ratio_histogram),
            last_counters: [0; stat::MAX as usize],
            last_runs: HashMap::new(),
            registry: Registry::default(),
        };
        registry.register(
            "tcp_queueing_delay_seconds",
            "Queueing delay per socket sample: srtt - min RTT for senders, rcv_rtt - its minimum for receivers",
            m.queue_delay.clone(),
        );
        registry.register(
            "tcp_srtt_seconds",
            "Smoothed RTT per socket sample (receivers: the kernel's receiver RTT estimate)",
            m.srtt.clone(),
        );
        registry.register(
            "tcp_min_rtt_seconds",
            "Minimum RTT per socket sample (the kernel's windowed min RTT; receivers: their floor, the lower of the lowest rcv_rtt and the min RTT)",
            m.min_rtt.clone(),
        );
        registry.register(
            "tcp_cwnd_segments",
            "Congestion window of sending sockets per sample, segments",
            m.cwnd.clone(),
        );
        registry.register("tcp_retransmits", "Segments retransmitted", m.retrans.clone());
        registry.register("tcp_sockets", "TCP sockets tracked", m.sockets.clone());
        registry.register(
            "tcp_bloated_sockets",
            "Sockets active in the last second whose queueing delay is at or above the bloat threshold",
            m.bloated.clone(),
        );
        registry.register("probe_events", "Events seen by each probe", m.events.clone());
        registry.register(
            "probe_dropped",
            "Updates lost: socket map full (map_full) or sample ring buffer full (ringbuf_full)",
            m.dropped.clone(),
        );
        registry.register("probe_map_entries", "Entries in the kernel's socket map", m.map_entries.clone());
        registry.register("probe_map_capacity", "Capacity of the kernel's socket map", m.map_capacity.clone());
        registry.register(
            "probe_run_time_seconds",
            "Time spent in each probe (kernel BPF stats; zero unless bpf_stats is enabled)",
            m.run_time.clone(),
        );
        registry.register(
            "probe_runs",
            "Runs of each probe (kernel BPF stats; zero unless bpf_stats is enabled)",
            m.runs.clone(),
        );
        registry.register(
            "westwood_cwnd_pipe_ratio",
            "Westwood+ sockets: cwnd / (BWE x RTTmin / MSS), how far cwnd sits above the estimated pipe",
            m.westwood_cwnd_pipe.clone(),
        );
        registry.register(
            "build",
            "bloatd build",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        Metrics { registry, ..m }
    }

    /// Account one record of the socket model.
    pub fn observe(&self, o: &Observation) {
        let labels = CcRole { cc: o.cc.clone(), role: o.role.into() };
        if o.retrans_delta > 0 {
            self.retrans.get_or_create(&labels).inc_by(o.retrans_delta as u64);
        }
        let Some(s) = &o.sample else { return };
        let (rtt_us, min_rtt_us) = (s.view_rtt_us(o.role), s.view_min_rtt_us(o.role));
        // A socket without an RTT sample yet has nothing to say.
        if min_rtt_us == 0 || rtt_us == 0 {
            return;
        }
        self.queue_delay.get_or_create(&labels).observe(s.view_queue_delay_us(o.role) as f64 / 1e6);
        self.srtt.get_or_create(&labels).observe(rtt_us as f64 / 1e6);
        self.min_rtt.get_or_create(&labels).observe(min_rtt_us as f64 / 1e6);
        if o.role == Role::Sender {
            self.cwnd.get_or_create(&CcLabel { cc: o.cc.clone() }).observe(s.cwnd as f64);
        }
    }

    /// Westwood+ sockets: cwnd relative to the pipe it estimated.
    pub fn observe_westwood(&self, cwnd: u32, pipe_segments: u32) {
        if pipe_segments > 0 {
            self.westwood_cwnd_pipe
                .get_or_create(&CcLabel { cc: "bloatd_westwood".into() })
                .observe(cwnd as f64 / pipe_segments as f64);
        }
    }

    /// Kernel-side counters are absolute; Prometheus counters get deltas.
    pub fn update_probes(&mut self, c: &Counters, runs: &[(&'static str, u64, u64)], capacity: u32) {
        let delta = |i: u32, last: &Counters| c[i as usize].saturating_sub(last[i as usize]);
        for (i, probe) in [
            (stat::PROBE, "tcp_probe"),
            (stat::STATE, "inet_sock_set_state"),
            (stat::RETRANS, "tcp_retransmit_skb"),
            (stat::CONG, "tcp_cong_state_set"),
            (stat::ITER, "iter_tcp"),
        ] {
            self.events
                .get_or_create(&ProbeLabel { probe: probe.into() })
                .inc_by(delta(i, &self.last_counters));
        }
        for (i, reason) in [(stat::DROP_MAP_FULL, "map_full"), (stat::DROP_RINGBUF, "ringbuf_full")] {
            self.dropped
                .get_or_create(&ReasonLabel { reason: reason.into() })
                .inc_by(delta(i, &self.last_counters));
        }
        self.map_entries
            .set(c[stat::CREATED as usize].saturating_sub(c[stat::DELETED as usize]) as i64);
        self.map_capacity.set(capacity as i64);
        for &(probe, ns, cnt) in runs {
            let (last_ns, last_cnt) = self.last_runs.insert(probe, (ns, cnt)).unwrap_or((0, 0));
            let l = ProbeLabel { probe: probe.into() };
            self.run_time.get_or_create(&l).inc_by(ns.saturating_sub(last_ns) as f64 / 1e9);
            self.runs.get_or_create(&l).inc_by(cnt.saturating_sub(last_cnt));
        }
        self.last_counters = *c;
    }

    /// Gauges recomputed from the sockets of the view model (all states).
    pub fn update_gauges(&self, socks: &[Socket], threshold_us: u32) {
        self.sockets.clear();
        self.bloated.clear();
        for s in socks {
            let labels = CcRole { cc: s.cc.clone(), role: s.role.into() };
            let with_state = CcRoleState { cc: s.cc.clone(), role: s.role.into(), state: s.state.clone() };
            self.sockets.get_or_create(&with_state).inc();
            // Only sockets that carried traffic in the last second: an idle
            // socket keeps its last srtt but has no queue.
            if s.idle_ms <= 1000 {
                let g = self.bloated.get_or_create(&labels);
                if s.is_bloated(threshold_us) {
                    g.inc();
                }
            }
        }
    }

    /// The exposition in Prometheus text format 0.0.4, which every scraper
    /// and `promtool check metrics` read.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("encoding to a String cannot fail");
        openmetrics_to_text(&out)
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
        let meta = ["# HELP ", "# TYPE "].into_iter().find(|p| line.starts_with(p));
        match meta {
            Some(prefix) => {
                let rest = &line[prefix.len()..];
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let name = renamed.get(name).map(String::as_str).unwrap_or(name);
                let tail = if prefix == "# TYPE " && tail == "info" { "gauge" } else { tail };
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
    use bloatd_tui::model::Sample;

    #[test]
    fn histogram_and_counter_carry_cc_and_role_only() {
        let m = Metrics::new();
        m.observe(&Observation {
            cc: "cubic".into(),
            role: Role::Sender,
            sample: Some(Sample {
                t_ms: 0,
                srtt_us: 270_000,
                min_rtt_us: 20_000,
                floor_us: 20_000,
                queue_delay_us: 250_000,
                rcv_rtt_us: 0,
                rcv_queue_delay_us: 0,
                cwnd: 300,
                inflight: 300,
                pipe_segments: None,
                throughput_bps: 0,
            }),
            retrans_delta: 3,
        });
        let text = m.encode();
        assert!(text.contains(r#"bloatd_tcp_queueing_delay_seconds_bucket{le="0.5",cc="cubic",role="sender"} 1"#), "{text}");
        assert!(text.contains(r#"bloatd_tcp_queueing_delay_seconds_bucket{le="0.2",cc="cubic",role="sender"} 0"#));
        assert!(text.contains(r#"bloatd_tcp_retransmits_total{cc="cubic",role="sender"} 3"#));
        assert!(text.contains("bloatd_build_info{version="));
        assert!(text.contains("# TYPE bloatd_tcp_retransmits_total counter"));
        assert!(text.contains("# TYPE bloatd_build_info gauge"));
        assert!(!text.contains("# EOF"));
    }
}
