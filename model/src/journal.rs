//! The flight recorder's records: bloat episodes, what they held, and the
//! per-minute history of every active path (daemon/src/recorder/).
//!
//! An episode is a path (namespace, peer prefix, interface: the paths view's
//! grouping by prefix) or a service whose queueing delay stayed at or above
//! `bloat_threshold_ms` for a few seconds, until it stayed below for a few
//! seconds. `bloatd incidents`, `bloatd incident ID`, `bloatd history`, the
//! API's `/v1/incidents` and `/v1/history` and the dashboard's history view
//! show them; `bloatd incident ID --export DIR` turns one into a lab bundle.
//! Times are Unix milliseconds, names carry their unit.

use crate::{BottleneckClass, FloorSource, OwnerClass, Role};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};

/// What an episode is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EpisodeKind {
    /// The sockets of one path (namespace, peer prefix, interface).
    Path,
    /// The sockets of one service (systemd unit, container, cgroup).
    Service,
}

impl EpisodeKind {
    pub const ALL: [EpisodeKind; 2] = [EpisodeKind::Path, EpisodeKind::Service];

    pub const fn as_str(self) -> &'static str {
        match self {
            EpisodeKind::Path => "path",
            EpisodeKind::Service => "service",
        }
    }
}

/// The path of a path episode: the paths view's grouping by prefix.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct EpisodePath {
    pub netns: u32,
    /// The network address of the peer's prefix (or the peer).
    pub peer: IpAddr,
    pub prefix_len: u8,
    /// Egress interface ("" if unknown).
    pub interface: String,
    /// The next hop toward the peer in the namespace's routing table when
    /// the episode opened; None for a directly connected peer or where the
    /// table could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
}

impl EpisodePath {
    /// The peer, or `prefix/len`, as shown (as [`crate::NetPath::peer_text`]).
    pub fn peer_text(&self) -> String {
        let full = if self.peer.is_ipv4() { 32 } else { 128 };
        if self.prefix_len >= full {
            self.peer.to_string()
        } else {
            format!("{}/{}", self.peer, self.prefix_len)
        }
    }

    /// Whether `addr` is inside this path's prefix.
    pub fn contains(&self, addr: IpAddr) -> bool {
        match (self.peer, addr) {
            (IpAddr::V4(p), IpAddr::V4(a)) => {
                let bits = self.prefix_len.min(32) as u32;
                let m = if bits == 0 {
                    0
                } else {
                    u32::MAX << (32 - bits)
                };
                u32::from(p) & m == u32::from(a) & m
            }
            (IpAddr::V6(p), IpAddr::V6(a)) => {
                let bits = self.prefix_len.min(128) as u32;
                let m = if bits == 0 {
                    0
                } else {
                    u128::MAX << (128 - bits)
                };
                u128::from(p) & m == u128::from(a) & m
            }
            _ => false,
        }
    }
}

/// What bloatd's policy and DRWA did during an episode.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EpisodeActions {
    /// DRWA's mode when the episode opened and when it closed ("disabled",
    /// "off", "on"; absent from a bloatd without a policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drwa: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drwa_at_end: Option<String>,
    /// The rules that acted on the episode's flows (chose their congestion
    /// control, switched them, bounded their backlog, DRWA by rule).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<String>,
    /// Of the episode's flows: those a rule or DRWA acted on, those DRWA
    /// clamped.
    pub flows_acted_on: u32,
    pub flows_clamped: u32,
    /// The host's policy counters over the episode's span (every flow's,
    /// not only the episode's): bulk switches, DRWA rounds, DRWA cuts
    /// taken back.
    pub bulk_switched: u64,
    pub drwa_rounds: u64,
    pub drwa_held: u64,
}

/// One episode: when, where, how much queue, who was involved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Episode {
    pub id: u64,
    pub kind: EpisodeKind,
    /// Path episodes: the path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<EpisodePath>,
    /// Service episodes: the service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// The first second the queue was at or above the threshold, and the
    /// first it was below again (for an open episode: the last second seen).
    pub start_ms: u64,
    pub end_ms: u64,
    /// Still going.
    #[serde(default)]
    pub open: bool,
    /// Cut short: bloatd stopped or died while it went on ("stopped",
    /// "interrupted": the journal found it open at the next start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut: Option<String>,
    /// The queue's threshold the episode was measured against.
    pub threshold_us: u32,
    /// The path's floor (lowest over the episode) and where it came from.
    pub floor_us: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor_source: Option<FloorSource>,
    /// The largest queue of any of its sockets, and the median and 90th
    /// percentile of the per-second median queue.
    pub queue_peak_us: u32,
    pub queue_p50_us: u32,
    pub queue_p90_us: u32,
    /// Mean delivery over the span (bytes acknowledged or received by its
    /// sockets), and the bytes.
    pub throughput_bps: u64,
    pub bytes: u64,
    /// The most sockets at once, and the flows seen over the span.
    pub sockets_max: u32,
    pub flows: u32,
    /// The services and processes of its flows (path episodes), or the
    /// paths (service episodes: their peers' text).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ccs: Vec<String>,
    #[serde(default)]
    pub actions: EpisodeActions,
    /// Path episodes: the kind of queue it waited in, as the bottleneck
    /// classifier last called its peers during it (issue 33; absent in
    /// episodes recorded before, and while no peer of the path was
    /// classified).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bottleneck: Option<BottleneckClass>,
    /// Path episodes: whose traffic filled its queue, as the classifier
    /// last called its peers during it (absent in episodes recorded
    /// before, and while no queue of the path stood long enough to say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<OwnerClass>,
}

impl Episode {
    /// How long it lasted (so far).
    pub fn duration_ms(&self) -> u64 {
        self.end_ms.saturating_sub(self.start_ms)
    }

    /// The bufferbloat grade of its median queue (as the paths view's).
    pub fn grade(&self) -> &'static str {
        crate::grade(self.queue_p50_us)
    }

    /// How long it lasted, or has lasted by `now_ms` with a `+` while it
    /// goes on: "38s", "1m35s+".
    pub fn duration_text(&self, now_ms: u64) -> String {
        if self.open {
            format!(
                "{}+",
                crate::format::age(now_ms.saturating_sub(self.start_ms))
            )
        } else {
            crate::format::age(self.duration_ms())
        }
    }

    /// Passive loaded responsiveness at its median queue.
    pub fn rpm(&self) -> u32 {
        crate::rpm(self.floor_us as u64 + self.queue_p50_us as u64)
    }

    /// "path to 10.9.2.0/24 (eth0)" or "service nginx.service".
    pub fn subject_text(&self) -> String {
        match (&self.path, &self.service) {
            (Some(p), _) => {
                if p.interface.is_empty() {
                    format!("path to {}", p.peer_text())
                } else {
                    format!("path to {} ({})", p.peer_text(), p.interface)
                }
            }
            (None, Some(s)) => format!("service {}", if s.is_empty() { "?" } else { s }),
            (None, None) => "?".into(),
        }
    }
}

/// One flow of an episode (a socket of its path or service), among the
/// largest by bytes over the span.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EpisodeFlow {
    pub cookie: u64,
    pub pid: Option<u32>,
    pub process: Option<String>,
    pub service: String,
    pub cc: String,
    pub role: Role,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub netns: u32,
    /// Bytes it delivered over the episode (acknowledged for a sender,
    /// received for a receiver), and its retransmissions.
    pub bytes: u64,
    pub retrans: u32,
    /// The largest unsent backlog it held, and its time at the delivery
    /// rate.
    pub unsent_bytes_max: u32,
    pub unsent_delay_max_us: u32,
    /// Its median queueing delay over the span (its own side's view).
    pub queue_p50_us: u32,
    /// What bloatd's policy did to it ([`crate::SocketPolicy::mark`]:
    /// R, B, L, D), "" when nothing.
    #[serde(default)]
    pub policy: String,
    /// The rules that acted on it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<String>,
}

/// One second of an episode's path (or service): its queue, RTT, floor,
/// delivery and sockets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PathPoint {
    pub t_ms: u64,
    /// Median and largest queueing delay of its active sockets.
    pub queue_us: u32,
    pub queue_max_us: u32,
    /// Median RTT (floor + median queue) and the floor.
    pub rtt_us: u32,
    pub floor_us: u32,
    /// Bytes its sockets delivered since the last point, per second.
    pub rate_bps: u64,
    pub sockets: u32,
}

/// One second of one of an episode's flows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FlowPoint {
    pub t_ms: u64,
    pub cwnd: u32,
    /// RTT from the socket's side.
    pub rtt_us: u32,
    pub rate_bps: u64,
}

/// The points of one flow, by its cookie.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FlowSeries {
    pub cookie: u64,
    pub points: Vec<FlowPoint>,
}

/// `GET /v1/incidents/{id}`: an episode with its flows and series.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EpisodeDetail {
    pub episode: Episode,
    /// Largest by bytes first.
    pub flows: Vec<EpisodeFlow>,
    pub series: Vec<PathPoint>,
    pub flow_series: Vec<FlowSeries>,
}

/// One minute of one active path, outside episodes and within them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MinuteRow {
    /// The minute's start.
    pub t_ms: u64,
    pub netns: u32,
    pub peer: IpAddr,
    pub prefix_len: u8,
    pub interface: String,
    /// Over the reads of that minute: the median and 90th percentile of
    /// the path's median queue, and the largest queue of any socket.
    pub queue_p50_us: u32,
    pub queue_p90_us: u32,
    pub queue_max_us: u32,
    /// Bytes delivered in the minute, per second; the most sockets.
    pub rate_bps: u64,
    pub sockets: u32,
    /// With `worst` asked: how many paths this minute's row stands for
    /// (the worst path's queue, every path's rate and sockets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<u32>,
}

impl MinuteRow {
    /// Its path (no gateway: rows do not keep it).
    pub fn path(&self) -> EpisodePath {
        EpisodePath {
            netns: self.netns,
            peer: self.peer,
            prefix_len: self.prefix_len,
            interface: self.interface.clone(),
            gateway: None,
        }
    }

    pub fn peer_text(&self) -> String {
        self.path().peer_text()
    }
}

/// `GET /v1/incidents?...`: episodes that overlap `[since_ms, now]`,
/// newest first, at most `limit` (default 1000).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IncidentsQuery {
    pub since_ms: Option<u64>,
    /// An address (episodes whose prefix holds it), a prefix (`a.b.c.0/24`)
    /// or an interface name.
    pub path: Option<String>,
    /// A service: its episodes, and path episodes it had flows in.
    pub service: Option<String>,
    pub limit: Option<usize>,
}

impl IncidentsQuery {
    /// Whether `e` is one the query asks for (time aside).
    pub fn matches(&self, e: &Episode) -> bool {
        if let Some(p) = self.path.as_deref().filter(|p| !p.is_empty()) {
            if !path_matches(e.path.as_ref(), p) {
                return false;
            }
        }
        if let Some(s) = self.service.as_deref().filter(|s| !s.is_empty()) {
            let own = e.service.as_deref() == Some(s);
            if !own && !e.services.iter().any(|x| x == s) {
                return false;
            }
        }
        true
    }
}

/// `--path P` against a path: P an address inside its prefix, its prefix
/// (or a wider or narrower one holding its peer), or its interface.
pub fn path_matches(path: Option<&EpisodePath>, p: &str) -> bool {
    let Some(path) = path else { return false };
    if let Ok(a) = p.parse::<IpAddr>() {
        return path.contains(a);
    }
    if let Some((a, len)) = p.split_once('/') {
        if let (Ok(a), Ok(len)) = (a.parse::<IpAddr>(), len.parse::<u8>()) {
            let asked = EpisodePath {
                peer: a,
                prefix_len: len,
                ..path.clone()
            };
            return asked.contains(path.peer) || path.contains(a);
        }
    }
    path.interface == p
}

/// `GET /v1/history?...`: the per-minute rows since `since_ms` (default
/// the last 24 hours), oldest first; `path` as in [`IncidentsQuery`];
/// with `worst`, one row per minute: the worst path's queue, every
/// path's rate and sockets, and how many paths.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HistoryQuery {
    pub since_ms: Option<u64>,
    pub path: Option<String>,
    #[serde(default)]
    pub worst: crate::api::Flag,
}

impl HistoryQuery {
    /// Whether `m`'s path is one the query asks for.
    pub fn matches(&self, m: &MinuteRow) -> bool {
        self.path
            .as_deref()
            .filter(|p| !p.is_empty())
            .is_none_or(|p| path_matches(Some(&m.path()), p))
    }
}

/// The recorder's state for the dashboard and `status`: the episodes open
/// now, and where the journal is.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RecorderState {
    pub open: Vec<Episode>,
}

/// One line on the episode open longest, for the dashboard's header:
/// "bloat since 14:02:11, 38s, path to 10.9.2.0/24 (eth0), 2 flows (+1
/// more)". `offset_s`: the local time's offset from UTC.
pub fn open_episode_line(open: &[Episode], now_ms: u64, offset_s: i64) -> Option<String> {
    let e = open.iter().min_by_key(|e| (e.start_ms, e.id))?;
    let more = if open.len() > 1 {
        format!(" (+{} more)", open.len() - 1)
    } else {
        String::new()
    };
    Some(format!(
        "bloat since {}, {}, {}, {} flow{}{more}",
        crate::format::clock(e.start_ms, offset_s),
        crate::format::age(now_ms.saturating_sub(e.start_ms)),
        e.subject_text(),
        e.flows,
        if e.flows == 1 { "" } else { "s" }
    ))
}

/// "2h", "30m", "90s", "7d" as milliseconds (the `--since` of `bloatd
/// incidents` and `bloatd history`).
pub fn parse_span_ms(s: &str) -> crate::Result<u64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| crate::Error::SpanUnitMissing(s.to_string()))?;
    let (n, unit) = s.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| crate::Error::SpanNotNumber(s.to_string()))?;
    let unit_ms = match unit {
        "s" => 1_000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => {
            return Err(crate::Error::SpanUnit {
                span: s.to_string(),
                unit: unit.to_string(),
            })
        }
    };
    n.checked_mul(unit_ms)
        .ok_or_else(|| crate::Error::SpanTooLong(s.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(peer: &str, len: u8, iface: &str) -> EpisodePath {
        EpisodePath {
            netns: 1,
            peer: peer.parse().unwrap(),
            prefix_len: len,
            interface: iface.into(),
            gateway: None,
        }
    }

    #[test]
    fn a_path_is_found_by_address_prefix_or_interface() {
        let p = path("10.9.2.0", 24, "eth0");
        for q in [
            "10.9.2.77",
            "10.9.2.0/24",
            "10.9.0.0/16",
            "10.9.2.2/32",
            "eth0",
        ] {
            assert!(path_matches(Some(&p), q), "{q}");
        }
        for q in ["10.9.3.1", "10.9.3.0/24", "wlan0", "fd00::1"] {
            assert!(!path_matches(Some(&p), q), "{q}");
        }
        assert!(!path_matches(None, "eth0"));
        assert_eq!(p.peer_text(), "10.9.2.0/24");
        assert_eq!(path("fd00::", 64, "").peer_text(), "fd00::/64");
        assert!(path("fd00::", 64, "").contains("fd00::9".parse().unwrap()));
    }

    #[test]
    fn spans_have_units() {
        assert_eq!(parse_span_ms("2h"), Ok(7_200_000));
        assert_eq!(parse_span_ms("30m"), Ok(1_800_000));
        assert_eq!(parse_span_ms("90s"), Ok(90_000));
        assert_eq!(parse_span_ms("7d"), Ok(604_800_000));
        assert!(parse_span_ms("2").unwrap_err().to_string().contains("unit"));
        assert!(parse_span_ms("2w")
            .unwrap_err()
            .to_string()
            .contains("unknown unit"));
        assert!(parse_span_ms("h").is_err());
    }

    #[test]
    fn the_header_names_the_episode_open_longest() {
        let e = |id, start_ms, flows| Episode {
            id,
            kind: EpisodeKind::Path,
            path: Some(path("10.9.2.0", 24, "eth0")),
            service: None,
            start_ms,
            end_ms: start_ms,
            open: true,
            cut: None,
            threshold_us: 100_000,
            floor_us: 80_000,
            floor_source: None,
            queue_peak_us: 0,
            queue_p50_us: 0,
            queue_p90_us: 0,
            throughput_bps: 0,
            bytes: 0,
            sockets_max: 0,
            flows,
            services: vec![],
            processes: vec![],
            ccs: vec![],
            actions: Default::default(),
            bottleneck: None,
            owner: None,
        };
        // 14:02:11 UTC on some day, seen 38 s later.
        let t = 1_700_000_000_000 / 86_400_000 * 86_400_000 + (14 * 3600 + 2 * 60 + 11) * 1000;
        let line = open_episode_line(&[e(2, t + 5000, 1), e(1, t, 2)], t + 38_000, 0).unwrap();
        assert_eq!(
            line,
            "bloat since 14:02:11, 38s, path to 10.9.2.0/24 (eth0), 2 flows (+1 more)"
        );
        assert_eq!(open_episode_line(&[], t, 0), None);
    }
}
