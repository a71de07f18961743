//! The dashboard on synthetic data, without a daemon or root: a CUBIC
//! download whose receiver queue ramps up to 420 ms and a Westwood+ sender
//! whose cwnd climbs far above its pipe and falls back to it after each loss.
//!
//!     cargo run -p bloatd-tui --example demo [-- --fail-after N] [--panic-after N]
//!
//! `--fail-after N`: from the Nth refresh on, the source fails for 8
//! refreshes (as when the daemon restarts), then recovers.
//! `--panic-after N`: the source panics at the Nth refresh (to check that the
//! terminal is restored).
//! `--sockets N`: N more sockets of mixed kinds, their queues drifting (to
//! watch a busy host, and to measure the dashboard's CPU use).
// A test, a bench or an example stops at what it cannot do: unwraps are its way.
#![allow(clippy::unwrap_used)]

use bloatd_model::fixtures as common;

use bloatd_model::{CcState, Sample, Series, Snapshot, SnapshotRequest, Socket};
use bloatd_tui::{Options, Source};
use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

struct Demo {
    start_ms: u64,
    calls: u32,
    fail_after: Option<u32>,
    panic_after: Option<u32>,
    samples: HashMap<u64, Vec<Sample>>,
    /// The `--sockets` crowd.
    crowd: Vec<Socket>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Demo {
    /// The host at `t_ms` after start.
    fn sockets(&self, t_ms: u64) -> Vec<Socket> {
        let mut sockets = common::cubic_download_host().sockets;
        // The download's receiver queue ramps to 420 ms over 30 s, then the
        // transfer restarts.
        let queue_us = (t_ms % 30_000) as u32 * 14;
        for s in sockets.iter_mut().filter(|s| s.cookie == 101) {
            *s = common::receiving(s.clone(), 47_000, queue_us);
        }
        // Westwood+: cwnd from the pipe (40) to 412 over 20 s, then back.
        let mut ww = common::westwood_socket();
        let phase = (t_ms % 20_000) as u32;
        ww.cwnd = 40 + phase * 372 / 20_000;
        ww.inflight = ww.cwnd - 3;
        let queue_us = (ww.cwnd - 40) * 50_000 / 40;
        ww = common::sending(ww, 50_000, queue_us);
        sockets.push(ww);
        let step = (t_ms / 250) as u32;
        sockets.extend(self.crowd.iter().enumerate().map(|(i, s)| {
            let drift_us = (i as u32).wrapping_mul(7).wrapping_add(step * 13) % 97 * 1_000;
            let mut s = s.clone();
            s.queue_delay_us = (s.queue_delay_us + drift_us) % 900_000;
            s.srtt_us = s.min_rtt_us + s.queue_delay_us;
            s.rcv_queue_delay_us = (s.rcv_queue_delay_us + drift_us) % 900_000;
            s.rcv_rtt_us = s.floor_us + s.rcv_queue_delay_us;
            s
        }));
        sockets
    }

    fn record(&mut self, t_ms: u64, sockets: &[Socket]) {
        // Like the daemon, keep series only for the few sockets of interest
        // here: the synthetic ones and the first of the crowd.
        for s in sockets.iter().take(7) {
            let pipe_segments = match s.cc_state {
                Some(CcState::Westwood { pipe_segments, .. }) => Some(pipe_segments),
                _ => None,
            };
            let history = self.samples.entry(s.cookie).or_default();
            history.push(Sample {
                t_ms,
                srtt_us: s.srtt_us,
                min_rtt_us: s.min_rtt_us,
                floor_us: s.floor_us,
                queue_delay_us: s.queue_delay_us,
                rcv_rtt_us: s.rcv_rtt_us,
                rcv_queue_delay_us: s.rcv_queue_delay_us,
                cwnd: s.cwnd,
                inflight: s.inflight,
                pipe_segments,
                throughput_bps: s.throughput_bps,
                drwa_clamp_bytes: None,
                drwa_rcvd_rtt_bytes: None,
            });
            history.retain(|x| x.t_ms + 60_000 >= t_ms);
        }
    }
}

impl Source for Demo {
    fn snapshot(&mut self, req: &SnapshotRequest) -> bloatd_tui::Result<Snapshot> {
        let (series_for, since_ms) = (req.series, req.since_ms);
        self.calls += 1;
        if self.panic_after == Some(self.calls) {
            panic!("demo source panics at refresh {} as asked", self.calls);
        }
        if let Some(n) = self.fail_after {
            if (n..n + 8).contains(&self.calls) {
                return Err(bloatd_tui::Error::Source(
                    "bloatd daemon not reachable at /run/bloatd/bloatd.sock: retrying…".into(),
                ));
            }
        }
        let now = now_ms();
        let sockets = self.sockets(now - self.start_ms);
        self.record(now, &sockets);
        let mut snap = common::host(sockets);
        snap.taken_ms = now;
        snap.series = series_for
            .and_then(|c| self.samples.get(&c).map(|h| (c, h)))
            .map(|(cookie, h)| Series {
                cookie,
                samples: h.iter().filter(|x| x.t_ms > since_ms).cloned().collect(),
            })
            .into_iter()
            .collect();
        Ok(snap)
    }
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let number_after = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
    };
    let mut demo = Demo {
        start_ms: now_ms(),
        calls: 0,
        fail_after: number_after("--fail-after"),
        panic_after: number_after("--panic-after"),
        samples: HashMap::new(),
        crowd: number_after("--sockets")
            .map(|n: u32| common::many_sockets(n as usize, 42).sockets)
            .unwrap_or_default(),
    };
    bloatd_tui::run(&mut demo, &Options::default())
}
