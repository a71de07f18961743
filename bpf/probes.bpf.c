// SPDX-License-Identifier: GPL-2.0-only
/*
 * bloatd's probes: per-socket TCP state for every network namespace, and
 * the floor of every path the host talks over.
 *
 * Probes (BTF tracepoints, plus one cgroup sock_ops program):
 *   tcp_probe            every segment a socket in ESTABLISHED receives: ACKs
 *                        on the sender, data on the receiver. The hot path.
 *   inet_sock_set_state  lifecycle: create the record (with pid/comm on an
 *                        active open; at listen(), the owner of what the
 *                        listener will accept: service_ops.h), find the
 *                        path's floor at the handshake, send a last sample
 *                        and delete it at TCP_CLOSE.
 *   tcp_retransmit_skb   keeps the record fresh while a sender is stalled in
 *                        loss recovery and receives nothing.
 *   tcp_cong_state_set   Open/Disorder/CWR/Recovery/Loss as it changes
 *                        (Linux 5.19; before, read at each sample).
 *   sock_ops (cgroup)    tcp_probe runs only in tcp_rcv_established, so a
 *                        sender that closed its end (FIN_WAIT1, every
 *                        "Connection: close" response draining through a
 *                        queue) or whose peer did (CLOSE_WAIT) would never
 *                        be sampled. sock_ops asks for state callbacks at the
 *                        handshake and, once a socket leaves ESTABLISHED,
 *                        for a callback per incoming segment, which samples
 *                        it as tcp_probe would. It also applies bloatd's
 *                        policy (policy_ops.h): congestion control rules,
 *                        bulk switches and the receiver's DRWA.
 * Iterators:
 *   iter/tcp             picks up sockets that existed before bloatd started
 *                        (in the reader's namespace only).
 *   iter/bpf_sk_storage_map  reads every record, refreshed from its socket at
 *                        that moment, for every namespace.
 *
 * The record lives in socket local storage (`socks`), so the hot path finds
 * it through the socket itself instead of hashing a cookie: measured here,
 * socket storage plus the sampling check costs about 35 ns per segment
 * where cookie + hash lookup + copy cost about 100 (README, "Overhead").
 * Per segment the probe only checks the clock; at most once per socket per
 * sampling interval it copies the socket's numbers into the record, measures
 * its queue against the path's floor and pushes the record into the ring
 * buffer. Nothing else leaves the kernel, and an idle socket costs nothing.
 *
 * Queueing delay is RTT above the path's floor (floor.h): the lowest RTT
 * toward the same peer over a long window, by any socket, alive or closed;
 * the peer's prefix where the peer has no history; and for a connection
 * toward a new peer opened while its bottleneck already holds a queue, its
 * handshake RTT minus that queue, as the sockets crossing the same route
 * measure it (`bottlenecks`).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "bloatd.h"
#include "stats.h"
#include "sampler.h"
#include "probes_state.h"
#include "service_ops.h"
#include "sock_record.h"
#include "rcv_rtt.h"
#include "floor_path.h"
#include "policy_ops.h"


/*
 * The TCP clock: CLOCK_MONOTONIC in microseconds, which the stack stamps on
 * every segment it handles. Reading it is free; bpf_ktime_get_ns() costs
 * about 45 ns here, more than the rest of the hot path. tcp_probe fires
 * before the stack refreshes it, so it is as old as the socket's previous
 * segment: good enough to decide when to sample, not to time a sample.
 */
static __always_inline __u64 tcp_clock_ns(const struct tcp_sock *tp)
{
	return tp->tcp_mstamp * 1000;
}

static __always_inline struct bloatd_bottleneck *bottleneck_slot(const struct bloatd_sock *s)
{
	__u32 idx = ((s->netns * 0x9e3779b1u) ^ s->route_id) & (BOTTLENECK_SLOTS - 1);

	return bpf_map_lookup_elem(&bottlenecks, &idx);
}

/*
 * The floor inferred for a new connection from the queue its bottleneck held
 * in the last interval: the smallest reading of the sockets with a trusted
 * floor that carried traffic through the same route. The smallest, because
 * a queue at a shared bottleneck is in every such socket's RTT, while a
 * queue only one of them sees (its peer's own last mile, on a server) is
 * not the new connection's. 0: nothing to infer from.
 */
static __always_inline __u32 bottleneck_infer(const struct bloatd_sock *s, __u32 own,
					       __u64 now_ns)
{
	struct bloatd_bottleneck *b;

	if (!s->route_id || !(b = bottleneck_slot(s)))
		return 0;
	/* Signed: another CPU may have written a reading newer than now_ns. */
	if (b->netns != s->netns || b->route_id != s->route_id ||
	    (__s64)(now_ns - b->updated_ns) > (__s64)BOTTLENECK_FRESH_NS)
		return 0;
	return floor_infer(own, b->queue_us, b->floor_us);
}

/*
 * A trusted socket reports the queue it measures, and its floor. Readings
 * of one interval are folded with min (see bottleneck_infer); a new interval
 * starts over.
 */
static __always_inline void bottleneck_publish(const struct bloatd_sock *s, __u32 queue_us,
					       __u64 now_ns)
{
	struct bloatd_bottleneck *b;

	if (!s->route_id || !(b = bottleneck_slot(s)))
		return;
	if (b->netns == s->netns && b->route_id == s->route_id &&
	    (__s64)(now_ns - b->updated_ns) < (__s64)sample_interval_ns) {
		if (queue_us < b->queue_us)
			b->queue_us = queue_us;
		if (s->floor_us < b->floor_us)
			b->floor_us = s->floor_us;
		return;
	}
	b->netns = s->netns;
	b->route_id = s->route_id;
	b->queue_us = queue_us;
	b->floor_us = s->floor_us;
	b->updated_ns = now_ns;
}

/* The lowest RTT this socket has seen: its own windowed minimum, or a
 * receiver's lowest echoed-timestamp RTT. */
static __always_inline __u32 own_min_us(const struct bloatd_sock *s)
{
	return s->min_rtt_us;
}

/* The environment floor_path.h runs in: the kernel's maps. `env` is the
 * socket's record. */
static __always_inline struct bloatd_floor *floor_env_lookup(void *env,
							     const struct bloatd_path_key *key,
							     __u32 table)
{
	if (table == BLOATD_FLOOR_PEERS)
		return bpf_map_lookup_elem(&floors, key);
	return bpf_map_lookup_elem(&prefix_floors, key);
}

static __always_inline int floor_env_insert(void *env, const struct bloatd_path_key *key,
					    const struct bloatd_floor *f, __u32 table)
{
	if (table == BLOATD_FLOOR_PEERS)
		return bpf_map_update_elem(&floors, key, f, BPF_NOEXIST);
	return bpf_map_update_elem(&prefix_floors, key, f, BPF_NOEXIST);
}

static __always_inline __u32 floor_env_infer(void *env, __u32 own_us)
{
	return bottleneck_infer(env, own_us, bpf_ktime_get_ns());
}

static __always_inline void floor_env_count(void *env, __u32 stat)
{
	stat_inc(stat);
}

/*
 * Feed the socket's minimum into its path's floors and read back the floor
 * its queueing delay is measured against (floor_path.h); `moved`: its route
 * changed since it last did. A global function, so the verifier checks it
 * once on its own instead of along every path of every program that calls
 * it: inlined, its branches multiplied by the callers' took a program to
 * 650,000 of the verifier's 1,000,000 instructions. (A global function's
 * pointer arguments need Linux 5.12, bloatd's floor.)
 */
__noinline int floor_path_of(struct bloatd_sock *s, __u32 moved, __u64 now_ns)
{
	struct bloatd_floor_cfg cfg = {
		.window_s = floor_window_s,
		.prefix_v4 = floor_prefix_v4,
		.prefix_v6 = floor_prefix_v6,
		.infer = floor_infer_on,
	};
	struct bloatd_floor_subject subj = {};
	__u32 source, floor_us;

	if (!s)
		return 0;
	subj.netns = s->netns;
	subj.route_id = s->route_id;
	subj.own_us = own_min_us(s);
	subj.family = s->family;
	subj.moved = moved;
	__builtin_memcpy(subj.daddr, s->daddr, 16);
	floor_us = floor_path_refresh(s, &cfg, &subj, now_ns / NSEC_PER_SEC, &source);
	if (floor_us) {
		s->floor_us = floor_us;
		s->floor_source = source;
	}
	return 0;
}

/* Read the socket's route again (a connection re-routed after the route
 * table changed tells its floor that the path moved) and refresh its floor. */
static __always_inline void floor_refresh(struct bloatd_sock *s, const struct sock *sk,
					  __u64 now_ns)
{
	__u32 was = s->route_id;

	if (!floors_on)
		return;	/* sock_queues measures against the socket's own minimum */
	s->floor_ns = now_ns;
	sock_route(s, sk);
	floor_path_of(s, was && s->route_id != was, now_ns);
}

/* Queueing delay on both views against the floor. */
/*
 * The receiver's RTT bloatd counts: from the echoed timestamps where the
 * connection uses them, and none until one of their samples passed the gap
 * check (measure_rcv_rtt); the kernel's estimate only without timestamps.
 * That estimate (tcp_rcv_rtt_measure) is the time a whole receive window
 * took to arrive: an RTT for a download that fills the window, but for an
 * application-limited sender the time between its messages summed over a
 * window: 32 s for 200 B ten times a second on loopback, which read as 32 s
 * of queue on every such receiver of a busy server.
 */
static __always_inline __u32 sock_rcv_rtt_us(const struct bloatd_sock *s)
{
	if (s->flags & BLOATD_F_RCV_TS)
		return s->rcv_ts_rtt_us;
	return (s->flags & BLOATD_F_TIMESTAMPS) ? 0 : s->rcv_rtt_us;
}

static __always_inline void sock_queues(struct bloatd_sock *s)
{
	__u32 own = own_min_us(s), rcv_rtt;

	/* The socket's own minimum can fall below the floor it read last. */
	if (own && (!s->floor_us || own < s->floor_us)) {
		s->floor_us = own;
		s->floor_source = BLOATD_FLOOR_SOCKET;
	}
	s->queue_delay_us = s->srtt_us > s->floor_us && s->floor_us ?
			    s->srtt_us - s->floor_us : 0;
	rcv_rtt = sock_rcv_rtt_us(s);
	s->rcv_queue_delay_us = rcv_rtt > s->floor_us && s->floor_us ?
				rcv_rtt - s->floor_us : 0;
}

/* A watched socket's point of its series goes to the daemon. Returns
 * whether the socket is watched. */
static __always_inline int sock_stream(const struct bloatd_sock *s)
{
	struct bloatd_control *c;
	struct bloatd_sample *out;
	__u32 zero = 0;

	c = bpf_map_lookup_elem(&control, &zero);
	if (!c || !c->watching || !bpf_map_lookup_elem(&watch, &s->cookie))
		return 0;
	/* No wakeup: the daemon drains the ring on its own clock. */
	out = bpf_ringbuf_reserve(&samples, sizeof(*out), 0);
	if (!out) {
		stat_inc(BLOATD_STAT_DROP_RINGBUF);
		return 1;
	}
	out->cookie = s->cookie;
	out->sample_ns = s->sample_ns;
	out->throughput_bps = s->throughput_bps;
	out->srtt_us = s->srtt_us;
	out->min_rtt_us = s->min_rtt_us;
	out->floor_us = s->floor_us;
	out->queue_delay_us = s->queue_delay_us;
	out->rcv_rtt_us = sock_rcv_rtt_us(s);
	out->rcv_queue_delay_us = s->rcv_queue_delay_us;
	out->cwnd = s->cwnd;
	out->inflight = s->inflight;
	out->drwa_clamp = s->pol.drwa_clamp;
	out->drwa_rcvd_rtt = s->pol.drwa_rcvd_rtt;
	out->role = s->role;
	out->flags = s->flags;
	__builtin_memset(out->pad, 0, sizeof(out->pad));
	bpf_ringbuf_submit(out, BPF_RB_NO_WAKEUP);
	return 1;
}

static __always_inline struct bloatd_role_stats *role_stats(const struct bloatd_sock *s)
{
	__u32 idx = s->cc_idx < BLOATD_CC_MAX ? s->cc_idx : BLOATD_CC_MAX - 1;
	struct bloatd_cc_stats *st = bpf_map_lookup_elem(&cc_stats, &idx);

	if (!st)
		return NULL;
	return &st->role[s->role == BLOATD_ROLE_RECEIVER];
}

/* Retransmissions since they were last counted. */
static __always_inline void stats_retrans(struct bloatd_sock *s, struct bloatd_role_stats *r)
{
	if (s->total_retrans > s->prev_retrans) {
		r->retrans += s->total_retrans - s->prev_retrans;
		s->prev_retrans = s->total_retrans;
	}
}

/* The queueing delay of the socket's side of the transfer. */
static __always_inline __u32 sock_queue_us(const struct bloatd_sock *s)
{
	return s->role == BLOATD_ROLE_RECEIVER ? s->rcv_queue_delay_us : s->queue_delay_us;
}

/*
 * Whether this sample measured the socket's side of the transfer: data
 * moved in the interval it closes (an idle socket keeps a stale srtt), its
 * role is known, it has a floor, and an RTT of this interval on its side:
 * a sender's srtt; a receiver's echo sample taken in the interval (with
 * timestamps: its echoes pass in some of its segments only) or the
 * kernel's estimate (without). A sample that did not leaves the
 * socket-time its record holds to the next one that does (sampler_count).
 */
static __always_inline int sock_measured(const struct bloatd_sock *s)
{
	if (!(s->flags & BLOATD_F_ACTIVE) || s->role == BLOATD_ROLE_UNKNOWN || !s->floor_us)
		return 0;
	if (s->role != BLOATD_ROLE_RECEIVER)
		return s->srtt_us != 0;
	if (s->flags & BLOATD_F_TIMESTAMPS)
		return (s->flags & BLOATD_F_RCV_FRESH) != 0;
	return s->rcv_rtt_us != 0;
}

/*
 * A sample into the statistics, where the Prometheus histograms read it:
 * per-CPU counters, no lock, no record to user space. Once measured
 * (sock_measured), the sample counts the whole intervals of socket-time
 * its record holds (1 an interval in exact mode and for hot sockets; under
 * adaptive sampling the intervals of traffic it stands for, sampler.h),
 * each at this sample's values; `last`: the record's last word, which
 * counts its fraction too (sampler_take_last).
 */
static __always_inline void sock_stats(struct bloatd_sock *s, __u64 now_ns, int last)
{
	struct bloatd_role_stats *r = role_stats(s);
	__u32 rx = s->role == BLOATD_ROLE_RECEIVER, rtt, queue, queue_b, rtt_b, sec, slot, k;
	int measured = sock_measured(s);

	if (!r)
		return;
	stats_retrans(s, r);
	k = sampler_count(&s->pending_ns, sample_interval_ns, measured, last,
			  last ? bpf_get_prandom_u32() : 0);
	if (!measured)
		return;
	rtt = rx ? sock_rcv_rtt_us(s) : s->srtt_us;
	queue = sock_queue_us(s);
	queue_b = delay_bucket(queue);
	rtt_b = delay_bucket(rtt);
	if (k) {
		r->delay[BLOATD_HIST_QUEUE][queue_b] += k;
		r->delay_sum_us[BLOATD_HIST_QUEUE] += (__u64)k * queue;
		r->delay[BLOATD_HIST_RTT][rtt_b] += k;
		r->delay_sum_us[BLOATD_HIST_RTT] += (__u64)k * rtt;
		service_stats(s, rx, queue_b, queue, rtt_b, rtt, k);
		r->delay[BLOATD_HIST_FLOOR][delay_bucket(s->floor_us)] += k;
		r->delay_sum_us[BLOATD_HIST_FLOOR] += (__u64)k * s->floor_us;
		if (!rx) {
			r->cwnd[cwnd_bucket(s->cwnd)] += k;
			r->cwnd_sum += (__u64)k * s->cwnd;
		}
	}
	/* Bloated sockets, each counted once per second it was bloated in. */
	if (bloat_threshold_us && queue >= bloat_threshold_us) {
		sec = now_ns / NSEC_PER_SEC;
		if (s->bloated_sec != sec) {
			s->bloated_sec = sec;
			slot = sec & 3;
			if (r->bloated_sec[slot] != sec) {
				r->bloated_sec[slot] = sec;
				r->bloated[slot] = 0;
			}
			r->bloated[slot]++;
		}
	}
}

/*
 * The rate of the data that crossed the link in the interval, counted as
 * it arrived, never when a cumulative ACK or the filling of a hole finally
 * accounts for it (a recovery's whole window would land in one interval:
 * 50 Mbit/s read on a 16 Mbit/s link). d_acked, d_rcvd: bytes_acked and
 * bytes_received since the previous sample, dt_us the time since it.
 *
 * Sender: bytes cumulatively acknowledged plus segments SACKed, as the
 * kernel's delivery rate counts SACKed data (tp->delivered): the
 * cumulative ACK that ends a recovery adds the hole, not the window the
 * SACKs already counted. Over the time the peer took to send those ACKs
 * (its timestamps, TSval: the span between the last ACK before the
 * previous sample and the last before this one), which is when the data
 * arrived there, whenever that span is within half to twice the time
 * between the samples: ACKs held and then released together (a stalled
 * uplink, a cellular scheduler, a busy CPU) read neither as a faster link
 * in the interval that gets them nor as a slower one in the interval
 * before, which got fewer; the receiver's own series agrees interval by
 * interval. Else (no timestamps, a peer idle between samples, a TSval
 * tick other than 1 ms: RFC 7323 allows 1 ms to 1 s, 1 us where both ends
 * agreed on microseconds) the time between the samples. Ticks of 1 ms on
 * intervals of sample_interval_ns (100 ms) err by 2% at most.
 * Receiver: while no segment arrives out of order, the in-order bytes;
 * around a loss, the data segments that arrived (in order or not) at the
 * peer's segment size, which is what the sender's SACKs count too.
 */
static __always_inline __u64 sock_rate_bps(struct bloatd_sock *s, const struct tcp_sock *tp,
					   __u64 d_acked, __u64 d_rcvd, __u64 dt_us)
{
	__u32 sacked = tp->sacked_out, ooopack = tp->rcv_ooopack;
	__u32 segs = tp->data_segs_in - s->prev_segs_in;
	__u32 tsval = tp->rx_opt.rcv_tsval, ticks = tsval - s->prev_tsval;
	__u64 peer_us = (__u64)ticks * (tcp_usec_ts(tp) ? 1 : 1000), bytes = d_rcvd;
	__s64 snd = (__s64)d_acked + ((__s64)sacked - (__s64)s->prev_sacked) * s->mss;
	int ofo = tp->out_of_order_queue.rb_node != NULL;

	if (ofo || (s->flags & BLOATD_F_OFO) || ooopack != s->prev_ooopack)
		bytes = (__u64)segs * tp->inet_conn.icsk_ack.rcv_mss;
	if (ofo)
		s->flags |= BLOATD_F_OFO;
	else
		s->flags &= ~BLOATD_F_OFO;
	s->prev_sacked = sacked;
	s->prev_ooopack = ooopack;
	if (s->role != BLOATD_ROLE_RECEIVER) {
		/* SACK marks no cumulative ACK covered (reneging, a reno flow's
		 * timeout) leave it below zero: nothing crossed. */
		bytes = snd > 0 ? snd : 0;
		if ((s->flags & BLOATD_F_TIMESTAMPS) && s->prev_tsval && 2 * peer_us > dt_us &&
		    peer_us < 2 * dt_us)
			dt_us = peer_us;
	}
	s->prev_tsval = tsval;
	/* bytes * 8e6 / us: exact up to 2 TB between samples. */
	return s->sample_ns && dt_us ? bytes * 8000000 / dt_us : 0;
}

/*
 * Close the interval: the role from what moved since the previous sample
 * (a connection's first bytes, or a request/response turn, must not pin it
 * to a side for life), the data rate over the real time between the two
 * samples, and whether the socket carried data at all: segments delivered
 * to the peer or data arrived, counted even while a loss holds the
 * cumulative ACK still (a sender in recovery behind a deep queue can see
 * no new bytes acknowledged for a second, yet every ACK measures the queue).
 */
static __always_inline void sock_interval(struct bloatd_sock *s, const struct tcp_sock *tp,
					  __u64 now_ns)
{
	__u64 d_acked = s->bytes_acked - s->prev_acked;
	__u64 d_rcvd = s->bytes_received - s->prev_received;
	__u64 dt_us = (now_ns - s->sample_ns) / 1000, moved;
	__u32 delivered = tp->delivered, segs_in = tp->data_segs_in;

	/* A SYN or a FIN takes one sequence number: acknowledged alone it is
	 * no data (a download's receiver closing would turn sender). */
	if (d_acked == 1)
		d_acked = 0;
	if (d_acked > d_rcvd)
		s->role = BLOATD_ROLE_SENDER;
	else if (d_rcvd > d_acked)
		s->role = BLOATD_ROLE_RECEIVER;
	moved = d_acked > d_rcvd ? d_acked : d_rcvd;
	if (moved || delivered != s->prev_delivered || segs_in != s->prev_segs_in)
		s->flags |= BLOATD_F_ACTIVE;
	else
		s->flags &= ~BLOATD_F_ACTIVE;
	s->throughput_bps = sock_rate_bps(s, tp, d_acked, d_rcvd, dt_us);
	/* The receiver's RTT of this interval: its lowest echo sample. */
	if (s->rcv_ts_min_us) {
		s->rcv_ts_rtt_us = s->rcv_ts_min_us;
		s->rcv_ts_min_us = 0;
		s->flags |= BLOATD_F_RCV_TS | BLOATD_F_RCV_FRESH;
	} else {
		s->flags &= ~BLOATD_F_RCV_FRESH;
	}
	s->prev_acked = s->bytes_acked;
	s->prev_received = s->bytes_received;
	s->prev_delivered = delivered;
	s->prev_segs_in = segs_in;
	s->sample_ns = now_ns;
}

/* The socket joins (d = 1) or leaves (d = -1) the hot sockets, in the slot
 * it keeps while it is one. */
static __always_inline void hot_add(__u32 slot, __s32 d)
{
	struct bloatd_hot *h;
	__u32 zero = 0;

	h = bpf_map_lookup_elem(&hot, &zero);
	if (!h)
		return;
	slot &= SAMPLER_HOT_SLOTS - 1;
	__sync_fetch_and_add(&h->slot[slot], d);
	__sync_fetch_and_add(&h->total, d);
}

/* The slot of the socket's path in the hot table (sampler_path_slot). */
static __always_inline __u32 sock_path_slot(const struct sock *sk)
{
	const struct sock_common *skc = &sk->__sk_common;

	if (skc->skc_family == AF_INET6)
		return sampler_path_slot(skc->skc_v6_daddr.in6_u.u6_addr32[0],
					 skc->skc_v6_daddr.in6_u.u6_addr32[1],
					 skc->skc_net.net->ns.inum, floor_prefix_v6);
	return sampler_path_slot(skc->skc_daddr, 0, skc->skc_net.net->ns.inum, floor_prefix_v4);
}

/* A bloated socket's path: every socket on it is sampled every interval
 * for a while (sampler_path_slot). */
static __always_inline void path_mark(const struct sock *sk, __u32 now_j)
{
	struct bloatd_hot *h;
	__u32 zero = 0;

	h = bpf_map_lookup_elem(&hot, &zero);
	if (!h)
		return;
	now_j |= 1;	/* 0 means never */
	h->path_j[sock_path_slot(sk) & (SAMPLER_HOT_SLOTS - 1)] = now_j;
	h->marked_j = now_j;
}

/* The socket leaves the hot sockets (sampler.h). */
static __always_inline void sock_cool(struct bloatd_sock *s)
{
	if (!(s->flags & BLOATD_F_HOT))
		return;
	hot_add(s->hot_slot, -1);
	s->flags &= ~BLOATD_F_HOT;
}

/*
 * Adaptive sampling: whether the socket stays sampled every interval
 * (sampler.h, sampler_hot), decided at each sample from what it just
 * measured; the policy acts on it while a DRWA or bulk rule holds it.
 */
static __always_inline void sock_hotness(struct bloatd_sock *s, const struct tcp_sock *tp,
					 __u64 now_ns, int watched)
{
	__u64 j64 = bpf_jiffies64();
	__u32 j = j64, segs = tp->segs_in, slot;
	int dense = sampler_dense(segs - s->prev_segs_all, j - s->sample_jiffies), acted, hot;

	s->prev_segs_all = segs;
	s->sample_jiffies = j;
	if (!sampling_adaptive)
		return;
	/* Calibrated once, by the first samples: until then every segment is
	 * looked at (sampler_look). */
	if (!interval_jiffies)
		interval_jiffies = sampler_interval_jiffies(&calib_ns, &calib_jiffies, now_ns, j64,
							    sample_interval_ns);
	acted = s->pol.flags & (BLOATD_POL_DRWA_ARMED | BLOATD_POL_DRWA_CLAMPED |
				BLOATD_POL_BULK_WAIT | BLOATD_POL_BULK_DONE);
	hot = sampler_hot(sock_queue_us(s), bloat_threshold_us, watched, acted, dense);
	if (bloat_threshold_us && sock_queue_us(s) >= bloat_threshold_us)
		path_mark((const struct sock *)tp, j);
	if (!hot) {
		sock_cool(s);
		return;
	}
	if (s->flags & BLOATD_F_HOT)
		return;
	slot = tp->inet_conn.icsk_inet.sk.__sk_common.skc_hash & (SAMPLER_HOT_SLOTS - 1);
	s->hot_slot = slot;
	hot_add(slot, 1);
	s->flags |= BLOATD_F_HOT;
}

/* Bring the record up to date, measure its queue, count it in the
 * statistics (the socket-time its record holds, sampler.h), and stream it
 * if it is watched. */
static __always_inline void sock_sample(struct bloatd_sock *s, const struct tcp_sock *tp)
{
	__u64 now_ns = bpf_ktime_get_ns();
	int watched;

	sock_fill(s, tp);
	sock_interval(s, tp, now_ns);
	if (now_ns - s->floor_ns >= FLOOR_REFRESH_NS)
		floor_refresh(s, (const struct sock *)tp, now_ns);
	sock_queues(s);
	/* Sockets whose floor was observed report their bottleneck's queue,
	 * once their side of the transfer has an RTT to measure it from. */
	if (floors_on && (s->flags & BLOATD_F_ACTIVE) &&
	    (s->floor_source == BLOATD_FLOOR_SOCKET || s->floor_source == BLOATD_FLOOR_PEER)) {
		if (s->role == BLOATD_ROLE_RECEIVER) {
			if (sock_rcv_rtt_us(s))
				bottleneck_publish(s, s->rcv_queue_delay_us, now_ns);
		} else if (s->srtt_us) {
			bottleneck_publish(s, s->queue_delay_us, now_ns);
		}
	}
	sock_stats(s, now_ns, 0);
	sock_account(s, 0);
	watched = sock_stream(s);
	sock_hotness(s, tp, now_ns, watched);
}

/*
 * Whether a segment can pass without bloatd's record: the socket already
 * took a segment of its kind in this tick of the kernel's clock (jiffies,
 * 1 to 10 ms): an ACK after an ACK (rcv_tstamp, which tcp_ack stamps), data
 * after data (icsk_ack.lrcvtime, which tcp_event_data_recv stamps); both
 * stamps are written after this probe runs, so they are the previous
 * segment's. Decided from what the stack holds hot for this segment, where
 * the record is two dependent cache misses away on a busy server. A flow at
 * line rate reaches its record once per tick instead of once per segment;
 * a socket with one segment per tick or fewer, every time (README,
 * "Overhead"). What a passed-over segment would have done waits for the
 * next tick: a due sample (at most a tick late), and the receiver RTT
 * sample of its echo: at line rate the interval's lowest comes from the
 * first segment of each tick, when it is the first to carry its echo
 * (measure_rcv_rtt).
 */
static __always_inline int probe_passes_over(const struct tcp_sock *tp,
					     const struct sk_buff *skb)
{
	__u32 tick = bpf_jiffies64();

	if (tp->rcv_tstamp == tick)
		return 1;
	return skb->len > tp->tcp_header_len && tp->inet_conn.icsk_ack.lrcvtime == tick;
}

/*
 * Adaptive sampling (sampler.h): whether this segment is looked at, decided
 * before anything of the socket but its hash (in the line the socket
 * lookup just read) is touched. SAMPLER_LOOK_ALL: a hot socket's (or one
 * sharing its slot), or any socket's in exact mode or before the clock is
 * calibrated, handled as exact mode does; SAMPLER_LOOK_RANDOM: a random
 * look at any other's, with probability 2^-c->shift; 0: passed over.
 */
#define SAMPLER_LOOK_ALL 1
#define SAMPLER_LOOK_RANDOM 2

/* Whether every segment of the socket is looked at: exact mode, the clock
 * not calibrated yet, a hot socket's slot (or one sharing it), or a path a
 * bloated socket was sampled on lately. */
static __always_inline int sampler_sees_all(const struct sock *sk, __u32 interval_j)
{
	struct bloatd_hot *h;
	__u32 zero = 0, now_j;

	if (!sampling_adaptive || !interval_j)
		return 1;
	h = bpf_map_lookup_elem(&hot, &zero);
	if (!h)
		return 1;
	if (h->total && h->slot[sk->__sk_common.skc_hash & (SAMPLER_HOT_SLOTS - 1)])
		return 1;
	if (!h->marked_j)
		return 0;
	now_j = bpf_jiffies64();
	/* No path marked within the hold: none of them is. */
	if (!sampler_path_held(h->marked_j, now_j, interval_j, sample_interval_ns))
		return 0;
	return sampler_path_held(h->path_j[sock_path_slot(sk)], now_j, interval_j,
				 sample_interval_ns);
}

static __always_inline int sampler_look(const struct sock *sk, struct bloatd_sampler_cpu *c)
{
	if (!sampling_adaptive)
		return SAMPLER_LOOK_ALL;
	/* The clock's calibration, copied into the CPU's state: the globals
	 * are a page-mapped section, one TLB miss more a segment. */
	if (!c->interval_j)
		c->interval_j = interval_jiffies;
	if (sampler_sees_all(sk, c->interval_j))
		return SAMPLER_LOOK_ALL;
	if (!c->primed) {
		c->primed = 1;
		c->shift = SAMPLER_SHIFT_START;
	}
	return sampler_draw(&c->rng, c->shift) ? SAMPLER_LOOK_RANDOM : 0;
}

/* The tick of the socket's previous segment, as the kernel stamped it
 * (the ACK's rcv_tstamp, the data's lrcvtime: this probe runs before
 * either is written for this segment). */
static __always_inline __u32 sock_prev_j(const struct tcp_sock *tp)
{
	__u32 ack = tp->rcv_tstamp, data = tp->inet_conn.icsk_ack.lrcvtime;

	return (__s32)(data - ack) > 0 ? data : ack;
}

/* The record's clock moves to this segment; `seen`: the record sees every
 * segment (exact mode, a hot socket), so the socket-time since its
 * previous one is counted here (sampler_seen_weight). A record made just
 * now has none. */
static __always_inline void sock_update(struct bloatd_sock *s, const struct tcp_sock *tp,
					__u64 now_ns, int seen)
{
	__u32 now_j = bpf_jiffies64();

	if (seen)
		s->pending_ns += sampler_seen_weight(sock_prev_j(tp), s->update_j, now_j,
						     s->update_ns ? now_ns - s->update_ns : 0,
						     interval_jiffies, sample_interval_ns);
	s->update_ns = now_ns;
	s->update_j = now_j;
}

/* The socket's record, made if it has none yet (tcp_probe fires only in
 * ESTABLISHED: tcp_rcv_established); the receiver RTT of a data segment
 * measured. */
static __always_inline struct bloatd_sock *probe_record(struct sock *sk, struct tcp_sock *tp,
							const struct sk_buff *skb, int seen)
{
	struct bloatd_sock *s = bpf_sk_storage_get(&socks, sk, 0, 0);

	if (!s && !(s = sock_create(sk, tp, bpf_get_socket_cookie(sk))))
		return NULL;
	if ((s->flags & BLOATD_F_TIMESTAMPS) && skb->len > tp->tcp_header_len)
		measure_rcv_rtt(s, tp, skb);
	sock_update(s, tp, tcp_clock_ns(tp), seen);
	return s;
}

/* Signed: the TCP clock can trail the real time of the last sample. */
static __always_inline int sample_due(const struct bloatd_sock *s)
{
	return (__s64)(s->update_ns - s->sample_ns) >= (__s64)sample_interval_ns;
}

/*
 * A random look (adaptive sampling) at a socket that is not hot: its weight
 * into the record, a sample if one is due, and the look's cost into the
 * CPU's average, from which the odds of the next look follow.
 */
static __always_inline void probe_look(struct sock *sk, struct tcp_sock *tp,
				       const struct sk_buff *skb, struct bloatd_sampler_cpu *c)
{
	/* Timed when looks are rare; when they are most segments, one in 8
	 * (two clock reads are most of what a look at a hot line costs). */
	int timed = c->shift >= 3 || !(c->looks & 7);
	__u64 t0 = timed ? bpf_ktime_get_ns() : 0;
	struct bloatd_sock *s = probe_record(sk, tp, skb, 0);

	if (s) {
		/* The segment's own gap: its record's clock just moved to it. */
		s->pending_ns += sampler_look_weight(sampler_gap_j(sock_prev_j(tp), s->update_j),
						     c->interval_j, sample_interval_ns, c->shift);
		if (sample_due(s))
			sock_sample(s, tp);
	}
	c->looks++;
	if (!timed)
		return;
	sampler_cost(&c->look_ns, bpf_ktime_get_ns() - t0);
	sampler_rate(&c->win_ns, &c->win_events, &c->rate, t0, c->events);
	c->shift = sampler_shift_for(c->look_ns, c->rate);
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(tcp_probe, struct sock *sk, const struct sk_buff *skb)
{
	struct bloatd_sampler_cpu *c;
	struct tcp_sock *tp;
	struct bloatd_sock *s;
	__u32 zero = 0;
	int look;

	c = bpf_map_lookup_elem(&sampler, &zero);
	if (!c)
		return 0;
	c->events++;
	look = sampler_look(sk, c);
	if (!look || !(tp = bpf_skc_to_tcp_sock(sk)))
		return 0;
	if (look == SAMPLER_LOOK_RANDOM) {
		/* Never passed over: its weight stands for the segments
		 * skipped around it. */
		probe_look(sk, tp, skb, c);
		return 0;
	}
	if (probe_passes_over(tp, skb))
		return 0;
	s = probe_record(sk, tp, skb, 1);
	if (s && sample_due(s))
		sock_sample(s, tp);
	return 0;
}

/* Rare events: refresh the record if the socket has one. */
static __always_inline struct bloatd_sock *sock_event(struct sock *sk)
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	struct bloatd_sock *s;

	if (!tp)
		return NULL;
	s = bpf_sk_storage_get(&socks, sk, 0, 0);
	if (!s)
		return NULL;
	sock_fill(s, tp);
	/* A retransmission or a change of state is traffic too. */
	sock_update(s, tp, tcp_clock_ns(tp), sampler_sees_all(sk, interval_jiffies));
	return s;
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(tcp_retransmit_skb, const struct sock *sk, const struct sk_buff *skb,
	     int err)
{
	stat_inc(BLOATD_STAT_RETRANS);
	sock_event((struct sock *)sk);
	return 0;
}

SEC("tp_btf/tcp_cong_state_set")
int BPF_PROG(tcp_cong_state_set, struct sock *sk, const __u8 ca_state)
{
	struct bloatd_sock *s;

	stat_inc(BLOATD_STAT_CONG);
	s = sock_event(sk);
	/* The tracepoint fires before icsk_ca_state is written. */
	if (s)
		s->ca_state = ca_state;
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(inet_sock_set_state, const struct sock *csk, const int oldstate,
	     const int newstate)
{
	struct sock *sk = (struct sock *)csk;
	struct tcp_sock *tp;
	struct bloatd_sock *s;
	__u64 now_ns;

	if (sk->sk_protocol != IPPROTO_TCP)
		return 0;
	stat_inc(BLOATD_STAT_STATE);
	if (newstate == TCP_LISTEN) {
		listen_owner(sk);
		return 0;
	}
	tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 0;

	if (newstate == TCP_SYN_SENT || newstate == TCP_ESTABLISHED) {
		s = bpf_sk_storage_get(&socks, sk, 0, 0);
		if (!s && !(s = sock_create(sk, tp, bpf_get_socket_cookie(sk))))
			return 0;
		s->state = newstate;
		if (newstate == TCP_SYN_SENT) {
			/* connect() runs in the caller's context: the one
			 * moment the owning process is known. */
			s->pid = bpf_get_current_pid_tgid() >> 32;
			bpf_get_current_comm(s->comm, sizeof(s->comm));
			sock_account(s, 0);
			return 0;
		}
		sock_identity(s, &sk->__sk_common);
		sock_route(s, sk);
		sock_fill(s, tp);
		now_ns = bpf_ktime_get_ns();
		sock_interval_start(s, tp, now_ns);
		/* The handshake just measured the path: find its floor now,
		 * while the bottleneck's queue is the one it crossed. */
		floor_refresh(s, sk, now_ns);
		sock_queues(s);
		sock_account(s, 0);
		return 0;
	}

	s = bpf_sk_storage_get(&socks, sk, 0, 0);
	if (!s)
		return 0;
	s->state = newstate;
	if (newstate != TCP_CLOSE) {
		sock_account(s, 0);
		return 0;
	}
	/* The last word on this socket, then the record goes. Its minimum
	 * stays in its path's floor, its last interval in the statistics. */
	sock_fill(s, tp);
	now_ns = bpf_ktime_get_ns();
	sock_interval(s, tp, now_ns);
	floor_refresh(s, sk, now_ns);
	sock_queues(s);
	sock_update(s, tp, tcp_clock_ns(tp), 1);
	sock_stats(s, now_ns, 1);
	sock_cool(s);
	sock_account(s, 1);
	policy_forget(s);
	if (!bpf_sk_storage_delete(&socks, sk)) {
		__sync_fetch_and_add(&live_socks, -1);
		stat_inc(BLOATD_STAT_DELETED);
	}
	return 0;
}

/*
 * Closing senders. At the handshake a socket asks for state callbacks (one
 * per state change: cheap); when it leaves ESTABLISHED it also asks for the
 * header-option callback, which the stack makes for every segment it
 * receives in any state past the handshake (tcp_validate_incoming), and
 * which then does what tcp_probe does until the socket closes. (The RTT
 * callback would be cheaper but fired only 3 times for the ~270 ACKs of a
 * FIN_WAIT1 drain measured here.)
 *
 * The same program applies bloatd's policy (policy_ops.h): rules at the
 * handshake, bulk switches on RTT callbacks, DRWA on the ACKs a receiver
 * sends. One program per hook: each socket pays one program run per
 * callback it asked for, and the policy's callbacks are asked for only
 * where a rule or DRWA needs them.
 */
SEC("sockops")
int sock_ops(struct bpf_sock_ops *skops)
{
	struct bloatd_sock *s;
	struct tcp_sock *tp;
	struct bpf_sock *sk;
	__u32 op = skops->op;
	int newstate;

	switch (op) {
	case SOCKOPS_ACTIVE_ESTABLISHED_CB:
	case SOCKOPS_PASSIVE_ESTABLISHED_CB:
		/* Policy first (policy_ops.h): it may ask for more callbacks. */
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags |
					  SOCKOPS_STATE_CB_FLAG | policy_established(skops));
		return 1;
	case SOCKOPS_RTT_CB:
		policy_rtt(skops);
		return 1;
	case SOCKOPS_HDR_OPT_LEN_CB:
		drwa_ack(skops);
		return 1;
	case SOCKOPS_STATE_CB:
		newstate = skops->args[1];
		if (newstate == TCP_FIN_WAIT1 || newstate == TCP_CLOSE_WAIT ||
		    newstate == TCP_LAST_ACK || newstate == TCP_CLOSING)
			bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags |
						  SOCKOPS_PARSE_ALL_HDR_OPT_CB_FLAG);
		return 1;
	case SOCKOPS_PARSE_HDR_OPT_CB:
		break;
	default:
		return 1;
	}
	stat_inc(BLOATD_STAT_SOCKOPS);
	sk = skops->sk;
	if (!sk)
		return 1;
	tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 1;
	s = bpf_sk_storage_get(&socks, sk, 0, 0);
	if (!s)
		return 1;
	sock_update(s, tp, tcp_clock_ns(tp), 1);
	s->state = skops->state;
	if (sample_due(s))
		sock_sample(s, tp);
	return 1;
}

/*
 * Walks the TCP sockets of the reader's network namespace once at start (the
 * daemon reads it in each namespace it may enter), so sockets opened before
 * bloatd started (an idle ssh session) are listed too, and each takes the
 * owner seed_owners noted for it (service_ops.h). Sockets of namespaces
 * bloatd cannot enter get their record at a segment the probes look at.
 */
SEC("iter/tcp")
int seed_sockets(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct tcp_sock *tp;
	struct bloatd_sock *s;

	if (!skc)
		return 0;
	/* Full sockets only: no request or timewait minisocks. */
	tp = bpf_skc_to_tcp_sock(skc);
	if (!tp)
		return 0;
	/* Listeners and closed sockets get no record, only their owner. */
	if (skc->skc_state == TCP_LISTEN || skc->skc_state == TCP_CLOSE)
		goto owner;
	stat_inc(BLOATD_STAT_ITER);
	s = sock_create((struct sock *)tp, tp, bpf_get_socket_cookie(tp));
	if (!s)
		goto owner;
	sock_fill(s, tp);
	s->state = skc->skc_state;
	/* As if it had seen the socket's last segment: the TCP clock of the
	 * stack's last refresh, in that segment's tick. */
	s->update_ns = tcp_clock_ns(tp);
	s->update_j = sock_prev_j(tp);
	floor_refresh(s, (const struct sock *)tp, bpf_ktime_get_ns());
	sock_queues(s);
owner:
	seed_owner_apply(tp);
	return 0;
}

/*
 * A read of the records, each refreshed from its socket as it is read:
 * `bloatd sockets` shows the kernel's numbers of this moment. The fresh
 * numbers go into the copy in `dump`, never into the live record the
 * probes own. A read is an iterator session (dump_begin: a new walk is told
 * by its session, not by seq_num == 0, since the end's call carries the
 * last object's number, 0 after a single socket too); at its end the count
 * is all it returns (dump_end).
 */
static __always_inline void dump_begin(const struct bpf_iter_meta *meta)
{
	if (meta->session_id != dump_session) {
		dump_session = meta->session_id;
		dump_n = 0;
	}
}

static __always_inline void dump_end(struct bpf_iter_meta *meta)
{
	__u32 n = dump_n;

	bpf_seq_write(meta->seq, &n, sizeof(n));
}

static __always_inline void dump_record(const struct bloatd_sock *live, struct tcp_sock *tp)
{
	struct bloatd_sock *s;
	__u32 idx = dump_n;

	if (!live || !tp || !live->cookie)
		return;
	s = bpf_map_lookup_elem(&dump, &idx);
	if (!s)
		return;	/* beyond the slots: the daemon sees n == slots */
	__builtin_memcpy(s, live, sizeof(*s));
	if (!s->cookie)
		return;
	sock_fill(s, tp);
	sock_queues(s);
	dump_n = idx + 1;
}

/* Every record, of every network namespace, in one walk of the socket
 * storage map. Kernels may refuse map-element iterators (ours does, EPERM):
 * then dump_socks reads them namespace by namespace. */
SEC("iter/bpf_sk_storage_map")
int dump_socks_all(struct bpf_iter__bpf_sk_storage_map *ctx)
{
	struct sock *sk = ctx->sk;

	dump_begin(ctx->meta);
	if (!ctx->value)
		dump_end(ctx->meta);
	else if (sk)
		dump_record(ctx->value, bpf_skc_to_tcp_sock(sk));
	return 0;
}

/* The records of the reader's network namespace: a TCP iterator walks the
 * namespace of the thread that reads it, so the daemon reads it once in
 * each namespace that holds records (`netns_seen`), appending what each
 * walk leaves in `dump`. */
SEC("iter/tcp")
int dump_socks(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct tcp_sock *tp;

	dump_begin(ctx->meta);
	if (!skc) {
		dump_end(ctx->meta);
		return 0;
	}
	/* Full sockets only: request and timewait minisocks have no record. */
	tp = bpf_skc_to_tcp_sock(skc);
	if (tp)
		dump_record(bpf_sk_storage_get(&socks, tp, 0, 0), tp);
	return 0;
}

