// SPDX-License-Identifier: GPL-2.0
/*
 * bloatd_westwood: TCP Westwood+ as a BPF struct_ops congestion control.
 *
 * Westwood+ (Mascolo, Casetti, Gerla et al. 2001; Grieco and Mascolo 2004)
 * probes like Reno but answers congestion with what it has measured instead
 * of a fixed factor: after a loss it sets cwnd to the pipe size, BWE x RTTmin.
 * BWE counts the bytes that returning ACKs cover during one RTT (never less
 * than 50 ms) and smooths those samples with two 7/8 low-pass stages. On a
 * bloated link this empties the bottleneck queue after every loss, where Reno
 * and CUBIC keep it half full or more (see ../shared/papers/).
 *
 * Semantics follow the kernel's net/ipv4/tcp_westwood.c: ssthresh() (3
 * duplicate ACKs, ECN) returns Reno's cwnd/2, so proportional rate
 * reduction steers toward half the window during recovery, and BWE x RTTmin
 * is applied when the reduction completes (ssthresh = cwnd = the pipe) and
 * at a timeout (ssthresh = the pipe). With paper_ssthresh (config
 * westwood_ssthresh = "paper") ssthresh() returns BWE x RTTmin at once, as
 * the Westwood+ papers define it.
 *
 * Two changes of unit, not of behaviour on the links bloatd is for: a
 * microsecond clock (tcp_mstamp) where the kernel counts jiffies, and BWE in
 * bytes per second where the kernel keeps bytes per jiffy. On a LAN the
 * kernel's RTTmin is at least one jiffy (1 ms at HZ 1000) and its pipe
 * correspondingly larger than this one, which uses the measured sub-ms RTT;
 * on slow links the kernel's integer filter (bytes per jiffy, shifted by 3)
 * has a dead band of a few bytes per jiffy that this filter does not have.
 * Both are far below what the estimates vary by on the cellular links of
 * ../shared/papers/ (RTTs of 40 ms and more, rates of Mbit/s).
 */
#include "cc_bpf.h"

char _license[] SEC("license") = "GPL";

/*
 * Shortest BWE sampling window. Over shorter windows delayed and compressed
 * ACKs make the byte count too bursty to say anything about the rate; on a
 * LAN every window is exactly this long.
 */
#define WESTWOOD_WIN_MIN_US	50000U
/*
 * RTT assumed before the first sample: far too large on purpose, so that the
 * first real sample replaces it (passive opens have no RTT yet at init).
 */
#define WESTWOOD_INIT_RTT_US	20000000U

/*
 * Set by the daemon before load (bloatd_cc::Options), alone in its section
 * so that user space finds it at offset 0.
 */
const volatile struct bloatd_westwood_config westwood_config SEC(".rodata.westwood") = {
	.paper_ssthresh = 0,
	.ratio_interval_us = 100000,
};

/* Per-socket working state, in icsk_ca_priv. */
struct westwood {
	__u64 bw_first_stage;	/* bytes/s: first 7/8 stage ("not too smoothed") */
	__u64 bw_est;		/* bytes/s: second stage, the BWE */
	__u64 bk;		/* bytes ACKed in the current window */
	__u64 win_start_us;	/* start of the current window */
	__u64 last_congestion_us;
	__u32 last_export_us;
	__u32 last_ratio_us;	/* last cwnd/pipe observation */
	__u32 snd_una;		/* snd_una after the previous ACK */
	__u32 accounted;	/* bytes credited to duplicate ACKs, not yet cumulatively ACKed */
	__u32 rtt_us;		/* latest RTT sample */
	__u32 rtt_min_us;
	__u32 congestion_cwnd;	/* pipe applied at the last congestion event */
	__u32 recoveries;
	__u32 timeouts;
	__u8 first_ack;		/* no ACK seen yet: snd_una above may be stale */
	__u8 reset_rtt_min;	/* take the next RTT sample as RTTmin */
	__u8 export_pending;	/* a congestion event is not exported yet */
};

_Static_assert(sizeof(struct westwood) <=
	       sizeof(((struct inet_connection_sock *)0)->icsk_ca_priv),
	       "struct westwood must fit in icsk_ca_priv");

/*
 * Not preallocated: memory follows the sockets that use the algorithm, not
 * max_entries. Entries are replaced whole (bpf_map_update_elem), so a reader
 * never sees half of an update.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, __u64);		/* socket cookie */
	__type(value, struct bloatd_westwood_state);
} westwood_states SEC(".maps");

/* Keeps the buckets' bounds in the object's BTF, where the Rust side is
 * generated from (build.rs). */
const volatile enum bloatd_ratio_le ratio_le_anchor = BLOATD_RATIO_BUCKETS;

/* bloatd_westwood_cwnd_pipe_ratio's buckets (cc_state.h), per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bloatd_ratio_hist);
} cwnd_pipe_ratio SEC(".maps");

static __always_inline __u64 lowpass(__u64 a, __u64 b)
{
	return (7 * a + b) >> 3;
}

/* Close a window of delta_us: its byte count becomes one BWE sample. */
static __always_inline void westwood_filter(struct westwood *w, __u64 delta_us)
{
	__u64 sample = w->bk * USEC_PER_SEC / delta_us;

	/* An empty filter starts from the first sample, not from zero. */
	if (!w->bw_first_stage && !w->bw_est) {
		w->bw_first_stage = sample;
		w->bw_est = sample;
		return;
	}
	w->bw_first_stage = lowpass(w->bw_first_stage, sample);
	w->bw_est = lowpass(w->bw_est, w->bw_first_stage);
}

/*
 * Once per RTT (at least WESTWOOD_WIN_MIN_US) turn the bytes counted so far
 * into a bandwidth sample. Counting over a whole RTT, rather than per ACK
 * pair as the original Westwood did, is what makes Westwood+ robust to ACK
 * compression.
 */
static __always_inline void westwood_update_window(const struct tcp_sock *tp,
						   struct westwood *w, __u64 now_us)
{
	__u64 delta_us = now_us - w->win_start_us;
	__u32 win_us = w->rtt_us > WESTWOOD_WIN_MIN_US ? w->rtt_us : WESTWOOD_WIN_MIN_US;

	/* The first ACK starts the count where the connection really is. */
	if (w->first_ack) {
		w->snd_una = tp->snd_una;
		w->first_ack = 0;
	}
	if (w->rtt_us && delta_us > win_us) {
		westwood_filter(w, delta_us);
		w->bk = 0;
		w->win_start_us = now_us;
	}
}

static __always_inline void westwood_update_rtt_min(struct westwood *w)
{
	if (w->reset_rtt_min) {
		w->rtt_min_us = w->rtt_us;
		w->reset_rtt_min = 0;
	} else if (w->rtt_us < w->rtt_min_us) {
		w->rtt_min_us = w->rtt_us;
	}
}

/*
 * Bytes an ACK on the slow path stands for. A duplicate ACK does not move
 * snd_una but says that one more segment left the network, so it is credited
 * one MSS at once; the cumulative ACK that later covers those segments gives
 * back what was credited, so no byte is counted twice.
 */
static __always_inline __u32 westwood_acked_count(const struct tcp_sock *tp,
						  struct westwood *w)
{
	__u32 mss = tp->mss_cache;
	__u32 cumul = tp->snd_una - w->snd_una;

	if (!cumul) {
		w->accounted += mss;
		cumul = mss;
	}
	if (cumul > mss) {
		/* partial or delayed ACK */
		if (w->accounted >= cumul) {
			w->accounted -= cumul;
			cumul = mss;
		} else {
			cumul -= w->accounted;
			w->accounted = 0;
		}
	}
	w->snd_una = tp->snd_una;
	return cumul;
}

/* BWE x RTTmin in segments, never below 2 (the kernel's floor). */
static __always_inline __u32 westwood_pipe(const struct tcp_sock *tp,
					   const struct westwood *w)
{
	__u32 mss = tp->mss_cache ? tp->mss_cache : 1;
	__u64 pipe = w->bw_est * w->rtt_min_us / USEC_PER_SEC / mss;

	if (pipe < 2)
		return 2;
	return pipe > 0x7fffffff ? 0x7fffffff : (__u32)pipe;
}

static __always_inline void westwood_export(const struct sock *sk, struct westwood *w,
					    __u64 now_us)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	struct bloatd_westwood_state s;
	__u64 cookie = sk_cookie(sk);

	if (!cookie || !export_due((__u32)now_us, &w->last_export_us, w->export_pending))
		return;
	w->export_pending = 0;

	s.updated_us = now_us;
	s.bwe_bytes_per_s = w->bw_est;
	s.bwe_first_stage_bytes_per_s = w->bw_first_stage;
	s.last_congestion_us = w->last_congestion_us;
	s.min_rtt_us = w->rtt_min_us;
	s.rtt_us = w->rtt_us;
	s.cwnd = tp->snd_cwnd;
	s.ssthresh = tp->snd_ssthresh;
	s.mss = tp->mss_cache;
	s.congestion_cwnd = w->congestion_cwnd;
	s.recoveries = w->recoveries;
	s.timeouts = w->timeouts;
	export_write(&westwood_states, &cookie, &s);
}

static __always_inline __u32 ratio_bucket(__u64 milli)
{
	if (milli <= BLOATD_RATIO_LE_0) return 0;
	if (milli <= BLOATD_RATIO_LE_1) return 1;
	if (milli <= BLOATD_RATIO_LE_2) return 2;
	if (milli <= BLOATD_RATIO_LE_3) return 3;
	if (milli <= BLOATD_RATIO_LE_4) return 4;
	if (milli <= BLOATD_RATIO_LE_5) return 5;
	if (milli <= BLOATD_RATIO_LE_6) return 6;
	if (milli <= BLOATD_RATIO_LE_7) return 7;
	if (milli <= BLOATD_RATIO_LE_8) return 8;
	if (milli <= BLOATD_RATIO_LE_9) return 9;
	return 10;
}

/*
 * Once per sampling interval of a socket that gets ACKs: how far cwnd sits
 * from the pipe Westwood+ estimates (above it: a queue Westwood+ will drain
 * at the next congestion event).
 */
static __always_inline void westwood_observe_ratio(const struct tcp_sock *tp, struct westwood *w,
						   __u32 now_us)
{
	struct bloatd_ratio_hist *h;
	__u32 zero = 0, pipe, idx;
	__u64 milli;

	if (now_us - w->last_ratio_us < westwood_config.ratio_interval_us)
		return;
	w->last_ratio_us = now_us;
	if (w->rtt_min_us >= WESTWOOD_INIT_RTT_US || !w->bw_est)
		return;		/* no estimate yet */
	pipe = westwood_pipe(tp, w);
	milli = (__u64)tp->snd_cwnd * 1000 / pipe;
	h = bpf_map_lookup_elem(&cwnd_pipe_ratio, &zero);
	if (!h)
		return;
	idx = ratio_bucket(milli);
	if (idx < BLOATD_RATIO_BUCKETS)
		h->count[idx]++;
	h->sum_milli += milli;
}

/*
 * A flow switched to Westwood+ while it runs (bloatd's bulk policy,
 * setsockopt): it may already hold a standing queue, which its next RTT
 * samples would take for RTTmin, and a loss before its first BWE window
 * closes would set cwnd to 2 segments. So it starts from what the socket
 * already knows: RTTmin from the socket's own windowed minimum (which holds
 * the handshake, taken before the flow built its queue) and BWE from the
 * kernel's delivery rate. A new connection has acknowledged nothing yet and
 * starts from scratch, as the kernel's tcp_westwood does.
 */
static __always_inline void westwood_seed(const struct tcp_sock *tp, struct westwood *w)
{
	__u32 min_rtt = tp->rtt_min.s[0].v, interval = tp->rate_interval_us;
	__u64 rate;

	if (!tp->bytes_acked || !min_rtt || min_rtt == ~0U)
		return;
	w->rtt_min_us = min_rtt;
	w->rtt_us = tp->srtt_us >> 3;
	w->reset_rtt_min = 0;
	if (interval && tp->rate_delivered) {
		rate = (__u64)tp->rate_delivered * tp->mss_cache * USEC_PER_SEC / interval;
		w->bw_first_stage = rate;
		w->bw_est = rate;
	}
}

SEC("struct_ops")
void BPF_PROG(bloatd_westwood_init, struct sock *sk)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	struct westwood *w = inet_csk_ca(sk);

	__builtin_memset(w, 0, sizeof(*w));
	w->rtt_us = WESTWOOD_INIT_RTT_US;
	w->rtt_min_us = WESTWOOD_INIT_RTT_US;
	w->reset_rtt_min = 1;
	w->first_ack = 1;
	w->win_start_us = tp->tcp_mstamp;
	w->snd_una = tp->snd_una;
	westwood_seed(tp, w);
}

/* Westwood+ needs only the latest RTT sample. */
SEC("struct_ops")
void BPF_PROG(bloatd_westwood_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	struct westwood *w = inet_csk_ca(sk);
	__s32 rtt_us = sample->rtt_us;

	if (rtt_us > 0)
		w->rtt_us = rtt_us;
}

/* Every ACK, after the kernel moved snd_una: count bytes, track RTTmin. */
SEC("struct_ops")
void BPF_PROG(bloatd_westwood_in_ack_event, struct sock *sk, __u32 flags)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	struct westwood *w = inet_csk_ca(sk);
	__u64 now_us = tp->tcp_mstamp;

	westwood_update_window(tp, w, now_us);
	if (flags & CA_ACK_SLOWPATH) {
		/* duplicate, partial or SACK-carrying ACK */
		w->bk += westwood_acked_count(tp, w);
	} else {
		/* header-predicted pure advance of snd_una */
		w->bk += tp->snd_una - w->snd_una;
		w->snd_una = tp->snd_una;
	}
	westwood_update_rtt_min(w);
	westwood_observe_ratio(tp, w, (__u32)now_us);
	westwood_export(sk, w, now_us);
}

/*
 * A congestion event: exported now, and again on the next ACK with what the
 * kernel made of it (after a timeout cwnd is set only after this callback).
 */
static __always_inline void westwood_congestion(struct sock *sk, struct westwood *w, __u32 pipe)
{
	__u64 now_us = tcp_sk(sk)->tcp_mstamp;

	w->congestion_cwnd = pipe;
	w->last_congestion_us = now_us;
	w->export_pending = 1;
	westwood_export(sk, w, now_us);
	w->export_pending = 1;
}

SEC("struct_ops")
void BPF_PROG(bloatd_westwood_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct westwood *w = inet_csk_ca(sk);
	__u32 pipe;

	switch (ev) {
	case CA_EVENT_COMPLETE_CWR:
		/*
		 * Recovery (or an ECN window reduction) is over: continue from
		 * the pipe the ACKs have measured, which on a bloated link
		 * drains the standing queue.
		 */
		pipe = westwood_pipe(tp, w);
		tp->snd_ssthresh = pipe;
		tp->snd_cwnd = pipe;
		w->recoveries++;
		westwood_congestion(sk, w, pipe);
		break;
	case CA_EVENT_LOSS:
		/*
		 * Retransmission timeout: the kernel restarts from cwnd 1; slow
		 * start up to the measured pipe. RTTmin is re-learned from the
		 * next sample, since the path may have changed.
		 */
		pipe = westwood_pipe(tp, w);
		tp->snd_ssthresh = pipe;
		w->reset_rtt_min = 1;
		w->timeouts++;
		westwood_congestion(sk, w, pipe);
		break;
	default:
		break;
	}
}

SEC("struct_ops")
__u32 BPF_PROG(bloatd_westwood_ssthresh, struct sock *sk)
{
	const struct tcp_sock *tp = tcp_sk(sk);

	if (westwood_config.paper_ssthresh)
		return westwood_pipe(tp, inet_csk_ca(sk));
	/* tcp_reno_ssthresh */
	return tp->snd_cwnd >> 1 > 2 ? tp->snd_cwnd >> 1 : 2;
}

/* Probing is Reno's: slow start, then one segment per RTT. */
SEC("struct_ops")
void BPF_PROG(bloatd_westwood_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	tcp_reno_cong_avoid(sk, ack, acked);
}

SEC("struct_ops")
__u32 BPF_PROG(bloatd_westwood_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC("struct_ops")
void BPF_PROG(bloatd_westwood_release, struct sock *sk)
{
	__u64 cookie = sk_cookie(sk);

	if (cookie)
		bpf_map_delete_elem(&westwood_states, &cookie);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops bloatd_westwood = {
	.init		= (void *)bloatd_westwood_init,
	.release	= (void *)bloatd_westwood_release,
	.ssthresh	= (void *)bloatd_westwood_ssthresh,
	.cong_avoid	= (void *)bloatd_westwood_cong_avoid,
	.undo_cwnd	= (void *)bloatd_westwood_undo_cwnd,
	.cwnd_event	= (void *)bloatd_westwood_cwnd_event,
	.in_ack_event	= (void *)bloatd_westwood_in_ack_event,
	.pkts_acked	= (void *)bloatd_westwood_pkts_acked,
	.name		= "bloatd_westwood",
};
