//! `bloatd incident ID --export DIR`: an episode as a bundle the lab can
//! replay (`scripts/lab/lab.py --replay DIR`).
//!
//! - `trace.down`: the bottleneck's delivery opportunities in Mahimahi's
//!   format (one line per 1500-byte opportunity, in ms; the trace repeats
//!   at its last line), one second at a time from the episode's delivery
//!   rates (each read's rate spread over its interval, so reads off the
//!   second's grid count by their share). Where the path held a standing
//!   queue (median queue at least SATURATED_QUEUE_US) through the second
//!   and STANDING_AFTER_MS after it, and lost no socket, the link was
//!   saturated and what it delivered is its capacity ("measured");
//!   elsewhere the capacity is not known, only
//!   that it was at least what was delivered: it is interpolated between
//!   the measured seconds around it ("interpolated"), or held from the
//!   nearest one at the ends ("held"), never below the delivery.
//! - `capacity.csv`: each second's delivery, capacity and which of the
//!   three it is.
//! - `replay.json`: the base RTT (the path's floor), the buffer (the most
//!   bytes the queue held in a second: its median queue times the lower
//!   of that second's and the previous second's capacity), the flow mix
//!   (bulk flows and short ones, by bytes, each with the time of its first
//!   read), and what was recorded, for comparison.
//! - `episode.json`: the episode as `bloatd incident ID --json` gives it.

use bloatd_model::journal::{EpisodeDetail, PathPoint};
use serde::Serialize;
use std::path::Path;

/// A median queue from which the bottleneck counts as saturated (a
/// standing queue: more than a few packets at cellular rates).
pub const SATURATED_QUEUE_US: u32 = 20_000;
/// A second counts as saturated only if the queue still stands this long
/// after it: a socket's queue is its smoothed RTT less the floor, and it
/// lags the bottleneck's. When a bulk flow ends, a web fetch in slow start
/// behind its backlog still reads hundreds of ms of queue for a second or
/// two while the link idles (exported 4.0 Mbit/s on a 13.9 Mbit/s link;
/// an episode's end reads up to 2.4 s after ping's).
const STANDING_AFTER_MS: u64 = 2000;
/// What one trace opportunity carries (Mahimahi's MTU)...
pub const OPPORTUNITY_BYTES: u64 = 1500;
/// ...of which a full-size TCP segment's payload, what the delivery rates
/// count: 1500 less 20 B of IP, 20 of TCP and 12 of the timestamp option
/// (Linux's default). Counting an opportunity as 1500 payload bytes made
/// the exported link 3.5% slower than the one recorded.
pub const SEGMENT_PAYLOAD_BYTES: u64 = 1448;
/// A flow with at least this many bytes, or a fifth of the episode's, is
/// a bulk flow of the mix; the rest are short flows.
const BULK_BYTES: u64 = 1_000_000;

/// One second of the episode's bottleneck.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Second {
    pub t_s: u32,
    pub delivered_bps: u64,
    pub capacity_bps: u64,
    /// "measured", "interpolated" or "held".
    pub source: &'static str,
    pub queue_us: u32,
}

/// One second of the episode's series on a one-second grid from its
/// first point.
struct GridSecond {
    /// What the path delivered in the second: each point's rate spread
    /// evenly over its interval (since the point before), weighted by how
    /// much of the interval falls in the second. Reads are about a second
    /// apart but not on the grid (an API client's read comes between), so
    /// taking one interval's rate for the second would count a 0.4 s or a
    /// 1.6 s interval as the second.
    rate_bps: u64,
    /// The queue at the point whose interval covers the second's middle.
    queue_us: u32,
    /// Every interval in the second ended with a standing queue, the queue
    /// still stood STANDING_AFTER_MS later,
    /// delivered something, and lost no socket: the link was saturated
    /// throughout, and all it delivered was counted (a socket gone between
    /// two reads took its last bytes with it: a bulk flow's last second
    /// read 6.4 Mbit/s on a 14.4 Mbit/s link).
    saturated: bool,
}

fn per_second(series: &[PathPoint]) -> Vec<GridSecond> {
    let (Some(first), Some(last)) = (series.first(), series.last()) else {
        return Vec::new();
    };
    let n = (last.t_ms.saturating_sub(first.t_ms) / 1000) as usize;
    let mut out = Vec::with_capacity(n);
    // The first interval that may reach into the current second.
    let mut i = 1;
    for k in 0..n {
        let (a, b) = (
            first.t_ms + k as u64 * 1000,
            first.t_ms + (k as u64 + 1) * 1000,
        );
        while i + 1 < series.len() && series[i].t_ms <= a {
            i += 1;
        }
        let (mut sum, mut covered, mut saturated, mut queue_us) = (0u128, 0u64, true, 0);
        let mid = a + 500;
        for j in i..series.len() {
            let (lo, hi) = (series[j - 1].t_ms, series[j].t_ms);
            if lo >= b {
                break;
            }
            let overlap = hi.min(b).saturating_sub(lo.max(a));
            if overlap == 0 {
                continue;
            }
            let p = &series[j];
            sum += p.rate_bps as u128 * overlap as u128;
            covered += overlap;
            saturated &= p.queue_us >= SATURATED_QUEUE_US
                && p.rate_bps > 0
                && p.sockets >= series[j - 1].sockets;
            if lo < mid && mid <= hi {
                queue_us = p.queue_us;
            }
        }
        // The queue still standing STANDING_AFTER_MS later.
        let until = b + STANDING_AFTER_MS;
        let stood = last.t_ms >= until
            && series[i..]
                .iter()
                .skip_while(|p| p.t_ms <= b)
                .take_while(|p| p.t_ms <= until)
                .all(|p| p.queue_us >= SATURATED_QUEUE_US);
        out.push(GridSecond {
            rate_bps: sum.checked_div(covered as u128).unwrap_or(0) as u64,
            queue_us,
            saturated: saturated && stood && covered > 0,
        });
    }
    out
}

/// The bottleneck's capacity each second (see the module's comment).
pub fn capacity(series: &[PathPoint]) -> Vec<Second> {
    let grid = per_second(series);
    let measured: Vec<Option<u64>> = grid
        .iter()
        .map(|g| g.saturated.then_some(g.rate_bps))
        .collect();
    // The measured seconds: (second, capacity).
    let known: Vec<(usize, u64)> = measured
        .iter()
        .enumerate()
        .filter_map(|(i, c)| c.map(|c| (i, c)))
        .collect();
    grid.iter()
        .enumerate()
        .map(|(i, g)| {
            let (delivered, queue_us) = (g.rate_bps, g.queue_us);
            let (capacity, source) = match measured[i] {
                Some(c) => (c, "measured"),
                None => {
                    let before = known.iter().rev().find(|&&(k, _)| k < i);
                    let after = known.iter().find(|&&(k, _)| k > i);
                    match (before, after) {
                        (Some(&(a, ca)), Some(&(b, cb))) => {
                            let (ca, cb) = (ca as f64, cb as f64);
                            let f = (i - a) as f64 / (b - a) as f64;
                            ((ca + (cb - ca) * f) as u64, "interpolated")
                        }
                        (Some(&(_, c)), None) | (None, Some(&(_, c))) => (c, "held"),
                        (None, None) => (delivered, "held"),
                    }
                }
            };
            Second {
                t_s: i as u32,
                delivered_bps: delivered,
                capacity_bps: capacity.max(delivered),
                source,
                queue_us,
            }
        })
        .collect()
}

/// A Mahimahi trace of `seconds`: each second's opportunities spread
/// evenly over it (fractions carried to the next), the last line at the
/// end of the span (the period).
pub fn mahimahi(seconds: &[Second]) -> String {
    let mut out = String::new();
    let mut carry = 0.0f64;
    let mut last = 0u64;
    for (k, s) in seconds.iter().enumerate() {
        let exact = s.capacity_bps as f64 / (SEGMENT_PAYLOAD_BYTES * 8) as f64 + carry;
        let n = exact.floor() as u64;
        carry = exact - n as f64;
        for j in 0..n {
            let ms = k as u64 * 1000 + (2 * j + 1) * 500 / n;
            out.push_str(&format!("{}\n", ms.max(1)));
            last = ms.max(1);
        }
    }
    let period = (seconds.len() as u64 * 1000).max(1);
    if last < period {
        out.push_str(&format!("{period}\n"));
    }
    out
}

#[derive(Serialize)]
struct FlowMix {
    role: String,
    cc: String,
    process: Option<String>,
    bytes: u64,
    kind: &'static str,
    queue_p50_ms: f64,
    /// When it was first read, in seconds from the episode's start (0 for
    /// one that was there at the start; at most a read, a second, after it
    /// opened); absent for a flow the episode kept no series of.
    #[serde(skip_serializing_if = "Option::is_none")]
    start_s: Option<f64>,
}

#[derive(Serialize)]
struct Replay {
    episode: u64,
    subject: String,
    start_ms: u64,
    duration_s: u32,
    trace: &'static str,
    base_rtt_ms: f64,
    buffer_bytes: u64,
    capacity_mean_bps: u64,
    capacity_median_measured_bps: u64,
    /// Seconds whose capacity is estimated, not measured.
    capacity_estimated_share: f64,
    recorded: Recorded,
    flows: Vec<FlowMix>,
    bulk_flows: usize,
    short_flows: usize,
    short_bytes_median: u64,
    notes: Vec<String>,
}

#[derive(Serialize)]
struct Recorded {
    queue_p50_ms: f64,
    queue_p90_ms: f64,
    queue_peak_ms: f64,
    throughput_bps: u64,
    /// The median queue of the largest bulk flow, its own view.
    bulk_queue_p50_ms: Option<f64>,
    bulk_cc: Option<String>,
}

/// What `--export` wrote, for its one line.
pub struct Exported {
    pub seconds: usize,
    pub measured: usize,
    pub buffer_bytes: u64,
    pub base_rtt_ms: f64,
}

fn write(dir: &Path, name: &str, text: &str) -> std::io::Result<()> {
    std::fs::write(dir.join(name), text)
}

/// The bottleneck's buffer: the most bytes its queue held, each second's
/// median queue times the capacity that drained it (a queue in time drains
/// at the link's rate then: on a link whose rate varies, the peak queue
/// times a typical rate counts the bytes of a slow second at a fast rate;
/// the lab's 1 MB LTE buffer came out 2.0 MB that way). A read's queue
/// waited through the end of the second before (reads are a second apart,
/// off the grid, and the queue is most of a second): of the two seconds'
/// capacities, the lower one. With the second's own, a queue of 789 ms
/// that built while the link fell to 2.7 Mbit/s counted at the next
/// second's 11.9 Mbit/s, and the 1 MB buffer came out 1.22 MB (docs/lab.md).
/// Only the measured seconds, where both are known, if there are any: a
/// held second's capacity is a neighbour's, and its queue may be a slow
/// start's behind a drained backlog (the 1 MB buffer came out 1.35 MB with
/// them). Of `PEAK_AFTER` such seconds or more, the mean of the two
/// highest: each is a product of two noisy reads; the highest overshoots
/// and the next undershoots (test_recorder's lte episodes, 2026-12-07:
/// the highest 1.15-1.20 MB, the next 0.84-0.95 MB, against the lab's
/// 1 MB; their means 0.998-1.07 MB. Replayed, one episode queued +35%
/// over the recorded median on its highest, -4% on its next; another
/// -33% on its next (874 kB), -15% on their mean).
fn buffer_of(seconds: &[Second]) -> u64 {
    let bytes = |(k, s): (usize, &Second)| {
        let before = k
            .checked_sub(1)
            .map_or(s.capacity_bps, |j| seconds[j].capacity_bps);
        let drained = s.capacity_bps.min(before);
        (s.queue_us as u128 * drained as u128 / 8_000_000) as u64
    };
    let mut held: Vec<u64> = seconds
        .iter()
        .enumerate()
        .filter(|(_, s)| s.source == "measured")
        .map(bytes)
        .collect();
    if held.is_empty() {
        held = seconds.iter().enumerate().map(bytes).collect();
    }
    held.sort_unstable_by(|a, b| b.cmp(a));
    match held[..] {
        [a, b, ..] if held.len() >= PEAK_AFTER => (a + b) / 2,
        [a, ..] => a,
        [] => 0,
    }
}

/// From this many seconds on, the buffer is the mean of the two highest.
const PEAK_AFTER: usize = 5;

/// When the flow `cookie` was first read, in seconds from the episode's
/// start: the replay opens each short flow when the recorded one opened,
/// rather than spreading them evenly over the episode.
fn first_read_s(d: &EpisodeDetail, cookie: u64) -> Option<f64> {
    let first = d
        .flow_series
        .iter()
        .find(|s| s.cookie == cookie)?
        .points
        .first()?;
    Some(first.t_ms.saturating_sub(d.episode.start_ms) as f64 / 1000.0)
}

/// Write the bundle of `d` into `dir` (created if missing).
pub fn export(d: &EpisodeDetail, dir: &Path) -> crate::error::Result<Exported> {
    let e = &d.episode;
    let seconds = capacity(&d.series);
    if seconds.is_empty() {
        return Err(crate::error::Error::TooShort(e.id));
    }
    std::fs::create_dir_all(dir).map_err(|err| {
        crate::error::Error::context(format!("cannot create {}", dir.display()), err)
    })?;
    let measured: Vec<u64> = seconds
        .iter()
        .filter(|s| s.source == "measured")
        .map(|s| s.capacity_bps)
        .collect();
    let mut sorted = measured.clone();
    sorted.sort_unstable();
    let median_measured = sorted.get(sorted.len() / 2).copied().unwrap_or_else(|| {
        let mut all: Vec<u64> = seconds.iter().map(|s| s.capacity_bps).collect();
        all.sort_unstable();
        all[all.len() / 2]
    });
    let mean = seconds.iter().map(|s| s.capacity_bps).sum::<u64>() / seconds.len() as u64;
    // The queue's payload as the link's packets take it.
    let buffer_bytes = buffer_of(&seconds) * OPPORTUNITY_BYTES / SEGMENT_PAYLOAD_BYTES;
    let total: u64 = d.flows.iter().map(|f| f.bytes).sum::<u64>().max(1);
    let flows: Vec<FlowMix> = d
        .flows
        .iter()
        .map(|f| FlowMix {
            role: f.role.name().into(),
            cc: f.cc.clone(),
            process: f.process.clone(),
            bytes: f.bytes,
            kind: if f.bytes >= BULK_BYTES || f.bytes * 5 >= total {
                "bulk"
            } else {
                "short"
            },
            queue_p50_ms: f.queue_p50_us as f64 / 1000.0,
            start_s: first_read_s(d, f.cookie),
        })
        .collect();
    let bulk = flows.iter().find(|f| f.kind == "bulk");
    let mut shorts: Vec<u64> = flows
        .iter()
        .filter(|f| f.kind == "short")
        .map(|f| f.bytes)
        .collect();
    shorts.sort_unstable();
    let estimated = seconds.len() - measured.len();
    let mut notes = vec![format!(
        "capacity: {} of {} seconds measured (median queue >= {} ms: the link was saturated, its delivery is its capacity); the others are estimated (interpolated between measured seconds, or held at the ends), never below what was delivered",
        measured.len(),
        seconds.len(),
        SATURATED_QUEUE_US / 1000
    )];
    notes.push(
        "buffer: the most bytes the path's median queue held in a second (its queue times the lower of that second's and the previous second's capacity)"
            .to_string(),
    );
    notes.push("base RTT: the path's floor; the uplink is constant (not recorded)".to_string());
    if measured.is_empty() {
        notes.push("no second was saturated: the capacity is only a lower bound".into());
    }
    let replay = Replay {
        episode: e.id,
        subject: e.subject_text(),
        start_ms: e.start_ms,
        duration_s: seconds.len() as u32,
        trace: "trace.down",
        base_rtt_ms: e.floor_us as f64 / 1000.0,
        buffer_bytes,
        capacity_mean_bps: mean,
        capacity_median_measured_bps: median_measured,
        capacity_estimated_share: estimated as f64 / seconds.len() as f64,
        recorded: Recorded {
            queue_p50_ms: e.queue_p50_us as f64 / 1000.0,
            queue_p90_ms: e.queue_p90_us as f64 / 1000.0,
            queue_peak_ms: e.queue_peak_us as f64 / 1000.0,
            throughput_bps: e.throughput_bps,
            bulk_queue_p50_ms: bulk.map(|f| f.queue_p50_ms),
            bulk_cc: bulk.map(|f| f.cc.clone()),
        },
        bulk_flows: flows.iter().filter(|f| f.kind == "bulk").count(),
        short_flows: shorts.len(),
        short_bytes_median: shorts.get(shorts.len() / 2).copied().unwrap_or(0),
        flows,
        notes,
    };
    write(dir, "trace.down", &mahimahi(&seconds))?;
    let mut csv = String::from("t_s,delivered_bps,capacity_bps,source,queue_ms\n");
    for s in &seconds {
        csv.push_str(&format!(
            "{},{},{},{},{:.1}\n",
            s.t_s,
            s.delivered_bps,
            s.capacity_bps,
            s.source,
            s.queue_us as f64 / 1000.0
        ));
    }
    write(dir, "capacity.csv", &csv)?;
    write(dir, "replay.json", &serde_json::to_string_pretty(&replay)?)?;
    write(dir, "episode.json", &serde_json::to_string_pretty(d)?)?;
    Ok(Exported {
        seconds: seconds.len(),
        measured: measured.len(),
        buffer_bytes,
        base_rtt_ms: replay.base_rtt_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(t_s: u64, rate_bps: u64, queue_ms: u32) -> PathPoint {
        PathPoint {
            t_ms: 1_000_000 + t_s * 1000,
            queue_us: queue_ms * 1000,
            queue_max_us: queue_ms * 1000,
            rtt_us: 80_000 + queue_ms * 1000,
            floor_us: 80_000,
            rate_bps,
            sockets: 1,
        }
    }

    #[test]
    fn saturated_seconds_are_the_capacity_the_others_estimated() {
        let with = |t_s, rate, queue_ms, sockets| PathPoint {
            sockets,
            ..point(t_s, rate, queue_ms)
        };
        let s = vec![
            with(0, 0, 300, 1),
            with(1, 2_000_000, 300, 1),
            with(2, 1_000_000, 300, 0), // a socket left: its last bytes uncounted
            with(3, 3_000_000, 300, 0),
            with(4, 3_000_000, 300, 0),
            with(5, 3_000_000, 300, 0),
            with(6, 1_000_000, 2, 0), // not saturated: delivered less than it could
        ];
        let c = capacity(&s);
        let got: Vec<(u64, &str)> = c.iter().map(|x| (x.capacity_bps, x.source)).collect();
        assert_eq!(
            got,
            vec![
                (2_000_000, "measured"),
                (2_500_000, "interpolated"),
                (3_000_000, "measured"),
                // The queue did not stand 2 s after these (at 6 s, or
                // the series ends): held.
                (3_000_000, "held"),
                (3_000_000, "held"),
                (3_000_000, "held"),
            ]
        );
    }

    #[test]
    fn a_read_between_counts_its_share_of_the_second() {
        // Second 0 delivered 8 Mbit/s, unevenly: 4 Mbit/s until an API
        // client's read at 0.4 s, then 10.67 Mbit/s. The second is what
        // both intervals delivered, not the one covering its middle.
        let at = |t_ms: u64, rate_bps: u64| PathPoint {
            t_ms: 1_000_000 + t_ms,
            ..point(0, rate_bps, 300)
        };
        let s = vec![
            at(0, 0),
            at(400, 4_000_000),
            at(1000, 10_666_667),
            at(2000, 16_000_000),
            at(2500, 4_000_000),
            at(3000, 4_000_000),
            at(4000, 4_000_000),
            at(5000, 4_000_000),
            at(6000, 4_000_000),
        ];
        let c = capacity(&s);
        let got: Vec<u64> = c[..3].iter().map(|x| x.capacity_bps / 1000).collect();
        assert_eq!(got, vec![8000, 16_000, 4000]);
        assert!(c[..4].iter().all(|x| x.source == "measured"));
        // A second with one interval that ended below the standing queue
        // was not saturated throughout; one that lost a socket did not
        // count all it delivered.
        let mut s2 = s.clone();
        s2[1].queue_us = 5_000;
        assert_eq!(capacity(&s2)[0].source, "held");
        let mut s3 = s.clone();
        s3[3].sockets = 2;
        let c3 = capacity(&s3);
        assert_eq!((c3[1].source, c3[2].source), ("measured", "interpolated"));
    }

    #[test]
    fn the_trace_carries_the_capacity_each_second() {
        let secs: Vec<Second> = [1_158_400u64, 2_316_800, 579_200]
            .iter()
            .enumerate()
            .map(|(i, &c)| Second {
                t_s: i as u32,
                delivered_bps: c,
                capacity_bps: c,
                source: "measured",
                queue_us: 0,
            })
            .collect();
        let t = mahimahi(&secs);
        let ms: Vec<u64> = t.lines().map(|l| l.parse().unwrap()).collect();
        assert!(ms.windows(2).all(|w| w[0] <= w[1]), "non-decreasing");
        let per = |k: u64| {
            ms.iter()
                .filter(|&&m| m > k * 1000 && m <= (k + 1) * 1000)
                .count()
        };
        // 1.1584 Mbit/s of payload is 100 full-size segments a second.
        assert_eq!((per(0), per(1)), (100, 200));
        assert_eq!(*ms.last().unwrap(), 3000, "the period is the span");
        assert!(per(2) == 50 || per(2) == 51);
    }

    /// Measured seconds, one per (capacity bit/s, median queue ms).
    fn measured(secs: &[(u64, u32)]) -> Vec<Second> {
        secs.iter()
            .enumerate()
            .map(|(i, &(c, q))| Second {
                t_s: i as u32,
                delivered_bps: c,
                capacity_bps: c,
                source: "measured",
                queue_us: q * 1000,
            })
            .collect()
    }

    #[test]
    fn the_buffer_is_the_most_bytes_a_second_queued() {
        // 900 ms at 8 Mbit/s (a slow second) holds 900 kB; 300 ms at
        // 24 Mbit/s 900 kB too; the peak queue times the median rate
        // (16 Mbit/s) would say 1.8 MB.
        let secs = measured(&[(8_000_000, 900), (16_000_000, 400), (24_000_000, 300)]);
        assert_eq!(buffer_of(&secs), 900_000);
        assert_eq!(buffer_of(&[]), 0);
    }

    #[test]
    fn of_five_seconds_or_more_the_buffer_is_the_mean_of_the_two_highest() {
        // test_recorder's lte episode of 2026-12-07 (brletv30): 1195 kB in
        // one second, 946 kB in the next highest.
        let mut q = vec![(8_000_000, 300); 4];
        q.push((8_000_000, 946));
        q.push((8_000_000, 1195));
        assert_eq!(buffer_of(&measured(&q)), 1_070_500);
        // Four seconds: the highest.
        assert_eq!(buffer_of(&measured(&q[2..])), 1_195_000);
    }

    #[test]
    fn a_queue_that_built_in_a_slow_second_counts_at_its_rate() {
        // test_recorder's lte episode: 761 ms at 11.4 Mbit/s, then the link
        // fell to 2.7 Mbit/s and the next read said 789 ms at 11.9 Mbit/s.
        let secs = measured(&[(11_378_200, 761), (2_681_970, 836), (11_911_300, 789)]);
        // 761 ms x 11.38 Mbit/s; not 789 ms x 11.91 Mbit/s (1.17 MB).
        assert_eq!(buffer_of(&secs), 1_082_351);
    }

    #[test]
    fn each_flow_carries_when_it_was_first_read() {
        use bloatd_model::journal::{Episode, EpisodeFlow, EpisodeKind, FlowPoint, FlowSeries};
        use bloatd_model::Role;
        let start = 1_000_000;
        let flow = |cookie: u64, bytes: u64| EpisodeFlow {
            cookie,
            pid: Some(1),
            process: Some("python3".into()),
            service: "/".into(),
            cc: "cubic".into(),
            role: Role::Sender,
            local: "10.9.1.1:8000".parse().unwrap(),
            remote: "10.9.2.2:40000".parse().unwrap(),
            netns: 1,
            bytes,
            retrans: 0,
            unsent_bytes_max: 0,
            unsent_delay_max_us: 0,
            queue_p50_us: 300_000,
            policy: String::new(),
            rules: vec![],
        };
        let series = |cookie: u64, from_s: u64| FlowSeries {
            cookie,
            points: (from_s..from_s + 3)
                .map(|s| FlowPoint {
                    t_ms: start + s * 1000 + 200,
                    cwnd: 10,
                    rtt_us: 380_000,
                    rate_bps: 1_000_000,
                })
                .collect(),
        };
        let d = EpisodeDetail {
            episode: Episode {
                id: 7,
                kind: EpisodeKind::Path,
                path: None,
                service: None,
                start_ms: start,
                end_ms: start + 10_000,
                open: false,
                cut: None,
                threshold_us: 100_000,
                floor_us: 80_000,
                floor_source: None,
                queue_peak_us: 500_000,
                queue_p50_us: 300_000,
                queue_p90_us: 400_000,
                throughput_bps: 16_000_000,
                bytes: 20_000_000,
                sockets_max: 3,
                flows: 3,
                services: vec![],
                processes: vec![],
                ccs: vec![],
                actions: Default::default(),
                bottleneck: None,
                owner: None,
            },
            flows: vec![flow(1, 19_000_000), flow(2, 800_000), flow(3, 500_000)],
            series: (0..10).map(|t| point(t, 16_000_000, 300)).collect(),
            // The third flow has no series (shorter than a read, or past
            // the flows the episode keeps points of).
            flow_series: vec![series(1, 0), series(2, 4)],
        };
        let dir = std::env::temp_dir().join(format!("bloatd-export-test-{}", std::process::id()));
        export(&d, &dir).unwrap();
        let replay: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("replay.json")).unwrap())
                .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let starts: Vec<Option<f64>> = replay["flows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.get("start_s").and_then(|v| v.as_f64()))
            .collect();
        assert_eq!(starts, [Some(0.2), Some(4.2), None]);
        assert_eq!(replay["short_flows"], 2);
    }
}
