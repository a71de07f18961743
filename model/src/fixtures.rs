//! Test fixtures (feature `fixtures`): hosts and sockets built in code,
//! deterministic (fixed times, no randomness but a fixed-seed generator for
//! the large host). For the tests, benches and the demo of the daemon and
//! the dashboard (their dev-dependency turns the feature on).

use crate::{
    Bottleneck, BottleneckClass, CaState, CcState, FloorSource, Health, NetPath, OwnerClass,
    QueueOwner, Role, Sample, Series, ServiceView, Snapshot, Socket,
};
use std::net::{IpAddr, Ipv4Addr};

/// 2025-11-21 00:00:00 UTC: every fixture snapshot is taken then.
pub const T0_MS: u64 = 1_763_683_200_000;
pub const INTERVAL_MS: u32 = 250;
pub const THRESHOLD_US: u32 = 100_000;

pub fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

/// An idle-ish established sender with a 20 ms path and no queue.
pub fn socket(cookie: u64) -> Socket {
    Socket {
        cookie,
        netns: 4026531840,
        local_addr: v4(10, 0, 0, 1),
        local_port: 40_000 + (cookie % 20_000) as u16,
        remote_addr: v4(10, 0, 0, 2),
        remote_port: 443,
        state: "ESTAB".into(),
        pid: Some(1000 + cookie as u32),
        comm: Some("curl".into()),
        service: "session-2.scope".into(),
        cc: "cubic".into(),
        role: Role::Sender,
        cwnd: 10,
        ssthresh: None,
        inflight: 0,
        mss: 1448,
        srtt_us: 20_000,
        min_rtt_us: 20_000,
        floor_us: 20_000,
        floor_source: Some(FloorSource::Socket),
        queue_delay_us: 0,
        rcv_rtt_us: 0,
        rcv_ts_rtt_us: None,
        timestamps: true,
        rcv_queue_delay_us: 0,
        unsent_bytes: 0,
        unsent_delay_us: 0,
        interface: "eth0".into(),
        retrans: 0,
        lost: 0,
        delivered_ce: 0,
        rcv_ooopack: 0,
        ca_state: CaState::Open,
        bytes_acked: 0,
        bytes_received: 0,
        delivery_rate_bps: 0,
        throughput_bps: 0,
        idle_ms: 0,
        cc_state: None,
        policy: None,
    }
}

/// Sets a sender's RTTs: min, and queue on top of it.
pub fn sending(mut s: Socket, min_rtt_us: u32, queue_us: u32) -> Socket {
    s.role = Role::Sender;
    s.min_rtt_us = min_rtt_us;
    s.floor_us = min_rtt_us;
    s.queue_delay_us = queue_us;
    s.srtt_us = min_rtt_us + queue_us;
    s
}

/// Sets a receiver's RTTs (rcv_rtt side).
pub fn receiving(mut s: Socket, min_rtt_us: u32, queue_us: u32) -> Socket {
    s.role = Role::Receiver;
    s.floor_us = min_rtt_us;
    s.rcv_queue_delay_us = queue_us;
    s.rcv_rtt_us = min_rtt_us + queue_us;
    s
}

pub fn host(sockets: Vec<Socket>) -> Snapshot {
    Snapshot {
        summary: None,
        matched: None,
        taken_ms: T0_MS,
        interval_ms: INTERVAL_MS,
        bloat_threshold_us: THRESHOLD_US,
        sockets,
        series: vec![],
        health: Health {
            events_total: 1_234_567,
            dropped_total: 0,
            map_entries: 0,
            map_capacity: 65_536,
            mode: "daemon".into(),
            features: Vec::new(),
        },
        paths: vec![],
        policy: None,
        services: vec![],
        episodes: vec![],
    }
}

/// The paths of `cubic_download_host` as the daemon groups them: the
/// download's peer holds the queue, two flows wait behind it.
pub fn cubic_download_paths() -> Vec<NetPath> {
    let path =
        |peer: IpAddr, iface: &str, floor_us, source, p50, max, sockets, bps, ccs: &[&str]| {
            NetPath {
                netns: 4026531840,
                peer,
                prefix_len: 32,
                interface: iface.into(),
                floor_us,
                floor_source: source,
                queue_delay_p50_us: p50,
                queue_delay_max_us: max,
                sockets,
                measured: sockets,
                throughput_bps: bps,
                ccs: ccs.iter().map(|c| c.to_string()).collect(),
                services: vec!["session-2.scope".into()],
                bottleneck: None,
            }
        };
    vec![
        NetPath {
            bottleneck: Some(Bottleneck {
                class: BottleneckClass::Droptail,
                why: "drop-tail buffer: 420ms of queue, 3 losses at 431ms of queue".into(),
                seconds: 12,
                owner: Some(QueueOwner {
                    class: OwnerClass::Own,
                    why: "the flows bloatd sees have the link (they carried 9.6Mbit/s lately): this path's own flows had 97%, neighbours 0%".into(),
                    neighbours: Vec::new(),
                }),
            }),
            ..path(
                v4(93, 184, 215, 14),
                "wlan0",
                47_000,
                FloorSource::Peer,
                420_000,
                431_000,
                2,
                9_600_000,
                &["cubic"],
            )
        },
        path(
            v4(198, 51, 100, 7),
            "wlan0",
            31_000,
            FloorSource::Inferred,
            2_500,
            2_500,
            1,
            12_000,
            &["cubic"],
        ),
        NetPath {
            bottleneck: Some(Bottleneck {
                class: BottleneckClass::Clear,
                why: "no standing queue: 0.0ms of queue, no loss or ECN mark".into(),
                seconds: 20,
                owner: None,
            }),
            ..path(
                v4(1, 1, 1, 1),
                "wlan0",
                9_000,
                FloorSource::Socket,
                0,
                0,
                1,
                0,
                &["bbr"],
            )
        },
        // A connection with no RTT sample yet: nothing to grade.
        NetPath {
            measured: 0,
            ..path(
                v4(203, 0, 113, 9),
                "wlan0",
                0,
                FloorSource::Socket,
                0,
                0,
                1,
                0,
                &["cubic"],
            )
        },
    ]
}

/// The services of a server behind one bloated uplink: a backup service
/// writing far ahead of the link (its own backlog) and a web service whose
/// users wait in the same network queue.
pub fn two_services() -> Vec<ServiceView> {
    let service =
        |name: &str, socks, p50, p90, max, unsent, backlog, wait, bps, comm: &str| ServiceView {
            service: name.into(),
            sockets: socks,
            active: socks,
            measured: socks,
            queue_delay_p50_us: p50,
            queue_delay_p90_us: p90,
            queue_delay_max_us: max,
            unsent_bytes: unsent,
            unsent_delay_p50_us: backlog,
            unsent_delay_max_us: backlog,
            wait_us: wait,
            throughput_bps: bps,
            ccs: vec!["cubic".into()],
            processes: vec![comm.into()],
        };
    vec![
        service(
            "backup.service",
            1,
            380_000,
            380_000,
            380_000,
            3_900_000,
            3_100_000,
            3_520_000,
            9_500_000,
            "rsync",
        ),
        service(
            "nginx.service",
            12,
            375_000,
            392_000,
            401_000,
            0,
            0,
            421_000,
            400_000,
            "nginx",
        ),
    ]
}

pub fn empty_host() -> Snapshot {
    host(vec![])
}

/// A laptop during a big download: curl receives over a bloated cellular
/// link (420 ms of queue on a 47 ms path) with CUBIC at the far end, while
/// the other connections suffer along.
pub fn cubic_download_host() -> Snapshot {
    let mut curl = receiving(socket(101), 47_000, 420_000);
    curl.remote_addr = v4(93, 184, 215, 14);
    curl.remote_port = 443;
    curl.local_addr = v4(192, 168, 1, 23);
    curl.local_port = 51_234;
    curl.cwnd = 10;
    curl.bytes_received = 412_000_000;
    curl.throughput_bps = 9_840_000;
    curl.delivery_rate_bps = 0;
    curl.retrans = 0;

    let mut upload = sending(socket(102), 52_000, 310_000);
    upload.comm = Some("rsync".into());
    upload.pid = Some(2211);
    upload.cc = "bloatd_cubic".into();
    upload.remote_addr = v4(10, 0, 0, 2);
    upload.remote_port = 22;
    upload.cwnd = 618;
    upload.ssthresh = Some(402);
    upload.inflight = 597;
    upload.throughput_bps = 11_200_000;
    upload.delivery_rate_bps = 11_600_000;
    upload.retrans = 37;
    upload.lost = 12;
    upload.ca_state = CaState::Open;
    upload.bytes_acked = 88_000_000;
    upload.cc_state = Some(CcState::Cubic {
        w_max_segments: 702,
        k_ms: 4_119,
        epoch_age_ms: Some(2_870),
        min_rtt_us: 51_800,
        hystart_round: 9,
        hystart_found: true,
    });

    let mut ssh = sending(socket(103), 31_000, 64_000);
    ssh.comm = Some("ssh".into());
    ssh.cc = "bbr".into();
    ssh.remote_addr = v4(198, 51, 100, 7);
    ssh.remote_port = 22;
    ssh.cwnd = 14;
    ssh.inflight = 1;
    ssh.throughput_bps = 12_000;

    let mut dns = receiving(socket(104), 18_000, 2_400);
    dns.comm = Some("firefox-esr".into());
    dns.cc = "cubic".into();
    dns.remote_addr = "2a00:1450:4001:82b::200e".parse().expect("an IPv6 literal");
    dns.remote_port = 443;
    dns.local_addr = "2001:db8::23".parse().expect("an IPv6 literal");
    dns.throughput_bps = 212_000;
    dns.ca_state = CaState::Disorder;
    dns.retrans = 2;

    let mut server = sending(socket(105), 0, 0);
    server.comm = None;
    server.pid = None;
    server.state = "LISTEN".into();
    server.local_port = 9477;
    server.remote_addr = v4(0, 0, 0, 0);
    server.remote_port = 0;
    server.srtt_us = 0;

    let mut snap = host(vec![dns, ssh, server, upload, curl]);
    snap.health.map_entries = 5;
    snap
}

/// The last minute of the curl download: the receiver queue climbs from a
/// few ms to 420 ms as CUBIC fills the cellular buffer; throughput is flat.
pub fn cubic_download_series() -> Series {
    Series {
        cookie: 101,
        samples: (0..=240u64)
            .map(|i| {
                let queue_us = (i as u32) * 420_000 / 240;
                Sample {
                    t_ms: T0_MS - 60_000 + i * 250,
                    srtt_us: 30_000,
                    min_rtt_us: 29_000,
                    floor_us: 47_000,
                    queue_delay_us: 1_000,
                    rcv_rtt_us: 47_000 + queue_us,
                    rcv_queue_delay_us: queue_us,
                    cwnd: 10,
                    inflight: 0,
                    pipe_segments: None,
                    throughput_bps: 9_400_000 + (i % 8) * 100_000,
                    drwa_clamp_bytes: None,
                    drwa_rcvd_rtt_bytes: None,
                }
            })
            .collect(),
    }
}

/// A bloatd_westwood bulk sender on a fat pipe: BWE 9.3 Mbit/s x RTTmin
/// 50 ms = 40 segments of pipe, while cwnd has grown to 412.
pub fn westwood_socket() -> Socket {
    let mut s = sending(socket(201), 50_000, 465_000);
    s.comm = Some("iperf3".into());
    s.pid = Some(3141);
    s.cc = "bloatd_westwood".into();
    s.local_addr = v4(10, 77, 1, 1);
    s.local_port = 46_202;
    s.remote_addr = v4(10, 77, 2, 2);
    s.remote_port = 5201;
    s.cwnd = 412;
    s.ssthresh = Some(40);
    s.inflight = 405;
    s.throughput_bps = 9_310_000;
    s.delivery_rate_bps = 9_280_000;
    s.retrans = 118;
    s.lost = 96;
    s.bytes_acked = 61_200_000;
    s.ca_state = CaState::Open;
    s.cc_state = Some(CcState::Westwood {
        bwe_bytes_per_s: 1_163_750,
        min_rtt_us: 50_000,
        pipe_segments: 40,
    });
    s
}

/// One minute of Westwood+ on a fat pipe: after each loss cwnd drops to the
/// pipe (BWE x RTTmin) and the queue drains; then it grows again linearly
/// and the RTT with it.
pub fn westwood_series() -> Series {
    Series {
        cookie: 201,
        samples: (0..=240u64)
            .map(|i| {
                // A 20 s cycle: cwnd from 40 to 412.
                let phase = (i % 80) as u32;
                let cwnd = 40 + phase * 372 / 79;
                // The queue holds the window beyond the pipe: (cwnd - pipe)
                // segments at the bottleneck rate, pipe / RTTmin.
                let queue_us = (cwnd - 40) * 50_000 / 40;
                Sample {
                    t_ms: T0_MS - 60_000 + i * 250,
                    srtt_us: 50_000 + queue_us,
                    min_rtt_us: 50_000,
                    floor_us: 50_000,
                    queue_delay_us: queue_us,
                    rcv_rtt_us: 0,
                    rcv_queue_delay_us: 0,
                    cwnd,
                    inflight: cwnd - 3,
                    pipe_segments: Some(40),
                    throughput_bps: 9_310_000,
                    drwa_clamp_bytes: None,
                    drwa_rcvd_rtt_bytes: None,
                }
            })
            .collect(),
    }
}

pub fn westwood_host() -> Snapshot {
    let mut quiet = sending(socket(202), 50_000, 3_100);
    quiet.comm = Some("iperf3".into());
    quiet.cc = "bloatd_westwood".into();
    quiet.remote_addr = v4(10, 77, 2, 2);
    quiet.remote_port = 5202;
    quiet.cc_state = Some(CcState::Westwood {
        bwe_bytes_per_s: 600_000,
        min_rtt_us: 50_000,
        pipe_segments: 21,
    });
    quiet.cwnd = 22;
    let mut snap = host(vec![westwood_socket(), quiet]);
    snap.health.mode = "embedded".into();
    snap.health.dropped_total = 17;
    snap
}

/// A host with `n` sockets of mixed kinds; a fixed-seed generator makes it
/// the same every run.
pub fn many_sockets(n: usize, seed: u64) -> Snapshot {
    let ccs = ["cubic", "bbr", "bloatd_westwood", "bloatd_cubic", "reno"];
    let comms = [
        "curl",
        "firefox-esr",
        "nginx",
        "sshd",
        "iperf3",
        "postgres",
        "apt",
    ];
    let mut state = seed | 1;
    let mut next = move || {
        // xorshift64*
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let sockets = (0..n as u64)
        .map(|i| {
            let r = next();
            let min_us = 1_000 + (r % 80_000) as u32;
            // Most queues small, a tail of bloated ones.
            let queue_us = match (r >> 20) % 100 {
                0..=79 => ((r >> 28) % 20_000) as u32,
                80..=94 => ((r >> 28) % 150_000) as u32,
                _ => ((r >> 28) % 900_000) as u32,
            };
            let mut s = socket(10_000 + i);
            s = if (r >> 40) % 3 == 0 {
                receiving(s, min_us, queue_us)
            } else {
                sending(s, min_us, queue_us)
            };
            s.cc = ccs[((r >> 8) % ccs.len() as u64) as usize].into();
            s.comm = Some(comms[((r >> 12) % comms.len() as u64) as usize].into());
            s.remote_addr = v4(10, (i >> 16) as u8, (i >> 8) as u8, i as u8);
            s.remote_port = 1024 + (r >> 44) as u16 % 60_000;
            s.cwnd = 4 + (r % 700) as u32;
            s.inflight = s.cwnd / 2;
            s.throughput_bps = (r >> 16) % 200_000_000;
            s.retrans = ((r >> 50) % 50) as u32;
            s
        })
        .collect();
    host(sockets)
}

/// The flight recorder's episode on the laptop's cellular link: the path
/// to 93.184.215.0/24 held 420 ms of queue for 38 s, from 23:10:05 the
/// evening before the snapshots (T0_MS is midnight).
pub fn cubic_download_episode() -> crate::journal::EpisodeDetail {
    use crate::journal::*;
    let start = T0_MS - 50 * 60_000 + 5_000;
    let series: Vec<PathPoint> = (0..=40u64)
        .map(|i| {
            let queue_us = if i < 38 {
                (i as u32 * 40_000).min(420_000)
            } else {
                30_000
            };
            PathPoint {
                t_ms: start + i * 1000,
                queue_us,
                queue_max_us: queue_us + 15_000,
                rtt_us: 47_000 + queue_us,
                floor_us: 47_000,
                rate_bps: 9_000_000 + (i % 5) * 400_000,
                sockets: 2,
            }
        })
        .collect();
    let flow = |cookie, comm: &str, bytes| EpisodeFlow {
        cookie,
        pid: Some(4000 + cookie as u32),
        process: Some(comm.into()),
        service: "session-2.scope".into(),
        cc: "cubic".into(),
        role: Role::Receiver,
        local: "192.168.1.23:51234".parse().expect("an address literal"),
        remote: "93.184.215.14:443".parse().expect("an address literal"),
        netns: 4026531840,
        bytes,
        retrans: 3,
        unsent_bytes_max: 0,
        unsent_delay_max_us: 0,
        queue_p50_us: 400_000,
        policy: String::new(),
        rules: vec![],
    };
    let flows = vec![
        flow(101, "curl", 44_000_000),
        flow(106, "firefox-esr", 320_000),
    ];
    let flow_series = flows
        .iter()
        .enumerate()
        .map(|(k, f)| FlowSeries {
            cookie: f.cookie,
            points: series
                .iter()
                .map(|p| FlowPoint {
                    t_ms: p.t_ms,
                    cwnd: 100 + (p.queue_us / 2000) / (k as u32 + 1),
                    rtt_us: p.rtt_us,
                    rate_bps: p.rate_bps / (k as u64 + 1),
                })
                .collect(),
        })
        .collect();
    EpisodeDetail {
        episode: Episode {
            id: 12,
            kind: EpisodeKind::Path,
            path: Some(EpisodePath {
                netns: 4026531840,
                peer: v4(93, 184, 215, 0),
                prefix_len: 24,
                interface: "wlan0".into(),
                gateway: Some(v4(192, 168, 1, 1)),
            }),
            service: None,
            start_ms: start,
            end_ms: start + 38_000,
            open: false,
            cut: None,
            threshold_us: THRESHOLD_US,
            floor_us: 47_000,
            floor_source: Some(FloorSource::Peer),
            queue_peak_us: 435_000,
            queue_p50_us: 400_000,
            queue_p90_us: 420_000,
            throughput_bps: 9_400_000,
            bytes: 44_650_000,
            sockets_max: 2,
            flows: 2,
            services: vec!["session-2.scope".into()],
            processes: vec!["curl".into(), "firefox-esr".into()],
            ccs: vec!["cubic".into()],
            actions: Default::default(),
            bottleneck: Some(BottleneckClass::Droptail),
            owner: Some(OwnerClass::Own),
        },
        flows,
        series,
        flow_series,
    }
}

/// The last hours of the recorder: the worst path's queue each minute
/// (quiet, then the download's episode at 23:10) and two episodes, the
/// newest (a service's, still open) first.
pub fn recorder_history() -> (Vec<crate::journal::MinuteRow>, Vec<crate::journal::Episode>) {
    use crate::journal::*;
    let minutes = (0..360u64)
        .map(|i| {
            let t_ms = T0_MS - (360 - i) * 60_000;
            let bloated = (t_ms..t_ms + 60_000).contains(&(T0_MS - 50 * 60_000 + 5_000));
            MinuteRow {
                t_ms,
                netns: 4026531840,
                peer: v4(93, 184, 215, 0),
                prefix_len: 24,
                interface: "wlan0".into(),
                queue_p50_us: if bloated {
                    400_000
                } else {
                    2_000 + (i % 7) as u32 * 1_500
                },
                queue_p90_us: if bloated { 420_000 } else { 9_000 },
                queue_max_us: if bloated { 435_000 } else { 14_000 },
                rate_bps: 2_000_000,
                sockets: 4,
                paths: Some(3),
            }
        })
        .collect();
    let download = cubic_download_episode().episode;
    let mut backup = download.clone();
    backup.id = 13;
    backup.kind = EpisodeKind::Service;
    backup.path = None;
    backup.service = Some("backup.service".into());
    backup.start_ms = T0_MS - 95_000;
    backup.end_ms = T0_MS;
    backup.open = true;
    backup.queue_peak_us = 310_000;
    backup.queue_p50_us = 280_000;
    backup.flows = 1;
    backup.processes = vec!["rsync".into()];
    (minutes, vec![backup, download])
}
