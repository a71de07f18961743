//! The per-socket state bloatd's congestion controls export, as Rust sees it.
//!
//! `Raw*` are the C structs of `struct_ops/cc_state.h`, generated from the
//! objects' BTF at build time; [`WestwoodState`] and
//! [`CubicState`] are what callers use: plain fields whose names carry units.

use crate::Algo;

/// `struct bloatd_westwood_state` and `struct bloatd_cubic_state` of
/// cc_state.h, generated at build time from the objects' BTF (build.rs).
mod abi {
    #![allow(dead_code)]
    include!(concat!(env!("OUT_DIR"), "/cc_state.rs"));
}
pub(crate) use abi::BloatdCubicState as RawCubicState;
pub(crate) use abi::BloatdRatioHist as RawRatioHist;
pub(crate) use abi::BloatdWestwoodConfig as RawWestwoodConfig;
pub(crate) use abi::BloatdWestwoodState as RawWestwoodState;

/// Westwood+'s cwnd / (BWE x RTTmin / MSS), counted in the kernel once per
/// socket per sampling interval in which it got ACKs (cc_state.h `struct
/// bloatd_ratio_hist`), summed over the CPUs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RatioHistogram {
    /// Observations per bucket (not cumulative); the last is +Inf.
    pub counts: Vec<u64>,
    /// Sum of the ratios.
    pub sum: f64,
}

impl RatioHistogram {
    /// Inclusive upper bounds of the buckets (cc_state.h `enum
    /// bloatd_ratio_le`, in thousandths there), +Inf last.
    pub fn bounds() -> Vec<f64> {
        use abi::ratio_le::*;
        [LE_0, LE_1, LE_2, LE_3, LE_4, LE_5, LE_6, LE_7, LE_8, LE_9]
            .iter()
            .map(|&m| m as f64 / 1000.0)
            .chain([f64::INFINITY])
            .collect()
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    pub(crate) fn from_cpus(cpus: &[RawRatioHist]) -> RatioHistogram {
        let mut h = RatioHistogram {
            counts: vec![0; abi::ratio_le::BUCKETS as usize],
            sum: 0.0,
        };
        let mut sum_milli = 0u64;
        for c in cpus {
            for (i, n) in c.count.iter().enumerate() {
                h.counts[i] += n;
            }
            sum_milli += c.sum_milli;
        }
        h.sum = sum_milli as f64 / 1000.0;
        h
    }
}

/// `hystart_found` bits (cc_state.h `enum bloatd_hystart`).
use abi::hystart::{ACK_TRAIN as HYSTART_ACK_TRAIN, DELAY as HYSTART_DELAY};

/// Westwood+'s view of one socket. Windows are in segments of `mss` bytes;
/// times `*_us` without "age" are the kernel's TCP clock (CLOCK_MONOTONIC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WestwoodState {
    /// Bandwidth estimate: ACKed bytes per second after both 7/8 filter stages.
    pub bwe_bytes_per_s: u64,
    /// Output of the first filter stage (less smoothed).
    pub bwe_first_stage_bytes_per_s: u64,
    /// RTTmin, re-learned after each timeout.
    pub min_rtt_us: u32,
    /// Latest RTT sample.
    pub rtt_us: u32,
    pub cwnd: u32,
    pub ssthresh: u32,
    pub mss: u32,
    /// cwnd (after recovery) or ssthresh (after a timeout) that Westwood+
    /// set at the last congestion event: BWE x RTTmin / MSS then.
    pub congestion_cwnd: u32,
    /// Completed fast recoveries / CWR episodes.
    pub recoveries: u32,
    /// Retransmission timeouts.
    pub timeouts: u32,
    /// When the last congestion event happened (TCP clock), if any.
    pub last_congestion_us: Option<u64>,
    /// When this snapshot was taken (TCP clock).
    pub updated_us: u64,
    /// How old the snapshot was when read.
    pub age_us: u64,
}

impl WestwoodState {
    /// BWE x RTTmin in segments, the pipe Westwood+ would set cwnd to if
    /// congestion happened now (at least 2, as the algorithm does).
    pub fn pipe_segments(&self) -> u32 {
        let mss = u64::from(self.mss.max(1));
        let pipe = self
            .bwe_bytes_per_s
            .saturating_mul(u64::from(self.min_rtt_us))
            / 1_000_000
            / mss;
        pipe.clamp(2, u64::from(u32::MAX)) as u32
    }
}

/// CUBIC's view of one socket. Windows are in segments of `mss` bytes;
/// times `*_us` without "age" are the kernel's TCP clock (CLOCK_MONOTONIC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CubicState {
    /// W_max: where the cubic curve flattens (cwnd at the last reduction,
    /// or (1 + beta) / 2 of it after fast convergence). 0 before any loss.
    pub w_max_segments: u32,
    /// cwnd when the last reduction began.
    pub loss_cwnd_segments: u32,
    /// K: time from the epoch start until W(t) reaches W_max.
    pub k_ms: u32,
    /// Start of the current epoch (TCP clock); None in slow start and recovery.
    pub epoch_start_us: Option<u64>,
    /// Time since the epoch start, when read.
    pub epoch_age_us: Option<u64>,
    /// cwnd when the epoch started.
    pub epoch_cwnd_segments: u32,
    /// The Reno-friendly estimate W_est.
    pub w_est_segments: u32,
    /// Minimum RTT seen (HyStart's baseline and the curve's RTT).
    pub min_rtt_us: u32,
    pub cwnd: u32,
    pub ssthresh: u32,
    pub mss: u32,
    /// Multiplicative decreases (loss or ECN).
    pub reductions: u32,
    /// Retransmission timeouts.
    pub timeouts: u32,
    /// HyStart round (one RTT of data) of the current slow start.
    pub hystart_round: u32,
    /// Slow start was ended by HyStart's ACK-train test.
    pub hystart_found_ack_train: bool,
    /// Slow start was ended by HyStart's delay-increase test.
    pub hystart_found_delay: bool,
    /// cwnd when HyStart ended slow start (0 if it did not).
    pub hystart_exit_cwnd: u32,
    /// When this snapshot was taken (TCP clock).
    pub updated_us: u64,
    /// How old the snapshot was when read.
    pub age_us: u64,
}

/// The inner state of one socket using a bloatd congestion control.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlgoState {
    Westwood(WestwoodState),
    Cubic(CubicState),
}

impl AlgoState {
    pub fn algo(&self) -> Algo {
        match self {
            AlgoState::Westwood(_) => Algo::Westwood,
            AlgoState::Cubic(_) => Algo::Cubic,
        }
    }

    pub fn cwnd(&self) -> u32 {
        match self {
            AlgoState::Westwood(s) => s.cwnd,
            AlgoState::Cubic(s) => s.cwnd,
        }
    }

    pub fn mss(&self) -> u32 {
        match self {
            AlgoState::Westwood(s) => s.mss,
            AlgoState::Cubic(s) => s.mss,
        }
    }

    /// How old the snapshot was when read.
    pub fn age_us(&self) -> u64 {
        match self {
            AlgoState::Westwood(s) => s.age_us,
            AlgoState::Cubic(s) => s.age_us,
        }
    }
}

/// Size of the map value for `algo`.
pub(crate) fn value_size(algo: Algo) -> usize {
    match algo {
        Algo::Westwood => std::mem::size_of::<RawWestwoodState>(),
        Algo::Cubic => std::mem::size_of::<RawCubicState>(),
    }
}

/// Decode one map value of `algo`; `now_us` is CLOCK_MONOTONIC in microseconds.
pub(crate) fn decode(algo: Algo, bytes: &[u8], now_us: u64) -> Option<AlgoState> {
    if bytes.len() != value_size(algo) {
        return None;
    }
    Some(match algo {
        Algo::Westwood => {
            // SAFETY: length checked; RawWestwoodState is plain old data
            // (u32/u64 fields, no padding) so any bytes are a valid value.
            let r: RawWestwoodState = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
            AlgoState::Westwood(WestwoodState {
                bwe_bytes_per_s: r.bwe_bytes_per_s,
                bwe_first_stage_bytes_per_s: r.bwe_first_stage_bytes_per_s,
                min_rtt_us: r.min_rtt_us,
                rtt_us: r.rtt_us,
                cwnd: r.cwnd,
                ssthresh: r.ssthresh,
                mss: r.mss,
                congestion_cwnd: r.congestion_cwnd,
                recoveries: r.recoveries,
                timeouts: r.timeouts,
                last_congestion_us: (r.last_congestion_us != 0).then_some(r.last_congestion_us),
                updated_us: r.updated_us,
                age_us: now_us.saturating_sub(r.updated_us),
            })
        }
        Algo::Cubic => {
            // SAFETY: as above, for RawCubicState.
            let r: RawCubicState = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
            let epoch = (r.epoch_start_us != 0).then_some(r.epoch_start_us);
            AlgoState::Cubic(CubicState {
                w_max_segments: r.w_max,
                loss_cwnd_segments: r.loss_cwnd,
                k_ms: r.k_ms,
                epoch_start_us: epoch,
                epoch_age_us: epoch.map(|e| now_us.saturating_sub(e)),
                epoch_cwnd_segments: r.epoch_cwnd,
                w_est_segments: r.w_est,
                min_rtt_us: r.min_rtt_us,
                cwnd: r.cwnd,
                ssthresh: r.ssthresh,
                mss: r.mss,
                reductions: r.reductions,
                timeouts: r.timeouts,
                hystart_round: r.hystart_round,
                hystart_found_ack_train: r.hystart_found & HYSTART_ACK_TRAIN != 0,
                hystart_found_delay: r.hystart_found & HYSTART_DELAY != 0,
                hystart_exit_cwnd: r.hystart_exit_cwnd,
                updated_us: r.updated_us,
                age_us: now_us.saturating_sub(r.updated_us),
            })
        }
    })
}

/// CLOCK_MONOTONIC in microseconds: the clock of the kernel's tcp_mstamp.
pub(crate) fn monotonic_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::size_of;

    #[test]
    fn ratio_histogram_sums_cpus_with_the_c_bounds() {
        assert_eq!(
            RatioHistogram::bounds(),
            vec![
                0.5,
                0.75,
                1.0,
                1.25,
                1.5,
                2.0,
                3.0,
                5.0,
                10.0,
                20.0,
                f64::INFINITY
            ]
        );
        let mut a = RawRatioHist::default();
        let mut b = RawRatioHist::default();
        a.count[2] = 3;
        a.sum_milli = 2_900;
        b.count[2] = 1;
        b.count[10] = 2;
        b.sum_milli = 60_100;
        let h = RatioHistogram::from_cpus(&[a, b]);
        assert_eq!(h.counts.len(), RatioHistogram::bounds().len());
        assert_eq!(h.counts[2], 4);
        assert_eq!(h.count(), 6);
        assert!((h.sum - 63.0).abs() < 1e-9);
    }

    #[test]
    fn decode_cubic() {
        let raw = RawCubicState {
            updated_us: 5_000_000,
            epoch_start_us: 4_000_000,
            w_max: 100,
            loss_cwnd: 100,
            k_ms: 4217,
            hystart_found: HYSTART_DELAY,
            ..Default::default()
        };
        // SAFETY: plain old data viewed as bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&raw as *const RawCubicState).cast::<u8>(),
                size_of::<RawCubicState>(),
            )
        };
        let AlgoState::Cubic(s) = decode(Algo::Cubic, bytes, 5_500_000).unwrap() else {
            panic!()
        };
        assert_eq!(s.w_max_segments, 100);
        assert_eq!(s.epoch_age_us, Some(1_500_000));
        assert_eq!(s.age_us, 500_000);
        assert!(s.hystart_found_delay && !s.hystart_found_ack_train);
        assert!(decode(Algo::Cubic, &bytes[1..], 0).is_none());
    }

    #[test]
    fn westwood_pipe() {
        let s = WestwoodState {
            bwe_bytes_per_s: 1_250_000, // 10 Mbit/s
            bwe_first_stage_bytes_per_s: 0,
            min_rtt_us: 40_000,
            rtt_us: 0,
            cwnd: 0,
            ssthresh: 0,
            mss: 1448,
            congestion_cwnd: 0,
            recoveries: 0,
            timeouts: 0,
            last_congestion_us: None,
            updated_us: 0,
            age_us: 0,
        };
        assert_eq!(s.pipe_segments(), 50_000 / 1448);
        assert_eq!(
            WestwoodState {
                bwe_bytes_per_s: 0,
                ..s
            }
            .pipe_segments(),
            2
        );
    }
}
