//! The socket tracker (the design's socket model): what the daemon knows
//! about every TCP socket, turned into the view model (`Socket`, `Series`)
//! that the API serves and the dashboard draws.
//!
//! The state of every socket comes from full reads of the kernel's records
//! (the map iterator), made when someone asks (API, dashboard) and shared by
//! every answer made from them ([`Read`]: an answer still streaming holds
//! its read while the next one comes in). Series exist only for the sockets
//! someone watches (`watch`): their samples come through the ring buffer.
//! Nothing here runs per sample of an unwatched socket: the probes count
//! every sample into the kernel's own statistics, which /metrics reads
//! (metrics.rs).

use crate::clock::Clock;
use crate::probes::abi::{self, BloatdSample, BloatdSock};
use crate::text::cstr;
use bloatd_model::{CaState, CcState, FloorSource, Role, Sample, Series, Socket};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

const TCP_INFINITE_SSTHRESH: u32 = 0x7fff_ffff;

/// One full read of the kernel's records: the state of every socket at that
/// moment. Immutable once made, so answers share it (`Arc`) instead of
/// copying it, and one still streaming out keeps it while the tracker moves
/// on to the next.
#[derive(Default)]
pub struct Read {
    /// The records as the kernel gave them (not copied again: at 100,000
    /// sockets a copy of the read costs more than making its index).
    socks: Vec<BloatdSock>,
    /// The state of bloatd's congestion controls, by cookie: only their
    /// sockets have one.
    cc_states: HashMap<u64, CcState>,
    /// (cookie, index in `socks`), sorted: for the few lookups by cookie
    /// (watched samples, series) without hashing every socket of every read.
    by_cookie: Vec<(u64, u32)>,
}

impl Read {
    fn new(socks: Vec<BloatdSock>, cc_states: HashMap<u64, CcState>) -> Read {
        let mut by_cookie: Vec<(u64, u32)> = socks
            .iter()
            .enumerate()
            .map(|(i, r)| (r.cookie, i as u32))
            .collect();
        by_cookie.sort_unstable();
        Read {
            socks,
            cc_states,
            by_cookie,
        }
    }

    fn get(&self, cookie: u64) -> Option<&BloatdSock> {
        let i = self
            .by_cookie
            .binary_search_by_key(&cookie, |&(c, _)| c)
            .ok()?;
        Some(&self.socks[self.by_cookie[i].1 as usize])
    }
}

/// What turning a record into a view-model `Socket` needs besides the
/// record: cheap to clone into an answer that outlives the tracker's borrow.
#[derive(Clone)]
struct View {
    interval_ns: u64,
    /// Names of the policy rules, by their index in the kernel.
    rule_names: Arc<Vec<String>>,
    /// Cgroup ids as service names.
    services: crate::service::ServiceNames,
}

pub struct Tracker {
    read: Arc<Read>,
    /// Series of watched sockets, oldest first.
    series: HashMap<u64, VecDeque<Sample>>,
    series_len: usize,
    view: View,
}

/// The sockets of one read as the API lists them, in their order (most
/// queued first), turned into `Socket`s only as they are taken: an answer
/// with every socket streams out without ever holding them all (the read
/// itself is already in memory, shared).
pub struct Rows {
    read: Arc<Read>,
    order: Vec<u32>,
    view: View,
    clock: Clock,
}

impl Rows {
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// The `i`th socket.
    pub fn get(&self, i: usize) -> Socket {
        let r = &self.read.socks[self.order[i] as usize];
        self.view
            .socket(r, self.read.cc_states.get(&r.cookie), &self.clock)
    }

    pub fn iter(&self) -> impl Iterator<Item = Socket> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }
}

/// The side of the transfer: as the probes decided it from what moved in
/// the socket's last interval; before anything moved, from its whole life.
pub fn role_of(rec: &BloatdSock) -> Role {
    match rec.role as u32 {
        abi::role::SENDER => Role::Sender,
        abi::role::RECEIVER => Role::Receiver,
        _ if rec.bytes_received > rec.bytes_acked => Role::Receiver,
        _ => Role::Sender,
    }
}

/// Queueing delay from the socket's own side: what `Socket::view_queue_delay_us`
/// says of the socket this record becomes.
fn view_queue_delay_us(rec: &BloatdSock) -> u32 {
    match role_of(rec) {
        Role::Receiver => rec.rcv_queue_delay_us,
        Role::Sender => rec.queue_delay_us,
    }
}

fn has_flag(rec: &BloatdSock, flag: u32) -> bool {
    rec.flags as u32 & flag != 0
}

fn floor_source(rec: &BloatdSock) -> Option<FloorSource> {
    floor_source_of(rec.floor_source as u32)
}

/// A floor's source as the kernel writes it (enum bloatd_floor_source);
/// None for none.
pub fn floor_source_of(v: u32) -> Option<FloorSource> {
    match v {
        abi::floor_source::SOCKET => Some(FloorSource::Socket),
        abi::floor_source::PEER => Some(FloorSource::Peer),
        abi::floor_source::PREFIX => Some(FloorSource::Prefix),
        abi::floor_source::INFERRED => Some(FloorSource::Inferred),
        _ => None,
    }
}

pub fn addr(family: u16, raw: &[u8; 16]) -> IpAddr {
    if family == abi::AF_INET6 {
        let v6 = Ipv6Addr::from(*raw);
        // A dual-stack listener holds IPv4 peers as ::ffff:a.b.c.d.
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    } else {
        IpAddr::V4(Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3]))
    }
}

fn ca_state(v: u8) -> CaState {
    match v {
        1 => CaState::Disorder,
        2 => CaState::Cwr,
        3 => CaState::Recovery,
        4 => CaState::Loss,
        _ => CaState::Open,
    }
}

/// `bytes` over `us` microseconds in bit/s, wide enough for any count.
fn rate_bps(bytes: u64, us: u64) -> u64 {
    if us == 0 {
        return 0;
    }
    (bytes as u128 * 8 * 1_000_000 / us as u128).min(u64::MAX as u128) as u64
}

/// The kernel's delivery rate estimate, as tcp_get_info computes it, in bit/s.
fn delivery_rate_bps(rec: &BloatdSock) -> u64 {
    rate_bps(
        rec.rate_delivered as u64 * rec.mss as u64,
        rec.rate_interval_us as u64,
    )
}

/// The time the socket's unsent bytes take at its delivery rate, or, with
/// no rate sample (after a loss the kernel's estimate can read 0), at the
/// rate of data across the link in its last interval.
fn unsent_delay_us(rec: &BloatdSock) -> u32 {
    let rate = match delivery_rate_bps(rec) {
        0 => rec.throughput_bps,
        r => r,
    };
    if rate == 0 {
        return 0;
    }
    (rec.unsent_bytes as u128 * 8 * 1_000_000 / rate as u128).min(u32::MAX as u128) as u32
}

/// A watched socket's sample as one point of its series.
fn sample_of(x: &BloatdSample, clock: &Clock, pipe_segments: Option<u32>) -> Sample {
    Sample {
        t_ms: clock.unix_ms_of(x.sample_ns),
        srtt_us: x.srtt_us,
        min_rtt_us: x.min_rtt_us,
        floor_us: x.floor_us,
        queue_delay_us: x.queue_delay_us,
        rcv_rtt_us: x.rcv_rtt_us,
        rcv_queue_delay_us: x.rcv_queue_delay_us,
        cwnd: x.cwnd,
        inflight: x.inflight,
        pipe_segments,
        throughput_bps: x.throughput_bps,
        drwa_clamp_bytes: (x.drwa_clamp > 0).then_some(x.drwa_clamp),
        drwa_rcvd_rtt_bytes: (x.drwa_clamp > 0).then_some(x.drwa_rcvd_rtt),
    }
}

impl View {
    fn socket(&self, r: &BloatdSock, cc_state: Option<&CcState>, clock: &Clock) -> Socket {
        let idle_ns = clock.mono_ns.saturating_sub(r.update_ns);
        let stale = clock.mono_ns.saturating_sub(r.sample_ns) > 3 * self.interval_ns;
        let comm = cstr(&r.comm);
        Socket {
            cookie: r.cookie,
            netns: r.netns,
            local_addr: addr(r.family, &r.saddr),
            local_port: r.sport,
            remote_addr: addr(r.family, &r.daddr),
            remote_port: r.dport,
            state: abi::tcp_state_name(r.state).to_string(),
            pid: (r.pid != 0).then_some(r.pid),
            comm: (!comm.is_empty()).then_some(comm),
            service: self.services.name(r.cgroup_id),
            cc: cstr(&r.cc),
            role: role_of(r),
            cwnd: r.cwnd,
            ssthresh: (r.ssthresh < TCP_INFINITE_SSTHRESH).then_some(r.ssthresh),
            inflight: r.inflight,
            mss: r.mss,
            srtt_us: r.srtt_us,
            min_rtt_us: r.min_rtt_us,
            floor_us: r.floor_us,
            floor_source: floor_source(r),
            queue_delay_us: r.queue_delay_us,
            rcv_rtt_us: r.rcv_rtt_us,
            rcv_ts_rtt_us: has_flag(r, abi::flag::RCV_TS).then_some(r.rcv_ts_rtt_us),
            timestamps: has_flag(r, abi::flag::TIMESTAMPS),
            rcv_queue_delay_us: r.rcv_queue_delay_us,
            unsent_bytes: r.unsent_bytes,
            unsent_delay_us: unsent_delay_us(r),
            interface: cstr(&r.ifname),
            retrans: r.total_retrans,
            lost: r.lost,
            delivered_ce: r.delivered_ce,
            rcv_ooopack: r.prev_ooopack,
            ca_state: ca_state(r.ca_state),
            bytes_acked: r.bytes_acked,
            bytes_received: r.bytes_received,
            delivery_rate_bps: delivery_rate_bps(r),
            throughput_bps: if stale { 0 } else { r.throughput_bps },
            idle_ms: idle_ns / 1_000_000,
            cc_state: cc_state.cloned(),
            policy: crate::policy::socket_policy(r, &self.rule_names),
        }
    }
}

impl Tracker {
    pub fn new(interval_ms: u64, series_seconds: u64) -> Tracker {
        Tracker {
            read: Arc::default(),
            series: HashMap::new(),
            series_len: (series_seconds * 1000 / interval_ms.max(1)) as usize,
            view: View {
                interval_ns: interval_ms * 1_000_000,
                rule_names: Arc::default(),
                services: crate::service::ServiceNames::new(crate::probes::cgroup2_root()),
            },
        }
    }

    /// The names of the services (cgroups) the sockets serve.
    pub fn services(&mut self) -> &mut crate::service::ServiceNames {
        &mut self.view.services
    }

    /// The names of the policy rules, so sockets can say which chose them.
    pub fn set_rule_names(&mut self, names: Vec<String>) {
        self.view.rule_names = Arc::new(names);
    }

    /// A sample of a watched socket joins its series.
    pub fn apply(&mut self, x: &BloatdSample, clock: &Clock) {
        if self.series_len == 0 {
            return;
        }
        let pipe_segments = match self.read.cc_states.get(&x.cookie) {
            Some(CcState::Westwood { pipe_segments, .. }) => Some(*pipe_segments),
            _ => None,
        };
        let series = self.series.entry(x.cookie).or_default();
        if series.len() >= self.series_len {
            series.pop_front();
        }
        series.push_back(sample_of(x, clock, pipe_segments));
    }

    /// The last read's records, for the next read to be made in their
    /// memory, when nothing else holds them (an answer still streaming
    /// keeps its read: then an empty vector). Memory more than twice what
    /// the last read filled is not kept: once a burst of sockets is gone,
    /// the daemon gives it back. The tracker lists no socket until
    /// `refresh`.
    pub fn take_records(&mut self) -> Vec<BloatdSock> {
        match Arc::get_mut(&mut self.read) {
            Some(read) => {
                let socks = std::mem::take(read).socks;
                if socks.capacity() > 2 * socks.len().max(1024) {
                    return Vec::new();
                }
                socks
            }
            None => Vec::new(),
        }
    }

    /// The kernel's records, read in full, with the state of bloatd's
    /// congestion controls by cookie: they are the state of every socket
    /// now; sockets the kernel no longer has are gone.
    pub fn refresh(&mut self, recs: Vec<BloatdSock>, cc_states: HashMap<u64, CcState>) {
        self.view.services.learn(recs.iter().map(|r| r.cgroup_id));
        self.read = Arc::new(Read::new(recs, cc_states));
    }

    /// Drop the series of sockets no longer watched, and the samples that
    /// fell out of the window.
    pub fn sweep(&mut self, clock: &Clock, series_seconds: u64, watched: &dyn Fn(u64) -> bool) {
        let horizon = clock.unix_ms.saturating_sub(series_seconds * 1000);
        self.series.retain(|cookie, s| {
            while s.front().is_some_and(|x| x.t_ms < horizon) {
                s.pop_front();
            }
            watched(*cookie) && !s.is_empty()
        });
        self.series.shrink_to_fit();
    }

    /// The last read, to make views of without the tracker.
    pub fn reading(&self) -> Reading {
        Reading {
            read: self.read.clone(),
            view: self.view.clone(),
        }
    }

    /// A socket the kernel has now, or one whose series is still kept.
    pub fn knows(&self, cookie: u64) -> bool {
        self.read.get(cookie).is_some() || self.series.contains_key(&cookie)
    }
}

/// One read with what turning its records into `Socket`s needs: cheap to
/// clone, used without the tracker (its views are made outside the
/// reader's lock, engine/views.rs).
#[derive(Clone)]
pub struct Reading {
    read: Arc<Read>,
    view: View,
}

impl Reading {
    /// Sockets in ESTABLISHED or with data still to deliver (a sender that
    /// closed its end while megabytes drain through a queue), all states
    /// with `all`; most queued first.
    pub fn sockets(&self, clock: &Clock, all: bool) -> Vec<Socket> {
        self.rows(clock, all).iter().collect()
    }

    /// The same, to be turned into `Socket`s as they are taken.
    pub fn rows(&self, clock: &Clock, all: bool) -> Rows {
        let socks = &self.read.socks;
        let mut keyed: Vec<(u32, u64, u32)> = socks
            .iter()
            .enumerate()
            .filter(|(_, r)| {
                all || r.state == abi::TCP_ESTABLISHED || r.inflight > 0 || r.unsent_bytes > 0
            })
            .map(|(i, r)| (view_queue_delay_us(r), r.cookie, i as u32))
            .collect();
        keyed.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        Rows {
            read: self.read.clone(),
            order: keyed.into_iter().map(|(_, _, i)| i).collect(),
            view: self.view.clone(),
            clock: *clock,
        }
    }
}

impl Tracker {
    /// Sockets as `Reading::sockets` lists them, of the last read.
    pub fn sockets(&self, clock: &Clock, all: bool) -> Vec<Socket> {
        self.reading().sockets(clock, all)
    }

    #[cfg(test)]
    pub fn rows(&self, clock: &Clock, all: bool) -> Rows {
        self.reading().rows(clock, all)
    }

    /// Samples of one socket newer than `since_ms` (empty until it is
    /// watched); None if the socket is unknown.
    pub fn series(&self, cookie: u64, since_ms: u64) -> Option<Series> {
        let known = self.read.get(cookie).is_some();
        let samples: Vec<Sample> = self
            .series
            .get(&cookie)
            .map(|s| s.iter().filter(|x| x.t_ms > since_ms).cloned().collect())
            .unwrap_or_default();
        (known || !samples.is_empty()).then_some(Series { cookie, samples })
    }

    /// The `n` sockets with the longest queue (their own side's view), for
    /// the watch list while someone looks at the dashboard.
    pub fn most_queued(&self, n: usize) -> Vec<u64> {
        let mut v: Vec<(u32, u64)> = self
            .read
            .socks
            .iter()
            .map(|r| (view_queue_delay_us(r), r.cookie))
            .collect();
        let n = n.min(v.len());
        if n > 0 && n < v.len() {
            v.select_nth_unstable_by(n - 1, |a, b| b.cmp(a));
        }
        v.truncate(n);
        v.into_iter().map(|(_, c)| c).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The record of a cubic sender: 300 ms srtt over a 20 ms floor.
    fn rec(cookie: u64, ns: u64) -> BloatdSock {
        let mut r = BloatdSock {
            cookie,
            update_ns: ns,
            sample_ns: ns,
            family: 2, // AF_INET
            state: abi::TCP_ESTABLISHED,
            role: abi::role::SENDER as u8,
            flags: abi::flag::ACTIVE as u8,
            srtt_us: 300_000,
            min_rtt_us: 20_000,
            floor_us: 20_000,
            floor_source: abi::floor_source::SOCKET as u8,
            queue_delay_us: 280_000,
            cwnd: 100,
            mss: 1448,
            ..Default::default()
        };
        r.cc[..5].copy_from_slice(b"cubic");
        r
    }

    fn sample(cookie: u64, ns: u64, queue_us: u32) -> BloatdSample {
        BloatdSample {
            cookie,
            sample_ns: ns,
            srtt_us: 20_000 + queue_us,
            floor_us: 20_000,
            queue_delay_us: queue_us,
            ..Default::default()
        }
    }

    fn clock(ns: u64) -> Clock {
        Clock {
            mono_ns: ns,
            unix_ms: 1_000_000 + ns / 1_000_000,
        }
    }

    #[test]
    fn the_next_read_reuses_the_last_reads_memory_unless_an_answer_holds_it() {
        let mut m = Tracker::new(100, 60);
        m.refresh(vec![rec(1, 1), rec(2, 1)], HashMap::new());
        // An answer streaming the read keeps it whole: nothing is taken.
        let streaming = m.rows(&clock(1), false);
        assert!(m.take_records().is_empty());
        assert_eq!(
            streaming.iter().map(|s| s.cookie).collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert_eq!(
            m.sockets(&clock(1), false).len(),
            2,
            "the tracker still lists them"
        );
        drop(streaming);
        // Nothing else holds it: its records (and their memory) are handed
        // over, and the tracker lists nothing until the next refresh.
        let spare = m.take_records();
        assert_eq!(
            spare.iter().map(|r| r.cookie).collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert!(m.sockets(&clock(1), false).is_empty());
        let mem = spare.as_ptr();
        let mut next = spare;
        next.clear();
        next.push(rec(3, 1));
        assert_eq!(next.as_ptr(), mem);
        m.refresh(next, HashMap::new());
        assert_eq!(m.sockets(&clock(1), false)[0].cookie, 3);
        // After a burst: memory for 100,000 records holding 2 is given back.
        let mut few = Vec::with_capacity(100_000);
        few.extend([rec(4, 1), rec(5, 1)]);
        m.refresh(few, HashMap::new());
        assert_eq!(m.take_records().capacity(), 0);
    }

    #[test]
    fn kernel_numbers_reach_the_view_and_go_stale_when_idle() {
        let mut m = Tracker::new(100, 60);
        let mut a = rec(1, 1_000_000_000);
        a.throughput_bps = 10_000_000;
        a.floor_us = 15_000;
        a.floor_source = abi::floor_source::INFERRED as u8;
        m.refresh(vec![a], HashMap::new());
        let s = &m.sockets(&clock(1_100_000_000), false)[0];
        assert_eq!(s.throughput_bps, 10_000_000);
        assert_eq!(
            (s.queue_delay_us, s.floor_us, s.floor_source),
            (280_000, 15_000, Some(FloorSource::Inferred))
        );
        assert_eq!(s.role, Role::Sender);
        // Idle for longer than three intervals: no stale throughput.
        let s = &m.sockets(&clock(2_000_000_000), false)[0];
        assert_eq!(s.throughput_bps, 0);
    }

    #[test]
    fn role_is_the_probes_else_the_lifetime_counts() {
        let mut r = rec(2, 5);
        r.bytes_received = 10;
        assert_eq!(
            role_of(&r),
            Role::Sender,
            "the last interval moved data out"
        );
        r.role = abi::role::UNKNOWN as u8;
        assert_eq!(
            role_of(&r),
            Role::Receiver,
            "nothing moved yet: by lifetime bytes"
        );
    }

    #[test]
    fn receiver_view_uses_the_measured_rtt() {
        let mut r = rec(2, 5);
        r.role = abi::role::RECEIVER as u8;
        r.rcv_rtt_us = 40_000; // the kernel's estimate lags the queue
        r.rcv_ts_rtt_us = 450_000;
        r.rcv_queue_delay_us = 430_000;
        r.flags |= (abi::flag::RCV_TS | abi::flag::TIMESTAMPS) as u8;
        let mut m = Tracker::new(100, 60);
        m.refresh(vec![r], HashMap::new());
        let s = &m.sockets(&clock(5), false)[0];
        assert_eq!(
            (s.rcv_rtt_us, s.rcv_ts_rtt_us, s.timestamps),
            (40_000, Some(450_000), true)
        );
        assert_eq!(
            (
                s.view_rtt_us(),
                s.view_queue_delay_us(),
                s.view_min_rtt_us()
            ),
            (450_000, 430_000, 20_000)
        );
    }

    #[test]
    fn without_timestamps_the_kernel_estimate_stands_in() {
        let mut r = rec(2, 5);
        r.role = abi::role::RECEIVER as u8;
        r.rcv_rtt_us = 60_000;
        let mut m = Tracker::new(100, 60);
        m.refresh(vec![r], HashMap::new());
        let s = &m.sockets(&clock(5), false)[0];
        assert_eq!(
            (s.timestamps, s.rcv_ts_rtt_us, s.view_rtt_us()),
            (false, None, 60_000)
        );
    }

    #[test]
    fn a_full_read_is_the_state_and_forgets_what_the_kernel_forgot() {
        let mut m = Tracker::new(100, 60);
        m.refresh(vec![rec(1, 10), rec(2, 10)], HashMap::new());
        let mut newer = rec(1, 20);
        newer.cwnd = 50;
        m.refresh(vec![newer], HashMap::new());
        assert_eq!(m.sockets(&clock(20), true).len(), 1);
        assert_eq!(m.sockets(&clock(20), false)[0].cwnd, 50);
    }

    #[test]
    fn watched_samples_make_the_series_whatever_reads_come_between() {
        let mut m = Tracker::new(100, 60);
        m.refresh(vec![rec(1, 100)], HashMap::new());
        m.apply(&sample(1, 100_000_000, 5_000), &clock(100_000_000));
        m.refresh(vec![rec(1, 300_000_000)], HashMap::new());
        m.apply(&sample(1, 200_000_000, 9_000), &clock(300_000_000));
        let s = m.series(1, 0).unwrap();
        assert_eq!(
            s.samples
                .iter()
                .map(|x| x.queue_delay_us)
                .collect::<Vec<_>>(),
            vec![5_000, 9_000]
        );
        assert_eq!(
            m.series(1, s.samples[0].t_ms).unwrap().samples.len(),
            1,
            "since_ms"
        );
        assert!(m.series(99, 0).is_none(), "unknown socket");
        m.refresh(vec![rec(2, 400_000_000)], HashMap::new());
        assert_eq!(
            m.series(1, 0).unwrap().samples.len(),
            2,
            "a closed socket's history stays until swept"
        );
    }

    #[test]
    fn sweep_keeps_only_watched_and_recent_history() {
        let mut m = Tracker::new(100, 60);
        for cookie in [1, 2] {
            m.apply(&sample(cookie, 1_000_000_000, 1), &clock(1_000_000_000));
        }
        m.sweep(&clock(1_000_000_000), 60, &|c| c == 1);
        assert!(m.series(2, 0).is_none());
        assert_eq!(m.series(1, 0).unwrap().samples.len(), 1);
        m.sweep(&clock(100_000_000_000), 60, &|_| true);
        assert!(m.series(1, 0).is_none(), "past the window");
    }

    #[test]
    fn the_most_queued_are_watched_while_someone_looks() {
        let mut m = Tracker::new(100, 60);
        let recs: Vec<BloatdSock> = (1..=5)
            .map(|c| {
                let mut r = rec(c, 10);
                r.queue_delay_us = c as u32 * 1000;
                r
            })
            .collect();
        m.refresh(recs, HashMap::new());
        let mut top = m.most_queued(2);
        top.sort();
        assert_eq!(top, vec![4, 5]);
        assert_eq!(m.most_queued(10).len(), 5);
    }

    #[test]
    fn closing_senders_with_data_are_listed() {
        let mut m = Tracker::new(100, 60);
        let mut fin = rec(1, 10);
        fin.state = 4; // FIN-WAIT-1, megabytes still in flight
        fin.inflight = 900;
        let mut done = rec(2, 10);
        done.state = 8; // CLOSE-WAIT, nothing left to send
        m.refresh(vec![fin, done], HashMap::new());
        let listed: Vec<u64> = m
            .sockets(&clock(10), false)
            .iter()
            .map(|s| s.cookie)
            .collect();
        assert_eq!(listed, vec![1]);
        assert_eq!(m.sockets(&clock(10), true).len(), 2);
    }

    #[test]
    fn rates_do_not_overflow() {
        // 3 GB between two readings 100 ms apart: 240 Gbit/s, not a wrap.
        assert_eq!(rate_bps(3_000_000_000, 100_000), 240_000_000_000);
        let mut r = rec(1, 10);
        r.unsent_bytes = 4_000_000;
        r.rate_delivered = 1000;
        r.rate_interval_us = 1_448_000; // 1000 segments of 1448 B in 1.448 s: 8 Mbit/s
        assert_eq!(delivery_rate_bps(&r), 8_000_000);
        assert_eq!(unsent_delay_us(&r), 4_000_000);
        // No rate sample: the interval's rate across the link instead of 0.
        r.rate_delivered = 0;
        r.throughput_bps = 16_000_000;
        assert_eq!(unsent_delay_us(&r), 2_000_000);
    }

    #[test]
    fn v4_mapped_addresses_shown_as_ipv4() {
        let mut raw = [0u8; 16];
        raw[10] = 0xff;
        raw[11] = 0xff;
        raw[12..].copy_from_slice(&[10, 9, 1, 1]);
        assert_eq!(
            addr(abi::AF_INET6, &raw),
            "10.9.1.1".parse::<IpAddr>().unwrap()
        );
    }
}
