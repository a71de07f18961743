// SPDX-License-Identifier: GPL-2.0
/*
 * bloatd_cubic: CUBIC (RFC 9438) with HyStart as a BPF struct_ops congestion
 * control.
 *
 * After a reduction CUBIC grows cwnd along W(t) = C (t - K)^3 + W_max: fast
 * while far below the W_max where the last loss happened, flat around it,
 * then faster again to probe for more. Because the curve depends on time
 * rather than on ACKs, it fills a deep buffer regardless of RTT, and with
 * beta 0.7 it gives back only 30% of cwnd at each loss: on a bloated link the
 * queue never drains (the papers in ../shared/papers/ measure +54% RTT
 * against Westwood+). bloatd carries it so the two can be compared side by
 * side with their internals visible.
 *
 * Semantics follow RFC 9438 and the kernel's net/ipv4/tcp_cubic.c (beta
 * 717/1024, fast convergence, Reno-friendly region, HyStart ACK train and
 * delay increase, the curve followed at most once per jiffy). Units:
 * microsecond TCP clock, K and the curve's time in milliseconds, C = 0.4
 * exactly, an exact integer cube root. No floating point.
 */
#include "cc_bpf.h"
#include "cc_idle.h"

char _license[] SEC("license") = "GPL";

#define BETA_SCALE	1024
#define BETA		717		/* beta_cubic = 0.7 */

/*
 * K^3 = (W_max - cwnd_epoch) / C with C = 0.4 segments/s^3; with K in
 * milliseconds K^3 = (W_max - cwnd_epoch) * 1e9 / 0.4.
 */
#define CUBE_FACTOR_MS	2500000000ULL
/* |t - K| beyond 2^20 ms (17 minutes) would overflow the cube. */
#define CUBIC_OFFS_MAX_MS	(1U << 20)
/*
 * With an unchanged cwnd the target moves slowly: recompute the per-ACK
 * increment at most every 1/32 s (the kernel's HZ/32).
 */
#define CUBIC_RECALC_US	31250U

#define HYSTART_MIN_SAMPLES	8
#define HYSTART_DELAY_MIN_US	4000U
#define HYSTART_DELAY_MAX_US	16000U

/* Tunables, as the kernel's module parameters. */
const volatile bool fast_convergence = true;
const volatile bool tcp_friendliness = true;
/* The HyStart tests in use; typed by their enum, which so reaches the
 * object's BTF, from which the Rust side of cc_state.h is generated. */
const volatile enum bloatd_hystart hystart_detect = BLOATD_HYSTART_ACK_TRAIN | BLOATD_HYSTART_DELAY;
const volatile __u32 hystart_low_window = 16;
const volatile __u32 hystart_ack_delta_us = 2000;

/* Per-socket working state, in icsk_ca_priv (104 bytes). */
struct cubic {
	__u64 epoch_start_us;	/* 0 = no epoch: next congestion avoidance ACK starts one */
	__u32 last_update_us;	/* last recomputation of cnt */
	__u32 last_export_us;
	__u32 cnt;		/* ACKed segments per one-segment cwnd increase */
	__u32 w_max;
	__u32 loss_cwnd;
	__u32 last_cwnd;	/* cwnd at the last recomputation of cnt */
	__u32 last_jiffy;	/* jiffies (low 32 bits) of that recomputation */
	__u32 k_ms;
	__u32 epoch_cwnd;
	__u32 w_est;		/* Reno-friendly estimate */
	__u32 ack_cnt;		/* ACKed segments not yet turned into W_est growth */
	__u32 delay_min_us;
	__u32 reductions;
	__u32 timeouts;
	/* HyStart */
	__u32 round_start_us;	/* start of the current round (one RTT of data) */
	__u32 train_last_us;	/* last ACK of the current closely spaced ACK train */
	__u32 end_seq;		/* snd_nxt when the round began: its end */
	__u32 curr_rtt_us;	/* minimum RTT of this round's first samples */
	__u32 hystart_round;
	__u32 hystart_exit_cwnd;
	__u8 sample_cnt;
	__u8 found;		/* BLOATD_HYSTART_* that ended slow start */
	__u8 export_pending;
};

_Static_assert(sizeof(struct cubic) <=
	       sizeof(((struct inet_connection_sock *)0)->icsk_ca_priv),
	       "struct cubic must fit in icsk_ca_priv");

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
	__type(value, struct bloatd_cubic_state);
} cubic_states SEC(".maps");

/* Position of the most significant set bit, 1-based; 0 for 0. */
static __always_inline __u32 fls64(__u64 x)
{
	__u32 n = 0;

	if (x >> 32) {
		n += 32;
		x >>= 32;
	}
	if (x >> 16) {
		n += 16;
		x >>= 16;
	}
	if (x >> 8) {
		n += 8;
		x >>= 8;
	}
	if (x >> 4) {
		n += 4;
		x >>= 4;
	}
	if (x >> 2) {
		n += 2;
		x >>= 2;
	}
	if (x >> 1) {
		n += 1;
		x >>= 1;
	}
	return n + (__u32)x;
}

/*
 * floor(cbrt(x)), exact. Newton's step y' = (2y + x / y^2) / 3 never goes
 * below the root (AM-GM) and strictly decreases while y^3 > x, so starting
 * from 2^ceil(bits/3), which is above the root and within a factor 2 of it,
 * it reaches floor(cbrt(x)) in at most 7 steps for any 64-bit x. Only run
 * when an epoch starts, never per ACK.
 */
static __u32 cubic_root(__u64 x)
{
	__u64 y, next;
	int i;

	if (!x)
		return 0;
	y = 1ULL << ((fls64(x) + 2) / 3);
	for (i = 0; i < 12; i++) {
		next = (2 * y + x / (y * y)) / 3;
		if (next >= y)
			break;
		y = next;
	}
	return (__u32)y;
}

/* Forget the curve: after a timeout nothing learned about the path holds. */
static __always_inline void cubic_reset(struct cubic *ca)
{
	ca->epoch_start_us = 0;
	ca->last_update_us = 0;
	ca->cnt = 0;
	ca->w_max = 0;
	ca->last_cwnd = 0;
	ca->last_jiffy = 0;
	ca->k_ms = 0;
	ca->epoch_cwnd = 0;
	ca->w_est = 0;
	ca->ack_cnt = 0;
	ca->delay_min_us = 0;
	ca->found = 0;
	ca->hystart_exit_cwnd = 0;
	ca->hystart_round = 0;
}

/* A HyStart round is one RTT of data: it ends when snd_nxt of now is ACKed. */
static __always_inline void hystart_new_round(const struct tcp_sock *tp, struct cubic *ca)
{
	ca->round_start_us = (__u32)tp->tcp_mstamp;
	ca->train_last_us = ca->round_start_us;
	ca->end_seq = tp->snd_nxt;
	ca->curr_rtt_us = ~0U;
	ca->sample_cnt = 0;
	ca->hystart_round++;
}

static __always_inline void cubic_export(const struct sock *sk, struct cubic *ca, __u64 now_us)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	struct bloatd_cubic_state s;
	__u64 cookie = sk_cookie(sk);

	if (!cookie || !export_due((__u32)now_us, &ca->last_export_us, ca->export_pending))
		return;
	ca->export_pending = 0;

	s.updated_us = now_us;
	s.epoch_start_us = ca->epoch_start_us;
	s.w_max = ca->w_max;
	s.loss_cwnd = ca->loss_cwnd;
	s.k_ms = ca->k_ms;
	s.epoch_cwnd = ca->epoch_cwnd;
	s.w_est = ca->w_est;
	s.min_rtt_us = ca->delay_min_us;
	s.cwnd = tp->snd_cwnd;
	s.ssthresh = tp->snd_ssthresh;
	s.mss = tp->mss_cache;
	s.reductions = ca->reductions;
	s.timeouts = ca->timeouts;
	s.hystart_round = ca->hystart_round;
	s.hystart_found = ca->found;
	s.hystart_exit_cwnd = ca->hystart_exit_cwnd;
	export_write(&cubic_states, &cookie, &s);
}

/*
 * A congestion event: exported now, so that a flow that gets no further ACK
 * still shows it, and again on the next ACK with the cwnd and ssthresh the
 * kernel set after this callback returned.
 */
static __always_inline void cubic_event_export(const struct sock *sk, struct cubic *ca)
{
	ca->export_pending = 1;
	cubic_export(sk, ca, tcp_sk(sk)->tcp_mstamp);
	ca->export_pending = 1;
}

SEC("struct_ops")
void BPF_PROG(bloatd_cubic_init, struct sock *sk)
{
	struct cubic *ca = inet_csk_ca(sk);

	__builtin_memset(ca, 0, sizeof(*ca));
	if (hystart_detect)
		hystart_new_round(tcp_sk(sk), ca);
}

/*
 * The epoch begins at the first congestion avoidance ACK after a reduction
 * (or after slow start): the curve starts at the cwnd we have, cwnd_epoch,
 * and reaches W_max after K.
 */
static __always_inline void cubic_start_epoch(struct cubic *ca, __u32 cwnd, __u32 acked,
					      __u64 now_us)
{
	ca->epoch_start_us = now_us;
	ca->ack_cnt = acked;
	ca->w_est = cwnd;
	ca->epoch_cwnd = cwnd;
	/* K = 0 above the last W_max: probe from here, convex from t = 0 */
	ca->k_ms = ca->w_max <= cwnd ? 0 : cubic_root((__u64)(ca->w_max - cwnd) * CUBE_FACTOR_MS);
	ca->export_pending = 1;
}

/* W(K), where the curve is flat: W_max, or cwnd_epoch when above it. */
static __always_inline __u32 cubic_origin(const struct cubic *ca)
{
	return ca->w_max > ca->epoch_cwnd ? ca->w_max : ca->epoch_cwnd;
}

/*
 * Set ca->cnt, the number of ACKed segments per one-segment increase, so
 * that within one RTT cwnd reaches W(t + RTT) (RFC 9438 4.2), or the
 * Reno-friendly W_est if that is larger (4.3), but never grows more than
 * 1.5x per RTT.
 */
static __always_inline void cubic_update(struct cubic *ca, __u32 cwnd, __u32 acked,
					 __u64 now_us)
{
	__u64 t_ms, offs_ms, delta, target;
	__u32 cnt, acks_per_seg, grow, origin, jiffy;

	ca->ack_cnt += acked;
	if (ca->last_cwnd == cwnd && (__u32)now_us - ca->last_update_us <= CUBIC_RECALC_US)
		return;
	/*
	 * Follow the curve at most once per jiffy, as the kernel does: within
	 * a jiffy cwnd keeps growing at the rate set by its first ACK. At
	 * sub-millisecond RTTs (a LAN, veth) that is many RTTs, and it is what
	 * makes the kernel's CUBIC fill such paths as fast as it does; doing
	 * the same keeps the two interchangeable there. Only the Reno-friendly
	 * bound is applied in between.
	 */
	jiffy = (__u32)bpf_jiffies64();
	if (ca->epoch_start_us && jiffy == ca->last_jiffy) {
		cnt = ca->cnt;
		goto reno_friendly;
	}
	ca->last_cwnd = cwnd;
	ca->last_update_us = (__u32)now_us;
	ca->last_jiffy = jiffy;

	if (!ca->epoch_start_us)
		cubic_start_epoch(ca, cwnd, acked, now_us);
	origin = cubic_origin(ca);

	/* W(t + RTT): where cwnd should be one RTT from now */
	t_ms = (now_us - ca->epoch_start_us + ca->delay_min_us) / USEC_PER_MSEC;
	offs_ms = t_ms < ca->k_ms ? ca->k_ms - t_ms : t_ms - ca->k_ms;
	if (offs_ms > CUBIC_OFFS_MAX_MS)
		offs_ms = CUBIC_OFFS_MAX_MS;
	/* C (t - K)^3 with C = 0.4 and t in ms: 2 offs^3 / (5 * 10^9) */
	delta = 2 * offs_ms * offs_ms * offs_ms / 5000000000ULL;
	if (t_ms < ca->k_ms)
		target = delta < origin ? origin - delta : 0;
	else
		target = origin + delta;

	if (target > cwnd) {
		delta = target - cwnd;
		cnt = delta >= cwnd ? 1 : cwnd / (__u32)delta;
	} else {
		/* at or above the target: creep, one segment per 100 RTTs */
		cnt = 100 * cwnd;
	}
	/*
	 * No loss yet (slow start ended by HyStart): the curve knows no
	 * W_max, so grow at least 5% per RTT while the bandwidth is unknown.
	 */
	if (!ca->w_max && cnt > 20)
		cnt = 20;

reno_friendly:
	if (tcp_friendliness) {
		/*
		 * W_est grows by alpha = 3 (1 - beta) / (1 + beta) segments per
		 * RTT, the rate at which AIMD with this beta is as aggressive
		 * as Reno: one segment per cwnd / alpha ACKed segments.
		 */
		acks_per_seg = cwnd * (BETA_SCALE + BETA) / (3 * (BETA_SCALE - BETA));
		if (!acks_per_seg)
			acks_per_seg = 1;
		grow = ca->ack_cnt / acks_per_seg;
		ca->w_est += grow;
		ca->ack_cnt -= grow * acks_per_seg;
		if (ca->w_est > cwnd) {
			__u32 max_cnt = cwnd / (ca->w_est - cwnd);

			if (cnt > max_cnt)
				cnt = max_cnt;
		}
	}
	/* at most one segment per two ACKed: 1.5x per RTT */
	ca->cnt = cnt < 2 ? 2 : cnt;
}

SEC("struct_ops")
void BPF_PROG(bloatd_cubic_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct cubic *ca = inet_csk_ca(sk);

	if (!tcp_is_cwnd_limited(sk))
		return;
	if (tcp_in_slow_start(tp)) {
		acked = tcp_slow_start(tp, acked);
		if (!acked)
			return;
	}
	cubic_update(ca, tp->snd_cwnd, acked, tp->tcp_mstamp);
	tcp_cong_avoid_ai(tp, ca->cnt, acked);
}

/* Multiplicative decrease, on 3 duplicate ACKs, ECN or a timeout. */
SEC("struct_ops")
__u32 BPF_PROG(bloatd_cubic_ssthresh, struct sock *sk)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	struct cubic *ca = inet_csk_ca(sk);
	__u32 cwnd = tp->snd_cwnd;
	__u32 ssthresh;

	ca->epoch_start_us = 0;
	ca->loss_cwnd = cwnd;
	/*
	 * Fast convergence: a loss below the previous W_max means a new flow
	 * is taking its share; aim lower, (1 + beta) / 2 of this cwnd, to
	 * release bandwidth sooner.
	 */
	if (fast_convergence && cwnd < ca->w_max)
		ca->w_max = cwnd * (BETA_SCALE + BETA) / (2 * BETA_SCALE);
	else
		ca->w_max = cwnd;
	ca->reductions++;
	cubic_event_export(sk, ca);

	ssthresh = cwnd * BETA / BETA_SCALE;
	return ssthresh < 2 ? 2 : ssthresh;
}

SEC("struct_ops")
void BPF_PROG(bloatd_cubic_set_state, struct sock *sk, __u8 new_state)
{
	struct cubic *ca = inet_csk_ca(sk);

	if (new_state != TCP_CA_Loss)
		return;
	cubic_reset(ca);
	if (hystart_detect)
		hystart_new_round(tcp_sk(sk), ca);
	ca->timeouts++;
	cubic_event_export(sk, ca);
}

/* The kernel's jiffies per second, from its config (libbpf reads it). */
extern unsigned int CONFIG_HZ __kconfig __weak;

/*
 * After an idle period (application limited, nothing in flight) the curve
 * must not have advanced: shift the epoch by the time since the last send,
 * as the kernel does (cc_idle.h), or the first ACKs after the pause would
 * see a large t and burst cwnd upward.
 */
SEC("struct_ops")
void BPF_PROG(bloatd_cubic_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	struct cubic *ca = inet_csk_ca(sk);
	__u64 now_us = tp->tcp_mstamp;
	__u64 idle_us;

	if (ev != CA_EVENT_TX_START || !ca->epoch_start_us)
		return;
	idle_us = cubic_idle_us((__u32)bpf_jiffies64(), tp->lsndtime, CONFIG_HZ);
	if (!idle_us)
		return;
	ca->epoch_start_us += idle_us;
	if (ca->epoch_start_us > now_us)
		ca->epoch_start_us = now_us;
}

/*
 * Extra slack for the ACK train test: TSO/GRO deliver ACKs in bursts, so a
 * short-RTT flow would otherwise see its train end too early. Up to four GSO
 * packets at the pacing rate, capped at 1 ms (kernel: hystart_ack_delay).
 */
static __always_inline __u32 hystart_ack_delay(const struct sock *sk)
{
	__u64 rate = sk->sk_pacing_rate;
	__u64 d;

	if (!rate)
		return 0;
	d = (__u64)sk->sk_gso_max_size * 4 * USEC_PER_SEC / rate;
	return d < USEC_PER_MSEC ? (__u32)d : USEC_PER_MSEC;
}

/* HyStart ends slow start here: ssthresh = cwnd, congestion avoidance next. */
static __always_inline void hystart_exit(struct tcp_sock *tp, struct cubic *ca, __u8 how)
{
	ca->found |= how;
	ca->hystart_exit_cwnd = tp->snd_cwnd;
	tp->snd_ssthresh = tp->snd_cwnd;
	ca->export_pending = 1;
}

/*
 * HyStart (Ha and Rhee): leave slow start before the buffer overflows, when
 * either the ACKs of this round keep arriving closely spaced for longer than
 * half the minimum RTT (the pipe is full: the train is as long as the path),
 * or the round's RTT has risen well above the minimum (a queue is building).
 */
static __always_inline void hystart_update(struct sock *sk, struct cubic *ca, __u32 delay_us,
					   __u32 now_us)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 threshold;

	if (seq_after(tp->snd_una, ca->end_seq))
		hystart_new_round(tp, ca);
	if (tp->snd_cwnd < hystart_low_window)
		return;

	if ((hystart_detect & BLOATD_HYSTART_ACK_TRAIN) &&
	    (__s32)(now_us - ca->train_last_us) <= (__s32)hystart_ack_delta_us) {
		ca->train_last_us = now_us;
		threshold = ca->delay_min_us + hystart_ack_delay(sk);
		/* without pacing the whole round leaves back to back */
		if (sk->sk_pacing_status == SK_PACING_NONE)
			threshold >>= 1;
		if ((__s32)(now_us - ca->round_start_us) > (__s32)threshold)
			hystart_exit(tp, ca, BLOATD_HYSTART_ACK_TRAIN);
	}

	if (hystart_detect & BLOATD_HYSTART_DELAY) {
		__u32 slack = ca->delay_min_us >> 3;

		if (ca->curr_rtt_us > delay_us)
			ca->curr_rtt_us = delay_us;
		if (ca->sample_cnt < HYSTART_MIN_SAMPLES) {
			ca->sample_cnt++;
			return;
		}
		if (slack < HYSTART_DELAY_MIN_US)
			slack = HYSTART_DELAY_MIN_US;
		if (slack > HYSTART_DELAY_MAX_US)
			slack = HYSTART_DELAY_MAX_US;
		if (ca->curr_rtt_us > ca->delay_min_us + slack)
			hystart_exit(tp, ca, BLOATD_HYSTART_DELAY);
	}
}

static __always_inline void cubic_rtt_sample(struct sock *sk, struct cubic *ca, __s32 rtt_us,
					     __u64 now_us)
{
	__u32 delay_us;

	/* ACKs covering only retransmitted data carry no RTT sample */
	if (rtt_us < 0)
		return;
	/*
	 * Skip the first second after a reduction, as the kernel does: those
	 * ACKs are for data sent into the queue built before it.
	 */
	if (ca->epoch_start_us && now_us - ca->epoch_start_us < USEC_PER_SEC)
		return;
	delay_us = rtt_us ? rtt_us : 1;
	if (!ca->delay_min_us || ca->delay_min_us > delay_us)
		ca->delay_min_us = delay_us;
	if (!ca->found && hystart_detect && tcp_in_slow_start(tcp_sk(sk)))
		hystart_update(sk, ca, delay_us, (__u32)now_us);
}

SEC("struct_ops")
void BPF_PROG(bloatd_cubic_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	struct cubic *ca = inet_csk_ca(sk);
	__u64 now_us = tcp_sk(sk)->tcp_mstamp;

	cubic_rtt_sample(sk, ca, sample->rtt_us, now_us);
	cubic_export(sk, ca, now_us);
}

SEC("struct_ops")
__u32 BPF_PROG(bloatd_cubic_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC("struct_ops")
void BPF_PROG(bloatd_cubic_release, struct sock *sk)
{
	__u64 cookie = sk_cookie(sk);

	if (cookie)
		bpf_map_delete_elem(&cubic_states, &cookie);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops bloatd_cubic = {
	.init		= (void *)bloatd_cubic_init,
	.release	= (void *)bloatd_cubic_release,
	.ssthresh	= (void *)bloatd_cubic_ssthresh,
	.cong_avoid	= (void *)bloatd_cubic_cong_avoid,
	.set_state	= (void *)bloatd_cubic_set_state,
	.undo_cwnd	= (void *)bloatd_cubic_undo_cwnd,
	.cwnd_event	= (void *)bloatd_cubic_cwnd_event,
	.pkts_acked	= (void *)bloatd_cubic_pkts_acked,
	.name		= "bloatd_cubic",
};
