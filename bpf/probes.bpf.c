// SPDX-License-Identifier: GPL-2.0-only
/*
 * bloatd's probes: per-socket TCP state for every network namespace, and
 * the floor of every path the host talks over.
 *
 * Hooks (BTF tracepoints, plus one cgroup sock_ops program):
 *   tcp_probe            every segment a socket in ESTABLISHED receives: ACKs
 *                        on the sender, data on the receiver. The hot path.
 *   inet_sock_set_state  lifecycle: create the record (with pid/comm on an
 *                        active open), find the path's floor at the
 *                        handshake, send a last sample and delete it at
 *                        TCP_CLOSE.
 *   tcp_retransmit_skb   keeps the record fresh while a sender is stalled in
 *                        loss recovery and receives nothing.
 *   tcp_cong_state_set   Open/Disorder/CWR/Recovery/Loss as it changes.
 *   sock_ops (cgroup)    tcp_probe runs only in tcp_rcv_established, so a
 *                        sender that closed its end (FIN_WAIT1, every
 *                        "Connection: close" response draining through a
 *                        queue) or whose peer did (CLOSE_WAIT) would never
 *                        be sampled. sock_ops asks for state callbacks at the
 *                        handshake and, once a socket leaves ESTABLISHED,
 *                        for a callback per incoming segment, which samples
 *                        it as tcp_probe would.
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

#define AF_INET 2
#define AF_INET6 10
#define NSEC_PER_SEC 1000000000ULL

/* sock_ops (include/uapi/linux/bpf.h; kept here so the object does not
 * depend on the vmlinux.h enum names). */
#define SOCKOPS_ACTIVE_ESTABLISHED_CB 4
#define SOCKOPS_PASSIVE_ESTABLISHED_CB 5
#define SOCKOPS_STATE_CB 10
#define SOCKOPS_PARSE_HDR_OPT_CB 13
#define SOCKOPS_STATE_CB_FLAG 0x4
#define SOCKOPS_PARSE_ALL_HDR_OPT_CB_FLAG 0x10

char LICENSE[] SEC("license") = "GPL";

/* Set by the daemon before load. */
const volatile __u64 sample_interval_ns = 100000000ULL;
const volatile __u64 map_capacity = 65536;
/* How long a floor is remembered: longer than any standing queue should
 * last (README, "Path floors"). */
const volatile __u32 floor_window_s = 1800;
/* Prefix lengths whose floor serves a peer with no history; 0 disables. */
const volatile __u32 floor_prefix_v4 = 24;
const volatile __u32 floor_prefix_v6 = 64;
/* Infer a new peer's floor from its bottleneck's queue (floor_infer). */
const volatile __u32 floor_infer_on = 1;

/* Records alive now: the bound of `socks` (socket storage has none). */
__u64 live_socks = 0;

/* Keeps every record type in the object's BTF (bloatd.h, struct bloatd_abi). */
struct bloatd_abi abi_anchor = {};

/* How often a socket re-reads its path's floor and feeds it, and how often a
 * receiver measures its RTT from echoed timestamps. */
#define FLOOR_REFRESH_NS NSEC_PER_SEC
#define TS_MEASURE_NS (10 * 1000 * 1000ULL)
#define BOTTLENECK_SLOTS 1024
/* How old a bottleneck's reading may be and still serve a handshake: a
 * sender in loss recovery behind a deep queue can go a second without an
 * RTT sample, and a standing queue does not vanish in that time. */
#define BOTTLENECK_FRESH_NS NSEC_PER_SEC

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct bloatd_sock);
} socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} samples SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BLOATD_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

/* Floors of peers and of prefixes; the least recently used go first when
 * full (the daemon counts them: created - present). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 32768);	/* floor_entries, set by the daemon */
	__type(key, struct bloatd_path_key);
	__type(value, struct bloatd_floor);
} floors SEC(".maps");

/* The queue each route's bottleneck holds now: direct-mapped by a hash of
 * (netns, route), the newest reading wins a collision. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BOTTLENECK_SLOTS);
	__type(key, __u32);
	__type(value, struct bloatd_bottleneck);
} bottlenecks SEC(".maps");

/* Scratch record for the map iterator, which must not write into the live
 * record it reads without the socket's lock. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bloatd_sock);
} scratch SEC(".maps");

static __always_inline void stat_inc(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &idx);

	if (v)
		*v += 1;
}

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

/* Who the socket is: set when its record is created and when it becomes
 * ESTABLISHED (at SYN_SENT the local port is not bound yet). */
static __always_inline void sock_identity(struct bloatd_sock *s,
					  const struct sock_common *skc)
{
	s->family = skc->skc_family;
	s->sport = skc->skc_num;
	s->dport = bpf_ntohs(skc->skc_dport);
	s->netns = skc->skc_net.net->ns.inum;
	if (s->family == AF_INET6) {
		__builtin_memcpy(s->saddr, &skc->skc_v6_rcv_saddr, 16);
		__builtin_memcpy(s->daddr, &skc->skc_v6_daddr, 16);
	} else {
		__builtin_memcpy(s->saddr, &skc->skc_rcv_saddr, 4);
		__builtin_memcpy(s->daddr, &skc->skc_daddr, 4);
	}
}

/* The route the socket leaves by: egress interface and gateway. */
static __always_inline void sock_route(struct bloatd_sock *s, const struct sock *sk)
{
	struct dst_entry *dst = sk->sk_dst_cache;
	struct net_device *dev;
	__u32 gw[4] = {};

	if (!dst)
		return;
	dev = dst->dev;
	if (!dev)
		return;
	s->ifindex = dev->ifindex;
	bpf_probe_read_kernel_str(s->ifname, sizeof(s->ifname), dev->name);
	/* The route's family, not the socket's: a dual-stack socket talking to
	 * an IPv4 peer (::ffff:a.b.c.d) is routed by IPv4. */
	if (BPF_CORE_READ(dst, ops, family) == AF_INET6) {
		BPF_CORE_READ_INTO(&gw, (struct rt6_info *)dst, rt6i_gateway);
	} else if (BPF_CORE_READ((struct rtable *)dst, rt_gw_family) == AF_INET) {
		gw[0] = BPF_CORE_READ((struct rtable *)dst, rt_gw4);
	} else if (BPF_CORE_READ((struct rtable *)dst, rt_gw_family) == AF_INET6) {
		BPF_CORE_READ_INTO(&gw, (struct rtable *)dst, rt_gw6);
	}
	s->route_id = floor_route_id(s->ifindex, gw);
}

/*
 * The live numbers, exactly as tcp_get_info() derives them for `ss -ti`, so
 * the kernel's own view is the oracle for every field. Read without the
 * socket's lock (the iterator): counters can be mid-update, so inflight is
 * clamped instead of wrapping.
 */
static __always_inline void sock_fill(struct bloatd_sock *s,
				      const struct tcp_sock *tp)
{
	const struct tcp_congestion_ops *ops = tp->inet_conn.icsk_ca_ops;
	__u32 out = tp->packets_out, left = tp->sacked_out + tp->lost_out;
	__u32 min_rtt = tp->rtt_min.s[0].v, write_seq = tp->write_seq;
	__u32 snd_nxt = tp->snd_nxt;

	s->cwnd = tp->snd_cwnd;
	s->ssthresh = tp->snd_ssthresh;
	s->inflight = (out > left ? out - left : 0) + tp->retrans_out;
	s->mss = tp->mss_cache;
	s->srtt_us = tp->srtt_us >> 3;
	/* ~0U until the first RTT sample. */
	s->min_rtt_us = min_rtt == ~0U ? 0 : min_rtt;
	s->total_retrans = tp->total_retrans;
	s->lost = tp->lost;
	s->rate_delivered = tp->rate_delivered;
	s->rate_interval_us = tp->rate_interval_us;
	s->bytes_acked = tp->bytes_acked;
	s->bytes_received = tp->bytes_received;
	s->rcv_rtt_us = tp->rcv_rtt_est.rtt_us >> 3;
	s->unsent_bytes = (__s32)(write_seq - snd_nxt) > 0 ? write_seq - snd_nxt : 0;
	/* The stack sizes every header by whether timestamps were agreed
	 * (20 bytes, or 32 with the aligned option): a plain field, where the
	 * tstamp_ok bitfield read back set on connections without them. */
	if (tp->tcp_header_len > 20)
		s->flags |= BLOATD_F_TIMESTAMPS;
	else
		s->flags &= ~BLOATD_F_TIMESTAMPS;
	/* The name is read only when the ops change (setsockopt, sockops). */
	if ((__u64)ops != s->ca_ops) {
		s->ca_ops = (__u64)ops;
		bpf_probe_read_kernel_str(s->cc, sizeof(s->cc), ops->name);
	}
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
							     const struct bloatd_path_key *key)
{
	return bpf_map_lookup_elem(&floors, key);
}

static __always_inline int floor_env_insert(void *env, const struct bloatd_path_key *key,
					    const struct bloatd_floor *f)
{
	return bpf_map_update_elem(&floors, key, f, BPF_NOEXIST);
}

static __always_inline __u32 floor_env_infer(void *env, __u32 own_us)
{
	return bottleneck_infer(env, own_us, bpf_ktime_get_ns());
}

static __always_inline void floor_env_count(void *env, __u32 stat)
{
	stat_inc(stat);
}

#include "floor_path.h"

/* Feed the socket's minimum into its path's floors and read back the floor
 * its queueing delay is measured against (floor_path.h). */
static __always_inline void floor_refresh(struct bloatd_sock *s, __u64 now_ns)
{
	struct bloatd_floor_cfg cfg = {
		.window_s = floor_window_s,
		.prefix_v4 = floor_prefix_v4,
		.prefix_v6 = floor_prefix_v6,
		.infer = floor_infer_on,
	};
	struct bloatd_floor_subject subj = {
		.netns = s->netns,
		.route_id = s->route_id,
		.own_us = own_min_us(s),
		.family = s->family,
	};
	__u32 source, floor_us;

	s->floor_ns = now_ns;
	__builtin_memcpy(subj.daddr, s->daddr, 16);
	floor_us = floor_path_refresh(s, &cfg, &subj, now_ns / NSEC_PER_SEC, &source);
	if (floor_us) {
		s->floor_us = floor_us;
		s->floor_source = source;
	}
}

/* Queueing delay on both views against the floor. */
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
	/* The receiver's RTT as bloatd measures it from echoed timestamps;
	 * without timestamps only the kernel's estimate is left. */
	rcv_rtt = (s->flags & BLOATD_F_RCV_TS) ? s->rcv_ts_rtt_us : s->rcv_rtt_us;
	s->rcv_queue_delay_us = rcv_rtt > s->floor_us && s->floor_us ?
				rcv_rtt - s->floor_us : 0;
}

/*
 * A receiver's RTT from the timestamp the sender echoes on its data (TSecr
 * against our own TSval clock), as ePPing and the kernel's
 * tcp_rcv_rtt_measure_ts do. The kernel's own estimate (rcv_rtt_est) serves
 * receive-buffer autotuning: it takes any lower sample at once and ignores
 * higher ones while the application has unread data, so it under-reports a
 * queue. Only the aligned timestamp option every Linux peer sends is read
 * (NOP NOP TS 10), as the kernel's fast path does; at most once per
 * TS_MEASURE_NS per socket, on a segment that carries data.
 */
static __always_inline void measure_rcv_rtt(struct bloatd_sock *s, const struct tcp_sock *tp,
					    const struct sk_buff *skb, __u64 now_ns)
{
	__u8 th[32];
	__u32 tsecr, now_us, rtt_us, delta, len = skb->len;
	__s32 err;

	if (now_ns - s->ts_ns < TS_MEASURE_NS)
		return;
	if (bpf_probe_read_kernel(th, sizeof(th), skb->data))
		return;
	/* doff >= 8 words: 12 option bytes; the segment carries data. */
	if ((th[12] >> 4) < 8 || len <= (__u32)(th[12] >> 4) * 4)
		return;
	if (th[20] != 1 || th[21] != 1 || th[22] != 8 || th[23] != 10)
		return;
	s->ts_ns = now_ns;
	tsecr = ((__u32)th[28] << 24) | ((__u32)th[29] << 16) | ((__u32)th[30] << 8) | th[31];
	/* Later segments of one burst echo the same value and would add the
	 * sender's own pacing; measure the first, as the kernel does. */
	if (tsecr == s->rcv_last_tsecr)
		return;
	s->rcv_last_tsecr = tsecr;
	tsecr -= tp->tsoffset;
	now_us = bpf_ktime_get_ns() / 1000;
	if (BPF_CORE_READ_BITFIELD_PROBED(tp, tcp_usec_ts)) {
		rtt_us = now_us - tsecr;
	} else {
		delta = now_us / 1000 - tsecr;
		rtt_us = delta * 1000;
		/* Millisecond clock: a sub-millisecond RTT reads 0. */
		if (!delta)
			rtt_us = 500;
	}
	if ((__s32)rtt_us <= 0 || rtt_us > 60 * 1000 * 1000)
		return;
	/* Smoothed like srtt (gain 1/8), so one late echo does not swing it. */
	if (!(s->flags & BLOATD_F_RCV_TS)) {
		s->rcv_ts_rtt_us = rtt_us;
		s->flags |= BLOATD_F_RCV_TS;
	} else {
		err = (__s32)(rtt_us - s->rcv_ts_rtt_us);
		s->rcv_ts_rtt_us += err >> 3;
	}
}

static __always_inline void sock_send(struct bloatd_sock *s, __u8 kind)
{
	s->kind = kind;
	/* No wakeup: the daemon drains the ring on its own clock, so a busy
	 * host does not pay one wakeup per sample. */
	if (bpf_ringbuf_output(&samples, s, sizeof(*s), BPF_RB_NO_WAKEUP))
		stat_inc(BLOATD_STAT_DROP_RINGBUF);
}

/*
 * A new record, born when a connection starts (SYN_SENT, ESTABLISHED) or at
 * its first segment in ESTABLISHED; never from the tail events of a closing
 * socket, which would leave a record nobody deletes.
 */
static __always_inline struct bloatd_sock *sock_create(struct sock *sk,
							const struct tcp_sock *tp)
{
	struct bloatd_sock *s;

	if (live_socks >= map_capacity) {
		stat_inc(BLOATD_STAT_DROP_MAP_FULL);
		return NULL;
	}
	s = bpf_sk_storage_get(&socks, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!s) {
		stat_inc(BLOATD_STAT_DROP_MAP_FULL);
		return NULL;
	}
	if (!s->cookie) {
		__sync_fetch_and_add(&live_socks, 1);
		stat_inc(BLOATD_STAT_CREATED);
		s->cookie = bpf_get_socket_cookie(sk);
		sock_identity(s, &sk->__sk_common);
		sock_route(s, sk);
		s->state = sk->__sk_common.skc_state;
		s->ca_state = BPF_CORE_READ_BITFIELD_PROBED(&tp->inet_conn, icsk_ca_state);
	}
	return s;
}

/*
 * Close the interval: the role from what moved since the previous sample
 * (a connection's first bytes, or a request/response turn, must not pin it
 * to a side for life), the goodput over the real time between the two
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

	if (d_acked > d_rcvd)
		s->role = BLOATD_ROLE_SENDER;
	else if (d_rcvd > d_acked)
		s->role = BLOATD_ROLE_RECEIVER;
	moved = d_acked > d_rcvd ? d_acked : d_rcvd;
	if (moved || delivered != s->prev_delivered || segs_in != s->prev_segs_in)
		s->flags |= BLOATD_F_ACTIVE;
	else
		s->flags &= ~BLOATD_F_ACTIVE;
	/* bytes * 8e6 / us: exact up to 2 TB between samples. */
	s->throughput_bps = s->sample_ns && dt_us ? moved * 8000000 / dt_us : 0;
	s->prev_acked = s->bytes_acked;
	s->prev_received = s->bytes_received;
	s->prev_delivered = delivered;
	s->prev_segs_in = segs_in;
	s->sample_ns = now_ns;
}

/* Bring the record up to date, measure its queue, and send it as a sample. */
static __always_inline void sock_sample(struct bloatd_sock *s, const struct tcp_sock *tp)
{
	__u64 now_ns = bpf_ktime_get_ns();

	sock_fill(s, tp);
	sock_interval(s, tp, now_ns);
	if (now_ns - s->floor_ns >= FLOOR_REFRESH_NS)
		floor_refresh(s, now_ns);
	sock_queues(s);
	/* Sockets whose floor was observed report their bottleneck's queue,
	 * once their side of the transfer has an RTT to measure it from. */
	if ((s->flags & BLOATD_F_ACTIVE) &&
	    (s->floor_source == BLOATD_FLOOR_SOCKET || s->floor_source == BLOATD_FLOOR_PEER)) {
		if (s->role == BLOATD_ROLE_RECEIVER) {
			if (s->flags & BLOATD_F_RCV_TS || s->rcv_rtt_us)
				bottleneck_publish(s, s->rcv_queue_delay_us, now_ns);
		} else if (s->srtt_us) {
			bottleneck_publish(s, s->queue_delay_us, now_ns);
		}
	}
	sock_send(s, BLOATD_SAMPLE);
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(tcp_probe, struct sock *sk, const struct sk_buff *skb)
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	struct bloatd_sock *s;
	__u64 now_ns;

	stat_inc(BLOATD_STAT_PROBE);
	if (!tp)
		return 0;
	s = bpf_sk_storage_get(&socks, sk, 0, 0);
	/* tcp_probe fires only in ESTABLISHED (tcp_rcv_established). */
	if (!s && !(s = sock_create(sk, tp)))
		return 0;
	now_ns = tcp_clock_ns(tp);
	s->update_ns = now_ns;
	if (s->flags & BLOATD_F_TIMESTAMPS)
		measure_rcv_rtt(s, tp, skb, now_ns);
	/* Signed: the TCP clock can trail the real time of the last sample. */
	if ((__s64)(now_ns - s->sample_ns) >= (__s64)sample_interval_ns)
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
	s->update_ns = tcp_clock_ns(tp);
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
	tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 0;

	if (newstate == TCP_SYN_SENT || newstate == TCP_ESTABLISHED) {
		s = bpf_sk_storage_get(&socks, sk, 0, 0);
		if (!s && !(s = sock_create(sk, tp)))
			return 0;
		s->state = newstate;
		if (newstate == TCP_SYN_SENT) {
			/* connect() runs in the caller's context: the one
			 * moment the owning process is known. */
			s->pid = bpf_get_current_pid_tgid() >> 32;
			bpf_get_current_comm(s->comm, sizeof(s->comm));
			return 0;
		}
		sock_identity(s, &sk->__sk_common);
		sock_route(s, sk);
		sock_fill(s, tp);
		/* The handshake just measured the path: find its floor now,
		 * while the bottleneck's queue is the one it crossed. */
		now_ns = bpf_ktime_get_ns();
		floor_refresh(s, now_ns);
		sock_queues(s);
		return 0;
	}

	s = bpf_sk_storage_get(&socks, sk, 0, 0);
	if (!s)
		return 0;
	s->state = newstate;
	if (newstate == TCP_CLOSE) {
		/* The last word on this socket, then the record goes. Its
		 * minimum stays in its path's floor. */
		sock_fill(s, tp);
		now_ns = bpf_ktime_get_ns();
		sock_interval(s, tp, now_ns);
		floor_refresh(s, now_ns);
		sock_queues(s);
		sock_send(s, BLOATD_CLOSED);
		if (!bpf_sk_storage_delete(&socks, sk)) {
			__sync_fetch_and_add(&live_socks, -1);
			stat_inc(BLOATD_STAT_DELETED);
		}
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
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags |
					  SOCKOPS_STATE_CB_FLAG);
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
	s->update_ns = tcp_clock_ns(tp);
	s->state = skops->state;
	if ((__s64)(s->update_ns - s->sample_ns) >= (__s64)sample_interval_ns)
		sock_sample(s, tp);
	return 1;
}

/*
 * Walks the TCP sockets of the reader's network namespace once, so sockets
 * opened before bloatd started (an idle ssh session) are listed too. Sockets
 * of other namespaces show up at their next segment through tcp_probe.
 */
SEC("iter/tcp")
int seed_sockets(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct tcp_sock *tp;
	struct bloatd_sock *s;

	if (!skc)
		return 0;
	/* Full sockets only: no listeners, request or timewait minisocks. */
	if (skc->skc_state == TCP_LISTEN || skc->skc_state == TCP_TIME_WAIT ||
	    skc->skc_state == TCP_NEW_SYN_RECV || skc->skc_state == TCP_CLOSE)
		return 0;
	tp = bpf_skc_to_tcp_sock(skc);
	if (!tp)
		return 0;
	stat_inc(BLOATD_STAT_ITER);
	s = sock_create((struct sock *)tp, tp);
	if (!s)
		return 0;
	sock_fill(s, tp);
	s->state = skc->skc_state;
	s->update_ns = tcp_clock_ns(tp);
	floor_refresh(s, bpf_ktime_get_ns());
	sock_queues(s);
	return 0;
}

/*
 * Every record, refreshed from its socket as it is read: `bloatd sockets`
 * shows the kernel's numbers of this moment, for every namespace. The
 * socket is read without its lock, so the fresh numbers go into a scratch
 * copy, never into the live record the probes own.
 */
SEC("iter/bpf_sk_storage_map")
int dump_socks(struct bpf_iter__bpf_sk_storage_map *ctx)
{
	struct bloatd_sock *live = ctx->value, *s;
	struct sock *sk = ctx->sk;
	struct tcp_sock *tp;
	__u32 zero = 0;

	if (!live || !sk || !live->cookie)
		return 0;
	s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return 0;
	__builtin_memcpy(s, live, sizeof(*s));
	if (!s->cookie)
		return 0;
	tp = bpf_skc_to_tcp_sock(sk);
	if (tp) {
		sock_fill(s, tp);
		sock_queues(s);
	}
	bpf_seq_write(ctx->meta->seq, s, sizeof(*s));
	return 0;
}

/* Every path floor (peers and prefixes), key and value, in one read. */
SEC("iter/bpf_map_elem")
int dump_floors(struct bpf_iter__bpf_map_elem *ctx)
{
	struct bloatd_path_key *key = ctx->key;
	struct bloatd_floor *floor = ctx->value;

	if (!key || !floor)
		return 0;
	bpf_seq_write(ctx->meta->seq, key, sizeof(*key));
	bpf_seq_write(ctx->meta->seq, floor, sizeof(*floor));
	return 0;
}
