/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A socket's record (struct bloatd_sock in `socks`): made when the probes
 * or the policy first meet the socket (sock_create), filled from the
 * socket (who it is, its route, its live numbers: sock_fill), and counted
 * in `sock_counts` (sock_account). Shared by probes.bpf.c and the policy
 * (policy_ops.h), which makes the record of a connection it acts on.
 */
#ifndef BLOATD_SOCK_RECORD_H
#define BLOATD_SOCK_RECORD_H

#include <bpf/bpf_endian.h>
#include "probes_state.h"
#include "service_ops.h"

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
	/* Read again every second (floor_refresh): the name only if it moved. */
	if (dev->ifindex != s->ifindex || !s->ifname[0]) {
		s->ifindex = dev->ifindex;
		bpf_probe_read_kernel_str(s->ifname, sizeof(s->ifname), dev->name);
	}
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
 * The index of a congestion control in the statistics, by name: the first
 * BLOATD_CC_MAX - 1 names get one each, any further name the last ("other").
 * Two CPUs meeting a new name at once may both take an index; the daemon
 * sums indexes that carry the same name.
 */
static __always_inline __u8 cc_index_of(const char *name)
{
	char key[BLOATD_CC_LEN];
	__u32 *found, idx;

	__builtin_memcpy(key, name, sizeof(key));
	found = bpf_map_lookup_elem(&cc_index, key);
	if (found)
		return *found;
	idx = __sync_fetch_and_add(&next_cc, 1);
	if (idx >= BLOATD_CC_MAX - 1)
		idx = BLOATD_CC_MAX - 1;
	else
		bpf_map_update_elem(&cc_names, &idx, key, BPF_ANY);
	bpf_map_update_elem(&cc_index, key, &idx, BPF_NOEXIST);
	return idx;
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
	s->delivered_ce = tp->delivered_ce;
	s->rate_delivered = tp->rate_delivered;
	s->rate_interval_us = tp->rate_interval_us;
	s->bytes_acked = tp->bytes_acked;
	s->bytes_received = tp->bytes_received;
	s->rcv_rtt_us = tp->rcv_rtt_est.rtt_us >> 3;
	s->unsent_bytes = (__s32)(write_seq - snd_nxt) > 0 ? write_seq - snd_nxt : 0;
	if (ca_state_from_sock)
		s->ca_state = BPF_CORE_READ_BITFIELD_PROBED(&tp->inet_conn, icsk_ca_state);
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
		__builtin_memset(s->cc, 0, sizeof(s->cc));
		bpf_probe_read_kernel_str(s->cc, sizeof(s->cc), ops->name);
		s->cc_idx = cc_index_of(s->cc);
	}
}

/* Add `d` to slot `slot` (1-based, 0 = none) of `sock_counts`. */
static __always_inline void counts_add(struct bloatd_sock_counts *c, __u32 slot, __s64 d)
{
	__u32 idx = slot - 1;

	if (!slot || idx >= BLOATD_CC_MAX * 2 * BLOATD_STATES)
		return;
	/* The verifier must see the bound on the register that indexes. */
	barrier_var(idx);
	if (idx >= BLOATD_CC_MAX * 2 * BLOATD_STATES)
		return;
	__sync_fetch_and_add(&((__s64 *)c->n)[idx], d);
}

/*
 * Keep `sock_counts` true: the record counts in one (cc, role, state) slot
 * at a time; `counted` says which. gone: the record is about to go.
 */
static __always_inline void sock_account(struct bloatd_sock *s, int gone)
{
	struct bloatd_sock_counts *c;
	__u32 zero = 0, cc = s->cc_idx < BLOATD_CC_MAX ? s->cc_idx : BLOATD_CC_MAX - 1;
	__u32 state = s->state < BLOATD_STATES ? s->state : 0;
	__u32 slot = gone ? 0 : (cc * 2 + (s->role == BLOATD_ROLE_RECEIVER)) * BLOATD_STATES + state + 1;
	__u32 old = s->counted;

	if (slot == old)
		return;
	c = bpf_map_lookup_elem(&sock_counts, &zero);
	if (!c)
		return;
	counts_add(c, old, -1);
	counts_add(c, slot, 1);
	s->counted = slot;
}

/*
 * Start the next interval from what the socket has done so far: the
 * handshake (a SYN acknowledged counts as one byte) and any history from
 * before bloatd saw the socket are nobody's role and no sample.
 */
static __always_inline void sock_interval_start(struct bloatd_sock *s, const struct tcp_sock *tp,
						__u64 now_ns)
{
	s->prev_acked = s->bytes_acked;
	s->prev_received = s->bytes_received;
	s->prev_delivered = tp->delivered;
	s->prev_segs_in = tp->data_segs_in;
	s->prev_sacked = tp->sacked_out;
	s->prev_ooopack = tp->rcv_ooopack;
	s->prev_tsval = tp->rx_opt.rcv_tsval;
	s->sample_ns = now_ns;
}

/*
 * A new record, born when a connection starts (SYN_SENT, ESTABLISHED) or at
 * its first segment in ESTABLISHED; never from the tail events of a closing
 * socket, which would leave a record nobody deletes. The caller gives the
 * socket's cookie: tracing programs and sock_ops ask for it with different
 * arguments.
 */
static __always_inline struct bloatd_sock *sock_create(struct sock *sk,
							const struct tcp_sock *tp,
							__u64 cookie)
{
	struct bloatd_sock *s;

	/* Reserve a place first: checking and then creating would let every
	 * CPU pass the check at once and overshoot the bound. */
	if (__sync_fetch_and_add(&live_socks, 1) >= map_capacity) {
		__sync_fetch_and_add(&live_socks, -1);
		sock_refused(sk);
		return NULL;
	}
	s = bpf_sk_storage_get(&socks, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!s || s->cookie) {
		__sync_fetch_and_add(&live_socks, -1);
		if (!s)
			sock_refused(sk);	/* out of memory */
		return s;
	}
	stat_inc(BLOATD_STAT_CREATED);
	s->cookie = cookie;
	sock_service(s, sk);
	sock_identity(s, &sk->__sk_common);
	if (!bpf_map_lookup_elem(&netns_seen, &s->netns))
		bpf_map_update_elem(&netns_seen, &s->netns, &s->netns, BPF_NOEXIST);
	sock_route(s, sk);
	s->state = sk->__sk_common.skc_state;
	s->ca_state = BPF_CORE_READ_BITFIELD_PROBED(&tp->inet_conn, icsk_ca_state);
	sock_fill(s, tp);
	s->prev_retrans = s->total_retrans;	/* history before bloatd is not new */
	sock_interval_start(s, tp, bpf_ktime_get_ns());
	sock_account(s, 0);
	return s;
}

#endif /* BLOATD_SOCK_RECORD_H */
