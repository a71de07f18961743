//! The flight recorder's benchmarks (not tests: `#[ignore]`, run by hand;
//! docs/measurements.md has their numbers):
//!
//!     cargo test --release -p bloatd recorder::bench -- --ignored --nocapture --test-threads 1
//!
//! - `disk_rate_1000_paths`: a synthetic feed of 1,000 active paths (two
//!   sockets each, one read a second) through the detector into a journal
//!   on disk, simulated time: the bytes the recorder's thread writes
//!   (/proc/thread-self/io: wchar, what it hands the kernel; write_bytes,
//!   what reaches the block device) per simulated second, quiet and with a
//!   tenth of the paths bloated.
//! - `fill_journal_64mb`: a journal filled to its 64 MB bound with 30 days
//!   of episodes and the minute rows of 1,000 paths, ending now, left in
//!   $BLOATD_BENCH_DIR (default /var/tmp/bloatd-bench-journal) for
//!   `bloatd --state-dir DIR incidents --since 24h`; prints the query's time
//!   through the library too.

use super::episodes::{Detector, EpisodeRecord, Point, Settings, Write};
use super::journal::{self, Bounds, Journal};
use bloatd_model::journal::{
    Episode, EpisodeFlow, EpisodeKind, EpisodePath, IncidentsQuery, MinuteRow,
};
use bloatd_model::{Role, Socket};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Instant;

fn io_of_thread() -> (u64, u64) {
    let t = std::fs::read_to_string("/proc/thread-self/io").unwrap_or_default();
    let get = |k: &str| {
        t.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    (get("wchar:"), get("write_bytes:"))
}

fn bench_dir(name: &str) -> PathBuf {
    let base = std::env::var_os("BLOATD_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp"));
    let d = base.join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

/// Path `i`'s two sockets (a sender and its receiver's mirror on another
/// host: two senders toward one peer) with `queue_ms` of queue, having
/// delivered `bytes` each.
fn path_sockets(i: u32, queue_ms: u32, bytes: u64) -> [Socket; 2] {
    let peer = IpAddr::from([10, (i >> 8) as u8, i as u8, 2]);
    [0u64, 1].map(|k| {
        let mut s = bloatd_model::fixtures::sending(
            bloatd_model::fixtures::socket(2 * i as u64 + k + 1),
            20_000,
            queue_ms * 1000,
        );
        s.remote_addr = peer;
        s.local_port = 10_000 + k as u16;
        s.service = format!("svc{}.service", i % 50);
        s.interface = "eth0".into();
        s.bytes_acked = bytes;
        s.idle_ms = 0;
        s
    })
}

/// `minutes` simulated minutes of 1,000 paths read once a second, the
/// first `bloated` of them at 300 ms of queue: bytes written per second.
fn feed(minutes: u64, bloated: u32) -> (f64, f64, u64) {
    let dir = bench_dir(&format!("bloatd-bench-rate-{bloated}"));
    let t0 = 1_800_000_000_000u64;
    let bounds = Bounds {
        max_bytes: 64 << 20,
        max_age_ms: 30 * 86_400_000,
    };
    let (mut j, _) = Journal::open(&dir, bounds, t0).unwrap();
    let mut d = Detector::new(
        Settings {
            threshold_us: 100_000,
            prefix: Some((24, 64)),
        },
        1,
    );
    // A minute to settle (the first episodes open, the first rows).
    let mut measured_from = None;
    for s in 0..(minutes + 1) * 60 {
        if s == 60 {
            measured_from = Some(io_of_thread());
        }
        let t = t0 + s * 1000;
        let socks: Vec<Socket> = (0..1000u32)
            .flat_map(|i| path_sockets(i, if i < bloated { 300 } else { 5 }, s * 25_000))
            .collect();
        let w = d.observe(t, &socks, None, &|_, _| None);
        if !w.is_empty() {
            j.write(&w, t).unwrap();
        }
    }
    let (w0, b0) = measured_from.unwrap();
    let (w1, b1) = io_of_thread();
    let secs = (minutes * 60) as f64;
    let bytes = j.bytes();
    drop(j);
    let _ = std::fs::remove_dir_all(&dir);
    ((w1 - w0) as f64 / secs, (b1 - b0) as f64 / secs, bytes)
}

#[test]
#[ignore]
fn disk_rate_1000_paths() {
    for bloated in [0u32, 100] {
        let t = Instant::now();
        let (wchar, block, size) = feed(10, bloated);
        println!(
            "1,000 active paths, {bloated} bloated, 10 simulated minutes: {:.1} kB/s handed to the kernel, {:.1} kB/s to the block device; journal {:.1} MB; {:.1} s",
            wchar / 1000.0,
            block / 1000.0,
            size as f64 / 1e6,
            t.elapsed().as_secs_f64()
        );
    }
}

/// A synthetic episode of 60 s with 8 flows, its points, at `start`.
fn synthetic_episode(id: u64, start: u64, path: u32) -> Vec<Write> {
    let peer = IpAddr::from([10, (path >> 8) as u8, path as u8, 0]);
    let flows: Vec<(u32, EpisodeFlow)> = (1..=8u32)
        .map(|k| {
            (
                k,
                EpisodeFlow {
                    cookie: id * 100 + k as u64,
                    pid: Some(1000 + k),
                    process: Some("nginx".into()),
                    service: "nginx.service".into(),
                    cc: "cubic".into(),
                    role: Role::Sender,
                    local: "10.0.0.1:443".parse().unwrap(),
                    remote: std::net::SocketAddr::new(peer, 40_000 + k as u16),
                    netns: 4026531840,
                    bytes: 1_000_000 * k as u64,
                    retrans: k,
                    unsent_bytes_max: 100_000,
                    unsent_delay_max_us: 40_000,
                    queue_p50_us: 300_000,
                    policy: String::new(),
                    rules: vec![],
                },
            )
        })
        .collect();
    let episode = Episode {
        id,
        kind: EpisodeKind::Path,
        path: Some(EpisodePath {
            netns: 4026531840,
            peer,
            prefix_len: 24,
            interface: "eth0".into(),
            gateway: Some("10.0.0.254".parse().unwrap()),
        }),
        service: None,
        start_ms: start,
        end_ms: start + 60_000,
        open: false,
        cut: None,
        threshold_us: 100_000,
        floor_us: 20_000,
        floor_source: None,
        queue_peak_us: 450_000,
        queue_p50_us: 300_000,
        queue_p90_us: 400_000,
        throughput_bps: 9_000_000,
        bytes: 36_000_000,
        sockets_max: 8,
        flows: 8,
        services: vec!["nginx.service".into()],
        processes: vec!["nginx".into()],
        ccs: vec!["cubic".into()],
        actions: Default::default(),
        bottleneck: None,
        owner: None,
    };
    let mut out = vec![Write::Episode(Box::new(EpisodeRecord { episode, flows }))];
    for flow in 0..=8u32 {
        out.push(Write::Points {
            episode: id,
            flow,
            points: (0..60u64)
                .map(|s| Point {
                    t_ms: start + s * 1000,
                    v: [300_000, 450_000, 20_000, 9_000_000, 8],
                })
                .collect(),
        });
    }
    out
}

#[test]
#[ignore]
fn fill_journal_64mb() {
    let dir = std::env::var_os("BLOATD_BENCH_DIR")
        .map(|d| PathBuf::from(d).join("bloatd-bench-journal"))
        .unwrap_or_else(|| PathBuf::from("/var/tmp/bloatd-bench-journal"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let now = crate::clock::Clock::now().unix_ms / 60_000 * 60_000;
    let start = now - 30 * 86_400_000;
    let bounds = Bounds {
        max_bytes: 64 << 20,
        max_age_ms: 30 * 86_400_000,
    };
    let t = Instant::now();
    let (mut j, _) = Journal::open(&dir, bounds, start).unwrap();
    // 30 days of episodes, one every 20 minutes; the minute rows of 1,000
    // paths (10 minutes of rows in one write, as 10 reads would) for the
    // last 3 days: the bound keeps about a day of them, so older rows
    // would only be trimmed again.
    let mut id = 1;
    let mut m = start;
    let rows_from = now - 3 * 86_400_000;
    let mut step = 0u64;
    while m < now {
        let minutes = if m >= rows_from { 10 } else { 0 };
        let mut w: Vec<Write> = (0..minutes)
            .map(|k| {
                let t_ms = m + k * 60_000;
                Write::Minutes(
                    (0..1000u32)
                        .map(|i| MinuteRow {
                            t_ms,
                            netns: 4026531840,
                            peer: IpAddr::from([10, (i >> 8) as u8, i as u8, 0]),
                            prefix_len: 24,
                            interface: "eth0".into(),
                            queue_p50_us: 2_000 + i,
                            queue_p90_us: 9_000 + i,
                            queue_max_us: 20_000 + i,
                            rate_bps: 1_000_000 + i as u64,
                            sockets: 2,
                            paths: None,
                        })
                        .collect(),
                )
            })
            .collect();
        if step.is_multiple_of(2) {
            w.extend(synthetic_episode(id, m, (id % 1000) as u32));
            id += 1;
        }
        step += 1;
        j.write(&w, m + 600_000).unwrap();
        m += 600_000;
    }
    println!(
        "filled {} in {:.0} s: {:.1} MB on disk (bound 64 MiB = {:.1} MB)",
        dir.display(),
        t.elapsed().as_secs_f64(),
        j.bytes() as f64 / 1e6,
        (64u64 << 20) as f64 / 1e6
    );
    assert!(j.bytes() <= 64 << 20);
    drop(j);
    let r = journal::open_reader(&dir).unwrap().unwrap();
    let q = IncidentsQuery::default();
    let mut times = Vec::new();
    let mut n = 0;
    for _ in 0..5 {
        let t = Instant::now();
        n = journal::incidents(&r, &q, now - 86_400_000).unwrap().len();
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "incidents --since 24h: {n} episodes in {:.1} ms (median of 5, the library's query)",
        times[2]
    );
}
