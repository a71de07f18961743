//! The API's contract: what the daemon answers on its Unix socket, for the
//! CLI, `bloatd top`, the lab and scripts (`curl --unix-socket`). One place
//! for every type a route takes or returns; the view-model types the
//! dashboard draws (`Socket`, `Snapshot`, ...) are defined by the TUI crate
//! (the daemon depends on it, not the other way round) and named here.
//!
//! API (HTTP/1.1 on /run/bloatd/bloatd.sock, JSON, view model types):
//!   GET  /v1/status                          daemon state and health
//!   GET  /v1/sockets[?all=1]                 sockets, read fresh from the kernel
//!   GET  /v1/snapshot[?series=C&since_ms=T][&fresh=1]  what `bloatd top` draws
//!   GET  /v1/series/{cookie}[?since_ms=T]    one socket's samples
//!   GET  /v1/paths[?prefix=1]                sockets grouped by path, with floor and queue
//!   GET  /v1/floors                          every floor the kernel keeps
//!   GET  /v1/cc                              registered and available algorithms
//!   POST /v1/cc/default {"name": "..."}      set the host default (restored at stop)

pub mod client;
pub mod server;

use bloatd_tui::model::Health;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Status {
    pub pid: u32,
    pub version: String,
    pub mode: String,
    pub started_unix_ms: u64,
    pub interval_ms: u64,
    /// The BPF programs attached (`tp_btf/tcp_probe`, `cgroup/sock_ops`).
    #[serde(default)]
    pub probes: Vec<String>,
    /// The old name of `probes`, kept for one release.
    pub hooks: Vec<String>,
    pub cc_registered: Vec<String>,
    pub default_cc: Option<String>,
    pub listen: Option<String>,
    pub sockets: usize,
    pub health: Health,
    /// Why senders that closed their end are not sampled (no sock_ops
    /// program on the cgroup v2 root), if they are not.
    #[serde(default)]
    pub sockops_error: Option<String>,
}

#[derive(Serialize, Deserialize)]
pub struct CcInfo {
    pub bloatd: Vec<String>,
    pub registered: Vec<String>,
    pub available: Vec<String>,
    pub default: String,
}

/// One floor the kernel keeps: of a peer (prefix_len 32/128) or a prefix.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FloorEntry {
    pub netns: u32,
    pub peer: std::net::IpAddr,
    pub prefix_len: u8,
    pub floor_us: u32,
    /// `socket` (observed by a socket toward it), `prefix`, or `inferred`.
    pub floor_source: bloatd_tui::model::FloorSource,
    /// Seconds since a socket last fed it.
    pub updated_s_ago: u32,
}

/// What the floors table holds and what its bound pushed out.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Floors {
    pub window_s: u32,
    pub capacity: u32,
    /// Floors created since start, and those the LRU bound evicted.
    pub created: u64,
    pub evicted: u64,
    pub floors: Vec<FloorEntry>,
}

#[derive(Serialize, Deserialize)]
pub struct DefaultReq {
    pub name: String,
}

#[derive(Serialize, Deserialize)]
pub struct DefaultResp {
    pub previous: String,
    pub default: String,
}
