//! Bloat episodes from successive reads, and the per-minute rows of every
//! active path: pure (no clock, no I/O), driven by the reads' own times, so
//! a synthetic feed (the tests, the disk-rate benchmark) runs it as the
//! daemon does.
//!
//! A path (the paths view's grouping by prefix) or a service becomes a
//! candidate at the first read its median queue (of its sockets that moved
//! in the last second: `paths::path_of`, `service::view::service_of`) is at
//! or above the threshold, an episode once it is above OPEN_AFTER_MS or
//! more after that first read, its start (a dip below shorter than
//! CLOSE_AFTER_MS is bridged, as in an open episode: a path's new flow in
//! its first round trips can pull the median under for a read); it closes
//! once the queue stayed below for CLOSE_AFTER_MS, ending at its last sample over the threshold (the
//! newest record over it of a moving member, at the last read that found
//! the group above: not the read that noticed the drop, a second or more
//! later). A read that does not see the path (its sockets closed) counts
//! as below. What the journal needs
//! comes out of each read as [`Write`]s: an open episode's summary and its
//! new points every read (so a `kill -9` loses at most the last one).

mod classes;
mod record;

use super::PolicySnap;
use bloatd_model::journal::{
    Episode, EpisodeActions, EpisodeDetail, EpisodeFlow, EpisodeKind, EpisodePath, FlowPoint,
    FlowSeries, MinuteRow, PathPoint,
};
use bloatd_model::{BottleneckClass, FloorSource, OwnerClass, Role, Socket};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;

/// How long the queue stays at or above the threshold before it is an
/// episode, and below before the episode ends.
pub const OPEN_AFTER_MS: u64 = 3_000;
pub const CLOSE_AFTER_MS: u64 = 3_000;
/// Flows kept with an episode (largest by bytes), and followed while it
/// goes on (the smallest go when more come).
pub const TOP_FLOWS: usize = 8;
const TRACKED_FLOWS: usize = 32;
/// Points of a series kept in memory; past this every other one goes (the
/// journal has them all).
const SERIES_MAX: usize = 3_600;
/// An open episode's summary is written this often (and when it opens,
/// when its largest flows change, when it closes); its points every read.
/// A summary is a page or two, rewritten whole: written every second by a
/// hundred episodes at once, it would be most of what the journal writes.
/// A daemon that dies mid-episode leaves its points; the next start takes
/// the episode's end and queue from them.
const SUMMARY_EVERY_MS: u64 = 60_000;
/// Episodes and candidates followed at once; more are counted, not
/// recorded.
const FOLLOWED_MAX: usize = 256;
/// Names (services, processes, congestion controls) kept per episode.
const NAMES_MAX: usize = 16;
/// Distinct flows counted per episode (beyond, the count stops).
const SEEN_MAX: usize = 100_000;
/// Peers of a path episode asked for their bottleneck class each read.
const PEERS_MAX: usize = 8;

/// What the detector is told.
#[derive(Clone, Debug)]
pub struct Settings {
    pub threshold_us: u32,
    /// The paths view's prefix lengths (IPv4, IPv6); None: by peer.
    pub prefix: Option<(u8, u8)>,
}

/// One point of a series as the journal keeps it: the path's (flow 0:
/// queue, queue max, floor, rate, sockets) or a flow's (cwnd, RTT, 0,
/// rate, 0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    pub t_ms: u64,
    pub v: [i64; 5],
}

impl Point {
    pub fn of_path(p: &PathPoint) -> Point {
        Point {
            t_ms: p.t_ms,
            v: [
                p.queue_us as i64,
                p.queue_max_us as i64,
                p.floor_us as i64,
                p.rate_bps as i64,
                p.sockets as i64,
            ],
        }
    }

    pub fn of_flow(p: &FlowPoint) -> Point {
        Point {
            t_ms: p.t_ms,
            v: [p.cwnd as i64, p.rtt_us as i64, 0, p.rate_bps as i64, 0],
        }
    }

    pub fn path(&self) -> PathPoint {
        let c = |i: usize| self.v[i].clamp(0, u32::MAX as i64) as u32;
        PathPoint {
            t_ms: self.t_ms,
            queue_us: c(0),
            queue_max_us: c(1),
            rtt_us: c(2).saturating_add(c(0)),
            floor_us: c(2),
            rate_bps: self.v[3].max(0) as u64,
            sockets: c(4),
        }
    }

    pub fn flow(&self) -> FlowPoint {
        let c = |i: usize| self.v[i].clamp(0, u32::MAX as i64) as u32;
        FlowPoint {
            t_ms: self.t_ms,
            cwnd: c(0),
            rtt_us: c(1),
            rate_bps: self.v[3].max(0) as u64,
        }
    }
}

/// An episode as the journal stores it: the summary and its flows, each
/// with the number its points are kept under (1, 2, ...; 0 is the path).
#[derive(Clone, Debug, PartialEq)]
pub struct EpisodeRecord {
    pub episode: Episode,
    pub flows: Vec<(u32, EpisodeFlow)>,
}

/// What to write after a read, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// An episode's summary and flows (insert or replace).
    Episode(Box<EpisodeRecord>),
    /// New points of an episode's series (`flow` 0: the path's).
    Points {
        episode: u64,
        flow: u32,
        points: Vec<Point>,
    },
    /// A closed episode keeps only these flows' points (and the path's).
    Prune { episode: u64, keep: Vec<u32> },
    /// The rows of a minute that ended.
    Minutes(Vec<MinuteRow>),
}

impl Write {
    /// The episode a write belongs to.
    pub fn episode_id(&self) -> Option<u64> {
        match self {
            Write::Episode(r) => Some(r.episode.id),
            Write::Points { episode, .. } | Write::Prune { episode, .. } => Some(*episode),
            Write::Minutes(_) => None,
        }
    }

    /// Points or rows it holds, for the memory bound.
    pub fn weight(&self) -> usize {
        match self {
            Write::Episode(r) => 1 + r.flows.len(),
            Write::Points { points, .. } => points.len(),
            Write::Prune { .. } => 1,
            Write::Minutes(rows) => rows.len(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Key {
    Path {
        netns: u32,
        peer: IpAddr,
        prefix_len: u8,
        interface: String,
    },
    Service(String),
}

/// One group of sockets at one read, as the detector sees it.
struct Group<'a> {
    members: Vec<&'a Socket>,
    queue_us: u32,
    queue_max_us: u32,
    floor_us: u32,
    floor_source: Option<FloorSource>,
    /// Some socket has an RTT sample and a floor: there is a queue to judge.
    measured: bool,
    /// Some socket moved in the last second.
    active: bool,
    /// Bytes its sockets delivered since the last read (each flow once).
    delivered: u64,
}

impl Group<'_> {
    /// When its last sample at or above the threshold was taken, read at
    /// `t_ms`: the newest record over it of a member that moved (a record
    /// is as of its last sample, `idle_ms` before the read); the read's
    /// time where no single member is over.
    fn last_over_ms(&self, t_ms: u64, threshold_us: u32) -> u64 {
        self.members
            .iter()
            .filter(|s| s.is_active() && s.view_queue_delay_us() >= threshold_us)
            .map(|s| t_ms.saturating_sub(s.idle_ms))
            .max()
            .unwrap_or(t_ms)
    }
}

/// A flow followed during an episode.
#[derive(Clone, Debug)]
struct FlowTrack {
    idx: u32,
    flow: EpisodeFlow,
    retrans_first: u32,
    queues: Vec<u32>,
    points: Vec<FlowPoint>,
    written_until_ms: u64,
}

/// An episode being followed: a candidate until its queue held for
/// OPEN_AFTER_MS (then it has an id).
#[derive(Clone, Debug)]
struct Followed {
    id: Option<u64>,
    kind: EpisodeKind,
    path: Option<EpisodePath>,
    service: Option<String>,
    start_ms: u64,
    last_ms: u64,
    /// Its last sample over the threshold (`Group::last_over_ms`): its end
    /// once below.
    over_ms: u64,
    below_since: Option<u64>,
    points: Vec<PathPoint>,
    written_until_ms: u64,
    /// When its summary was last written, and the flows it named.
    summary_written: Option<(u64, Vec<u32>)>,
    flows: Vec<FlowTrack>,
    next_flow: u32,
    seen: HashSet<u64>,
    services: BTreeSet<String>,
    processes: BTreeSet<String>,
    ccs: BTreeSet<String>,
    bytes: u64,
    sockets_max: u32,
    floor: Option<(u32, Option<FloorSource>)>,
    peak_us: u32,
    policy_start: Option<PolicySnap>,
    policy_last: Option<PolicySnap>,
    /// A pid of one of its sockets, for the path's gateway.
    pid: Option<u32>,
    /// Path episodes: the peers its moving sockets talked to at the last
    /// read (PEERS_MAX at most), and the class and owner the bottleneck
    /// classifier last gave them (`Detector::classify`).
    peers: Vec<IpAddr>,
    bottleneck: Option<BottleneckClass>,
    owner: Option<OwnerClass>,
}

/// A minute's accumulation for one path.
#[derive(Default)]
struct MinuteAcc {
    queues: Vec<u32>,
    queue_max_us: u32,
    bytes: u64,
    sockets: u32,
}

/// Bytes each socket delivered (acknowledged as a sender, received as a
/// receiver) at the last read.
#[derive(Default)]
struct Delivered {
    last_t_ms: Option<u64>,
    by_cookie: HashMap<u64, u64>,
}

fn delivered_total(s: &Socket) -> u64 {
    match s.role {
        Role::Sender => s.bytes_acked,
        Role::Receiver => s.bytes_received,
    }
}

impl Delivered {
    /// Each socket's bytes since the last read: all of a socket first
    /// seen now (it opened since), none at the first read (nothing to
    /// measure from). Returns them and the time since the last read.
    fn update(&mut self, t_ms: u64, socks: &[Socket]) -> (HashMap<u64, u64>, u64) {
        let first = self.last_t_ms.is_none();
        let dt_ms = self.last_t_ms.map_or(0, |l| t_ms.saturating_sub(l));
        let mut now = HashMap::with_capacity(socks.len());
        let mut deltas = HashMap::with_capacity(socks.len());
        for s in socks {
            let total = delivered_total(s);
            let d = match self.by_cookie.get(&s.cookie) {
                Some(&was) => total.saturating_sub(was),
                None if first => 0,
                None => total,
            };
            now.insert(s.cookie, total);
            if d > 0 {
                deltas.insert(s.cookie, d);
            }
        }
        self.by_cookie = now;
        self.last_t_ms = Some(t_ms);
        (deltas, dt_ms)
    }
}

fn rate_bps(bytes: u64, dt_ms: u64) -> u64 {
    bytes.saturating_mul(8000).checked_div(dt_ms).unwrap_or(0)
}

/// The detector: every read goes through [`Detector::observe`].
pub struct Detector {
    settings: Settings,
    followed: BTreeMap<Key, Followed>,
    delivered: Delivered,
    minute: Option<u64>,
    minutes: BTreeMap<(u32, IpAddr, u8, String), MinuteAcc>,
    next_id: u64,
    /// Episodes opened, by kind (for /metrics).
    pub opened: [u64; 2],
    /// Keys above the threshold that could not be followed (FOLLOWED_MAX).
    pub unfollowed: u64,
}

fn kind_index(k: EpisodeKind) -> usize {
    match k {
        EpisodeKind::Path => 0,
        EpisodeKind::Service => 1,
    }
}

impl Detector {
    pub fn new(settings: Settings, next_id: u64) -> Detector {
        Detector {
            settings,
            followed: BTreeMap::new(),
            delivered: Delivered::default(),
            minute: None,
            minutes: BTreeMap::new(),
            next_id: next_id.max(1),
            opened: [0; 2],
            unfollowed: 0,
        }
    }

    /// Episode ids moved (`map`: old to new, the journal's once it
    /// opens), and the next id.
    pub fn renumber(&mut self, map: &HashMap<u64, u64>, next: u64) {
        for f in self.followed.values_mut() {
            if let Some(id) = f.id.as_mut() {
                if let Some(&n) = map.get(id) {
                    *id = n;
                }
            }
        }
        self.next_id = self.next_id.max(next);
    }

    /// Whether some path or service is at or above the threshold, or an
    /// episode is open: the engine then reads every second.
    pub fn hot(&self) -> bool {
        !self.followed.is_empty()
    }

    /// The episodes open now (not candidates).
    pub fn open(&self) -> Vec<Episode> {
        self.followed
            .values()
            .filter(|f| f.id.is_some())
            .map(|f| f.summary(self.settings.threshold_us))
            .collect()
    }

    /// Episodes open now, by kind.
    pub fn open_counts(&self) -> [u64; 2] {
        let mut n = [0; 2];
        for f in self.followed.values().filter(|f| f.id.is_some()) {
            n[kind_index(f.kind)] += 1;
        }
        n
    }

    /// An open episode with its flows and series as far as they go.
    pub fn detail(&self, id: u64) -> Option<EpisodeDetail> {
        let f = self.followed.values().find(|f| f.id == Some(id))?;
        let top = f.top_flows();
        Some(EpisodeDetail {
            episode: f.summary(self.settings.threshold_us),
            flows: top.iter().map(|t| t.flow.clone()).collect(),
            series: f.points.clone(),
            flow_series: top
                .iter()
                .map(|t| FlowSeries {
                    cookie: t.flow.cookie,
                    points: t.points.clone(),
                })
                .collect(),
        })
    }

    /// One read: the episodes it opens, extends and closes, and the minute
    /// it ends. `gateway` finds a path's next hop when its episode opens.
    pub fn observe(
        &mut self,
        t_ms: u64,
        socks: &[Socket],
        policy: Option<&PolicySnap>,
        gateway: &dyn Fn(&EpisodePath, Option<u32>) -> Option<IpAddr>,
    ) -> Vec<Write> {
        let (deltas, dt_ms) = self.delivered.update(t_ms, socks);
        let mut out = Vec::new();
        self.end_minute(t_ms, &mut out);
        let threshold = self.settings.threshold_us;
        let mut groups: Vec<(Key, Group)> = Vec::new();
        for (key, members) in crate::paths::groups(socks, self.settings.prefix) {
            let p = crate::paths::path_of(key, &members);
            let g = Group {
                queue_us: p.queue_delay_p50_us,
                queue_max_us: p.queue_delay_max_us,
                floor_us: p.floor_us,
                floor_source: (p.floor_us > 0).then_some(p.floor_source),
                measured: p.measured > 0,
                active: members.iter().any(|s| s.is_active()),
                delivered: delivered_of(&members, &deltas),
                members,
            };
            let (netns, peer, prefix_len, interface) = key;
            if g.active || g.delivered > 0 {
                let acc = self
                    .minutes
                    .entry((netns, peer, prefix_len, interface.to_string()))
                    .or_default();
                if g.measured {
                    acc.queues.push(g.queue_us);
                }
                acc.queue_max_us = acc.queue_max_us.max(g.queue_max_us);
                acc.bytes += g.delivered;
                acc.sockets = acc.sockets.max(g.members.len() as u32);
            }
            let key = Key::Path {
                netns,
                peer,
                prefix_len,
                interface: interface.to_string(),
            };
            groups.push((key, g));
        }
        for (name, members) in crate::service::view::groups(socks) {
            let v = crate::service::view::service_of(name, &members);
            let floor = members
                .iter()
                .filter(|s| s.floor_us > 0)
                .min_by_key(|s| s.floor_us);
            let g = Group {
                queue_us: v.queue_delay_p50_us,
                queue_max_us: v.queue_delay_max_us,
                floor_us: floor.map_or(0, |s| s.floor_us),
                floor_source: floor.and_then(|s| s.floor_source),
                measured: v.measured > 0,
                active: v.active > 0,
                delivered: delivered_of(&members, &deltas),
                members,
            };
            groups.push((Key::Service(name.to_string()), g));
        }
        let mut seen: HashSet<&Key> = HashSet::with_capacity(groups.len());
        for (key, g) in &groups {
            seen.insert(key);
            let above = g.measured && threshold > 0 && g.queue_us >= threshold;
            if !above && !self.followed.contains_key(key) {
                continue;
            }
            if !self.followed.contains_key(key) {
                if self.followed.len() >= FOLLOWED_MAX {
                    self.unfollowed += 1;
                    continue;
                }
                self.followed
                    .insert(key.clone(), Followed::new(key, t_ms, policy));
            }
            let f = self.followed.get_mut(key).expect("inserted above");
            f.add(t_ms, g, &deltas, dt_ms, policy);
            if above {
                f.below_since = None;
                f.over_ms = g.last_over_ms(t_ms, threshold);
            } else {
                f.below_since.get_or_insert(t_ms);
            }
        }
        // Followed keys this read did not see: their sockets are gone.
        for (key, f) in self.followed.iter_mut() {
            if !seen.contains(key) {
                f.last_ms = t_ms;
                f.below_since.get_or_insert(t_ms);
            }
        }
        self.settle(t_ms, gateway, &mut out);
        out
    }

    /// Candidates confirmed or dropped, open episodes written or closed.
    fn settle(
        &mut self,
        t_ms: u64,
        gateway: &dyn Fn(&EpisodePath, Option<u32>) -> Option<IpAddr>,
        out: &mut Vec<Write>,
    ) {
        let threshold = self.settings.threshold_us;
        let mut done = Vec::new();
        for (key, f) in self.followed.iter_mut() {
            if f.id.is_none() {
                // A candidate's dip below is bridged as an episode's is
                // (a new flow of the path in its first round trips can
                // pull the median under for a read); below for
                // CLOSE_AFTER_MS, it is dropped.
                if f.below_since
                    .is_some_and(|b| t_ms.saturating_sub(b) >= CLOSE_AFTER_MS)
                {
                    done.push(key.clone());
                    continue;
                }
                if f.below_since.is_some() || t_ms.saturating_sub(f.start_ms) < OPEN_AFTER_MS {
                    continue;
                }
                f.id = Some(self.next_id);
                self.next_id += 1;
                self.opened[kind_index(f.kind)] += 1;
                if let Some(p) = f.path.as_mut() {
                    p.gateway = gateway(p, f.pid);
                }
            }
            let closing = f
                .below_since
                .is_some_and(|b| t_ms.saturating_sub(b) >= CLOSE_AFTER_MS);
            out.extend(f.writes(threshold, closing));
            if closing {
                done.push(key.clone());
            }
        }
        for key in done {
            self.followed.remove(&key);
        }
    }

    /// bloatd stops: every open episode is written as cut ("stopped"),
    /// and the minute so far.
    pub fn finish(&mut self, t_ms: u64) -> Vec<Write> {
        let threshold = self.settings.threshold_us;
        let mut out = Vec::new();
        for f in self.followed.values_mut().filter(|f| f.id.is_some()) {
            // Above at its last read: it ends there; already below, at its
            // last sample over.
            if f.below_since.is_none() {
                f.over_ms = f.last_ms.min(t_ms);
                f.below_since = Some(f.over_ms);
            }
            let mut w = f.writes(threshold, true);
            for x in w.iter_mut() {
                if let Write::Episode(r) = x {
                    r.episode.cut = Some("stopped".into());
                }
            }
            out.extend(w);
        }
        self.followed.clear();
        self.end_minute(u64::MAX / 2, &mut out);
        out
    }
}

/// Bytes the members delivered since the last read, each flow once.
fn delivered_of(members: &[&Socket], deltas: &HashMap<u64, u64>) -> u64 {
    crate::service::view::once_per_flow(members)
        .map(|s| deltas.get(&s.cookie).copied().unwrap_or(0))
        .sum()
}

/// `set` with `name` in it, up to NAMES_MAX names.
fn keep_name(set: &mut BTreeSet<String>, name: &str) {
    if !name.is_empty() && set.len() < NAMES_MAX {
        set.insert(name.to_string());
    }
}

/// Every other point, when a series grew past SERIES_MAX.
fn thin<T>(v: &mut Vec<T>) {
    if v.len() > SERIES_MAX {
        let mut i = 0;
        v.retain(|_| {
            i += 1;
            i % 2 == 1
        });
    }
}

impl Followed {
    fn new(key: &Key, t_ms: u64, policy: Option<&PolicySnap>) -> Followed {
        let (kind, path, service) = match key {
            Key::Path {
                netns,
                peer,
                prefix_len,
                interface,
            } => (
                EpisodeKind::Path,
                Some(EpisodePath {
                    netns: *netns,
                    peer: *peer,
                    prefix_len: *prefix_len,
                    interface: interface.clone(),
                    gateway: None,
                }),
                None,
            ),
            Key::Service(s) => (EpisodeKind::Service, None, Some(s.clone())),
        };
        Followed {
            id: None,
            kind,
            path,
            service,
            start_ms: t_ms,
            last_ms: t_ms,
            over_ms: t_ms,
            below_since: None,
            points: Vec::new(),
            written_until_ms: 0,
            summary_written: None,
            flows: Vec::new(),
            next_flow: 1,
            seen: HashSet::new(),
            services: BTreeSet::new(),
            processes: BTreeSet::new(),
            ccs: BTreeSet::new(),
            bytes: 0,
            sockets_max: 0,
            floor: None,
            peak_us: 0,
            policy_start: policy.cloned(),
            policy_last: policy.cloned(),
            pid: None,
            peers: Vec::new(),
            bottleneck: None,
            owner: None,
        }
    }

    /// One read of its sockets.
    fn add(
        &mut self,
        t_ms: u64,
        g: &Group,
        deltas: &HashMap<u64, u64>,
        dt_ms: u64,
        policy: Option<&PolicySnap>,
    ) {
        self.last_ms = t_ms;
        if policy.is_some() {
            self.policy_last = policy.cloned();
        }
        self.points.push(PathPoint {
            t_ms,
            queue_us: g.queue_us,
            queue_max_us: g.queue_max_us,
            rtt_us: g.floor_us.saturating_add(g.queue_us),
            floor_us: g.floor_us,
            rate_bps: rate_bps(g.delivered, dt_ms),
            sockets: g.members.len() as u32,
        });
        thin(&mut self.points);
        self.bytes += g.delivered;
        self.sockets_max = self.sockets_max.max(g.members.len() as u32);
        self.peak_us = self.peak_us.max(g.queue_max_us);
        if g.floor_us > 0 && self.floor.is_none_or(|(f, _)| g.floor_us < f) {
            self.floor = Some((g.floor_us, g.floor_source));
        }
        self.peers.clear();
        for s in &g.members {
            let delta = deltas.get(&s.cookie).copied().unwrap_or(0);
            if !s.is_active() && delta == 0 {
                continue;
            }
            if self.path.is_some()
                && self.peers.len() < PEERS_MAX
                && !self.peers.contains(&s.remote_addr)
            {
                self.peers.push(s.remote_addr);
            }
            if self.seen.len() < SEEN_MAX {
                self.seen.insert(s.cookie);
            }
            keep_name(&mut self.services, &s.service);
            keep_name(&mut self.processes, s.comm.as_deref().unwrap_or(""));
            keep_name(&mut self.ccs, &s.cc);
            if self.pid.is_none() {
                self.pid = s.pid;
            }
            self.follow_flow(t_ms, s, delta, dt_ms);
        }
    }

    /// A socket's read into its flow, which is followed from now if there
    /// is room (the flow with the fewest bytes makes room).
    fn follow_flow(&mut self, t_ms: u64, s: &Socket, delta: u64, dt_ms: u64) {
        let i = match self.flows.iter().position(|t| t.flow.cookie == s.cookie) {
            Some(i) => i,
            None => {
                if self.flows.len() >= TRACKED_FLOWS {
                    let (least, bytes) = self
                        .flows
                        .iter()
                        .enumerate()
                        .map(|(i, t)| (i, t.flow.bytes))
                        .min_by_key(|&(_, b)| b)
                        .expect("full");
                    if delta <= bytes {
                        return;
                    }
                    self.flows.swap_remove(least);
                }
                self.flows.push(FlowTrack {
                    idx: self.next_flow,
                    flow: EpisodeFlow {
                        cookie: s.cookie,
                        pid: s.pid,
                        process: s.comm.clone(),
                        service: s.service.clone(),
                        cc: s.cc.clone(),
                        role: s.role,
                        local: s.local_endpoint(),
                        remote: s.remote_endpoint(),
                        netns: s.netns,
                        bytes: 0,
                        retrans: 0,
                        unsent_bytes_max: 0,
                        unsent_delay_max_us: 0,
                        queue_p50_us: 0,
                        policy: String::new(),
                        rules: Vec::new(),
                    },
                    retrans_first: s.retrans,
                    queues: Vec::new(),
                    points: Vec::new(),
                    written_until_ms: 0,
                });
                self.next_flow += 1;
                self.flows.len() - 1
            }
        };
        let t = &mut self.flows[i];
        let f = &mut t.flow;
        f.bytes += delta;
        f.cc = s.cc.clone();
        f.retrans = s.retrans.saturating_sub(t.retrans_first);
        f.unsent_bytes_max = f.unsent_bytes_max.max(s.unsent_bytes);
        f.unsent_delay_max_us = f.unsent_delay_max_us.max(s.unsent_delay_us);
        if let Some(p) = &s.policy {
            let mark = p.mark();
            if !mark.is_empty() {
                f.policy = mark;
            }
            let rules = [
                p.chose_cc(),
                p.notsent_lowat_rule.as_deref(),
                p.drwa.as_ref().map(|d| d.by.as_str()),
            ];
            for r in rules.into_iter().flatten() {
                if r != "switch" && !f.rules.iter().any(|x| x == r) {
                    f.rules.push(r.to_string());
                }
            }
        }
        if s.view_rtt_us() > 0 && s.floor_us > 0 {
            t.queues.push(s.view_queue_delay_us());
            thin(&mut t.queues);
        }
        t.points.push(FlowPoint {
            t_ms,
            cwnd: s.cwnd,
            rtt_us: s.view_rtt_us(),
            rate_bps: rate_bps(delta, dt_ms),
        });
        thin(&mut t.points);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bloatd_model::fixtures;

    pub(super) const T0: u64 = 1_763_683_200_000; // a whole minute

    pub(super) fn settings() -> Settings {
        Settings {
            threshold_us: 100_000,
            prefix: Some((24, 64)),
        }
    }

    /// A sender toward 10.9.2.2 (path 10.9.2.0/24 on eth0) with a 80 ms
    /// floor and `queue_ms` of queue, `acked` bytes acknowledged so far.
    pub(super) fn bulk(cookie: u64, queue_ms: u32, acked: u64) -> Socket {
        let mut s = fixtures::sending(fixtures::socket(cookie), 80_000, queue_ms * 1000);
        s.remote_addr = "10.9.2.2".parse().unwrap();
        s.interface = "eth0".into();
        s.service = "bulk.service".into();
        s.comm = Some("iperf3".into());
        s.bytes_acked = acked;
        s.idle_ms = 0;
        s
    }

    fn no_gateway(_: &EpisodePath, _: Option<u32>) -> Option<IpAddr> {
        None
    }

    /// Reads once a second from T0: queue of the bulk flow each second
    /// (None: the socket is gone), 250 kB acknowledged per second.
    pub(super) fn run(d: &mut Detector, queues: &[Option<u32>]) -> Vec<(u64, Vec<Write>)> {
        queues
            .iter()
            .enumerate()
            .map(|(i, q)| {
                let t = T0 + i as u64 * 1000;
                let socks: Vec<Socket> = q
                    .iter()
                    .map(|&q| bulk(1, q, 250_000 * (i as u64 + 1)))
                    .collect();
                (t, d.observe(t, &socks, None, &no_gateway))
            })
            .collect()
    }

    fn episodes_of(writes: &[(u64, Vec<Write>)], kind: EpisodeKind) -> Vec<Episode> {
        writes
            .iter()
            .flat_map(|(_, w)| w.iter())
            .filter_map(|w| match w {
                Write::Episode(r) if r.episode.kind == kind => Some(r.episode.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_queue_held_for_seconds_opens_an_episode_from_its_first_second() {
        let mut d = Detector::new(settings(), 7);
        // 2 s calm, 10 s at 400 ms, then calm.
        let mut q = vec![Some(5), Some(5)];
        q.extend([Some(400); 10]);
        q.extend([Some(5); 6]);
        let w = run(&mut d, &q);
        let eps = episodes_of(&w, EpisodeKind::Path);
        // Written at every read from the one that confirmed it (t = 5 s,
        // 3 s after its first second above) to the one that closed it.
        let first = eps.first().unwrap();
        assert_eq!((first.id, first.open), (7, true));
        assert_eq!(first.start_ms, T0 + 2000);
        let last = eps.last().unwrap();
        assert!(!last.open);
        assert_eq!(last.end_ms, T0 + 11_000, "ends at its last sample over");
        assert_eq!(last.path.as_ref().unwrap().peer_text(), "10.9.2.0/24");
        assert_eq!(last.queue_peak_us, 400_000);
        assert_eq!(last.queue_p50_us, 400_000);
        assert_eq!((last.flows, last.sockets_max), (1, 1));
        assert_eq!(last.processes, vec!["iperf3"]);
        // 250 kB a second over the episode's 10 s (and the drain's reads).
        assert!(last.bytes >= 2_500_000, "{}", last.bytes);
        assert_eq!(d.opened, [1, 1], "a path and a service episode");
        assert!(!d.hot(), "nothing followed once it closed");
        // The path's points: every second from its start, each once.
        let mut pts: Vec<u64> = w
            .iter()
            .flat_map(|(_, w)| w.iter())
            .filter_map(|w| match w {
                Write::Points {
                    episode: 7,
                    flow: 0,
                    points,
                } => Some(points.clone()),
                _ => None,
            })
            .flatten()
            .map(|p| p.t_ms)
            .collect();
        let n = pts.len();
        pts.dedup();
        assert_eq!(pts.len(), n, "no point written twice");
        assert_eq!(pts[0], T0 + 2000);
        // The largest flow is kept with its points.
        let prune = w
            .iter()
            .flat_map(|(_, w)| w.iter())
            .find_map(|w| match w {
                Write::Prune { episode: 7, keep } => Some(keep.clone()),
                _ => None,
            })
            .unwrap();
        assert_eq!(prune, vec![1]);
    }

    #[test]
    fn a_spike_shorter_than_a_few_seconds_is_no_episode() {
        let mut d = Detector::new(settings(), 1);
        let w = run(&mut d, &[Some(5), Some(400), Some(400), Some(5), Some(5)]);
        assert!(episodes_of(&w, EpisodeKind::Path).is_empty());
        assert_eq!(d.opened, [0, 0]);
    }

    #[test]
    fn a_dip_shorter_than_the_close_delay_keeps_the_start() {
        // A read below a second after the first above (a new flow joined
        // the path) neither drops the candidate nor moves its start.
        let mut d = Detector::new(settings(), 1);
        let w = run(
            &mut d,
            &[Some(5), Some(400), Some(5), Some(400), Some(400), Some(400)],
        );
        let eps = episodes_of(&w, EpisodeKind::Path);
        assert_eq!(eps.last().map(|e| e.start_ms), Some(T0 + 1000));
        // Below for CLOSE_AFTER_MS: dropped, no episode.
        let mut d = Detector::new(settings(), 1);
        let w = run(
            &mut d,
            &[
                Some(400),
                Some(5),
                Some(5),
                Some(5),
                Some(5),
                Some(400),
                Some(400),
            ],
        );
        assert!(episodes_of(&w, EpisodeKind::Path).is_empty());
    }

    #[test]
    fn sockets_that_go_away_end_it() {
        let mut d = Detector::new(settings(), 1);
        let mut q = vec![Some(400); 6];
        q.extend([None; 5]);
        let w = run(&mut d, &q);
        let last = episodes_of(&w, EpisodeKind::Path).pop().unwrap();
        assert!(!last.open);
        assert_eq!(last.end_ms, T0 + 5000, "its last sample over");
    }

    #[test]
    fn the_end_is_the_last_sample_over_not_the_read_that_saw_the_drop() {
        let mut d = Detector::new(settings(), 1);
        let mut socks = |t: u64, q: u32, idle_ms: u64| {
            let mut s = bulk(1, q, 250 * t);
            s.idle_ms = idle_ms;
            d.observe(T0 + t, &[s], None, &no_gateway)
        };
        let mut w = Vec::new();
        for t in (0..6_000).step_by(1000) {
            w.extend(socks(t, 400, 0));
        }
        // The last read over: its record 300 ms old; then a read 1.4 s
        // later below, and the close.
        w.extend(socks(6_000, 400, 300));
        for t in (7_400..12_000).step_by(1000) {
            w.extend(socks(t, 5, 0));
        }
        let last = w
            .iter()
            .filter_map(|w| match w {
                Write::Episode(r) if r.episode.kind == EpisodeKind::Path => Some(&r.episode),
                _ => None,
            })
            .next_back()
            .unwrap();
        assert!(!last.open);
        assert_eq!((last.start_ms, last.end_ms), (T0, T0 + 5_700));
    }

    #[test]
    fn the_delivery_rate_comes_from_the_bytes_between_reads() {
        let mut d = Detector::new(settings(), 1);
        let w = run(&mut d, &[Some(400); 6]);
        let pts: Vec<Point> = w
            .iter()
            .flat_map(|(_, w)| w.iter())
            .filter_map(|w| match w {
                // The path's episode (the service's is 2).
                Write::Points {
                    episode: 1,
                    flow: 0,
                    points,
                } => Some(points.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        // The first read has nothing to measure from; then 2 Mbit/s.
        let rates: Vec<u64> = pts.iter().map(|p| p.path().rate_bps).collect();
        assert_eq!(
            rates,
            vec![0, 2_000_000, 2_000_000, 2_000_000, 2_000_000, 2_000_000]
        );
    }

    #[test]
    fn each_minute_of_an_active_path_is_a_row() {
        let mut d = Detector::new(settings(), 1);
        let mut rows = Vec::new();
        for i in 0..=60u64 {
            let t = T0 + i * 1000;
            let q = if i < 30 { 10 } else { 200 };
            for w in d.observe(t, &[bulk(1, q, 125_000 * (i + 1))], None, &no_gateway) {
                if let Write::Minutes(m) = w {
                    rows.extend(m);
                }
            }
        }
        assert_eq!(rows.len(), 1, "{rows:?}");
        let m = &rows[0];
        assert_eq!(
            (m.t_ms, m.peer_text(), m.interface.as_str()),
            (T0, "10.9.2.0/24".into(), "eth0")
        );
        assert_eq!(
            (m.queue_p50_us, m.queue_p90_us, m.queue_max_us),
            (10_000, 200_000, 200_000)
        );
        // 59 seconds of 125 kB in the minute's 60.
        assert_eq!(m.rate_bps, 59 * 125_000 * 8 / 60);
        assert_eq!(m.sockets, 1);
    }

    #[test]
    fn a_stop_cuts_the_open_episodes() {
        let mut d = Detector::new(settings(), 1);
        run(&mut d, &[Some(400); 6]);
        let w = d.finish(T0 + 6000);
        let cut: Vec<&Episode> = w
            .iter()
            .filter_map(|w| match w {
                Write::Episode(r) => Some(&r.episode),
                _ => None,
            })
            .collect();
        assert_eq!(cut.len(), 2);
        assert!(cut
            .iter()
            .all(|e| !e.open && e.cut.as_deref() == Some("stopped") && e.end_ms == T0 + 5000));
    }

    #[test]
    fn the_largest_flows_are_kept() {
        let mut d = Detector::new(settings(), 1);
        let mut all = Vec::new();
        for i in 0..12u64 {
            let t = T0 + i * 1000;
            // Twelve flows on the path, flow c delivering c kB a second;
            // the queue drops at 8 s.
            let q = if i < 8 { 300 } else { 5 };
            let socks: Vec<Socket> = (1..=12).map(|c| bulk(c, q, c * 1000 * (i + 1))).collect();
            all.extend(d.observe(t, &socks, None, &no_gateway));
        }
        let rec = all
            .iter()
            .filter_map(|w| match w {
                Write::Episode(r) if r.episode.kind == EpisodeKind::Path && !r.episode.open => {
                    Some(r)
                }
                _ => None,
            })
            .next()
            .unwrap();
        let cookies: Vec<u64> = rec.flows.iter().map(|(_, f)| f.cookie).collect();
        assert_eq!(cookies, vec![12, 11, 10, 9, 8, 7, 6, 5]);
        assert_eq!(rec.episode.flows, 12);
    }
}
