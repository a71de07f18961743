//! Prometheus metrics: /metrics in the text format 0.0.4, written from one
//! table of families ([`FAMILIES`]: name, type, help, labels, values).
//!
//! Labels are bounded: `cc` (the algorithms loaded in the kernel, at most
//! 15 names plus "other"), `role` (sender/receiver), `state` (TCP state)
//! and, on the queueing delay and RTT histograms, `service` (the top
//! `service_labels` services plus "other": service/labels.rs); probe
//! self-metrics use `probe` and `reason`, the policy's `action`. A socket's
//! addresses or ports never become a label: a busy server would create a
//! series per connection.
//!
//! **Receivers carry no `cc`.** The congestion control that drives a
//! transfer is its sender's; a receiving socket's own algorithm (its
//! namespace's default, say bbr) acts on nothing the receiver measures.
//! A download's queue shows as `{role="receiver"}`, summed over whatever
//! algorithm its sockets happen to have ([`cc_role`], the one place).
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
//! One way in: `Scraper::text` (engine/scrape.rs) reads a [`Scrape`] (the kernel's
//! statistics and counters, the congestion controls' state) and
//! [`Metrics::encode`] writes it out; nothing else feeds a series. Each
//! family's values come as [`Row`]s that carry every dimension they are
//! known by; the family keeps the labels its table entry lists and adds up
//! the rest. A bounded label the rows carry becomes a label of a family by
//! naming it in the family's `labels`.

use crate::probes::abi::{hist, limits, stat, tcp_state_name, BloatdCcStats, BloatdRoleStats};
use crate::probes::Counters;
use bloatd_model::Role;
use std::collections::BTreeMap;
use std::fmt::Write;

extern "C" {
    // bpf/stats_host.c: the buckets the probes count into (stats.h).
    fn bloatd_delay_bound_us(i: u32) -> u32;
    fn bloatd_cwnd_bound(i: u32) -> u32;
}

/// Upper bounds of `n` buckets: bound(i) in the metric's unit for all but
/// the last, which is +Inf.
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
const ROLES: [Role; 2] = [Role::ALL[0], Role::ALL[1]];

/// Everything /metrics shows, read by `Scraper::text` (engine/scrape.rs) at scrape time:
/// the one input of the metrics.
#[derive(Clone, Debug, Default)]
pub struct Scrape {
    /// Statistics by congestion control name, merged over CPUs.
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
    /// Adaptive sampling as the probes run it (None in exact mode).
    pub sampler: Option<crate::probes::SamplerState>,
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
    /// The queueing delay and RTT histograms by (cc, role, service), the
    /// service label bounded (service/labels.rs).
    pub services: Vec<crate::service::metrics::ServiceHist>,
    /// What this kernel runs of the parts beyond the core (probes/kernel.rs).
    pub features: Vec<bloatd_model::Feature>,
    /// The flight recorder's episodes by kind (path, service): opened
    /// since start, open now (None: no recorder).
    pub episodes: Option<EpisodeCounts>,
    /// Paths with traffic lately by the kind of queue they wait in
    /// (`BottleneckClass::ALL`'s order; engine/classify.rs).
    pub bottlenecks: [u64; 5],
    /// Of those with a standing queue, by whose traffic fills it
    /// (`OwnerClass::ALL`'s order).
    pub owners: [u64; 5],
}

/// A metric's type, as the text format names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One family of /metrics.
struct Family {
    /// The name its series carry (counters with their `_total`).
    name: &'static str,
    kind: Kind,
    help: &'static str,
    /// The labels of its series, in this order; every other dimension of
    /// its rows is added up.
    labels: &'static [&'static str],
    /// Its values in a scrape. A family with no row is left out, as one
    /// never observed.
    rows: fn(&Scrape) -> Vec<Row>,
}

/// A value with the dimensions it is known by (`cc`, `role`, `state`, ...).
/// A dimension a row lacks is no label of its series.
#[derive(Clone, Debug)]
struct Row {
    dims: Vec<(&'static str, String)>,
    value: Value,
}

#[derive(Clone, Debug)]
enum Value {
    Number(f64),
    /// Upper bounds (+Inf last), observations per bucket (not
    /// cumulative), and their sum.
    Histogram {
        bounds: Vec<f64>,
        counts: Vec<u64>,
        sum: f64,
    },
}

impl Value {
    /// Add `other` in: the value of a series whose rows differ only in
    /// dimensions the family does not label.
    fn add(&mut self, other: &Value) {
        match (self, other) {
            (Value::Number(a), Value::Number(b)) => *a += b,
            (
                Value::Histogram { counts, sum, .. },
                Value::Histogram {
                    counts: c, sum: s, ..
                },
            ) => {
                for (a, b) in counts.iter_mut().zip(c) {
                    *a += b;
                }
                *sum += s;
            }
            _ => unreachable!("a family's rows are of one kind"),
        }
    }
}

fn row(dims: &[(&'static str, &str)], v: f64) -> Row {
    Row {
        dims: dims.iter().map(|&(k, v)| (k, v.to_string())).collect(),
        value: Value::Number(v),
    }
}

/// The dimensions of statistics of congestion control `cc` in role index
/// `role`: a receiver's own congestion control drives nothing it measures,
/// so its rows carry the role alone.
fn cc_role(cc: &str, role: usize) -> Vec<(&'static str, String)> {
    match ROLES[role] {
        Role::Sender => vec![("cc", cc.to_string()), ("role", Role::Sender.name().into())],
        Role::Receiver => vec![("role", Role::Receiver.name().into())],
    }
}

/// Each (cc, role index, its statistics) the kernel keeps.
fn cc_roles(v: &Scrape) -> impl Iterator<Item = (&str, usize, &BloatdRoleStats)> {
    v.per_cc
        .iter()
        .flat_map(|(cc, st)| (0..ROLES.len()).map(move |r| (cc.as_str(), r, &st.role[r])))
}

fn has_observations(r: &BloatdRoleStats) -> bool {
    r.delay[hist::QUEUE as usize].iter().any(|&x| x > 0)
}

/// Each (cc, role) of the kernel's statistics that saw an observation,
/// with its dimensions.
fn observed(v: &Scrape) -> impl Iterator<Item = (Vec<(&'static str, String)>, &BloatdRoleStats)> {
    cc_roles(v)
        .filter(|(_, _, rs)| has_observations(rs))
        .map(|(cc, r, rs)| (cc_role(cc, r), rs))
}

/// Rows of delay histogram `h` (enum bloatd_hist), seconds.
fn delay_rows(v: &Scrape, h: u32) -> Vec<Row> {
    let bounds = delay_bounds_s();
    let h = h as usize;
    observed(v)
        .map(|(dims, r)| Row {
            dims,
            value: Value::Histogram {
                bounds: bounds.clone(),
                counts: r.delay[h].to_vec(),
                sum: r.delay_sum_us[h] as f64 / 1e6,
            },
        })
        .collect()
}

/// Rows of delay histogram `h` by service (the queueing delay and the
/// RTT): the same samples as [`delay_rows`], counted per cgroup in the
/// kernel and folded into the bounded `service` label. Without them (no
/// read yet) the rows by (cc, role) stand in, with no `service`.
fn service_rows(v: &Scrape, h: u32) -> Vec<Row> {
    if v.services.is_empty() {
        return delay_rows(v, h);
    }
    let bounds = delay_bounds_s();
    let h = h as usize;
    v.services
        .iter()
        .filter(|s| s.stats.delay[h].iter().any(|&x| x > 0))
        .map(|s| {
            let mut dims = cc_role(&s.cc, s.role.min(1));
            dims.push(("service", s.service.clone()));
            Row {
                dims,
                value: Value::Histogram {
                    bounds: bounds.clone(),
                    counts: s.stats.delay[h].to_vec(),
                    sum: s.stats.delay_sum_us[h] as f64 / 1e6,
                },
            }
        })
        .collect()
}

fn cwnd_rows(v: &Scrape) -> Vec<Row> {
    let bounds = cwnd_bounds();
    observed(v)
        .filter(|(_, r)| r.cwnd.iter().any(|&x| x > 0))
        .map(|(dims, r)| Row {
            dims,
            value: Value::Histogram {
                bounds: bounds.clone(),
                counts: r.cwnd.to_vec(),
                sum: r.cwnd_sum as f64,
            },
        })
        .collect()
}

/// Retransmissions of every (cc, role) that saw an observation or one.
fn retrans_rows(v: &Scrape) -> Vec<Row> {
    cc_roles(v)
        .filter(|(_, _, rs)| rs.retrans > 0 || has_observations(rs))
        .map(|(cc, r, rs)| Row {
            dims: cc_role(cc, r),
            value: Value::Number(rs.retrans as f64),
        })
        .collect()
}

/// Distinct sockets bloated in the second asked for: a slot counts only
/// if it is stamped with that second (an older stamp is an old second's).
fn bloated_rows(v: &Scrape) -> Vec<Row> {
    let slot = (v.bloated_second & 3) as usize;
    observed(v)
        .map(|(dims, r)| {
            let n = if r.bloated_sec[slot] == v.bloated_second {
                r.bloated[slot]
            } else {
                0
            };
            Row {
                dims,
                value: Value::Number(n as f64),
            }
        })
        .collect()
}

fn socket_rows(v: &Scrape) -> Vec<Row> {
    v.sockets
        .iter()
        .map(|(cc, r, s, n)| {
            let mut dims = cc_role(cc, *r);
            dims.push(("state", tcp_state_name(*s as u8).to_string()));
            Row {
                dims,
                value: Value::Number(*n as f64),
            }
        })
        .collect()
}

fn westwood_rows(v: &Scrape) -> Vec<Row> {
    v.westwood_cwnd_pipe
        .iter()
        .filter(|w| w.count() > 0)
        .map(|w| Row {
            dims: vec![("cc", "bloatd_westwood".into())],
            value: Value::Histogram {
                bounds: bloatd_cc::RatioHistogram::bounds(),
                counts: w.counts.clone(),
                sum: w.sum,
            },
        })
        .collect()
}

/// Counters of the probes by label value: `(stat, value)`.
fn stat_rows(v: &Scrape, label: &'static str, stats: &[(u32, &str)]) -> Vec<Row> {
    stats
        .iter()
        .map(|&(i, name)| row(&[(label, name)], v.counters.get(i) as f64))
        .collect()
}

fn event_rows(v: &Scrape) -> Vec<Row> {
    stat_rows(
        v,
        "probe",
        &[
            (stat::PROBE, "tcp_probe"),
            (stat::STATE, "inet_sock_set_state"),
            (stat::RETRANS, "tcp_retransmit_skb"),
            (stat::CONG, "tcp_cong_state_set"),
            (stat::ITER, "iter_tcp"),
            (stat::SOCKOPS, "sock_ops"),
        ],
    )
}

fn dropped_rows(v: &Scrape) -> Vec<Row> {
    stat_rows(
        v,
        "reason",
        &[
            (stat::DROP_MAP_FULL, "map_full"),
            (stat::DROP_RINGBUF, "ringbuf_full"),
        ],
    )
}

fn one(v: f64) -> Vec<Row> {
    vec![row(&[], v)]
}

/// The policy's rows: (label value, value) by `action`, when the policy
/// is loaded.
fn policy_rows(
    v: &Scrape,
    pick: fn(&bloatd_model::api::PolicyCounts) -> Vec<(&str, f64)>,
) -> Vec<Row> {
    v.policy
        .iter()
        .flat_map(|(c, _)| pick(c))
        .map(|(action, n)| row(&[("action", action)], n))
        .collect()
}

/// One row per part of bloatd beyond the core (probes/kernel.rs: a fixed set of
/// names), 1 where `on` says so of its state.
fn feature_rows(v: &Scrape, on: fn(bloatd_model::FeatureState) -> bool) -> Vec<Row> {
    v.features
        .iter()
        .map(|f| row(&[("feature", &f.name)], on(f.state) as u8 as f64))
        .collect()
}

/// The flight recorder's rows by `kind`: `pick` chooses opened or open.
/// Episodes by kind (path, service): opened since start, open now.
pub type EpisodeCounts = ([u64; 2], [u64; 2]);

fn episode_rows(v: &Scrape, pick: fn(&EpisodeCounts) -> [u64; 2]) -> Vec<Row> {
    v.episodes
        .iter()
        .flat_map(|e| {
            let n = pick(e);
            bloatd_model::journal::EpisodeKind::ALL
                .iter()
                .enumerate()
                .map(move |(i, k)| row(&[("kind", k.as_str())], n[i] as f64))
        })
        .collect()
}

/// Every family of /metrics, in the order they are written. Names and
/// meanings are a contract (DESIGN.md, README "Metrics").
const FAMILIES: &[Family] = &[
    Family {
        name: "bloatd_build_info",
        kind: Kind::Gauge,
        help: "bloatd build.",
        labels: &["version"],
        rows: |_| vec![row(&[("version", env!("CARGO_PKG_VERSION"))], 1.0)],
    },
    Family {
        name: "bloatd_westwood_cwnd_pipe_ratio",
        kind: Kind::Histogram,
        help: "Westwood+ sockets: cwnd / (BWE x RTTmin / MSS), how far cwnd sits above the estimated pipe (one observation per socket per sampling interval in which it got ACKs, counted in the kernel).",
        labels: &["cc"],
        rows: westwood_rows,
    },
    Family {
        name: "bloatd_tcp_queueing_delay_seconds",
        kind: Kind::Histogram,
        help: "Queueing delay per socket sample: srtt minus the path's floor for senders (cc: the sender's congestion control), the measured receiver RTT minus it for receivers (no cc: the remote sender's drives a download); service: the top service_labels services by socket-time and \"other\"",
        labels: &["cc", "role", "service"],
        rows: |v| service_rows(v, hist::QUEUE),
    },
    Family {
        name: "bloatd_tcp_srtt_seconds",
        kind: Kind::Histogram,
        help: "Smoothed RTT per socket sample (receivers: their RTT measured from echoed timestamps, else the kernel's estimate); by service, as the queueing delay",
        labels: &["cc", "role", "service"],
        rows: |v| service_rows(v, hist::RTT),
    },
    Family {
        name: "bloatd_tcp_min_rtt_seconds",
        kind: Kind::Histogram,
        help: "The floor each sample's queueing delay is measured against: the lowest RTT of the path (README, Path floors)",
        labels: &["cc", "role"],
        rows: |v| delay_rows(v, hist::FLOOR),
    },
    Family {
        name: "bloatd_tcp_cwnd_segments",
        kind: Kind::Histogram,
        help: "Congestion window of sending sockets per sample, segments",
        labels: &["cc"],
        rows: cwnd_rows,
    },
    Family {
        name: "bloatd_tcp_retransmits_total",
        kind: Kind::Counter,
        help: "Segments retransmitted",
        labels: &["cc", "role"],
        rows: retrans_rows,
    },
    Family {
        name: "bloatd_tcp_sockets",
        kind: Kind::Gauge,
        help: "TCP sockets tracked (receivers: no cc)",
        labels: &["cc", "role", "state"],
        rows: socket_rows,
    },
    Family {
        name: "bloatd_tcp_bloated_sockets",
        kind: Kind::Gauge,
        help: "Sockets whose queueing delay reached the bloat threshold in the last whole second (receivers: no cc)",
        labels: &["cc", "role"],
        rows: bloated_rows,
    },
    Family {
        name: "bloatd_episodes_total",
        kind: Kind::Counter,
        help: "Bloat episodes the flight recorder opened (a path or a service at or above the bloat threshold for a few seconds; `bloatd incidents` lists them)",
        labels: &["kind"],
        rows: |v| episode_rows(v, |e| e.0),
    },
    Family {
        name: "bloatd_episode_open",
        kind: Kind::Gauge,
        help: "Bloat episodes open now",
        labels: &["kind"],
        rows: |v| episode_rows(v, |e| e.1),
    },
    Family {
        name: "bloatd_paths_by_bottleneck",
        kind: Kind::Gauge,
        help: "Paths that carried traffic in the last 20 s by the kind of queue they wait in: clear, droptail, aqm, ecn-aqm, unknown (`bloatd paths` says why)",
        labels: &["class"],
        rows: |v| {
            bloatd_model::BottleneckClass::ALL
                .iter()
                .map(|c| row(&[("class", c.as_str())], v.bottlenecks[*c as usize] as f64))
                .collect()
        },
    },
    Family {
        name: "bloatd_paths_by_owner",
        kind: Kind::Gauge,
        help: "Paths with a standing queue (10 ms or more) in the last 20 s by whose traffic fills it: self, neighbour (another namespace of this machine), external (traffic bloatd does not see), mixed, unknown (`bloatd paths` says why)",
        labels: &["owner"],
        rows: |v| {
            bloatd_model::OwnerClass::ALL
                .iter()
                .map(|c| row(&[("owner", c.as_str())], v.owners[*c as usize] as f64))
                .collect()
        },
    },
    Family {
        name: "bloatd_feature_enabled",
        kind: Kind::Gauge,
        help: "1 where this kernel runs the part of bloatd (as designed or by a fallback), 0 where it was declined at start: `bloatd status` says why",
        labels: &["feature"],
        rows: |v| feature_rows(v, |s| s != bloatd_model::FeatureState::Off),
    },
    Family {
        name: "bloatd_feature_fallback",
        kind: Kind::Gauge,
        help: "1 where the part runs by a fallback this kernel allows (`bloatd status` says which)",
        labels: &["feature"],
        rows: |v| feature_rows(v, |s| s == bloatd_model::FeatureState::Fallback),
    },
    Family {
        name: "bloatd_probe_events_total",
        kind: Kind::Counter,
        help: "Events seen by each probe",
        labels: &["probe"],
        rows: event_rows,
    },
    Family {
        name: "bloatd_probe_dropped_total",
        kind: Kind::Counter,
        help: "Losses: sockets not tracked because the socket map is full (map_full, each socket once), samples of watched sockets lost to a full ring buffer (ringbuf_full)",
        labels: &["reason"],
        rows: dropped_rows,
    },
    Family {
        name: "bloatd_probe_map_entries",
        kind: Kind::Gauge,
        help: "Entries in the kernel's socket map",
        labels: &[],
        rows: |v| one(v.counters.map_entries() as f64),
    },
    Family {
        name: "bloatd_probe_map_capacity",
        kind: Kind::Gauge,
        help: "Capacity of the kernel's socket map",
        labels: &[],
        rows: |v| one(v.map_capacity as f64),
    },
    Family {
        name: "bloatd_probe_sampling_odds",
        kind: Kind::Gauge,
        help: "Adaptive sampling: a segment of a socket that is not hot is looked at with probability 1/odds (the largest over CPUs; chosen from what a look costs there and how many segments come); 1 in exact mode",
        labels: &[],
        rows: |v| one(v.sampler.as_ref().map_or(1.0, |s| s.odds() as f64)),
    },
    Family {
        name: "bloatd_probe_sampling_looks_total",
        kind: Kind::Counter,
        help: "Adaptive sampling: random looks at sockets that are not hot",
        labels: &[],
        rows: |v| one(v.sampler.as_ref().map_or(0.0, |s| s.looks() as f64)),
    },
    Family {
        name: "bloatd_probe_hot_sockets",
        kind: Kind::Gauge,
        help: "Adaptive sampling: sockets sampled every interval (bloated, watched, acted on or dense)",
        labels: &[],
        rows: |v| one(v.sampler.as_ref().map_or(0.0, |s| s.hot as f64)),
    },
    Family {
        name: "bloatd_probe_run_time_seconds_total",
        kind: Kind::Counter,
        help: "Time spent in each probe (kernel BPF stats; zero unless bpf_stats is enabled)",
        labels: &["probe"],
        rows: |v| {
            v.runs
                .iter()
                .map(|&(probe, ns, _)| row(&[("probe", probe)], ns as f64 / 1e9))
                .collect()
        },
    },
    Family {
        name: "bloatd_probe_runs_total",
        kind: Kind::Counter,
        help: "Runs of each probe (kernel BPF stats; zero unless bpf_stats is enabled)",
        labels: &["probe"],
        rows: |v| {
            v.runs
                .iter()
                .map(|&(probe, _, n)| row(&[("probe", probe)], n as f64))
                .collect()
        },
    },
    Family {
        name: "bloatd_path_floors",
        kind: Kind::Gauge,
        help: "Path floors the kernel keeps (peers and prefixes)",
        labels: &[],
        rows: |v| one(v.floors as f64),
    },
    Family {
        name: "bloatd_path_floors_created_total",
        kind: Kind::Counter,
        help: "Path floors created (peers and prefixes)",
        labels: &[],
        rows: |v| one(v.counters.get(stat::FLOOR_NEW) as f64),
    },
    Family {
        name: "bloatd_path_floors_evicted_total",
        kind: Kind::Counter,
        help: "Path floors the bounds (floor_entries for peers, a quarter of it for prefixes) pushed out, least recently used first",
        labels: &[],
        rows: |v| one(v.counters.floors_evicted(v.floors) as f64),
    },
    Family {
        name: "bloatd_path_floors_inferred_total",
        kind: Kind::Counter,
        help: "Floors inferred for a new peer from the queue its route's bottleneck held",
        labels: &[],
        rows: |v| one(v.counters.get(stat::FLOOR_INFERRED) as f64),
    },
    Family {
        name: "bloatd_service_overflow_total",
        kind: Kind::Counter,
        help: "Samples counted under service=\"other\" because the kernel's per-service histograms were full (service_entries)",
        labels: &[],
        rows: |v| one(v.counters.get(stat::SVC_FULL) as f64),
    },
    Family {
        name: "bloatd_path_floor_route_changes_total",
        kind: Kind::Counter,
        help: "Floors started over because the peer is now reached through another interface or gateway",
        labels: &[],
        rows: |v| one(v.counters.get(stat::FLOOR_ROUTE) as f64),
    },
    Family {
        name: "bloatd_cc_export_failures_total",
        kind: Kind::Counter,
        help: "State snapshots of bloatd's congestion controls that their map refused (full or out of memory); the socket's state stays stale until its next export",
        labels: &["cc"],
        rows: |v| {
            v.cc_export_failures
                .iter()
                .map(|(cc, n)| row(&[("cc", cc)], *n as f64))
                .collect()
        },
    },
    Family {
        name: "bloatd_policy_sockets",
        kind: Kind::Gauge,
        help: "Live sockets under each policy action: cc (a rule chose the congestion control at the handshake), bulk (a bulk rule switched it mid-flow), drwa (DRWA clamps the receive window now)",
        labels: &["action"],
        rows: |v| {
            policy_rows(v, |c| {
                vec![
                    ("cc", c.cc_sockets as f64),
                    ("bulk", c.bulk_sockets as f64),
                    ("drwa", c.drwa_sockets as f64),
                ]
            })
        },
    },
    Family {
        name: "bloatd_policy_actions_total",
        kind: Kind::Counter,
        help: "What the policy did: cc (congestion control set at a handshake), bulk (switched mid-flow), drwa (a DRWA round set a window clamp), drwa_held (a DRWA cut taken back: the window fell, the RTT did not), drwa_restore (a window given back), drwa_recovered (a window given back that a bloatd which did not stop had clamped), notsent_lowat (a sender's unsent backlog bounded at a handshake), bulk_gated (a bulk switch not made: the path was an AQM's, or not of the rule's path classes), drwa_gated (a DRWA round not run: the path was an AQM's)",
        labels: &["action"],
        rows: |v| {
            policy_rows(v, |c| {
                vec![
                    ("cc", c.cc_set_total as f64),
                    ("bulk", c.bulk_switched_total as f64),
                    ("drwa", c.drwa_rounds_total as f64),
                    ("drwa_held", c.drwa_held_total as f64),
                    ("drwa_restore", c.drwa_restored_total as f64),
                    ("drwa_recovered", c.drwa_recovered_total as f64),
                    ("notsent_lowat", c.notsent_lowat_set_total as f64),
                    ("bulk_gated", c.bulk_gated_total as f64),
                    ("drwa_gated", c.drwa_gated_total as f64),
                ]
            })
        },
    },
    Family {
        name: "bloatd_policy_failures_total",
        kind: Kind::Counter,
        help: "Policy actions the kernel refused: cc (bpf_setsockopt TCP_CONGESTION), drwa (TCP_WINDOW_CLAMP), notsent_lowat (TCP_NOTSENT_LOWAT)",
        labels: &["action"],
        rows: |v| {
            policy_rows(v, |c| {
                vec![
                    ("cc", c.cc_failed_total as f64),
                    ("drwa", c.drwa_failed_total as f64),
                    ("notsent_lowat", c.notsent_lowat_failed_total as f64),
                ]
            })
        },
    },
    Family {
        name: "bloatd_drwa_enabled",
        kind: Kind::Gauge,
        help: "1 while DRWA is switched on for every armed receiver (drwa = \"on\", the API, bloatd top's key)",
        labels: &[],
        rows: |v| {
            v.policy
                .iter()
                .map(|(_, m)| row(&[], (*m == bloatd_model::policy::DrwaMode::On) as u8 as f64))
                .collect()
        },
    },
];

/// Writes /metrics.
#[derive(Debug, Default)]
pub struct Metrics;

impl Metrics {
    pub fn new() -> Metrics {
        Metrics
    }

    /// The exposition of `scrape` in Prometheus text format 0.0.4, which
    /// every scraper and `promtool check metrics` read.
    pub fn encode(&self, scrape: Scrape) -> String {
        let mut out = String::new();
        for f in FAMILIES {
            encode_family(&mut out, f, &scrape);
        }
        out
    }
}

/// One family: its rows grouped by the labels it keeps (the others added
/// up), then HELP, TYPE and its series.
fn encode_family(out: &mut String, f: &Family, scrape: &Scrape) {
    let mut series: BTreeMap<Vec<(&str, String)>, Value> = BTreeMap::new();
    for r in (f.rows)(scrape) {
        let key: Vec<(&str, String)> = f
            .labels
            .iter()
            .filter_map(|l| r.dims.iter().find(|(d, _)| d == l).cloned())
            .collect();
        match series.get_mut(&key) {
            Some(v) => v.add(&r.value),
            None => {
                series.insert(key, r.value);
            }
        }
    }
    if series.is_empty() {
        return;
    }
    let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(f.help));
    let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind.name());
    for (labels, value) in &series {
        match value {
            Value::Number(v) => sample(out, f.name, "", labels, None, *v),
            Value::Histogram {
                bounds,
                counts,
                sum,
            } => {
                let mut cumulative = 0;
                for (le, n) in bounds.iter().zip(counts) {
                    cumulative += n;
                    sample(out, f.name, "_bucket", labels, Some(*le), cumulative as f64);
                }
                sample(out, f.name, "_sum", labels, None, *sum);
                sample(out, f.name, "_count", labels, None, cumulative as f64);
            }
        }
    }
}

/// One sample line: `name{labels,le="..."} value`.
fn sample(
    out: &mut String,
    name: &str,
    suffix: &str,
    labels: &[(&str, String)],
    le: Option<f64>,
    v: f64,
) {
    out.push_str(name);
    out.push_str(suffix);
    let le = le.map(number);
    let all = labels
        .iter()
        .map(|(k, v)| (*k, v.as_str()))
        .chain(le.as_deref().map(|le| ("le", le)));
    for (i, (k, v)) in all.enumerate() {
        out.push(if i == 0 { '{' } else { ',' });
        let _ = write!(out, "{k}=\"{}\"", escape_label(v));
    }
    if !labels.is_empty() || le.is_some() {
        out.push('}');
    }
    out.push(' ');
    out.push_str(&number(v));
    out.push('\n');
}

/// A value as the text format writes it: integers without a fraction,
/// `+Inf` for infinity.
fn number(v: f64) -> String {
    if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else if v.is_nan() {
        "NaN".into()
    } else {
        format!("{v}")
    }
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
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
        // The same sample, as the kernel counts it for its service.
        let mut svc = crate::probes::abi::BloatdSvcStats::default();
        svc.delay[hist::QUEUE as usize][9] = 1;
        svc.delay_sum_us[hist::QUEUE as usize] = 250_000;
        svc.delay[hist::RTT as usize][9] = 1;
        svc.delay_sum_us[hist::RTT as usize] = 270_000;
        Scrape {
            services: vec![crate::service::metrics::ServiceHist {
                service: "nginx.service".into(),
                cc: "cubic".into(),
                role: 0,
                stats: svc,
            }],
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
    fn kernel_histograms_encode_with_cc_role_and_service_only() {
        let text = Metrics::new().encode(view());
        for line in [
            r#"bloatd_tcp_queueing_delay_seconds_bucket{cc="cubic",role="sender",service="nginx.service",le="0.5"} 1"#,
            r#"bloatd_tcp_queueing_delay_seconds_bucket{cc="cubic",role="sender",service="nginx.service",le="0.2"} 0"#,
            r#"bloatd_tcp_queueing_delay_seconds_bucket{cc="cubic",role="sender",service="nginx.service",le="+Inf"} 1"#,
            r#"bloatd_tcp_queueing_delay_seconds_sum{cc="cubic",role="sender",service="nginx.service"} 0.25"#,
            r#"bloatd_tcp_queueing_delay_seconds_count{cc="cubic",role="sender",service="nginx.service"} 1"#,
            r#"bloatd_tcp_srtt_seconds_sum{cc="cubic",role="sender",service="nginx.service"} 0.27"#,
            "bloatd_service_overflow_total 0",
            r#"bloatd_tcp_min_rtt_seconds_bucket{cc="cubic",role="sender",le="0.02"} 1"#,
            r#"bloatd_tcp_cwnd_segments_bucket{cc="cubic",le="512"} 1"#,
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
        // Metadata as text format 0.0.4 has it: a counter's name with its
        // `_total`, no OpenMetrics-only types or lines.
        for bad in ["# UNIT", " info\n", "# TYPE bloatd_tcp_retransmits counter"] {
            assert!(!text.contains(bad), "{bad}\n{text}");
        }
    }

    /// Two congestion controls' receivers (each its namespace's default,
    /// say) and a cubic sender: the senders keep their cc, the receivers
    /// are one series without it, their observations and bloated sockets
    /// added up.
    #[test]
    fn receivers_carry_no_cc() {
        let mut v = view();
        let mut bbr = BloatdCcStats::default();
        for (st, n) in [(&mut v.per_cc[0].1, 2), (&mut bbr, 3)] {
            let r = &mut st.role[1];
            r.delay[hist::QUEUE as usize][9] = n;
            r.delay_sum_us[hist::QUEUE as usize] = n * 300_000;
            r.bloated[41 & 3] = n;
            r.bloated_sec[41 & 3] = 41;
        }
        // The same samples by service: both receivers in one.
        for (cc, n) in [("cubic", 2), ("bbr", 3)] {
            let mut stats = crate::probes::abi::BloatdSvcStats::default();
            stats.delay[hist::QUEUE as usize][9] = n;
            stats.delay_sum_us[hist::QUEUE as usize] = n * 300_000;
            v.services.push(crate::service::metrics::ServiceHist {
                service: "apt.service".into(),
                cc: cc.into(),
                role: 1,
                stats,
            });
        }
        v.per_cc.push(("bbr".into(), bbr));
        v.sockets.push(("bbr".into(), 1, 1, 4));
        v.sockets.push(("cubic".into(), 1, 1, 1));
        let text = Metrics::new().encode(v);
        for line in [
            r#"bloatd_tcp_queueing_delay_seconds_bucket{role="receiver",service="apt.service",le="0.5"} 5"#,
            r#"bloatd_tcp_queueing_delay_seconds_sum{role="receiver",service="apt.service"} 1.5"#,
            r#"bloatd_tcp_queueing_delay_seconds_count{cc="cubic",role="sender",service="nginx.service"} 1"#,
            r#"bloatd_tcp_min_rtt_seconds_count{cc="cubic",role="sender"} 1"#,
            r#"bloatd_tcp_bloated_sockets{role="receiver"} 5"#,
            r#"bloatd_tcp_bloated_sockets{cc="cubic",role="sender"} 1"#,
            r#"bloatd_tcp_sockets{role="receiver",state="ESTAB"} 5"#,
        ] {
            assert!(text.contains(line), "missing {line}\n{text}");
        }
        assert!(
            !text.contains(r#"cc="bbr""#) && !text.contains(r#"cc="cubic",role="receiver""#),
            "{text}"
        );
    }

    /// Paths by kind of queue: one row per class (sorted, as every family),
    /// a bounded label.
    #[test]
    fn paths_by_bottleneck_one_row_per_class() {
        let text = Metrics::new().encode(Scrape {
            bottlenecks: [3, 1, 2, 0, 4],
            ..view()
        });
        let rows: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("bloatd_paths_by_bottleneck{"))
            .collect();
        assert_eq!(
            rows,
            [
                r#"bloatd_paths_by_bottleneck{class="aqm"} 2"#,
                r#"bloatd_paths_by_bottleneck{class="clear"} 3"#,
                r#"bloatd_paths_by_bottleneck{class="droptail"} 1"#,
                r#"bloatd_paths_by_bottleneck{class="ecn-aqm"} 0"#,
                r#"bloatd_paths_by_bottleneck{class="unknown"} 4"#,
            ]
        );
    }

    /// Paths by whose traffic fills their queue: one row per owner, a
    /// bounded label (never an address or a namespace).
    #[test]
    fn paths_by_owner_one_row_per_owner() {
        let text = Metrics::new().encode(Scrape {
            owners: [2, 1, 0, 3, 1],
            ..view()
        });
        let rows: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("bloatd_paths_by_owner{"))
            .collect();
        assert_eq!(
            rows,
            [
                r#"bloatd_paths_by_owner{owner="external"} 0"#,
                r#"bloatd_paths_by_owner{owner="mixed"} 3"#,
                r#"bloatd_paths_by_owner{owner="neighbour"} 1"#,
                r#"bloatd_paths_by_owner{owner="self"} 2"#,
                r#"bloatd_paths_by_owner{owner="unknown"} 1"#,
            ]
        );
    }

    /// Every family's HELP and TYPE come once, before its samples, and
    /// every sample line belongs to the family above it.
    #[test]
    fn one_pass_text_format() {
        let text = Metrics::new().encode(Scrape {
            policy: Some((Default::default(), bloatd_model::policy::DrwaMode::Off)),
            ..view()
        });
        let mut family = "";
        let mut seen = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                family = rest.split(' ').next().unwrap();
                assert!(seen.insert(family), "{family} twice");
            } else if !line.starts_with("# TYPE ") {
                assert!(line.starts_with(family), "{line} outside {family}");
            }
        }
        assert!(text.contains("bloatd_drwa_enabled 0\n"));
        assert_eq!(
            FAMILIES.iter().filter(|f| seen.contains(f.name)).count(),
            seen.len()
        );
    }

    #[test]
    fn label_values_and_help_are_escaped() {
        assert_eq!(escape_label("a\"b\\c\nd"), r#"a\"b\\c\nd"#);
        assert_eq!(escape_help("a\\b\nc"), r#"a\\b\nc"#);
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(512.0), "512");
        assert_eq!(number(f64::INFINITY), "+Inf");
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
            r#"bloatd_westwood_cwnd_pipe_ratio_bucket{cc="bloatd_westwood",le="0.75"} 0"#,
            r#"bloatd_westwood_cwnd_pipe_ratio_bucket{cc="bloatd_westwood",le="1"} 3"#,
            r#"bloatd_westwood_cwnd_pipe_ratio_bucket{cc="bloatd_westwood",le="1.25"} 4"#,
            r#"bloatd_westwood_cwnd_pipe_ratio_bucket{cc="bloatd_westwood",le="20"} 4"#,
            r#"bloatd_westwood_cwnd_pipe_ratio_bucket{cc="bloatd_westwood",le="+Inf"} 5"#,
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
