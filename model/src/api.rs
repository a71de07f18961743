//! The API's contract: what the daemon answers on its Unix socket, for the
//! CLI, `bloatd top`, the lab and scripts (`curl --unix-socket`). One place
//! for every type a route takes or returns; the view-model types
//! (`Socket`, `Snapshot`, ...) are in [`crate::view`]. The daemon's typed
//! client (daemon/src/client.rs) asks these routes with these types.
//!
//! HTTP/1.1 on /run/bloatd/bloatd.sock, JSON; the routes are in [`route`],
//! each with its query type and answer.

use crate::{FloorSource, Health, SnapshotRequest};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The routes, written once: the server routes them, the client asks them.
pub mod route {
    /// GET: daemon state and health ([`Status`](super::Status)).
    pub const STATUS: &str = "/v1/status";
    /// GET [`SocketsQuery`](super::SocketsQuery): sockets read from the
    /// kernel at most a sampling interval ago (`Vec<Socket>`).
    pub const SOCKETS: &str = "/v1/sockets";
    /// GET [`SnapshotQuery`](super::SnapshotQuery): what `bloatd top`
    /// draws ([`Snapshot`](crate::Snapshot)).
    pub const SNAPSHOT: &str = "/v1/snapshot";
    /// GET [`SeriesQuery`](super::SeriesQuery): one socket's samples
    /// (`Series`); `{cookie}` is the socket's cookie.
    pub const SERIES: &str = "/v1/series/{cookie}";
    /// GET [`PathsQuery`](super::PathsQuery): sockets grouped by path, with
    /// floor and queue (`Vec<NetPath>`).
    pub const PATHS: &str = "/v1/paths";
    /// GET: every floor the kernel keeps ([`Floors`](super::Floors)).
    pub const FLOORS: &str = "/v1/floors";
    /// GET: sockets grouped by service, with the wait of its users split
    /// between the network's queue and its own backlog
    /// (`Vec<ServiceView>`).
    pub const SERVICES: &str = "/v1/services";
    /// GET: registered and available algorithms ([`CcInfo`](super::CcInfo)).
    pub const CC: &str = "/v1/cc";
    /// POST [`DefaultReq`](super::DefaultReq): set the host default,
    /// restored at stop ([`DefaultResp`](super::DefaultResp)).
    pub const CC_DEFAULT: &str = "/v1/cc/default";
    /// GET: the policy's rules, DRWA and what they did
    /// ([`PolicyInfo`](super::PolicyInfo)).
    pub const POLICY: &str = "/v1/policy";
    /// POST [`DrwaReq`](super::DrwaReq): DRWA on or off, live (409 when
    /// this daemon did not arm it); answers the request.
    pub const POLICY_DRWA: &str = "/v1/policy/drwa";
    /// POST [`RuleReq`](super::RuleReq): a rule on or off, live (404 for
    /// no such rule); `{name}` is the rule's name; answers the request.
    pub const POLICY_RULE: &str = "/v1/policy/rules/{name}";
    /// GET [`IncidentsQuery`](crate::journal::IncidentsQuery): the flight
    /// recorder's bloat episodes, newest first (`Vec<Episode>`).
    pub const INCIDENTS: &str = "/v1/incidents";
    /// GET: one episode with its flows and series
    /// ([`EpisodeDetail`](crate::journal::EpisodeDetail)); `{id}` is its id.
    pub const INCIDENT: &str = "/v1/incidents/{id}";
    /// GET [`HistoryQuery`](crate::journal::HistoryQuery): one row a minute
    /// per active path (`Vec<MinuteRow>`), oldest first.
    pub const HISTORY: &str = "/v1/history";
    /// GET on the metrics listener (TCP), not the API socket: Prometheus
    /// text.
    pub const METRICS: &str = "/metrics";
}

/// A yes/no of a query string: `name=1` (any number but 0), or absent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct Flag(Option<u8>);

impl Flag {
    pub fn is_set(self) -> bool {
        self.0.unwrap_or(0) != 0
    }
}

impl From<bool> for Flag {
    fn from(b: bool) -> Flag {
        Flag(b.then_some(1))
    }
}

/// `GET /v1/sockets[?all=1]`: all states, not only ESTABLISHED.
#[derive(Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SocketsQuery {
    #[serde(default)]
    pub all: Flag,
}

/// `GET /v1/snapshot?...`: a [`SnapshotRequest`] in a query string, and
/// `fresh` (the read of the current sampling interval, shared with
/// `/v1/sockets`, instead of the read shared by dashboards, up to 5 s old).
#[derive(Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SnapshotQuery {
    pub series: Option<u64>,
    pub since_ms: Option<u64>,
    pub sort: Option<String>,
    pub filter: Option<String>,
    pub limit: Option<usize>,
    #[serde(default)]
    pub fresh: Flag,
    /// Also the sockets grouped by path (`Snapshot::paths`).
    #[serde(default)]
    pub paths: Flag,
    /// Also the sockets grouped by service (`Snapshot::services`).
    #[serde(default)]
    pub services: Flag,
}

impl SnapshotQuery {
    pub fn new(req: &SnapshotRequest, fresh: bool) -> SnapshotQuery {
        SnapshotQuery {
            series: req.series,
            since_ms: req.series.map(|_| req.since_ms),
            sort: req.sort.clone(),
            filter: req.filter.clone(),
            limit: req.limit,
            fresh: fresh.into(),
            paths: req.paths.into(),
            services: req.services.into(),
        }
    }

    pub fn request(&self) -> SnapshotRequest {
        SnapshotRequest {
            series: self.series,
            since_ms: self.since_ms.unwrap_or(0),
            sort: self.sort.clone(),
            filter: self.filter.clone(),
            limit: self.limit,
            paths: self.paths.is_set(),
            services: self.services.is_set(),
        }
    }
}

/// `GET /v1/series/{cookie}[?since_ms=T]`: samples newer than T.
#[derive(Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SeriesQuery {
    pub since_ms: Option<u64>,
}

/// `GET /v1/paths[?prefix=1]`: by prefix instead of by peer.
#[derive(Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PathsQuery {
    #[serde(default)]
    pub prefix: Flag,
}

/// `GET /v1/status`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Status {
    pub pid: u32,
    pub version: String,
    pub mode: String,
    pub started_unix_ms: u64,
    pub interval_ms: u64,
    /// How sockets are sampled: "adaptive" or "exact" (config `sampling`).
    #[serde(default)]
    pub sampling: String,
    /// The BPF programs attached (`tp_btf/tcp_probe`, `cgroup/sock_ops`).
    pub probes: Vec<String>,
    pub cc_registered: Vec<String>,
    pub default_cc: Option<String>,
    pub listen: Option<String>,
    pub sockets: usize,
    pub health: Health,
    /// Why senders that closed their end are not sampled (no sock_ops
    /// program on the cgroup v2 root), if they are not.
    #[serde(default)]
    pub sockops_error: Option<String>,
    /// The kernel's release; what it runs of bloatd's parts beyond the
    /// core is `health.features`.
    #[serde(default)]
    pub kernel: String,
}

/// `GET /v1/cc`.
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct CcInfo {
    pub bloatd: Vec<String>,
    pub registered: Vec<String>,
    pub available: Vec<String>,
    pub default: String,
}

/// One floor the kernel keeps: of a peer (prefix_len 32/128) or a prefix.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct FloorEntry {
    pub netns: u32,
    pub peer: std::net::IpAddr,
    pub prefix_len: u8,
    pub floor_us: u32,
    /// `socket` (observed by a socket toward it), `prefix`, or `inferred`.
    pub floor_source: FloorSource,
    /// Seconds since a socket last fed it.
    pub updated_s_ago: u32,
}

/// `GET /v1/floors`: what the floors table holds and what its bound
/// pushed out.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Floors {
    pub window_s: u32,
    /// The bound of the peers' floors (`floor_entries`) and of the
    /// prefixes' (a table of their own, so peers cannot push them out).
    pub capacity: u32,
    #[serde(default)]
    pub prefix_capacity: u32,
    /// Floors created since start, and those the LRU bound evicted.
    pub created: u64,
    pub evicted: u64,
    pub floors: Vec<FloorEntry>,
}

/// `POST /v1/cc/default`, and its answer.
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct DefaultReq {
    pub name: String,
}

#[derive(Serialize, Deserialize, JsonSchema)]
pub struct DefaultResp {
    pub previous: String,
    pub default: String,
}

/// `GET /v1/policy`'s counters: what the policy did (bpf/policy.h).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PolicyCounts {
    /// Live sockets whose congestion control a rule chose at the handshake.
    pub cc_sockets: i64,
    /// Live sockets a bulk rule switched.
    pub bulk_sockets: i64,
    /// Live sockets whose window DRWA clamps now.
    pub drwa_sockets: i64,
    pub cc_set_total: u64,
    pub bulk_switched_total: u64,
    pub cc_failed_total: u64,
    pub drwa_rounds_total: u64,
    pub drwa_restored_total: u64,
    pub drwa_failed_total: u64,
    /// DRWA cuts taken back (the window fell, the RTT did not).
    #[serde(default)]
    pub drwa_held_total: u64,
    /// Windows given back that a bloatd which did not stop had clamped
    /// (found in the pinned `drwa_saved` at start or stop).
    #[serde(default)]
    pub drwa_recovered_total: u64,
    /// TCP_NOTSENT_LOWAT set at a handshake, and refused.
    #[serde(default)]
    pub notsent_lowat_set_total: u64,
    #[serde(default)]
    pub notsent_lowat_failed_total: u64,
    /// Bulk switches not made at the switch: the path was an AQM's
    /// (`act_on_aqm` off) or not of the rule's `path` classes.
    #[serde(default)]
    pub bulk_gated_total: u64,
    /// DRWA rounds not run: the receiver's path was an AQM's.
    #[serde(default)]
    pub drwa_gated_total: u64,
}

/// `GET /v1/policy`: the rules, DRWA's state, and what they did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PolicyInfo {
    pub drwa: DrwaInfo,
    pub rules: Vec<RuleInfo>,
    pub counts: PolicyCounts,
    /// The connections DRWA has acted on that are alive now.
    #[serde(default)]
    pub drwa_connections: Vec<DrwaConnection>,
}

/// A connection DRWA has acted on: its ends and DRWA's state on it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DrwaConnection {
    pub netns: u32,
    pub local: std::net::SocketAddr,
    pub remote: std::net::SocketAddr,
    pub drwa: crate::Drwa,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DrwaInfo {
    /// "disabled" (nothing asked of the kernel), "off" or "on".
    pub mode: String,
    pub lambda: f64,
    pub min_bytes: u64,
    /// Where what DRWA must give back is pinned (bpffs), so a daemon that
    /// dies without stopping leaves it to the next start or stop; None:
    /// not pinned (DRWA disabled, or no BPF file system: then a crash
    /// leaves the clamps on the sockets).
    #[serde(default)]
    pub saved_pin: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RuleInfo {
    pub name: String,
    pub selects: String,
    pub does: String,
    pub rule: Option<crate::policy::Rule>,
    pub enabled: bool,
    /// Live sockets whose congestion control (or DRWA) this rule chose.
    pub sockets: usize,
    /// Live sockets a bulk rule waits on.
    pub waiting: usize,
}

/// `POST /v1/policy/drwa`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct DrwaReq {
    pub on: bool,
}

/// `POST /v1/policy/rules/{name}`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct RuleReq {
    pub enabled: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dashboard_request_round_trips_through_the_query_string() {
        let req = SnapshotRequest {
            series: Some(7),
            since_ms: 9,
            filter: Some("cc:cubic x".into()),
            limit: Some(3),
            sort: None,
            paths: false,
            services: false,
        };
        let q = serde_urlencoded::to_string(SnapshotQuery::new(&req, false)).unwrap();
        assert_eq!(q, "series=7&since_ms=9&filter=cc%3Acubic+x&limit=3");
        let back: SnapshotQuery = serde_urlencoded::from_str(&q).unwrap();
        assert_eq!((back.request(), back.fresh.is_set()), (req, false));
        let fresh = SnapshotQuery::new(&SnapshotRequest::default(), true);
        assert_eq!(serde_urlencoded::to_string(&fresh).unwrap(), "fresh=1");
        assert_eq!(
            serde_urlencoded::to_string(SocketsQuery { all: false.into() }).unwrap(),
            ""
        );
        assert_eq!(
            serde_urlencoded::to_string(SocketsQuery { all: true.into() }).unwrap(),
            "all=1"
        );
        assert_eq!(
            serde_urlencoded::to_string(PathsQuery {
                prefix: true.into()
            })
            .unwrap(),
            "prefix=1"
        );
        let q: PathsQuery = serde_urlencoded::from_str("prefix=0").unwrap();
        assert!(!q.prefix.is_set());
        let q: SocketsQuery = serde_urlencoded::from_str("").unwrap();
        assert!(!q.all.is_set());
    }
}
