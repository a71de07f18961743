//! Unit tests of adaptive sampling's arithmetic (bpf/sampler.h): the C the
//! probes inline, compiled for the host (bpf/testing/sampler_host.c). No
//! root, no kernel. The end-to-end check (adaptive against exact on a real
//! load, bucket by bucket) is scripts/tests/test_sampling.py.

use bloatd_bpf_testing as _; // links the bloatd_sampler_* functions

extern "C" {
    fn bloatd_sampler_draw(rng: *mut u64, shift: u32) -> i32;
    fn bloatd_sampler_cost(look_ns: *mut u64, ns: u64);
    fn bloatd_sampler_shift_for(look_ns: u64, rate: u64) -> u32;
    fn bloatd_sampler_rate(
        win_ns: *mut u64,
        win_events: *mut u64,
        rate: *mut u64,
        now_ns: u64,
        events: u64,
    );
    fn bloatd_sampler_look_weight(gap_j: u32, interval_j: u32, interval_ns: u64, shift: u32)
        -> u64;
    fn bloatd_sampler_take(pending_ns: *mut u64, interval_ns: u64) -> u32;
    fn bloatd_sampler_take_last(pending_ns: *mut u64, interval_ns: u64, r: u32) -> u32;
    fn bloatd_sampler_time_weight(gap_ns: i64, interval_ns: u64) -> u64;
    fn bloatd_sampler_seen_weight(
        prev_j: u32,
        update_j: u32,
        now_j: u32,
        since_ns: i64,
        interval_j: u32,
        interval_ns: u64,
    ) -> u64;
    fn bloatd_sampler_count(
        pending_ns: *mut u64,
        interval_ns: u64,
        measured: i32,
        last: i32,
        r: u32,
    ) -> u32;
    fn bloatd_sampler_dense(d_segs: u32, d_jiffies: u32) -> i32;
    fn bloatd_sampler_hot(
        queue_us: u32,
        threshold_us: u32,
        watched: i32,
        acted: i32,
        dense: i32,
    ) -> i32;
    fn bloatd_sampler_interval_jiffies(
        ref_ns: *mut u64,
        ref_j: *mut u64,
        now_ns: u64,
        now_j: u64,
        interval_ns: u64,
    ) -> u32;
}

/// The sampling interval: 100 ms, 100 ticks of a 1000 Hz kernel clock.
const IV: u64 = 100_000_000;

fn weight(gap_j: u32, interval_j: u32, shift: u32) -> u64 {
    unsafe { bloatd_sampler_look_weight(gap_j, interval_j, IV, shift) }
}

fn take(p: &mut u64) -> u64 {
    unsafe { bloatd_sampler_take(p, IV) as u64 }
}

fn take_last_r(p: &mut u64, r: u32) -> u64 {
    unsafe { bloatd_sampler_take_last(p, IV, r) as u64 }
}

/// The close with the random number at its middle: the fraction rounds to
/// the nearest.
fn take_last(p: &mut u64) -> u64 {
    take_last_r(p, 1 << 31)
}

/// What a socket's segments (their gaps, in ticks) count in the histograms
/// under adaptive sampling at `shift`, in observations: the probes' looks
/// and weights, the record's pending weight taken at each sample.
fn adaptive_count(gaps: &[u32], interval_j: u32, shift: u32, seed: u64) -> f64 {
    let (mut rng, mut pending, mut counted) = (seed, 0u64, 0u64);
    for &g in gaps {
        if unsafe { bloatd_sampler_draw(&mut rng, shift) } != 0 {
            pending += weight(g, interval_j, shift);
            counted += take(&mut pending);
        }
    }
    counted as f64 + pending as f64 / IV as f64
}

/// The same segments' socket-time in intervals: each closes the part of an
/// interval since the one before it, at most a whole one.
fn socket_time(gaps: &[u32], interval_j: u32) -> f64 {
    gaps.iter()
        .map(|&g| g.min(interval_j) as f64 / interval_j as f64)
        .sum()
}

/// What exact mode (and a hot socket) counts for the same segments: the
/// socket-time each adds as it is seen (sampler_time_weight, the gaps in
/// ms of the TCP clock here), taken at a sample at the first segment at
/// least one interval after the last sample, the rest at the close.
fn exact_count(gaps: &[u32], interval_j: u32) -> f64 {
    assert_eq!(interval_j as u64 * 1_000_000, IV);
    let (mut since, mut pending, mut n) = (0u32, 0u64, 0u64);
    for &g in gaps {
        pending += unsafe { bloatd_sampler_time_weight(g as i64 * 1_000_000, IV) };
        since += g;
        if since >= interval_j {
            n += take(&mut pending);
            since = 0;
        }
    }
    (n + take_last(&mut pending)) as f64
}

/// Gaps of a socket with a segment every `mean` ticks on average
/// (exponential, so sometimes several in an interval, sometimes none).
fn poisson_gaps(n: usize, mean: f64, seed: u64) -> Vec<u32> {
    let mut rng = seed;
    (0..n)
        .map(|_| {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = ((rng >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
            (-u.ln() * mean).round().max(1.0) as u32
        })
        .collect()
}

#[test]
fn a_look_counts_the_socket_time_of_the_segments_it_stands_for() {
    assert_eq!(weight(100, 100, 0), IV);
    assert_eq!(weight(250, 100, 5), IV << 5);
    // A segment 30 ticks after the previous one closes 0.3 of an interval.
    assert_eq!(weight(30, 100, 0), 30_000_000);
    assert_eq!(weight(30, 100, 4), 30_000_000 << 4);
    // Before the clock is calibrated every look counts whole.
    assert_eq!(weight(1, 0, 3), IV << 3);
    assert_eq!(weight(0, 100, 3), 0);
}

#[test]
fn a_sample_takes_whole_observations_and_carries_the_fraction() {
    let mut p = 3 * IV + 40;
    assert_eq!(take(&mut p), 3);
    assert_eq!(p, 40);
    assert_eq!(take(&mut p), 0);
    p += IV;
    assert_eq!(take(&mut p), 1);
    assert_eq!(p, 40);
    // The close counts what is left to the nearest whole.
    assert_eq!(take_last(&mut p), 0);
    p = IV + IV / 2 + 1;
    assert_eq!(take_last(&mut p), 2);
    assert_eq!(p, 0);
    // A 40 ms connection counts 0.4 of an observation on average: its
    // fraction with that probability.
    let mut rng = 99u64;
    let n = 100_000;
    let counted: u64 = (0..n)
        .map(|_| {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let mut p = 40_000_000;
            take_last_r(&mut p, (rng >> 32) as u32)
        })
        .sum();
    assert!((counted as f64 / n as f64 - 0.4).abs() < 0.01, "{counted}");
}

#[test]
fn a_seen_segment_adds_the_part_of_an_interval_since_the_last() {
    let w = |gap, iv| unsafe { bloatd_sampler_time_weight(gap, iv) };
    assert_eq!(w(100_000_000, IV), IV);
    assert_eq!(w(30_000, IV), 30_000, "a bulk flow's segments, 30 us apart");
    assert_eq!(w(5_000_000_000, IV), IV, "idle time is no traffic");
    assert_eq!(w(-5, IV), 0, "a clock that trails adds nothing");
}

#[test]
fn a_busy_server_socket_counts_the_same_in_both_modes() {
    // A socket of the busy-server load: one segment per 100 ms interval
    // (HZ 1000), a little jitter. At one look in 64 the sum over 200,000
    // segments is within 2% of exact mode's, and both are its socket-time.
    let gaps: Vec<u32> = (0..200_000).map(|i| 95 + (i * 7919 % 11) as u32).collect();
    let (truth, exact) = (socket_time(&gaps, 100), exact_count(&gaps, 100));
    let adaptive = adaptive_count(&gaps, 100, 6, 42);
    assert!(
        (exact / truth - 1.0).abs() < 0.001,
        "exact {exact} truth {truth}"
    );
    assert!(
        (adaptive / exact - 1.0).abs() < 0.02,
        "adaptive {adaptive} exact {exact}"
    );
}

/// A small generator for the models below (the LCG the probes use).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// What a segment the record sees adds: the kernel stamped the socket's
/// previous segment at tick `prev_j`, the record last wrote at `update_j`
/// (`since_ms` before this segment), this one comes at `now_j`.
fn seen(prev_j: u32, update_j: u32, now_j: u32, since_ms: i64) -> u64 {
    unsafe { bloatd_sampler_seen_weight(prev_j, update_j, now_j, since_ms * 1_000_000, 100, IV) }
}

#[test]
fn a_seen_segment_after_unseen_ones_adds_its_own_gap() {
    // The record saw the previous segment (its tick is the record's last
    // write, or before it): the time since, in the record's clock.
    assert_eq!(seen(1000, 1000, 1030, 30), 30_000_000);
    assert_eq!(seen(990, 1000, 1030, 30), 30_000_000);
    assert_eq!(
        seen(1000, 1000, 1030, 0),
        0,
        "a record made at this segment"
    );
    // Segments came after the record's last write (a look 2 s ago, or a
    // cold stretch no look fell in): this segment's own gap.
    assert_eq!(seen(2980, 1000, 3000, 2000), 20_000_000);
    assert_eq!(seen(2500, 1000, 3000, 2000), IV);
    // The tick counter wraps.
    assert_eq!(seen(5, u32::MAX - 4, 25, 30), 20_000_000);
}

#[test]
fn a_socket_moving_between_hot_and_cold_counts_its_socket_time() {
    // Five segments an interval (20 ticks apart, HZ 1000), hot for three
    // intervals (every segment seen), cold for three (one look in 16), over
    // and over: a busy path's mark coming and going. Each seen segment
    // after a cold stretch counts its own gap; counted from the record's
    // last write (as first built), each such hand-over added up to a whole
    // interval for 0.2.
    let (interval_j, shift, n) = (100u32, 4u32, 600_000u64);
    let run = |own_gap: bool| {
        let (mut rng, mut pending, mut counted) = (5u64, 0u64, 0u64);
        let mut update_j = 0u32;
        for i in 1..=n {
            let now_j = (i * 20) as u32;
            let prev_j = now_j - 20;
            if (now_j / 300).is_multiple_of(2) {
                let since = (now_j - update_j) as i64;
                pending += if own_gap {
                    seen(prev_j, update_j, now_j, since)
                } else {
                    unsafe { bloatd_sampler_time_weight(since * 1_000_000, IV) }
                };
                update_j = now_j;
            } else if unsafe { bloatd_sampler_draw(&mut rng, shift) } != 0 {
                pending += weight(now_j - prev_j, interval_j, shift);
                update_j = now_j;
            }
            counted += take(&mut pending);
        }
        counted as f64
    };
    let truth = n as f64 * 0.2;
    let (now, before) = (run(true), run(false));
    assert!((now / truth - 1.0).abs() < 0.02, "{now} against {truth}");
    assert!(
        before / truth > 1.1,
        "from the record's last write: {before} against {truth}"
    );
}

/// A busy server's receivers as the two modes count them: `sockets`
/// sockets, a segment each interval (HZ 1000, a little jitter), whose echo
/// gives a sample in `p` of its segments, bloated (150 ms) in `b` of those
/// and 50 ms in the rest, independently. A socket is hot while its last
/// measurement was bloated: then every segment is seen, as in exact mode;
/// else one in 2^`shift` is looked at. Each segment seen or looked at
/// closes a sample; `carry`: a sample without a measurement of its own
/// leaves its socket-time to the next one (sampler_count), else it counts
/// it at the socket's last measurement. Counted over the last half of the
/// run (the first half settles what the records carry). Returns the
/// observations and the share of them in the bloated bucket.
fn receivers(adaptive: bool, carry: bool, sockets: u64, p: f64, b: f64, shift: u32) -> (f64, f64) {
    let (interval_j, segments) = (100u32, 6_000);
    let (mut all, mut bloated) = (0u64, 0u64);
    for sock in 0..sockets {
        let mut rng = Lcg(sock.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mut draw = sock + 17;
        let (mut pending, mut last) = (0u64, None::<bool>);
        let (mut now_j, mut update_j) = (0u32, 0u32);
        for i in 0..segments {
            let prev_j = now_j;
            now_j += 95 + (rng.next() * 10.0) as u32;
            let valid = rng.next() < p;
            let value = rng.next() < b;
            if !adaptive || last == Some(true) {
                pending += seen(prev_j, update_j, now_j, (now_j - update_j) as i64);
            } else if unsafe { bloatd_sampler_draw(&mut draw, shift) } != 0 {
                pending += weight(now_j - prev_j, interval_j, shift);
            } else {
                continue;
            }
            update_j = now_j;
            if valid {
                last = Some(value);
            }
            let measured = if carry { valid } else { last.is_some() };
            let k = unsafe { bloatd_sampler_count(&mut pending, IV, measured as i32, 0, 0) } as u64;
            if i >= segments / 2 {
                all += k;
                if last == Some(true) {
                    bloated += k;
                }
            }
        }
    }
    (all as f64, bloated as f64 / all as f64)
}

#[test]
fn receivers_measured_now_and_then_count_alike_in_both_modes() {
    // One segment in ten gives a sample, 30% of them bloated: exact mode
    // counts 30% of socket-time bloated. Counted at its next measurement,
    // adaptive mode agrees; counted at its last one (as first built), a
    // cold receiver's value stood for it 16 times longer than a hot one's,
    // and the bloated share fell to a fraction.
    let (sockets, p, b, shift) = (300, 0.1, 0.3, 4);
    let (n_exact, s_exact) = receivers(false, true, sockets, p, b, shift);
    let (n_adapt, s_adapt) = receivers(true, true, sockets, p, b, shift);
    assert!((s_exact - b).abs() < 0.02, "exact: bloated share {s_exact}");
    assert!(
        (s_adapt - s_exact).abs() < 0.02,
        "shares: {s_adapt} against {s_exact}"
    );
    assert!(
        (n_adapt / n_exact - 1.0).abs() < 0.03,
        "{n_adapt} against {n_exact}"
    );
    let (n_stale_e, s_stale_e) = receivers(false, false, sockets, p, b, shift);
    let (n_stale_a, s_stale_a) = receivers(true, false, sockets, p, b, shift);
    assert!((s_stale_e - b).abs() < 0.02, "stale, exact: {s_stale_e}");
    assert!(
        s_stale_e - s_stale_a > 0.1,
        "stale: {s_stale_a} against {s_stale_e}"
    );
    assert!(
        (n_stale_a / n_stale_e - 1.0).abs() < 0.03,
        "{n_stale_a} against {n_stale_e}"
    );
}

#[test]
fn a_sample_that_did_not_measure_carries_its_socket_time() {
    let count =
        |p: &mut u64, measured, last, r| unsafe { bloatd_sampler_count(p, IV, measured, last, r) };
    let mut p = 2 * IV + 5;
    assert_eq!(count(&mut p, 0, 0, 0), 0);
    assert_eq!(p, 2 * IV + 5, "carried whole");
    p += IV;
    assert_eq!(count(&mut p, 1, 0, 0), 3);
    assert_eq!(p, 5);
    p = IV / 2;
    assert_eq!(
        count(&mut p, 1, 1, u32::MAX),
        0,
        "the close: the fraction with its probability"
    );
    p = IV / 2;
    assert_eq!(count(&mut p, 1, 1, 0), 1);
    p = 3 * IV;
    assert_eq!(
        count(&mut p, 0, 1, 0),
        0,
        "a close without a measurement counts nothing"
    );
}

#[test]
fn a_bulk_flow_counts_one_observation_an_interval() {
    // 10 s of segments 20 us apart, seen one by one: 100 observations.
    let mut pending = 0u64;
    let mut n = 0;
    for i in 0..500_000u64 {
        pending += unsafe { bloatd_sampler_time_weight(20_000, IV) };
        if i % 5_000 == 4_999 {
            n += take(&mut pending);
        }
    }
    assert_eq!(n + take_last(&mut pending), 100);
}

#[test]
fn the_estimate_is_unbiased_in_socket_time_at_every_rate_and_shift() {
    for (mean, shift) in [(400.0, 3), (100.0, 6), (30.0, 6), (10.0, 8), (3.0, 10)] {
        // Enough segments for 2,000 looks a run at these odds.
        let gaps = poisson_gaps(2_000 << shift, mean, mean as u64 + 1);
        let truth = socket_time(&gaps, 100);
        assert!((exact_count(&gaps, 100) / truth - 1.0).abs() < 0.001);
        // Averaged over independent generators: the estimate's mean.
        let runs = 16u64;
        let got: f64 = (1..=runs)
            .map(|r| adaptive_count(&gaps, 100, shift, r.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
            .sum::<f64>()
            / runs as f64;
        assert!(
            (got / truth - 1.0).abs() < 0.03,
            "a segment every {mean} ticks, 1 look in {}: {got} against {truth}",
            1 << shift
        );
    }
}

#[test]
fn looks_are_drawn_at_the_odds_of_the_shift() {
    let mut rng = 7u64;
    for shift in [3, 6, 10] {
        let n = 1 << 20;
        let hits = (0..n)
            .filter(|_| unsafe { bloatd_sampler_draw(&mut rng, shift) } != 0)
            .count() as f64;
        let want = n as f64 / (1u64 << shift) as f64;
        assert!(
            (hits / want - 1.0).abs() < 0.1,
            "shift {shift}: {hits} for {want}"
        );
    }
}

#[test]
fn the_odds_follow_what_a_look_costs_and_how_busy_the_cpu_is() {
    let shift = |ns, rate| unsafe { bloatd_sampler_shift_for(ns, rate) };
    // A busy CPU (50,000 segments a second), budget 16 ns a segment plus
    // 0.5 ms a second (26 ns a segment): a 100 ns look is taken 1 in 4, a
    // 1 us one 1 in 64, a 5 us one (this VM's cold sockets) 1 in 256.
    assert_eq!(shift(100, 50_000), 2);
    assert_eq!(shift(1000, 50_000), 6);
    assert_eq!(shift(5000, 50_000), 8);
    assert_eq!(shift(1 << 30, 50_000), 12);
    // A quiet one looks at every segment: 500 segments of 1 us a second
    // are 0.05% of a core.
    assert_eq!(shift(1000, 500), 0);
    assert_eq!(shift(5000, 0), 0, "not measured yet: the allowance alone");
    let mut avg = 0u64;
    unsafe { bloatd_sampler_cost(&mut avg, 800) };
    assert_eq!(avg, 800, "the first look sets the average");
    for _ in 0..64 {
        unsafe { bloatd_sampler_cost(&mut avg, 160) };
    }
    assert!((150..=180).contains(&avg), "{avg}");
}

#[test]
fn the_rate_is_measured_over_a_second_at_least() {
    let (mut w, mut we, mut rate) = (0u64, 0u64, 0u64);
    let step = |w: &mut u64, we: &mut u64, r: &mut u64, t, e| unsafe {
        bloatd_sampler_rate(w, we, r, t, e)
    };
    step(&mut w, &mut we, &mut rate, 10_000_000_000, 1000);
    step(&mut w, &mut we, &mut rate, 10_500_000_000, 26_000);
    assert_eq!(rate, 0, "half a second: not yet");
    step(&mut w, &mut we, &mut rate, 12_000_000_000, 101_000);
    assert_eq!(rate, 50_000);
    step(&mut w, &mut we, &mut rate, 13_000_000_000, 102_000);
    assert_eq!(rate, 1_000);
}

#[test]
fn hot_is_bloated_watched_acted_on_or_dense() {
    let hot = |q, t, w, a, d| unsafe { bloatd_sampler_hot(q, t, w, a, d) } != 0;
    assert!(hot(100_000, 100_000, 0, 0, 0), "at the threshold");
    assert!(!hot(99_999, 100_000, 0, 0, 0));
    assert!(!hot(500_000, 0, 0, 0, 0), "threshold 0: never bloated");
    assert!(hot(0, 100_000, 1, 0, 0) && hot(0, 100_000, 0, 1, 0) && hot(0, 100_000, 0, 0, 1));
    let dense = |s, j| unsafe { bloatd_sampler_dense(s, j) } != 0;
    assert!(dense(50, 100) && !dense(49, 100) && !dense(10, 0));
}

#[test]
fn the_clock_is_calibrated_after_a_second() {
    let (mut rns, mut rj) = (0u64, 0u64);
    let cal = |rns: &mut u64, rj: &mut u64, ns, j| unsafe {
        bloatd_sampler_interval_jiffies(rns, rj, ns, j, 100_000_000)
    };
    assert_eq!(cal(&mut rns, &mut rj, 5_000_000_000, 4_294_000_000), 0);
    assert_eq!(cal(&mut rns, &mut rj, 5_500_000_000, 4_294_000_125), 0);
    // HZ 250 over 1.2 s: 25 ticks an interval (the tick counter wrapping).
    let j = 4_294_000_000u64 + 300;
    assert_eq!(cal(&mut rns, &mut rj, 6_200_000_000, j), 25);
}
