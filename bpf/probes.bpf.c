// SPDX-License-Identifier: GPL-2.0-only
/*
 * bloatd's probes: per-socket TCP state for every network namespace.
 *
 * Hooks (all BTF tracepoints):
 *   tcp_probe            every segment a socket in ESTABLISHED receives: ACKs
 *                        on the sender, data on the receiver. The hot path.
 *   inet_sock_set_state  lifecycle: create the record (with pid/comm on an
 *                        active open), send a last sample and delete it at
 *                        TCP_CLOSE.
 *   tcp_retransmit_skb   keeps the record fresh while a sender is stalled in
 *                        loss recovery and receives nothing.
 *   tcp_cong_state_set   Open/Disorder/CWR/Recovery/Loss as it changes.
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
 * sampling interval it copies the socket's numbers into the record and
 * pushes the record into the ring buffer. Nothing else leaves the kernel,
 * and an idle socket costs nothing.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "bloatd.h"

#define AF_INET6 10

char LICENSE[] SEC("license") = "GPL";

/* Set by the daemon before load. */
const volatile __u64 sample_interval_ns = 100000000ULL;
const volatile __u64 max_socks = 65536;

/* Records alive now: the bound of `socks` (socket storage has none). */
__u64 live_socks = 0;

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

static __always_inline void stat_inc(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &idx);

	if (v)
		*v += 1;
}

/*
 * The TCP clock: CLOCK_MONOTONIC in microseconds, which the stack stamps on
 * every segment it handles. Reading it is free; bpf_ktime_get_ns() costs
 * about 45 ns here, more than the rest of the hot path.
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

/*
 * The live numbers, exactly as tcp_get_info() derives them for `ss -ti`, so
 * the kernel's own view is the oracle for every field.
 */
static __always_inline void sock_fill(struct bloatd_sock *s,
				      const struct tcp_sock *tp)
{
	const struct tcp_congestion_ops *ops = tp->inet_conn.icsk_ca_ops;
	__u32 rcv_rtt_us = tp->rcv_rtt_est.rtt_us >> 3;
	__u32 floor_us;

	s->cwnd = tp->snd_cwnd;
	s->ssthresh = tp->snd_ssthresh;
	s->inflight = tp->packets_out - (tp->sacked_out + tp->lost_out) +
		      tp->retrans_out;
	s->mss = tp->mss_cache;
	s->srtt_us = tp->srtt_us >> 3;
	s->min_rtt_us = tp->rtt_min.s[0].v;
	s->total_retrans = tp->total_retrans;
	s->lost = tp->lost;
	s->rate_delivered = tp->rate_delivered;
	s->rate_interval_us = tp->rate_interval_us;
	s->bytes_acked = tp->bytes_acked;
	s->bytes_received = tp->bytes_received;
	/*
	 * A receiver's RTT estimate comes from timestamps echoed on the data
	 * it receives, so it includes the queue the data waited in. Its floor
	 * is the lowest of those estimates and of the socket's own min RTT
	 * (its handshake and requests), which a download that starts behind
	 * a standing queue would otherwise never see below.
	 */
	s->rcv_rtt_us = rcv_rtt_us;
	floor_us = s->rcv_min_rtt_us;
	if (rcv_rtt_us && (!floor_us || rcv_rtt_us < floor_us))
		floor_us = rcv_rtt_us;
	if (s->min_rtt_us && (!floor_us || s->min_rtt_us < floor_us))
		floor_us = s->min_rtt_us;
	s->rcv_min_rtt_us = floor_us;
	/* The name is read only when the ops change (setsockopt, sockops). */
	if ((__u64)ops != s->ca_ops) {
		s->ca_ops = (__u64)ops;
		bpf_probe_read_kernel_str(s->cc, sizeof(s->cc), ops->name);
	}
}

static __always_inline void sock_send(struct bloatd_sock *s, __u64 now_ns, __u8 kind)
{
	s->sample_ns = now_ns;
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

	if (live_socks >= max_socks) {
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
		s->state = sk->__sk_common.skc_state;
		s->ca_state = BPF_CORE_READ_BITFIELD_PROBED(&tp->inet_conn, icsk_ca_state);
	}
	return s;
}

/* Bring the record up to date and send it as a sample. */
static __always_inline void sock_sample(struct bloatd_sock *s,
					const struct tcp_sock *tp, __u64 now_ns)
{
	sock_fill(s, tp);
	sock_send(s, now_ns, BLOATD_SAMPLE);
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
	if (now_ns - s->sample_ns >= sample_interval_ns)
		sock_sample(s, tp, now_ns);
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
		if (newstate == TCP_SYN_SENT) {
			/* connect() runs in the caller's context: the one
			 * moment the owning process is known. */
			s->pid = bpf_get_current_pid_tgid() >> 32;
			bpf_get_current_comm(s->comm, sizeof(s->comm));
		} else {
			sock_identity(s, &sk->__sk_common);
		}
		s->state = newstate;
		sock_fill(s, tp);
		return 0;
	}

	s = bpf_sk_storage_get(&socks, sk, 0, 0);
	if (!s)
		return 0;
	s->state = newstate;
	if (newstate == TCP_CLOSE) {
		/* The last word on this socket, then the record goes. */
		sock_fill(s, tp);
		sock_send(s, tcp_clock_ns(tp), BLOATD_CLOSED);
		if (!bpf_sk_storage_delete(&socks, sk)) {
			__sync_fetch_and_add(&live_socks, -1);
			stat_inc(BLOATD_STAT_DELETED);
		}
	}
	return 0;
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
	return 0;
}

/*
 * Every record, refreshed from its socket as it is read: `bloatd sockets`
 * shows the kernel's numbers of this moment, for every namespace.
 */
SEC("iter/bpf_sk_storage_map")
int dump_socks(struct bpf_iter__bpf_sk_storage_map *ctx)
{
	struct bloatd_sock *s = ctx->value;
	struct sock *sk = ctx->sk;
	struct tcp_sock *tp;

	if (!s || !sk)
		return 0;
	tp = bpf_skc_to_tcp_sock(sk);
	if (tp)
		sock_fill(s, tp);
	bpf_seq_write(ctx->meta->seq, s, sizeof(*s));
	return 0;
}
