//! The view model shared by the daemon's API and the dashboard.
//!
//! These types are the JSON contract of the Unix-socket API (`/v1/snapshot`,
//! `/v1/sockets`) and of `bloatd sockets --json`: scripts and the lab read
//! the same field names. Names carry their unit (`_us`, `_bps`, `_ms`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};

/// Which side of the transfer a socket is on. A socket whose peer has
/// acknowledged more bytes than it received is a sender; otherwise a receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Sender,
    Receiver,
}

impl Role {
    pub const ALL: [Role; 2] = [Role::Sender, Role::Receiver];

    /// For serde's defaults: data from before the role was sent.
    pub fn sender() -> Role {
        Role::Sender
    }

    /// The role as JSON, metric labels and sentences name it: `sender` or
    /// `receiver`.
    pub const fn name(self) -> &'static str {
        match self {
            Role::Sender => "sender",
            Role::Receiver => "receiver",
        }
    }

    /// The role in a table column: `send` or `recv`.
    pub fn short(self) -> &'static str {
        match self {
            Role::Sender => "send",
            Role::Receiver => "recv",
        }
    }
}

/// The kernel's congestion-avoidance state (icsk_ca_state).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CaState {
    Open,
    Disorder,
    Cwr,
    Recovery,
    Loss,
}

/// Where a floor (the lowest RTT of a path) came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FloorSource {
    /// The socket's own minimum RTT.
    Socket,
    /// Observed by another socket toward the same peer (alive or closed).
    Peer,
    /// Observed toward the peer's prefix (/24, /64): the peer had no history.
    Prefix,
    /// The handshake RTT minus the queue the bottleneck held at that moment,
    /// as sockets with observed floors on the same route measured it.
    Inferred,
    /// DRWA's RTT_min only, never a socket's floor: the one the other
    /// receivers DRWA acts on along the same path use (a connection's first
    /// rounds, bpf/policy.h drwa_first_floor).
    Receivers,
}

impl FloorSource {
    pub fn as_str(self) -> &'static str {
        match self {
            FloorSource::Socket => "socket",
            FloorSource::Peer => "peer",
            FloorSource::Prefix => "prefix",
            FloorSource::Inferred => "inferred",
            FloorSource::Receivers => "receivers",
        }
    }
}

/// One path: the sockets of one network namespace toward one peer (or one
/// prefix) through one interface, with the queue they wait in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NetPath {
    pub netns: u32,
    /// The peer, or the network address of the prefix.
    pub peer: IpAddr,
    /// 32 / 128 for one peer; less for a prefix.
    pub prefix_len: u8,
    /// Egress interface name, "" if unknown.
    pub interface: String,
    /// The path's floor (lowest RTT) and where it came from.
    pub floor_us: u32,
    pub floor_source: FloorSource,
    /// Queueing delay over its sockets now (those that carried traffic in
    /// the last second; all of them if none did).
    pub queue_delay_p50_us: u32,
    pub queue_delay_max_us: u32,
    pub sockets: u32,
    /// Its sockets with an RTT sample and a floor: the queue, grade and
    /// RPM come from them; 0 means there is nothing to grade.
    #[serde(default)]
    pub measured: u32,
    /// Goodput of its sockets together.
    pub throughput_bps: u64,
    /// Congestion controls of its sockets.
    pub ccs: Vec<String>,
    /// The services its sockets serve.
    #[serde(default)]
    pub services: Vec<String>,
    /// What kind of queue holds its traffic, from its last seconds of
    /// reads (daemon/src/bottleneck.rs); absent where not classified (by
    /// prefix, `bloatd top`'s embedded mode before its first seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bottleneck: Option<Bottleneck>,
}

/// The kind of queue a path's traffic waits in (issue 33).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum BottleneckClass {
    /// No standing queue while it carries traffic, no loss, no mark.
    Clear,
    /// A standing queue, or losses when the queue was long: a buffer that
    /// fills until it overflows.
    Droptail,
    /// Losses while the queue was short: an AQM drops before it fills.
    Aqm,
    /// Congestion signalled by ECN without loss while the queue was short.
    EcnAqm,
    /// Not enough evidence (`Bottleneck::why` says what is missing).
    #[default]
    Unknown,
}

impl BottleneckClass {
    pub const ALL: [BottleneckClass; 5] = [
        BottleneckClass::Clear,
        BottleneckClass::Droptail,
        BottleneckClass::Aqm,
        BottleneckClass::EcnAqm,
        BottleneckClass::Unknown,
    ];

    /// The name in JSON, /metrics' `class` label and config.
    pub fn as_str(self) -> &'static str {
        match self {
            BottleneckClass::Clear => "clear",
            BottleneckClass::Droptail => "droptail",
            BottleneckClass::Aqm => "aqm",
            BottleneckClass::EcnAqm => "ecn-aqm",
            BottleneckClass::Unknown => "unknown",
        }
    }
}

impl BottleneckClass {
    /// Where a queue of this kind waits, to follow "holds 420ms of queue"
    /// ("" where it says nothing).
    pub fn where_phrase(self) -> &'static str {
        match self {
            BottleneckClass::Droptail => " in a drop-tail buffer",
            BottleneckClass::Aqm => " under an AQM",
            BottleneckClass::EcnAqm => " under an ECN-marking AQM",
            BottleneckClass::Clear | BottleneckClass::Unknown => "",
        }
    }
}

/// A path's class and the evidence for it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Bottleneck {
    pub class: BottleneckClass,
    /// One sentence: the evidence, or what is missing.
    pub why: String,
    /// Seconds of reads with traffic in flight it rests on.
    pub seconds: u32,
    /// Whose traffic fills its queue; absent while no queue stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<QueueOwner>,
}

/// Whose traffic fills a path's standing queue (issue 33).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum OwnerClass {
    /// The path's own flows (this namespace's, and the other end's where
    /// that is on this machine too).
    #[serde(rename = "self")]
    Own,
    /// Flows of another network namespace of this machine (a container or
    /// pod) that wait in the same queue.
    Neighbour,
    /// Traffic bloatd does not see: the queue stood before every flow it
    /// sees there, or they carry a small share of what the link delivered.
    External,
    /// No one owner has three quarters of the link.
    Mixed,
    /// Not enough reads with a standing queue yet.
    #[default]
    Unknown,
}

impl OwnerClass {
    pub const ALL: [OwnerClass; 5] = [
        OwnerClass::Own,
        OwnerClass::Neighbour,
        OwnerClass::External,
        OwnerClass::Mixed,
        OwnerClass::Unknown,
    ];

    /// The name in JSON and /metrics' `owner` label.
    pub fn as_str(self) -> &'static str {
        match self {
            OwnerClass::Own => "self",
            OwnerClass::Neighbour => "neighbour",
            OwnerClass::External => "external",
            OwnerClass::Mixed => "mixed",
            OwnerClass::Unknown => "unknown",
        }
    }
}

/// Whose traffic fills a path's queue, and the evidence.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct QueueOwner {
    pub class: OwnerClass,
    /// One sentence: the shares, or what is missing.
    pub why: String,
    /// The neighbours that share the queue: "netns INODE (process)".
    #[serde(default)]
    pub neighbours: Vec<String>,
}

impl NetPath {
    /// The bufferbloat grade of the DSLReports and Waveform tests, from the
    /// median queueing delay: A+ < 5 ms, A < 30, B < 60, C < 200, D < 400,
    /// F otherwise. None without an RTT sample: an unmeasured path is no A+.
    pub fn grade(&self) -> Option<&'static str> {
        (self.measured > 0).then(|| grade(self.queue_delay_p50_us))
    }

    /// The kind of queue it waits in, as a table's cell: the class, or
    /// `-` where the classifier has not seen it (a prefix, a path no read
    /// observed, or no daemon).
    pub fn bottleneck_text(&self) -> &'static str {
        self.bottleneck.as_ref().map_or("-", |b| b.class.as_str())
    }

    /// Whose traffic fills its queue, as a table's cell: the owner, or `-`
    /// where no queue stands (or it is not classified).
    pub fn owner_text(&self) -> &'static str {
        self.bottleneck
            .as_ref()
            .and_then(|b| b.owner.as_ref())
            .map_or("-", |o| o.class.as_str())
    }

    /// Loaded responsiveness in round trips per minute (IETF responsiveness
    /// draft: 60000 / loaded RTT in ms), estimated passively from the floor
    /// plus the median queue: no probe traffic is sent. None without an RTT
    /// sample.
    pub fn rpm(&self) -> Option<u32> {
        (self.measured > 0).then(|| rpm(self.floor_us as u64 + self.queue_delay_p50_us as u64))
    }

    /// Floor, queue (median, max), grade and RPM as tables show them: "-"
    /// where no socket of the path has measured them (no floor yet, no
    /// RTT sample).
    pub fn measured_text(&self) -> [String; 5] {
        let floor = if self.floor_us == 0 {
            "-".into()
        } else {
            crate::format::ms(self.floor_us as u64)
        };
        if self.measured == 0 {
            return [floor, "-".into(), "-".into(), "-".into(), "-".into()];
        }
        [
            floor,
            crate::format::ms(self.queue_delay_p50_us as u64),
            crate::format::ms(self.queue_delay_max_us as u64),
            self.grade().unwrap_or("-").to_string(),
            self.rpm().map_or("-".into(), |r| r.to_string()),
        ]
    }
}

impl NetPath {
    /// The peer, or `prefix/len`, as shown.
    pub fn peer_text(&self) -> String {
        let full = if self.peer.is_ipv4() { 32 } else { 128 };
        if self.prefix_len >= full {
            self.peer.to_string()
        } else {
            format!("{}/{}", self.peer, self.prefix_len)
        }
    }
}

/// One sentence on the worst path (the first: paths come worst queue
/// first), for a laptop user: where the queue is, how much, of what kind
/// where the classifier has decided, and how many flows wait behind it.
/// None when nothing queues (60 ms, grade C, or more).
pub fn worst_path_sentence(paths: &[NetPath]) -> Option<String> {
    let p = paths.first().filter(|p| p.queue_delay_p50_us >= 60_000)?;
    let flows = if p.sockets == 1 {
        "1 flow waits".to_string()
    } else {
        format!("{} flows wait", p.sockets)
    };
    Some(format!(
        "the link to {} ({}) holds {} of queue{}, {flows} behind it: grade {}, {} RPM (passive loaded estimate)",
        p.peer_text(),
        if p.interface.is_empty() { "?" } else { &p.interface },
        crate::format::ms(p.queue_delay_p50_us as u64),
        p.bottleneck.as_ref().map_or("", |b| b.class.where_phrase()),
        p.grade()?,
        p.rpm()?
    ))
}

/// One sentence on a path's kind of queue (`bloatd paths`): "10.9.2.2
/// (eth0): droptail, drop-tail buffer: 420ms of queue, 3 losses at 480ms
/// of queue (12 s of traffic)". None where it was not classified.
pub fn bottleneck_sentence(p: &NetPath) -> Option<String> {
    let b = p.bottleneck.as_ref()?;
    let owner = b
        .owner
        .as_ref()
        .map(|o| format!("; whose: {}, {}", o.class.as_str(), o.why))
        .unwrap_or_default();
    Some(format!(
        "{} ({}): {}, {}{owner} ({} s of traffic)",
        p.peer_text(),
        if p.interface.is_empty() {
            "?"
        } else {
            &p.interface
        },
        b.class.as_str(),
        b.why,
        b.seconds
    ))
}

/// One service (the sockets of one systemd unit, container or cgroup):
/// how long its users wait for a round trip, split by where the wait is:
/// in the network's queue (queueing delay against the path's floor) or in
/// the service's own send buffers (bytes written, not yet sent, at the
/// socket's delivery rate).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ServiceView {
    /// As [`Socket::service`].
    pub service: String,
    pub sockets: u32,
    /// Sockets that carried traffic in the last second: the numbers below
    /// are theirs (all measured sockets' when none did).
    pub active: u32,
    /// Its sockets with an RTT sample and a floor: the queue, backlog time,
    /// wait, grade and RPM come from them; 0 means there is nothing to
    /// grade (as [`NetPath::measured`]).
    #[serde(default)]
    pub measured: u32,
    /// The network's queue, each socket seen from its own side.
    pub queue_delay_p50_us: u32,
    pub queue_delay_p90_us: u32,
    pub queue_delay_max_us: u32,
    /// The service's own backlog: its senders' unsent bytes now, and the
    /// time they take at each socket's delivery rate.
    pub unsent_bytes: u64,
    pub unsent_delay_p50_us: u32,
    pub unsent_delay_max_us: u32,
    /// The round trip its users wait (RTT from the socket's side plus its
    /// unsent backlog), as the responsiveness draft aggregates probes: the
    /// single-sided trimmed mean at the 95th percentile.
    pub wait_us: u32,
    /// Goodput of its sockets together.
    pub throughput_bps: u64,
    pub ccs: Vec<String>,
    /// The processes that hold its sockets (by name).
    pub processes: Vec<String>,
}

impl ServiceView {
    /// The bufferbloat grade of its network queue (see [`NetPath::grade`]).
    /// None without an RTT sample.
    pub fn grade(&self) -> Option<&'static str> {
        (self.measured > 0).then(|| grade(self.queue_delay_p50_us))
    }

    /// Passive responsiveness in round trips per minute, as
    /// draft-ietf-ippm-responsiveness defines it for the loaded connection
    /// (60000 / the trimmed mean round trip in ms), from what the sockets
    /// wait instead of probes: no traffic is sent. None without an RTT
    /// sample.
    pub fn rpm(&self) -> Option<u32> {
        (self.measured > 0).then(|| rpm(self.wait_us as u64))
    }

    /// Queue (p50, p90, max), grade, backlog time, wait and RPM as tables
    /// show them: "-" where no socket of the service has measured them.
    pub fn measured_text(&self) -> [String; 7] {
        if self.measured == 0 {
            return std::array::from_fn(|_| "-".into());
        }
        let ms = |us: u32| crate::format::ms(us as u64);
        [
            ms(self.queue_delay_p50_us),
            ms(self.queue_delay_p90_us),
            ms(self.queue_delay_max_us),
            self.grade().unwrap_or("-").to_string(),
            ms(self.unsent_delay_p50_us),
            ms(self.wait_us),
            self.rpm().map_or("-".into(), |r| r.to_string()),
        ]
    }
}

/// One sentence on the worst service (the first: services come longest
/// wait first), for an operator: how long its users wait and where the
/// wait is. None when its network queue is under 60 ms (grade C) and its
/// backlog too.
pub fn worst_service_sentence(services: &[ServiceView]) -> Option<String> {
    let s = services
        .first()
        .filter(|s| s.queue_delay_p50_us >= 60_000 || s.unsent_delay_p50_us >= 60_000)?;
    Some(format!(
        "{}'s users wait {} a round trip: {} network queue, {} own send buffers; grade {}, {} RPM",
        s.service,
        crate::format::ms(s.wait_us as u64),
        crate::format::ms(s.queue_delay_p50_us as u64),
        crate::format::ms(s.unsent_delay_p50_us as u64),
        s.grade()?,
        s.rpm()?
    ))
}

/// Bufferbloat grade of a queueing delay (see [`NetPath::grade`]).
pub fn grade(queue_delay_us: u32) -> &'static str {
    match queue_delay_us {
        0..5_000 => "A+",
        5_000..30_000 => "A",
        30_000..60_000 => "B",
        60_000..200_000 => "C",
        200_000..400_000 => "D",
        _ => "F",
    }
}

/// Round trips per minute at a loaded RTT of `rtt_us` (0 when unknown).
pub fn rpm(rtt_us: u64) -> u32 {
    if rtt_us == 0 {
        return 0;
    }
    (60_000_000 / rtt_us).min(u32::MAX as u64) as u32
}

/// Internal state of a bloatd congestion control, exported by its own map
/// (the kernel refuses get_info for BPF congestion controls).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "algo", rename_all = "lowercase")]
pub enum CcState {
    /// Westwood+: bandwidth estimate and RTTmin. `pipe_segments` is
    /// BWE x RTTmin / MSS, the window Westwood+ falls back to after congestion.
    Westwood {
        bwe_bytes_per_s: u64,
        min_rtt_us: u32,
        pipe_segments: u32,
    },
    /// CUBIC: W_max (segments), K (ms), time since the epoch began (None when
    /// no epoch is running), the delay floor HyStart compares with, and
    /// HyStart's round and whether it found the exit point.
    Cubic {
        w_max_segments: u32,
        k_ms: u32,
        epoch_age_ms: Option<u32>,
        /// CUBIC's delay_min: the minimum RTT HyStart and the curve use.
        min_rtt_us: u32,
        hystart_round: u32,
        hystart_found: bool,
    },
}

/// What one part of a congestion control's state is: a quantity with its
/// unit, so each reader prints it its own way (`bloatd sockets` as `ss`
/// does, the dashboard with `format`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CcValue {
    /// A rate, bits per second.
    Rate(u64),
    /// A round-trip time the algorithm keeps, microseconds.
    Rtt(u32),
    /// A time the algorithm keeps in milliseconds.
    Millis(u32),
    Segments(u32),
    /// The socket's cwnd over the algorithm's pipe (BWE x RTTmin / MSS).
    PipeRatio(f64),
    /// HyStart's round, and whether it found the exit point.
    Round {
        n: u32,
        found: bool,
    },
    /// Not there now (a CUBIC with no epoch running).
    Absent,
}

/// One part of a congestion control's state: `key` as `bloatd sockets`
/// names it (`key=value`), `label` as the dashboard does, and `alarm`, what
/// it means when it shows bloat.
#[derive(Clone, Debug, PartialEq)]
pub struct CcPart {
    pub key: &'static str,
    pub label: &'static str,
    pub value: CcValue,
    pub alarm: Option<&'static str>,
}

impl CcState {
    /// The algorithm as the dashboard titles it.
    pub fn title(&self) -> &'static str {
        match self {
            CcState::Westwood { .. } => "Westwood+",
            CcState::Cubic { .. } => "CUBIC",
        }
    }

    /// Its parts, decoded once for every reader. With the socket's `cwnd`,
    /// what it says of the socket too: Westwood+'s cwnd over its pipe (more
    /// than twice the pipe in the window can only sit in a queue: the
    /// papers' "fat pipe").
    pub fn parts(&self, cwnd: Option<u32>) -> Vec<CcPart> {
        let part = |key, label, value| CcPart {
            key,
            label,
            value,
            alarm: None,
        };
        match *self {
            CcState::Westwood {
                bwe_bytes_per_s,
                min_rtt_us,
                pipe_segments,
            } => {
                let mut parts = vec![
                    part(
                        "bwe",
                        "BWE",
                        CcValue::Rate(bwe_bytes_per_s.saturating_mul(8)),
                    ),
                    part("rttmin", "RTTmin", CcValue::Rtt(min_rtt_us)),
                    part("pipe", "pipe", CcValue::Segments(pipe_segments)),
                ];
                if let (Some(cwnd), true) = (cwnd, pipe_segments > 0) {
                    let ratio = cwnd as f64 / pipe_segments as f64;
                    parts.push(CcPart {
                        alarm: (ratio >= 2.0).then_some("fat pipe"),
                        ..part("cwnd/pipe", "cwnd", CcValue::PipeRatio(ratio))
                    });
                }
                parts
            }
            CcState::Cubic {
                w_max_segments,
                k_ms,
                epoch_age_ms,
                min_rtt_us,
                hystart_round,
                hystart_found,
            } => vec![
                part("wmax", "W_max", CcValue::Segments(w_max_segments)),
                part("K", "K", CcValue::Millis(k_ms)),
                part(
                    "epoch",
                    "epoch",
                    epoch_age_ms.map_or(CcValue::Absent, CcValue::Millis),
                ),
                part("delaymin", "delay_min", CcValue::Rtt(min_rtt_us)),
                part(
                    "hystart",
                    "HyStart",
                    CcValue::Round {
                        n: hystart_round,
                        found: hystart_found,
                    },
                ),
            ],
        }
    }
}

/// The queueing delay from which a socket, a path or a service counts as
/// bloated (µs: the daemon's `bloat_threshold_ms`). The one bloat test:
/// every view that marks something bloated asks `reached_by`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BloatThreshold(pub u32);

impl BloatThreshold {
    /// Whether a queueing delay of `delay_us` counts as bloated. A
    /// threshold of 0 disables detection (otherwise every idle socket
    /// would count).
    pub fn reached_by(self, delay_us: u32) -> bool {
        self.0 > 0 && delay_us >= self.0
    }
}

/// A socket's traffic counts as "now" if its record moved within this
/// long ([`Socket::is_active`]).
pub const ACTIVE_MS: u64 = 1000;

/// One TCP socket as the kernel sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Socket {
    /// Socket cookie: the socket's identity, stable for its lifetime.
    pub cookie: u64,
    /// Network namespace inode (as in /proc/PID/ns/net).
    pub netns: u32,
    pub local_addr: IpAddr,
    pub local_port: u16,
    pub remote_addr: IpAddr,
    pub remote_port: u16,
    /// TCP state, as `ss` names it: "ESTAB", "FIN-WAIT-1", ...
    pub state: String,
    /// The process that holds the socket, where known: the one that
    /// connect()ed, or for an accepted connection its listener's owner
    /// (the process that called listen(), or held it when bloatd started).
    pub pid: Option<u32>,
    pub comm: Option<String>,
    /// The service it serves: its cgroup v2 (taken when the socket was
    /// created; an accepted connection has its listener's) as a systemd
    /// unit (`nginx.service`), a container (`pod/UID/CONTAINER`,
    /// `container/ID`) or the cgroup's path; "" where unknown.
    #[serde(default)]
    pub service: String,
    /// Congestion control name (icsk_ca_ops->name).
    pub cc: String,
    pub role: Role,
    /// Congestion window, segments.
    pub cwnd: u32,
    /// Slow-start threshold, segments; None while still "infinite".
    pub ssthresh: Option<u32>,
    /// Packets in flight (tcp_packets_in_flight).
    pub inflight: u32,
    /// Send MSS (mss_cache), bytes.
    pub mss: u32,
    /// Smoothed RTT (srtt_us >> 3).
    pub srtt_us: u32,
    /// The socket's own windowed minimum RTT (tcp_min_rtt, as `ss` shows
    /// it); 0 before the first RTT sample.
    pub min_rtt_us: u32,
    /// The path's floor the queueing delays are measured against: the lowest
    /// RTT toward this peer (or its prefix) over `floor_window_s`, by any
    /// socket, alive or closed; see `floor_source`.
    pub floor_us: u32,
    pub floor_source: Option<FloorSource>,
    /// Sender view of queueing delay: srtt_us - floor_us.
    pub queue_delay_us: u32,
    /// The kernel's receiver RTT estimate (what `ss` shows as rcv_rtt).
    pub rcv_rtt_us: u32,
    /// The receiver's RTT as bloatd measures it from the timestamps the
    /// sender echoes (None without TCP timestamps: then the kernel's
    /// estimate stands in).
    pub rcv_ts_rtt_us: Option<u32>,
    /// TCP timestamps negotiated on this connection.
    pub timestamps: bool,
    /// Receiver view of queueing delay: the receiver's RTT - floor_us.
    pub rcv_queue_delay_us: u32,
    /// Bytes the application wrote that the socket has not sent yet: the
    /// queue a sender keeps in its own socket, which RTT cannot see.
    pub unsent_bytes: u32,
    /// The time those bytes take at the socket's delivery rate (0 when the
    /// rate is unknown).
    pub unsent_delay_us: u32,
    /// Egress interface name ("" if unknown).
    pub interface: String,
    /// Retransmitted segments over the socket's life (total_retrans).
    pub retrans: u32,
    /// Segments marked lost over the socket's life.
    pub lost: u32,
    /// A sender's segments delivered with an ECN echo over its life (the
    /// kernel's delivered_ce: the receiver saw them, or ones beside them,
    /// CE-marked by an AQM); 0 without ECN.
    #[serde(default)]
    pub delivered_ce: u32,
    /// A receiver's segments that arrived out of order over its life (the
    /// kernel's rcv_ooopack, as of the socket's last sample): each run of
    /// them is a hole, a segment lost upstream (or overtaken); 0 on a
    /// kernel without the counter (before 5.5).
    #[serde(default)]
    pub rcv_ooopack: u32,
    pub ca_state: CaState,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    /// The kernel's delivery rate estimate, bits per second.
    pub delivery_rate_bps: u64,
    /// Goodput over the last sampling interval, bits per second (bytes acked
    /// for senders, bytes received for receivers).
    pub throughput_bps: u64,
    /// Milliseconds since the kernel last updated this socket's record.
    pub idle_ms: u64,
    /// Present for sockets using bloatd_westwood or bloatd_cubic.
    pub cc_state: Option<CcState>,
    /// What bloatd's policy did to the socket (a rule chose its congestion
    /// control, a bulk rule switched it, DRWA clamps its window); absent
    /// when nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<SocketPolicy>,
}

/// What bloatd's policy did to one socket.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SocketPolicy {
    /// The rule that set the congestion control at the handshake.
    pub cc_rule: Option<String>,
    /// The bulk rule that switched the running flow, or that waits for its
    /// bytes (`bulk_waiting`).
    pub bulk_rule: Option<String>,
    pub bulk_waiting: bool,
    /// The kernel refused a rule's congestion control.
    pub cc_failed: bool,
    /// The rule that bounded its unsent backlog (TCP_NOTSENT_LOWAT), and
    /// whether the kernel refused it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notsent_lowat_rule: Option<String>,
    #[serde(default)]
    pub notsent_lowat_failed: bool,
    /// DRWA on this (receiving) socket.
    pub drwa: Option<Drwa>,
    /// Its path's class held the policy back: a bulk switch not made (an
    /// AQM's path, or not of the bulk rule's `path` classes), or DRWA's
    /// rounds not run on an AQM's path (`act_on_aqm` off).
    #[serde(default)]
    pub gated: bool,
}

impl SocketPolicy {
    /// The rule that chose the congestion control the socket has now.
    pub fn chose_cc(&self) -> Option<&str> {
        match (&self.bulk_rule, self.bulk_waiting) {
            (Some(b), false) if !self.cc_failed => Some(b),
            _ => self.cc_rule.as_deref(),
        }
    }

    /// A short mark of what acts on the socket: `R` a rule chose its
    /// congestion control, `B` a bulk rule switched it, `L` a rule bounds
    /// its unsent backlog, `D` DRWA clamps its window (`d` DRWA watches it,
    /// no clamp now).
    pub fn mark(&self) -> String {
        let mut m = String::new();
        if self.bulk_rule.is_some() && !self.bulk_waiting && !self.cc_failed {
            m.push('B');
        } else if self.cc_rule.is_some() {
            m.push('R');
        }
        if self.notsent_lowat_rule.is_some() {
            m.push('L');
        }
        match &self.drwa {
            Some(d) if d.clamp_bytes > 0 => m.push('D'),
            Some(_) => m.push('d'),
            None => {}
        }
        m
    }
}

/// Dynamic Receive Window Adjustment on a receiving socket (Jiang et al.,
/// IMC 2012): once per RTT the advertised window is clamped to
/// lambda x RTT_min / RTT x the data received per RTT, RTT_min the lowest
/// of the connection's own minimum and its path's floor (bpf/policy.h,
/// drwa_round).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Drwa {
    /// What turned it on: "switch" (--drwa, the API, the dashboard's key)
    /// or the name of the rule.
    pub by: String,
    /// The clamp of the advertised window now, bytes (0: none, e.g. below
    /// drwa_min_bytes or switched off), and in segments of the peer's MSS.
    pub clamp_bytes: u32,
    pub clamp_segments: u32,
    /// Bytes received in the last round (one RTT): the sender's window as
    /// DRWA sees it.
    pub rcvd_per_rtt_bytes: u32,
    /// The round's RTT (RTT_est) and the RTT_min it was set against: the
    /// lowest of the connection's own minimum and its path's floor, or the
    /// RTT DRWA holds at after a cut that drained no queue.
    pub rtt_us: u32,
    pub min_rtt_us: u32,
    /// Where RTT_min came from: the connection's own minimum (`socket`),
    /// the path's floor (`peer`: learned toward the same peer over the same
    /// interface and gateway; `prefix`; `inferred`), or in its first rounds
    /// the RTT_min the other receivers on the path use (`receivers`). None while it is held
    /// at the RTT of a cut taken back (`held_rounds_left`), or before the
    /// first round.
    #[serde(default)]
    pub min_rtt_source: Option<FloorSource>,
    /// Rounds before a held RTT_min is let go and the lowest tried again
    /// (0: not held).
    #[serde(default)]
    pub held_rounds_left: u32,
    /// Rounds that set a clamp.
    pub rounds: u32,
    /// Cuts DRWA took back: the window fell and the RTT did not (the path
    /// got longer, or other flows hold the queue).
    #[serde(default)]
    pub held: u32,
}

impl Drwa {
    /// Where its RTT_min came from, in words (the detail view, `bloatd
    /// policy list`).
    pub fn min_rtt_from(&self) -> String {
        if self.held_rounds_left > 0 {
            return format!(
                "held: a cut taken back, {} rounds left",
                self.held_rounds_left
            );
        }
        match self.min_rtt_source {
            Some(FloorSource::Socket) => "own minimum".into(),
            Some(FloorSource::Peer) => "path floor".into(),
            Some(FloorSource::Prefix) => "prefix floor".into(),
            Some(FloorSource::Inferred) => "inferred floor".into(),
            Some(FloorSource::Receivers) => "other receivers".into(),
            None => "-".into(),
        }
    }
}

impl Socket {
    /// Queueing delay from the point of view that fits the socket: the sender
    /// sees it in srtt, the receiver of a download in its rcv_rtt estimate.
    pub fn view_queue_delay_us(&self) -> u32 {
        match self.role {
            Role::Sender => self.queue_delay_us,
            Role::Receiver => self.rcv_queue_delay_us,
        }
    }

    /// RTT as seen from the socket's side: srtt for senders; for receivers
    /// the RTT measured from echoed timestamps, else the kernel's estimate.
    pub fn view_rtt_us(&self) -> u32 {
        match self.role {
            Role::Sender => self.srtt_us,
            Role::Receiver => self.rcv_ts_rtt_us.unwrap_or(self.rcv_rtt_us),
        }
    }

    /// The floor the socket's queueing delay is measured against (the
    /// same on both sides of a transfer: it is the path's).
    pub fn view_min_rtt_us(&self) -> u32 {
        self.floor_us
    }

    /// Whether its traffic counts as "now": its record moved within the
    /// last `ACTIVE_MS` (the paths, services, recorder and classifier all
    /// count a socket active by this).
    pub fn is_active(&self) -> bool {
        self.idle_ms <= ACTIVE_MS
    }

    /// Whether the socket counts as bloated: its queueing delay, seen from its
    /// own side of the transfer, reached `threshold_us` (`BloatThreshold`).
    pub fn is_bloated(&self, threshold_us: u32) -> bool {
        BloatThreshold(threshold_us).reached_by(self.view_queue_delay_us())
    }

    /// The peer as `addr:port` (`[v6]:port` for IPv6), the form `ss` prints.
    pub fn remote_endpoint(&self) -> SocketAddr {
        SocketAddr::new(self.remote_addr, self.remote_port)
    }

    /// The local end as `addr:port`.
    pub fn local_endpoint(&self) -> SocketAddr {
        SocketAddr::new(self.local_addr, self.local_port)
    }
}

/// One point of a socket's time series, taken at the sampling interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Sample {
    /// Unix time of the sample, milliseconds.
    pub t_ms: u64,
    pub srtt_us: u32,
    pub min_rtt_us: u32,
    /// The path's floor (see [`Socket::floor_us`]).
    #[serde(default)]
    pub floor_us: u32,
    pub queue_delay_us: u32,
    /// The receiver's RTT the receiver queue is measured from (echoed
    /// timestamps, else the kernel's estimate).
    pub rcv_rtt_us: u32,
    pub rcv_queue_delay_us: u32,
    pub cwnd: u32,
    pub inflight: u32,
    /// Estimated pipe (BWE x RTTmin / MSS) for Westwood+ sockets.
    pub pipe_segments: Option<u32>,
    pub throughput_bps: u64,
    /// The window clamp DRWA set (bytes) and the bytes received in its last
    /// round (one RTT), for sockets DRWA clamps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drwa_clamp_bytes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drwa_rcvd_rtt_bytes: Option<u32>,
}

impl Sample {
    /// RTT from the side of the socket that `role` names, as in
    /// [`Socket::view_rtt_us`].
    pub fn view_rtt_us(&self, role: Role) -> u32 {
        match role {
            Role::Sender => self.srtt_us,
            Role::Receiver => self.rcv_rtt_us,
        }
    }

    /// Queueing delay from the side of the socket that `role` names.
    pub fn view_queue_delay_us(&self, role: Role) -> u32 {
        match role {
            Role::Sender => self.queue_delay_us,
            Role::Receiver => self.rcv_queue_delay_us,
        }
    }

    /// The floor the queueing delay is measured against (either side).
    pub fn view_min_rtt_us(&self, _role: Role) -> u32 {
        self.floor_us
    }
}

/// A socket's samples, oldest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Series {
    pub cookie: u64,
    pub samples: Vec<Sample>,
}

/// How the daemon itself is doing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Health {
    /// Probe events seen since start (all probes).
    pub events_total: u64,
    /// Updates lost: full socket map or full ring buffer.
    pub dropped_total: u64,
    /// Entries in the kernel's socket map, and its capacity.
    pub map_entries: u64,
    pub map_capacity: u64,
    /// "daemon" or "embedded".
    pub mode: String,
    /// The parts of bloatd that need more than the core's kernel, as this
    /// kernel runs them (`bloatd status` lists them, top's header names
    /// those not fully on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<Feature>,
}

/// How this kernel runs a part of bloatd.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FeatureState {
    /// As designed.
    On,
    /// Works another way this kernel allows (`detail` says which).
    Fallback,
    /// Declined: the kernel lacks what it needs (`detail` says what, and
    /// the Linux version that brings it).
    Off,
}

impl FeatureState {
    pub fn as_str(self) -> &'static str {
        match self {
            FeatureState::On => "on",
            FeatureState::Fallback => "fallback",
            FeatureState::Off => "off",
        }
    }
}

/// A part of bloatd beyond the core, detected at start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Feature {
    /// A stable name (`cc_link`, `rcv_rtt_usec`, ...; README, "Supported
    /// kernels").
    pub name: String,
    pub state: FeatureState,
    /// One line: what runs, what runs instead, or what is missing and the
    /// Linux version that brings it.
    pub detail: String,
}

/// Everything the dashboard needs for one frame.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Snapshot {
    /// Unix time the snapshot was taken, milliseconds.
    pub taken_ms: u64,
    /// With a `limit` in the request: the host's bloat over every socket,
    /// and how many passed the filter (`sockets` holds the first `limit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<HostSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched: Option<usize>,
    /// Sampling interval of the daemon, milliseconds.
    pub interval_ms: u32,
    /// Queueing delay above which a socket counts as bloated.
    pub bloat_threshold_us: u32,
    pub sockets: Vec<Socket>,
    /// Time series for the sockets the client asked for, samples newer than
    /// the `since_ms` it gave.
    pub series: Vec<Series>,
    pub health: Health,
    /// With `paths` in the request: every socket grouped by path (peer),
    /// worst queue first, as `bloatd paths` shows them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<NetPath>,
    /// What bloatd's policy is doing (absent from a bloatd without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyState>,
    /// With `services` in the request: every socket grouped by service,
    /// longest wait first, as `bloatd services` shows them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<ServiceView>,
    /// The flight recorder's bloat episodes open now (the dashboard's
    /// header names the one open longest).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub episodes: Vec<crate::journal::Episode>,
}

impl Snapshot {
    /// The daemon's bloat threshold, for the views to test with.
    pub fn bloat_threshold(&self) -> BloatThreshold {
        BloatThreshold(self.bloat_threshold_us)
    }
}

/// The policy's state for the dashboard's header.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PolicyState {
    /// DRWA: "disabled" (not armed: cannot be switched on live), "off" or "on".
    pub drwa: String,
    /// Congestion control rules loaded.
    pub rules: usize,
    /// Live sockets under each action: a rule chose the cc, a bulk rule
    /// switched it, DRWA clamps the window.
    pub cc_sockets: i64,
    pub bulk_sockets: i64,
    pub drwa_sockets: i64,
    /// Why the reader of this snapshot may not switch DRWA or rules (the
    /// API group watches; acting takes root or the admin group); None: it
    /// may. Filled per request by the daemon from the connection's peer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// Queueing delay distribution of the senders using one congestion
/// control, or of all receivers: a receiver's own congestion control does
/// not drive the transfer it receives (its remote sender's does), so
/// receivers are one group, whatever their sockets use.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CcDelay {
    /// The senders' congestion control; "" for receivers.
    pub cc: String,
    #[serde(default = "Role::sender")]
    pub role: Role,
    /// Sockets of this cc with an RTT measurement (the others have no
    /// queueing delay to report and would pull the percentiles to zero).
    pub sockets: usize,
    pub p50_us: u32,
    pub p90_us: u32,
    pub max_us: u32,
}

impl CcDelay {
    /// What the group is called on screen: the senders' congestion
    /// control, or `recv` (the table's name of the role) for receivers.
    pub fn label(&self) -> &str {
        match self.role {
            Role::Sender => &self.cc,
            Role::Receiver => Role::Receiver.short(),
        }
    }
}

/// The host's overall bloat, over all sockets (the filter does not apply).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HostSummary {
    pub sockets: usize,
    pub bloated: usize,
    pub worst_queue_delay_us: u32,
    /// Senders by congestion control, then the receivers.
    pub per_cc: Vec<CcDelay>,
}

/// What a dashboard asks for (the daemon's `/v1/snapshot`): one socket's series
/// newer than `since_ms`, and, with `limit`, only the first `limit` sockets
/// passing `filter` (the dashboard's filter syntax) in `sort` order (a sort
/// key's label: qdelay, rtt, throughput, cwnd, retrans, process). Without
/// `limit`, every socket, as before.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SnapshotRequest {
    pub series: Option<u64>,
    #[serde(default)]
    pub since_ms: u64,
    pub sort: Option<String>,
    pub filter: Option<String>,
    pub limit: Option<usize>,
    /// Also group the sockets by path (the dashboard's paths view).
    #[serde(default)]
    pub paths: bool,
    /// Also group the sockets by service (the dashboard's services view).
    #[serde(default)]
    pub services: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bloat_is_reached_at_the_threshold_and_never_with_none() {
        let t = BloatThreshold(100_000);
        assert!(t.reached_by(100_000) && !t.reached_by(99_999));
        assert!(!BloatThreshold(0).reached_by(u32::MAX));
    }

    #[test]
    fn a_cc_state_says_what_it_means_once() {
        let w = CcState::Westwood {
            bwe_bytes_per_s: 1_000_000,
            min_rtt_us: 50_000,
            pipe_segments: 40,
        };
        let keys = |p: &[CcPart]| p.iter().map(|p| p.key).collect::<Vec<_>>();
        // Without the socket: the algorithm's own numbers.
        assert_eq!(keys(&w.parts(None)), ["bwe", "rttmin", "pipe"]);
        assert_eq!(w.parts(None)[0].value, CcValue::Rate(8_000_000));
        // Twice the pipe in the window is bloat; less is not.
        let fat = w.parts(Some(80)).pop().unwrap();
        assert_eq!((fat.key, fat.alarm), ("cwnd/pipe", Some("fat pipe")));
        assert_eq!(w.parts(Some(79)).pop().unwrap().alarm, None);
        let c = CcState::Cubic {
            w_max_segments: 90,
            k_ms: 1200,
            epoch_age_ms: None,
            min_rtt_us: 20_000,
            hystart_round: 3,
            hystart_found: true,
        };
        assert_eq!(c.parts(Some(10))[2].value, CcValue::Absent);
        assert_eq!(c.parts(None)[4].value, CcValue::Round { n: 3, found: true });
    }

    #[test]
    fn a_role_has_one_name_in_json_labels_and_text() {
        for r in Role::ALL {
            assert_eq!(serde_json::to_value(r).unwrap(), r.name());
        }
    }
}
