//! Unit tests of the path floors (bpf/floor.h, bpf/floor_path.h): the C the
//! probes run, compiled for the host (bpf/floor_host.c and
//! bpf/testing/floor_host_env.c), over a table that
//! stands in for the kernel's `floors` LRU map. No root, no kernel.

use super::abi::{
    floor_source, stat, BloatdFloor, BloatdFloorCfg, BloatdFloorSubject, BloatdPathKey,
};
use bloatd_bpf_testing as _; // links bloatd_floor_path_refresh
use std::collections::HashMap;
use std::ffi::c_void;

extern "C" {
    fn bloatd_floor_path_refresh(
        env: *mut c_void,
        cfg: *const BloatdFloorCfg,
        s: *const BloatdFloorSubject,
        now_s: u32,
        source: *mut u32,
    ) -> u32;
    fn bloatd_floor_infer(own_min_us: u32, queue_us: u32, route_floor_us: u32) -> u32;
}

/// One of the kernel's floor maps as the test sees it: bounded, least
/// recently used first out.
#[derive(Default)]
struct Table {
    floors: HashMap<[u8; 24], Box<BloatdFloor>>,
    used: Vec<[u8; 24]>,
    bound: usize,
    evicted: u64,
}

impl Table {
    fn touch(&mut self, k: [u8; 24]) {
        self.used.retain(|x| *x != k);
        self.used.push(k);
    }
}

/// The kernel's `floors` (peers) and `prefix_floors` maps, with the
/// probes' counters.
struct Env {
    peers: Table,
    prefixes: Table,
    counts: HashMap<u32, u64>,
    /// What the bottleneck's reading lets the probes infer (0: nothing).
    infer: u32,
}

fn key_bytes(k: &BloatdPathKey) -> [u8; 24] {
    // SAFETY: BloatdPathKey is 24 bytes of plain data (generated from BTF).
    unsafe { std::mem::transmute_copy(k) }
}

impl Env {
    /// `bound` floors of peers, and as many of prefixes.
    fn new(bound: usize) -> Box<Env> {
        Box::new(Env {
            peers: Table {
                bound,
                ..Default::default()
            },
            prefixes: Table {
                bound,
                ..Default::default()
            },
            counts: HashMap::new(),
            infer: 0,
        })
    }

    /// The table the probes name (enum bloatd_floor_table), checked
    /// against the key: a peer's key is a whole address.
    fn table(&mut self, k: &BloatdPathKey, table: u32) -> &mut Table {
        let whole = if k.family == 10 { 128 } else { 32 };
        assert_eq!(table == 0, k.prefix_len == whole, "the key's table");
        if table == 0 {
            &mut self.peers
        } else {
            &mut self.prefixes
        }
    }

    fn count(&self, s: u32) -> u64 {
        self.counts.get(&s).copied().unwrap_or(0)
    }
}

#[no_mangle]
extern "C" fn bloatd_test_floor_lookup(
    env: *mut c_void,
    key: *const BloatdPathKey,
    table: u32,
) -> *mut BloatdFloor {
    // SAFETY: the test passes its own Env; the key points at a live key.
    let (env, key) = unsafe { (&mut *(env as *mut Env), &*key) };
    let (t, k) = (env.table(key, table), key_bytes(key));
    if !t.floors.contains_key(&k) {
        return std::ptr::null_mut();
    }
    t.touch(k);
    &mut **t.floors.get_mut(&k).unwrap() as *mut BloatdFloor
}

#[no_mangle]
extern "C" fn bloatd_test_floor_insert(
    env: *mut c_void,
    key: *const BloatdPathKey,
    f: *const BloatdFloor,
    table: u32,
) -> i32 {
    // SAFETY: as above.
    let (env, key, f) = unsafe { (&mut *(env as *mut Env), &*key, *f) };
    let (t, k) = (env.table(key, table), key_bytes(key));
    if t.floors.contains_key(&k) {
        return -17; // EEXIST, as BPF_NOEXIST
    }
    if t.floors.len() >= t.bound {
        let oldest = t.used.remove(0);
        t.floors.remove(&oldest);
        t.evicted += 1;
    }
    t.floors.insert(k, Box::new(f));
    t.touch(k);
    0
}

#[no_mangle]
extern "C" fn bloatd_test_floor_infer(env: *mut c_void, _own_us: u32) -> u32 {
    // SAFETY: as above.
    unsafe { (*(env as *mut Env)).infer }
}

#[no_mangle]
extern "C" fn bloatd_test_floor_count(env: *mut c_void, s: u32) {
    // SAFETY: as above.
    *unsafe { &mut *(env as *mut Env) }
        .counts
        .entry(s)
        .or_default() += 1;
}

const WINDOW_S: u32 = 1800;

fn cfg() -> BloatdFloorCfg {
    BloatdFloorCfg {
        window_s: WINDOW_S,
        prefix_v4: 24,
        prefix_v6: 64,
        infer: 1,
    }
}

fn v4(a: [u8; 4], own_us: u32) -> BloatdFloorSubject {
    let mut daddr = [0u8; 16];
    daddr[..4].copy_from_slice(&a);
    BloatdFloorSubject {
        netns: 1,
        route_id: 7,
        own_us,
        family: 2,
        moved: 0,
        daddr,
    }
}

fn v6(a: &str, own_us: u32) -> BloatdFloorSubject {
    let ip: std::net::Ipv6Addr = a.parse().unwrap();
    BloatdFloorSubject {
        netns: 1,
        route_id: 7,
        own_us,
        family: 10,
        moved: 0,
        daddr: ip.octets(),
    }
}

/// One socket's floor refresh at `now_s`: (floor, source).
fn refresh(env: &mut Env, cfg: &BloatdFloorCfg, s: &BloatdFloorSubject, now_s: u32) -> (u32, u32) {
    let mut source = 0;
    // SAFETY: the C code calls back into the env above with this pointer.
    let floor = unsafe {
        bloatd_floor_path_refresh(env as *mut Env as *mut c_void, cfg, s, now_s, &mut source)
    };
    (floor, source)
}

#[test]
fn a_flow_behind_a_queue_gets_the_floor_earlier_sockets_saw() {
    let mut env = Env::new(64);
    // A bulk download starts on an empty path: 40 ms.
    assert_eq!(
        refresh(&mut env, &cfg(), &v4([10, 0, 0, 2], 40_000), 100),
        (40_000, floor_source::SOCKET)
    );
    // A web fetch to the same host opens behind 1.4 s of queue.
    assert_eq!(
        refresh(&mut env, &cfg(), &v4([10, 0, 0, 2], 1_440_000), 112),
        (40_000, floor_source::PEER)
    );
}

#[test]
fn a_lower_minimum_replaces_a_higher_floor() {
    let mut env = Env::new(64);
    refresh(&mut env, &cfg(), &v4([10, 0, 0, 2], 50_000), 100);
    assert_eq!(
        refresh(&mut env, &cfg(), &v4([10, 0, 0, 2], 40_000), 101),
        (40_000, floor_source::SOCKET)
    );
    assert_eq!(
        refresh(&mut env, &cfg(), &v4([10, 0, 0, 2], 60_000), 102),
        (40_000, floor_source::PEER)
    );
}

#[test]
fn a_floor_expires_after_the_window() {
    let mut env = Env::new(64);
    let peer = |own| v4([10, 0, 0, 2], own);
    refresh(&mut env, &cfg(), &peer(40_000), 100);
    // Only higher RTTs since (a standing queue): the floor holds for the
    // whole window...
    assert_eq!(refresh(&mut env, &cfg(), &peer(900_000), 1000).0, 40_000);
    assert_eq!(
        refresh(&mut env, &cfg(), &peer(950_000), 100 + WINDOW_S).0,
        40_000
    );
    // ...and then the best of the later ones takes over: a route that
    // really got longer is believed after one window.
    assert_eq!(
        refresh(&mut env, &cfg(), &peer(950_000), 101 + WINDOW_S).0,
        900_000
    );
    // Nothing seen for a whole window: no history, the socket's own.
    assert_eq!(
        refresh(&mut env, &cfg(), &peer(980_000), 102 + 3 * WINDOW_S),
        (980_000, floor_source::SOCKET)
    );
    assert_eq!(
        refresh(&mut env, &cfg(), &peer(990_000), 103 + 3 * WINDOW_S),
        (980_000, floor_source::PEER)
    );
}

#[test]
fn a_peer_without_history_takes_its_prefix_floor() {
    let mut env = Env::new(64);
    refresh(&mut env, &cfg(), &v4([10, 0, 0, 2], 40_000), 100);
    assert_eq!(
        refresh(&mut env, &cfg(), &v4([10, 0, 0, 77], 600_000), 101),
        (40_000, floor_source::PREFIX)
    );
    // The provenance stays with the peer's floor for its next sockets.
    assert_eq!(
        refresh(&mut env, &cfg(), &v4([10, 0, 0, 77], 620_000), 102),
        (40_000, floor_source::PREFIX)
    );
    // Another /24: no history there.
    assert_eq!(
        refresh(&mut env, &cfg(), &v4([10, 0, 1, 2], 600_000), 103),
        (600_000, floor_source::SOCKET)
    );
    // Prefix length 0 turns the fallback off.
    let off = BloatdFloorCfg {
        prefix_v4: 0,
        ..cfg()
    };
    assert_eq!(
        refresh(&mut Env::new(64), &off, &v4([10, 0, 0, 2], 40_000), 100).1,
        floor_source::SOCKET
    );
}

#[test]
fn ipv6_peers_use_their_64_and_v4_mapped_peers_are_ipv4() {
    let mut env = Env::new(64);
    refresh(&mut env, &cfg(), &v6("fd00:1:2:3::10", 30_000), 100);
    assert_eq!(
        refresh(&mut env, &cfg(), &v6("fd00:1:2:3::99", 500_000), 101),
        (30_000, floor_source::PREFIX)
    );
    assert_eq!(
        refresh(&mut env, &cfg(), &v6("fd00:1:2:4::10", 500_000), 101).1,
        floor_source::SOCKET
    );
    // A dual-stack socket holds an IPv4 peer as ::ffff:10.0.0.2: same floor.
    refresh(&mut env, &cfg(), &v4([10, 0, 0, 2], 40_000), 102);
    assert_eq!(
        refresh(&mut env, &cfg(), &v6("::ffff:10.0.0.2", 700_000), 103),
        (40_000, floor_source::PEER)
    );
}

#[test]
fn a_new_peer_behind_a_queue_is_inferred_and_keeps_its_provenance() {
    let mut env = Env::new(64);
    env.infer = 41_000; // the handshake took 1.44 s through a 1.4 s queue
    assert_eq!(
        refresh(&mut env, &cfg(), &v4([10, 9, 4, 2], 1_440_000), 100),
        (41_000, floor_source::INFERRED)
    );
    assert_eq!(env.count(stat::FLOOR_INFERRED), 1);
    env.infer = 0;
    assert_eq!(
        refresh(&mut env, &cfg(), &v4([10, 9, 4, 2], 1_300_000), 101),
        (41_000, floor_source::INFERRED)
    );
    // Its prefix started from the inferred floor too, not from the queue.
    assert_eq!(
        refresh(&mut env, &cfg(), &v4([10, 9, 4, 9], 1_300_000), 102),
        (41_000, floor_source::PREFIX)
    );
    // Once a socket measures below it, the floor is observed.
    assert_eq!(
        refresh(&mut env, &cfg(), &v4([10, 9, 4, 2], 39_000), 103),
        (39_000, floor_source::SOCKET)
    );
}

#[test]
fn inference_needs_a_queue_and_stays_above_the_route_floor() {
    // SAFETY: pure function.
    let infer = |own, queue, route| unsafe { bloatd_floor_infer(own, queue, route) };
    assert_eq!(infer(1_440_000, 1_400_000, 38_000), 40_000);
    assert_eq!(
        infer(45_000, 500, 40_000),
        0,
        "no queue to speak of: the handshake is the floor"
    );
    // The queue read as large as the handshake (it drained a little in
    // between): no lower than the floor of the sockets that measured it.
    assert_eq!(infer(1_300_000, 1_350_000, 40_000), 40_000);
    assert_eq!(infer(0, 1_000_000, 40_000), 0, "no RTT sample yet");
}

#[test]
fn a_new_route_starts_the_floor_over() {
    let mut env = Env::new(64);
    refresh(&mut env, &cfg(), &v4([10, 0, 0, 2], 40_000), 100);
    // A socket over another gateway, with nothing over the old route for
    // a while: the path changed.
    let mut moved = v4([10, 0, 0, 2], 90_000);
    moved.route_id = 8;
    assert_eq!(
        refresh(&mut env, &cfg(), &moved, 110),
        (90_000, floor_source::SOCKET)
    );
    assert_eq!(env.count(stat::FLOOR_ROUTE), 1);
    // A live connection re-routed under it (the route table changed): at
    // once, though the old route fed the floor a second ago.
    let mut env = Env::new(64);
    refresh(&mut env, &cfg(), &v4([10, 0, 0, 2], 40_000), 100);
    moved.moved = 1;
    assert_eq!(
        refresh(&mut env, &cfg(), &moved, 101),
        (90_000, floor_source::SOCKET)
    );
    assert_eq!(env.count(stat::FLOOR_ROUTE), 1);
    // Its next refresh, over the route it moved to: nothing more.
    assert_eq!(refresh(&mut env, &cfg(), &moved, 102).0, 90_000);
    assert_eq!(env.count(stat::FLOOR_ROUTE), 1);
}

#[test]
fn flows_to_one_peer_over_two_next_hops_share_its_floor() {
    // ECMP: a bulk download hashed to one next hop learned 40 ms; a fetch
    // hashed to the other opens behind the queue. Refreshing in turn for
    // a minute, neither starts the floor over.
    let mut env = Env::new(64);
    let bulk = v4([10, 0, 0, 2], 40_000);
    let mut fetch = v4([10, 0, 0, 2], 1_440_000);
    fetch.route_id = 8;
    refresh(&mut env, &cfg(), &bulk, 100);
    for t in 101..160 {
        assert_eq!(
            refresh(&mut env, &cfg(), &fetch, t),
            (40_000, floor_source::PEER)
        );
        assert_eq!(refresh(&mut env, &cfg(), &bulk, t).0, 40_000);
    }
    assert_eq!(env.count(stat::FLOOR_ROUTE), 0);
    // Both next hops are known now: a fetch over either after a quiet
    // while does not start it over either.
    assert_eq!(refresh(&mut env, &cfg(), &fetch, 400).0, 40_000);
    assert_eq!(refresh(&mut env, &cfg(), &bulk, 800).0, 40_000);
    assert_eq!(env.count(stat::FLOOR_ROUTE), 0);
}

#[test]
fn a_flood_of_peers_does_not_push_out_the_prefixes() {
    // A prefix learned from one peer, then 100 peers of another /24 (a
    // remote host's addresses) through a table of 16 peers.
    let mut env = Env::new(16);
    refresh(&mut env, &cfg(), &v4([10, 0, 1, 2], 40_000), 100);
    for i in 0..100u8 {
        refresh(&mut env, &cfg(), &v4([10, 0, 2, i], 30_000), 101);
    }
    assert_eq!(env.peers.evicted, 101 - 16);
    assert_eq!(env.prefixes.evicted, 0);
    // A new peer of the first /24 still starts from its prefix's floor.
    assert_eq!(
        refresh(&mut env, &cfg(), &v4([10, 0, 1, 9], 600_000), 102),
        (40_000, floor_source::PREFIX)
    );
}

#[test]
fn the_floor_table_is_bounded_and_counts_what_it_creates() {
    // Prefixes off: one entry per peer.
    let cfg = BloatdFloorCfg {
        prefix_v4: 0,
        ..cfg()
    };
    let mut env = Env::new(4);
    for i in 0..10u8 {
        refresh(
            &mut env,
            &cfg,
            &v4([10, 0, 0, i], 40_000 + i as u32),
            100 + i as u32,
        );
    }
    assert_eq!(env.peers.floors.len(), 4);
    assert_eq!(env.count(stat::FLOOR_NEW), 10);
    // The daemon's count of what the bound dropped: created - present.
    assert_eq!(
        super::floor_evictions(env.count(stat::FLOOR_NEW), env.peers.floors.len() as u64),
        6
    );
    assert_eq!(env.peers.evicted, 6);
    // The least recently used went: the first peers have no history now.
    assert_eq!(
        refresh(&mut env, &cfg, &v4([10, 0, 0, 0], 700_000), 200).1,
        floor_source::SOCKET
    );
}

#[test]
fn no_rtt_sample_no_floor() {
    assert_eq!(
        refresh(&mut Env::new(4), &cfg(), &v4([10, 0, 0, 2], 0), 100),
        (0, floor_source::NONE)
    );
}
