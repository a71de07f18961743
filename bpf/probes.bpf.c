// SPDX-License-Identifier: GPL-2.0-only
/*
 * bloatd's probes: per-socket TCP state for every network namespace.
 *
 * Hooks (all BTF tracepoints):
 *   tcp_probe            every segment a socket in ESTABLISHED receives: ACKs
 *                        on the sender, data on the receiver. The hot path.
 *   inet_sock_set_state  lifecycle: create the record (with pid/comm on an
 *                        active open), delete it at TCP_CLOSE.
 *   tcp_retransmit_skb   keeps the record fresh while a sender is stalled in
 *                        loss recovery and receives nothing.
 *   tcp_cong_state_set   Open/Disorder/CWR/Recovery/Loss as it changes.
 *   iter/tcp             picks up sockets that existed before bloatd started
 *                        (in the reader's namespace only).
 *
 * Per packet the work is one hash lookup and a copy of a few counters from
 * tcp_sock into the socket's record. At most once per socket per sampling
 * interval the record is also pushed to the ring buffer; nothing else leaves
 * the kernel, and an idle socket costs nothing.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "bloatd.h"

#define AF_INET 2
#define AF_INET6 10

char LICENSE[] SEC("license") = "GPL";

/* Set by the daemon before load. */
const volatile __u64 sample_interval_ns = 100000000ULL;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);	/* the daemon sets the real size */
	__type(key, __u64);
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

/* Who the socket is: set once, when its record is created. */
static __always_inline void sock_identity(struct bloatd_sock *s,
					  const struct sock_common *skc)
{
	s->family = skc->skc_family;
	s->sport = skc->skc_num;
	s->dport = bpf_ntohs(skc->skc_dport);
	s->state = skc->skc_state;
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
	 * The receiver has no min_rtt of its own: its RTT estimate comes from
	 * timestamps echoed on data segments. The lowest estimate seen is the
	 * path without a queue; what rises above it is queueing delay.
	 */
	s->rcv_rtt_us = rcv_rtt_us;
	if (rcv_rtt_us && (rcv_rtt_us < s->rcv_min_rtt_us || !s->rcv_min_rtt_us))
		s->rcv_min_rtt_us = rcv_rtt_us;
	/* The name is read only when the ops change (setsockopt, sockops). */
	if ((__u64)ops != s->ca_ops) {
		s->ca_ops = (__u64)ops;
		bpf_probe_read_kernel_str(s->cc, sizeof(s->cc), ops->name);
	}
}

static __always_inline void sock_send(struct bloatd_sock *s, __u64 now, __u8 kind)
{
	s->sample_ns = now;
	s->kind = kind;
	/* No wakeup: the daemon drains the ring on its own clock, so a busy
	 * host does not pay one wakeup per sample. */
	if (bpf_ringbuf_output(&samples, s, sizeof(*s), BPF_RB_NO_WAKEUP))
		stat_inc(BLOATD_STAT_DROP_RINGBUF);
}

/*
 * The socket's record; created only when `create` is set: a record is born
 * when a connection starts (SYN_SENT, ESTABLISHED) or at its first segment
 * in ESTABLISHED, never from the tail events of a closing socket, which
 * would leave a record nobody deletes.
 */
static __always_inline struct bloatd_sock *
sock_get(const struct sock_common *skc, __u64 cookie, const struct tcp_sock *tp,
	 bool create)
{
	struct bloatd_sock *s = bpf_map_lookup_elem(&socks, &cookie);
	struct bloatd_sock init = {};
	long err;

	if (s || !create)
		return s;
	init.cookie = cookie;
	sock_identity(&init, skc);
	init.ca_state = BPF_CORE_READ_BITFIELD_PROBED(&tp->inet_conn, icsk_ca_state);
	err = bpf_map_update_elem(&socks, &cookie, &init, BPF_NOEXIST);
	if (err && err != -17 /* EEXIST: another CPU was first */) {
		stat_inc(BLOATD_STAT_DROP_MAP_FULL);
		return NULL;
	}
	if (!err)
		stat_inc(BLOATD_STAT_CREATED);
	return bpf_map_lookup_elem(&socks, &cookie);
}

/* Refresh a socket's record; send it as a sample if the interval passed. */
static __always_inline struct bloatd_sock *sock_update(struct sock *sk, bool create)
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	struct bloatd_sock *s;
	__u64 now;

	if (!tp)
		return NULL;
	s = sock_get(&sk->__sk_common, bpf_get_socket_cookie(sk), tp, create);
	if (!s)
		return NULL;
	sock_fill(s, tp);
	now = bpf_ktime_get_ns();
	s->update_ns = now;
	if (now - s->sample_ns >= sample_interval_ns)
		sock_send(s, now, BLOATD_SAMPLE);
	return s;
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(tcp_probe, struct sock *sk, const struct sk_buff *skb)
{
	stat_inc(BLOATD_STAT_PROBE);
	/* tcp_probe fires only in ESTABLISHED (tcp_rcv_established). */
	sock_update(sk, true);
	return 0;
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(tcp_retransmit_skb, const struct sock *sk, const struct sk_buff *skb,
	     int err)
{
	stat_inc(BLOATD_STAT_RETRANS);
	sock_update((struct sock *)sk, sk->__sk_common.skc_state == TCP_ESTABLISHED);
	return 0;
}

SEC("tp_btf/tcp_cong_state_set")
int BPF_PROG(tcp_cong_state_set, struct sock *sk, const __u8 ca_state)
{
	struct bloatd_sock *s;

	stat_inc(BLOATD_STAT_CONG);
	s = sock_update(sk, sk->__sk_common.skc_state == TCP_ESTABLISHED);
	/* The tracepoint fires before icsk_ca_state is written. */
	if (s)
		s->ca_state = ca_state;
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(inet_sock_set_state, const struct sock *sk, const int oldstate,
	     const int newstate)
{
	struct bloatd_sock *s;
	__u64 cookie;

	if (sk->sk_protocol != IPPROTO_TCP)
		return 0;
	stat_inc(BLOATD_STAT_STATE);
	cookie = bpf_get_socket_cookie((void *)sk);

	if (newstate == TCP_CLOSE) {
		s = bpf_map_lookup_elem(&socks, &cookie);
		if (!s)
			return 0;
		s->state = TCP_CLOSE;
		sock_send(s, bpf_ktime_get_ns(), BLOATD_CLOSED);
		if (!bpf_map_delete_elem(&socks, &cookie))
			stat_inc(BLOATD_STAT_DELETED);
		return 0;
	}
	if (newstate == TCP_SYN_SENT || newstate == TCP_ESTABLISHED) {
		s = sock_update((struct sock *)sk, true);
		if (!s)
			return 0;
		/* connect() runs in the caller's context: the one moment the
		 * owning process is known without walking /proc. */
		if (newstate == TCP_SYN_SENT) {
			s->pid = bpf_get_current_pid_tgid() >> 32;
			bpf_get_current_comm(s->comm, sizeof(s->comm));
		} else {
			/* At SYN_SENT the local port is not bound yet. */
			sock_identity(s, &sk->__sk_common);
		}
	} else {
		s = bpf_map_lookup_elem(&socks, &cookie);
		if (!s)
			return 0;
	}
	s->state = newstate;
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
	s = sock_get(skc, bpf_get_socket_cookie(tp), tp, true);
	if (!s)
		return 0;
	sock_fill(s, tp);
	s->state = skc->skc_state;
	s->update_ns = bpf_ktime_get_ns();
	return 0;
}
