//! The socket model: what the daemon knows about every TCP socket, built
//! from the probes' records, and turned into the view model (`Socket`,
//! `Series`) that the API serves and the dashboard draws.

use crate::probes::abi::{self, BloatdSock};
use bloatd_tui::model::{CaState, CcState, FloorSource, Role, Sample, Series, Socket};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Linux TCP states (include/net/tcp_states.h).
pub const TCP_ESTABLISHED: u8 = 1;
const TCP_INFINITE_SSTHRESH: u32 = 0x7fff_ffff;

/// Total samples kept across all sockets' series (~56 bytes each): the
/// history of the least recently active sockets goes first.
const SERIES_BUDGET: usize = 1_000_000;

/// A point in time on both clocks: probes stamp CLOCK_MONOTONIC, the API
/// speaks Unix time.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    pub mono_ns: u64,
    pub unix_ms: u64,
}

impl Clock {
    pub fn now() -> Clock {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: valid pointer to a timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        let mono_ns = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Clock { mono_ns, unix_ms }
    }

    /// Unix milliseconds of a CLOCK_MONOTONIC timestamp in the past.
    pub fn unix_ms_of(&self, mono_ns: u64) -> u64 {
        self.unix_ms.saturating_sub(self.mono_ns.saturating_sub(mono_ns) / 1_000_000)
    }
}

/// What one record contributes to the metrics.
#[derive(Debug, PartialEq)]
pub struct Observation {
    pub cc: String,
    pub role: Role,
    /// Present for periodic samples: they feed the histograms, through the
    /// view model's role-dependent views (`Sample::view_*`).
    pub sample: Option<Sample>,
    /// Retransmissions since the previous record of this socket.
    pub retrans_delta: u32,
}

struct Tracked {
    rec: BloatdSock,
    retrans_counted: u32,
    series: VecDeque<Sample>,
    cc_state: Option<CcState>,
}

pub struct Model {
    socks: HashMap<u64, Tracked>,
    interval_ns: u64,
    series_len: usize,
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

fn has_flag(rec: &BloatdSock, flag: u32) -> bool {
    rec.flags as u32 & flag != 0
}

/// The receiver's RTT the receiver queue is measured from.
fn rcv_view_rtt_us(rec: &BloatdSock) -> u32 {
    if has_flag(rec, abi::flag::RCV_TS) {
        rec.rcv_ts_rtt_us
    } else {
        rec.rcv_rtt_us
    }
}

fn floor_source(rec: &BloatdSock) -> Option<FloorSource> {
    match rec.floor_source as u32 {
        abi::floor_source::SOCKET => Some(FloorSource::Socket),
        abi::floor_source::PEER => Some(FloorSource::Peer),
        abi::floor_source::PREFIX => Some(FloorSource::Prefix),
        abi::floor_source::INFERRED => Some(FloorSource::Inferred),
        _ => None,
    }
}

/// Text from the kernel (a command name, an interface or algorithm name)
/// up to its NUL.
pub fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    crate::text::printable(&String::from_utf8_lossy(&b[..end]))
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

/// TCP state as `ss` names it.
pub fn state_name(state: u8) -> &'static str {
    match state {
        1 => "ESTAB",
        2 => "SYN-SENT",
        3 => "SYN-RECV",
        4 => "FIN-WAIT-1",
        5 => "FIN-WAIT-2",
        6 => "TIME-WAIT",
        7 => "CLOSE",
        8 => "CLOSE-WAIT",
        9 => "LAST-ACK",
        10 => "LISTEN",
        11 => "CLOSING",
        12 => "NEW-SYN-RECV",
        _ => "UNKNOWN",
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
    rate_bps(rec.rate_delivered as u64 * rec.mss as u64, rec.rate_interval_us as u64)
}

/// The time the socket's unsent bytes take at its delivery rate.
fn unsent_delay_us(rec: &BloatdSock) -> u32 {
    let rate = delivery_rate_bps(rec);
    if rate == 0 {
        return 0;
    }
    (rec.unsent_bytes as u128 * 8 * 1_000_000 / rate as u128).min(u32::MAX as u128) as u32
}

/// A record's numbers as one point of the socket's series.
fn sample_of(rec: &BloatdSock, clock: &Clock, pipe_segments: Option<u32>) -> Sample {
    Sample {
        t_ms: clock.unix_ms_of(rec.sample_ns),
        srtt_us: rec.srtt_us,
        min_rtt_us: rec.min_rtt_us,
        floor_us: rec.floor_us,
        queue_delay_us: rec.queue_delay_us,
        rcv_rtt_us: rcv_view_rtt_us(rec),
        rcv_queue_delay_us: rec.rcv_queue_delay_us,
        cwnd: rec.cwnd,
        inflight: rec.inflight,
        pipe_segments,
        throughput_bps: rec.throughput_bps,
    }
}

impl Model {
    pub fn new(interval_ms: u64, series_seconds: u64) -> Model {
        Model {
            socks: HashMap::new(),
            interval_ns: interval_ms * 1_000_000,
            series_len: (series_seconds * 1000 / interval_ms.max(1)) as usize,
        }
    }

    pub fn len(&self) -> usize {
        self.socks.len()
    }

    fn observe(t: &mut Tracked, rec: &BloatdSock, sample: Option<Sample>) -> Observation {
        let retrans_delta = rec.total_retrans.saturating_sub(t.retrans_counted);
        t.retrans_counted = rec.total_retrans.max(t.retrans_counted);
        Observation { cc: cstr(&rec.cc), role: role_of(rec), sample, retrans_delta }
    }

    fn entry(&mut self, rec: &BloatdSock, count_history: bool) -> &mut Tracked {
        self.socks.entry(rec.cookie).or_insert_with(|| Tracked {
            rec: *rec,
            retrans_counted: if count_history { 0 } else { rec.total_retrans },
            series: VecDeque::new(),
            cc_state: None,
        })
    }

    /// Apply one ring buffer record. Every sample joins the socket's series
    /// and, if the socket carried data in its interval, the histograms, even
    /// when a full read (the iterator) already gave the model a newer state.
    pub fn apply(&mut self, rec: BloatdSock, clock: &Clock) -> Option<Observation> {
        if rec.kind as u32 == abi::kind::CLOSED {
            let mut t = self.socks.remove(&rec.cookie)?;
            return Some(Self::observe(&mut t, &rec, None));
        }
        if rec.kind as u32 != abi::kind::SAMPLE {
            return None;
        }
        let series_len = self.series_len;
        let t = self.entry(&rec, true);
        if rec.update_ns >= t.rec.update_ns {
            t.rec = rec;
        }
        let pipe_segments = match t.cc_state {
            Some(CcState::Westwood { pipe_segments, .. }) => Some(pipe_segments),
            _ => None,
        };
        let sample = sample_of(&rec, clock, pipe_segments);
        if series_len > 0 {
            if t.series.len() >= series_len {
                t.series.pop_front();
            }
            t.series.push_back(sample.clone());
        }
        let active = has_flag(&rec, abi::flag::ACTIVE);
        Some(Self::observe(t, &rec, active.then_some(sample)))
    }

/// Bring the model in line with a full read of the kernel's map: add
    /// sockets we have not seen (idle since start), refresh the rest, and
    /// forget sockets the kernel no longer has (their close record was
    /// lost). `count_history` false on the first read: retransmissions
    /// from before bloatd started are not counted as new.
    pub fn refresh(&mut self, recs: Vec<BloatdSock>, count_history: bool) -> Vec<Observation> {
        let mut seen = std::collections::HashSet::with_capacity(recs.len());
        let mut obs = Vec::new();
        for rec in recs {
            seen.insert(rec.cookie);
            let t = self.entry(&rec, count_history);
            if rec.update_ns >= t.rec.update_ns {
                t.rec = rec;
            }
            let o = Self::observe(t, &rec, None);
            if o.retrans_delta > 0 {
                obs.push(o);
            }
        }
        self.socks.retain(|c, _| seen.contains(c));
        obs
    }

    pub fn set_cc_states(&mut self, mut states: HashMap<u64, CcState>) {
        for (cookie, t) in self.socks.iter_mut() {
            t.cc_state = states.remove(cookie);
        }
    }

    /// Drop history that fell out of the window, and the oldest histories
    /// when all of them together exceed the memory budget.
    pub fn sweep(&mut self, clock: &Clock, series_seconds: u64) {
        let horizon = clock.unix_ms.saturating_sub(series_seconds * 1000);
        let mut total = 0;
        for t in self.socks.values_mut() {
            while t.series.front().is_some_and(|s| s.t_ms < horizon) {
                t.series.pop_front();
            }
            if t.series.is_empty() {
                t.series = VecDeque::new();
            }
            total += t.series.len();
        }
        if total > SERIES_BUDGET {
            let mut by_age: Vec<(u64, u64)> = self
                .socks
                .iter()
                .filter(|(_, t)| !t.series.is_empty())
                .map(|(c, t)| (t.rec.sample_ns, *c))
                .collect();
            by_age.sort_unstable();
            for (_, cookie) in by_age {
                if total <= SERIES_BUDGET {
                    break;
                }
                let t = self.socks.get_mut(&cookie).unwrap();
                total -= t.series.len();
                t.series = VecDeque::new();
            }
        }
    }

    fn socket(&self, t: &Tracked, clock: &Clock) -> Socket {
        let r = &t.rec;
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
            state: state_name(r.state).to_string(),
            pid: (r.pid != 0).then_some(r.pid),
            comm: (!comm.is_empty()).then_some(comm),
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
            rcv_min_rtt_us: r.floor_us,
            rcv_queue_delay_us: r.rcv_queue_delay_us,
            unsent_bytes: r.unsent_bytes,
            unsent_delay_us: unsent_delay_us(r),
            interface: cstr(&r.ifname),
            retrans: r.total_retrans,
            lost: r.lost,
            ca_state: ca_state(r.ca_state),
            bytes_acked: r.bytes_acked,
            bytes_received: r.bytes_received,
            delivery_rate_bps: delivery_rate_bps(r),
            throughput_bps: if stale { 0 } else { r.throughput_bps },
            idle_ms: idle_ns / 1_000_000,
            cc_state: t.cc_state.clone(),
        }
    }

    /// Sockets in ESTABLISHED or with data still to deliver (a sender that
    /// closed its end while megabytes drain through a queue), all states
    /// with `all`; most queued first.
    pub fn sockets(&self, clock: &Clock, all: bool) -> Vec<Socket> {
        let mut out: Vec<Socket> = self
            .socks
            .values()
            .filter(|t| all || t.rec.state == TCP_ESTABLISHED || t.rec.inflight > 0 || t.rec.unsent_bytes > 0)
            .map(|t| self.socket(t, clock))
            .collect();
        out.sort_by(|a, b| {
            b.view_queue_delay_us().cmp(&a.view_queue_delay_us()).then(a.cookie.cmp(&b.cookie))
        });
        out
    }

    /// Samples of one socket newer than `since_ms`.
    pub fn series(&self, cookie: u64, since_ms: u64) -> Option<Series> {
        let t = self.socks.get(&cookie)?;
        Some(Series {
            cookie,
            samples: t.series.iter().filter(|s| s.t_ms > since_ms).cloned().collect(),
        })
    }

    /// Records of sockets that carried traffic within `window_ns`.
    pub fn active(&self, clock: &Clock, window_ns: u64) -> impl Iterator<Item = &BloatdSock> + use<'_> {
        let now_ns = clock.mono_ns;
        self.socks
            .values()
            .map(|t| &t.rec)
            .filter(move |r| now_ns.saturating_sub(r.update_ns) <= window_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample of a cubic sender: 300 ms srtt over a 20 ms floor.
    fn rec(cookie: u64, ns: u64) -> BloatdSock {
        let mut r = BloatdSock {
            cookie,
            update_ns: ns,
            sample_ns: ns,
            family: 2, // AF_INET
            state: TCP_ESTABLISHED,
            kind: abi::kind::SAMPLE as u8,
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

    fn clock(ns: u64) -> Clock {
        Clock { mono_ns: ns, unix_ms: 1_000_000 + ns / 1_000_000 }
    }

    #[test]
    fn kernel_numbers_reach_the_view_and_go_stale_when_idle() {
        let mut m = Model::new(100, 60);
        let mut a = rec(1, 1_000_000_000);
        a.throughput_bps = 10_000_000;
        a.floor_us = 15_000;
        a.floor_source = abi::floor_source::INFERRED as u8;
        m.apply(a, &clock(a.sample_ns));
        let s = &m.sockets(&clock(1_100_000_000), false)[0];
        assert_eq!(s.throughput_bps, 10_000_000);
        assert_eq!((s.queue_delay_us, s.floor_us, s.floor_source), (280_000, 15_000, Some(FloorSource::Inferred)));
        assert_eq!(s.role, Role::Sender);
        // Idle for longer than three intervals: no stale throughput.
        let s = &m.sockets(&clock(2_000_000_000), false)[0];
        assert_eq!(s.throughput_bps, 0);
    }

    #[test]
    fn role_is_the_probes_else_the_lifetime_counts() {
        let mut r = rec(2, 5);
        r.bytes_received = 10;
        assert_eq!(role_of(&r), Role::Sender, "the last interval moved data out");
        r.role = abi::role::UNKNOWN as u8;
        assert_eq!(role_of(&r), Role::Receiver, "nothing moved yet: by lifetime bytes");
    }

    #[test]
    fn receiver_view_uses_the_measured_rtt() {
        let mut r = rec(2, 5);
        r.role = abi::role::RECEIVER as u8;
        r.rcv_rtt_us = 40_000; // the kernel's estimate lags the queue
        r.rcv_ts_rtt_us = 450_000;
        r.rcv_queue_delay_us = 430_000;
        r.flags |= (abi::flag::RCV_TS | abi::flag::TIMESTAMPS) as u8;
        let mut m = Model::new(100, 60);
        let o = m.apply(r, &clock(5)).unwrap();
        let v = o.sample.unwrap();
        assert_eq!(
            (v.view_queue_delay_us(o.role), v.view_rtt_us(o.role), v.view_min_rtt_us(o.role)),
            (430_000, 450_000, 20_000)
        );
        let s = &m.sockets(&clock(5), false)[0];
        assert_eq!((s.rcv_rtt_us, s.rcv_ts_rtt_us, s.timestamps), (40_000, Some(450_000), true));
        assert_eq!(s.view_rtt_us(), 450_000);
    }

    #[test]
    fn without_timestamps_the_kernel_estimate_stands_in() {
        let mut r = rec(2, 5);
        r.role = abi::role::RECEIVER as u8;
        r.rcv_rtt_us = 60_000;
        let mut m = Model::new(100, 60);
        m.apply(r, &clock(5));
        let s = &m.sockets(&clock(5), false)[0];
        assert_eq!((s.timestamps, s.rcv_ts_rtt_us, s.view_rtt_us()), (false, None, 60_000));
    }

    #[test]
    fn samples_count_even_after_a_newer_full_read() {
        let mut m = Model::new(100, 60);
        // A full read (the iterator) carries the newest update_ns.
        let mut fresh = rec(1, 200);
        fresh.cwnd = 50;
        m.refresh(vec![fresh], true);
        // The ring still holds an older sample: it is history, not state.
        let mut old = rec(1, 100);
        old.cwnd = 10;
        let o = m.apply(old, &clock(300)).expect("observed");
        assert!(o.sample.is_some(), "the sample feeds the histograms");
        assert_eq!(m.series(1, 0).unwrap().samples.len(), 1, "and the series");
        assert_eq!(m.sockets(&clock(300), false)[0].cwnd, 50, "state stays the newest");
    }

    #[test]
    fn an_interval_without_traffic_stays_out_of_the_histograms() {
        let mut m = Model::new(100, 60);
        let mut r = rec(1, 100);
        r.flags = 0;
        let o = m.apply(r, &clock(100)).unwrap();
        assert!(o.sample.is_none());
        assert_eq!(m.series(1, 0).unwrap().samples.len(), 1);
    }

    #[test]
    fn close_record_removes_and_counts_final_retransmits() {
        let mut m = Model::new(100, 60);
        let mut a = rec(3, 10);
        a.total_retrans = 2;
        assert_eq!(m.apply(a, &clock(10)).unwrap().retrans_delta, 2);
        let mut c = a;
        c.kind = abi::kind::CLOSED as u8;
        c.total_retrans = 5;
        assert_eq!(m.apply(c, &clock(20)).unwrap().retrans_delta, 3);
        assert_eq!(m.len(), 0);
    }

    #[test]
    fn refresh_adds_idle_forgets_gone_and_skips_history() {
        let mut m = Model::new(100, 60);
        m.apply(rec(1, 10), &clock(10));
        let mut idle = rec(2, 5);
        idle.total_retrans = 7;
        let obs = m.refresh(vec![idle], false);
        assert!(obs.is_empty(), "retransmissions before start are not new");
        assert_eq!(m.len(), 1);
        assert!(m.series(1, 0).is_none());
    }

    #[test]
    fn closing_senders_with_data_are_listed() {
        let mut m = Model::new(100, 60);
        let mut fin = rec(1, 10);
        fin.state = 4; // FIN-WAIT-1, megabytes still in flight
        fin.inflight = 900;
        let mut done = rec(2, 10);
        done.state = 8; // CLOSE-WAIT, nothing left to send
        m.refresh(vec![fin, done], true);
        let listed: Vec<u64> = m.sockets(&clock(10), false).iter().map(|s| s.cookie).collect();
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
    }

    #[test]
    fn v4_mapped_addresses_shown_as_ipv4() {
        let mut raw = [0u8; 16];
        raw[10] = 0xff;
        raw[11] = 0xff;
        raw[12..].copy_from_slice(&[10, 9, 1, 1]);
        assert_eq!(addr(abi::AF_INET6, &raw), "10.9.1.1".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn series_budget_drops_oldest_history() {
        let mut m = Model::new(100, 60);
        m.apply(rec(1, 1_000_000_000), &clock(1_000_000_000));
        m.sweep(&clock(1_000_000_000), 60);
        assert_eq!(m.series(1, 0).unwrap().samples.len(), 1);
        // Past the retention window the history is gone.
        m.sweep(&clock(100_000_000_000), 60);
        assert!(m.series(1, 0).unwrap().samples.is_empty());
    }
}
