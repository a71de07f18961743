/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Inner state of bloatd's BPF congestion controls, as they export it.
 *
 * The kernel refuses get_info for BPF congestion controls, so `ss -ti` shows
 * cwnd and ssthresh but never what bloatd_westwood or bloatd_cubic think of
 * the path. Each algorithm keeps its working state in the socket's
 * icsk_ca_priv, like a built-in congestion control, and copies a snapshot of
 * it into a BPF hash map keyed by the socket cookie (u64):
 *   westwood_states -> struct bloatd_westwood_state
 *   cubic_states    -> struct bloatd_cubic_state
 *
 * A snapshot is written on an ACK at most every export_interval_us (10 ms,
 * cc_bpf.h) per socket, and on the first ACK after a congestion event or a
 * HyStart exit. The entry is deleted when the socket leaves the algorithm
 * (release). A socket appears only once its cookie exists: struct_ops
 * programs may not call bpf_get_socket_cookie, so the algorithms read the
 * cookie the kernel stored when someone asked for it (bloatd's tcp_probe,
 * sock_diag / ss, getsockopt SO_COOKIE) and never create one.
 *
 * Times are the TCP clock: CLOCK_MONOTONIC in microseconds (tcp_mstamp).
 * cwnd, ssthresh and every window are in segments of `mss` bytes.
 *
 * The Rust side (struct_ops/src/state.rs) is generated from the objects' BTF
 * at build time (build.rs). No implicit padding: the BPF side copies whole
 * structs from the stack into the map (the build refuses a gap).
 */
#ifndef BLOATD_CC_STATE_H
#define BLOATD_CC_STATE_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* hystart_found bits: what ended slow start before any loss (an enum, so
 * user space sees them in the BTF) */
enum bloatd_hystart {
	BLOATD_HYSTART_ACK_TRAIN = 0x1,
	BLOATD_HYSTART_DELAY = 0x2,
};

struct bloatd_westwood_state {
	__u64 updated_us;		/* TCP clock of this snapshot */
	__u64 bwe_bytes_per_s;		/* BWE: ACKed bytes per second, after both 7/8 filter stages */
	__u64 bwe_first_stage_bytes_per_s; /* output of the first filter stage */
	__u64 last_congestion_us;	/* TCP clock of the last congestion event, 0 = none */
	__u32 min_rtt_us;		/* RTTmin (reset to the next sample after a timeout) */
	__u32 rtt_us;			/* latest RTT sample */
	__u32 cwnd;
	__u32 ssthresh;
	__u32 mss;			/* tp->mss_cache, bytes */
	__u32 congestion_cwnd;		/* BWE x RTTmin / MSS set at the last congestion event */
	__u32 recoveries;		/* fast recoveries / CWR episodes completed (cwnd = BWE x RTTmin) */
	__u32 timeouts;			/* retransmission timeouts (ssthresh = BWE x RTTmin, cwnd 1) */
};

struct bloatd_cubic_state {
	__u64 updated_us;		/* TCP clock of this snapshot */
	__u64 epoch_start_us;		/* TCP clock of the current epoch's start, 0 = no epoch */
	__u32 w_max;			/* W_max: origin of the cubic curve (after fast convergence) */
	__u32 loss_cwnd;		/* cwnd when the last reduction began */
	__u32 k_ms;			/* K: time from epoch start until W(t) reaches W_max */
	__u32 epoch_cwnd;		/* cwnd at the start of the epoch */
	__u32 w_est;			/* Reno-friendly estimate W_est */
	__u32 min_rtt_us;		/* delay_min: minimum RTT seen, HyStart's and the curve's RTT */
	__u32 cwnd;
	__u32 ssthresh;
	__u32 mss;			/* tp->mss_cache, bytes */
	__u32 reductions;		/* multiplicative decreases (loss or ECN) */
	__u32 timeouts;			/* retransmission timeouts (full reset) */
	__u32 hystart_round;		/* HyStart rounds (one per RTT) since the last reset */
	__u32 hystart_found;		/* BLOATD_HYSTART_* bits, 0 = slow start not ended by HyStart */
	__u32 hystart_exit_cwnd;	/* cwnd when HyStart ended slow start */
};

/*
 * How bloatd_westwood behaves, set by the daemon before load (its
 * .rodata.westwood section; bloatd_cc::Options).
 */
struct bloatd_westwood_config {
	__u32 paper_ssthresh;		/* 1: ssthresh() = BWE x RTTmin (the papers); 0: Reno's half (the kernel's module) */
	__u32 ratio_interval_us;	/* at most one cwnd/pipe observation per socket per this (the daemon's sampling interval) */
};

/*
 * Westwood+'s cwnd against its estimated pipe, cwnd / (BWE x RTTmin / MSS),
 * counted where it happens (per CPU) and read when Prometheus scrapes
 * (bloatd_westwood_cwnd_pipe_ratio): one observation per socket per
 * sampling interval in which it got ACKs, so a bucket's share is a share of
 * socket-time, like the probes' histograms. Upper bounds in thousandths,
 * inclusive; the last bucket is +Inf.
 */
enum bloatd_ratio_le {
	BLOATD_RATIO_LE_0 = 500,
	BLOATD_RATIO_LE_1 = 750,
	BLOATD_RATIO_LE_2 = 1000,
	BLOATD_RATIO_LE_3 = 1250,
	BLOATD_RATIO_LE_4 = 1500,
	BLOATD_RATIO_LE_5 = 2000,
	BLOATD_RATIO_LE_6 = 3000,
	BLOATD_RATIO_LE_7 = 5000,
	BLOATD_RATIO_LE_8 = 10000,
	BLOATD_RATIO_LE_9 = 20000,
	BLOATD_RATIO_BUCKETS = 11,
};

struct bloatd_ratio_hist {
	__u64 count[BLOATD_RATIO_BUCKETS];	/* observations per bucket */
	__u64 sum_milli;			/* sum of the ratios, thousandths */
};

#endif /* BLOATD_CC_STATE_H */
