/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What both bloatd congestion controls need from the kernel: the TCP helpers
 * that are inline functions in include/net/tcp.h (so not callable from BPF),
 * the kfuncs bpf_tcp_ca exports, and the state export to user space.
 *
 * Kernel structs are read by direct, CO-RE relocated access (vmlinux.h marks
 * every record preserve_access_index): struct_ops programs get typed
 * pointers to the socket, the verifier allows plain loads from them, and the
 * few fields a congestion control may write (snd_cwnd, snd_ssthresh,
 * icsk_ca_priv...) can only be written that way.
 */
#ifndef BLOATD_CC_BPF_H
#define BLOATD_CC_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "cc_state.h"

#define USEC_PER_SEC	1000000ULL
#define USEC_PER_MSEC	1000U

/* Exported by net/ipv4/bpf_tcp_ca.c to struct_ops programs. */
extern __u32 tcp_slow_start(struct tcp_sock *tp, __u32 acked) __ksym;
extern void tcp_cong_avoid_ai(struct tcp_sock *tp, __u32 w, __u32 acked) __ksym;
extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;

/*
 * How often (at most) a socket's snapshot is copied to the export map, on
 * top of the copies at every congestion event (when it happens, so that a
 * flow that never gets another ACK still shows it) and on the ACK after. The daemon samples
 * every 100 ms: 10 ms keeps what it shows fresh while a bulk flow at line
 * rate pays one map update per 10 ms instead of one per ACK.
 */
const volatile __u32 export_interval_us = 10000;

static __always_inline struct tcp_sock *tcp_sk(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline void *inet_csk_ca(const struct sock *sk)
{
	return (void *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

/* Signed distance between two 32-bit sequence numbers (RFC 1982 style). */
static __always_inline bool seq_after(__u32 seq1, __u32 seq2)
{
	return (__s32)(seq2 - seq1) < 0;
}

static __always_inline bool tcp_in_slow_start(const struct tcp_sock *tp)
{
	return tp->snd_cwnd < tp->snd_ssthresh;
}

/*
 * Growing cwnd only makes sense when cwnd is what limits the sender; an
 * application-limited flow would otherwise inflate cwnd far past anything
 * the path has shown it can carry. In slow start, allow cwnd to reach twice
 * what was in flight (include/net/tcp.h: tcp_is_cwnd_limited).
 */
static __always_inline bool tcp_is_cwnd_limited(const struct sock *sk)
{
	const struct tcp_sock *tp = tcp_sk(sk);

	if (BPF_CORE_READ_BITFIELD(tp, is_cwnd_limited))
		return true;
	if (tcp_in_slow_start(tp))
		return tp->snd_cwnd < 2 * tp->max_packets_out;
	return false;
}

/*
 * The socket's cookie if someone already asked the kernel for it, else 0.
 * bpf_tcp_ca_get_func_proto does not offer bpf_get_socket_cookie to
 * struct_ops programs, and generating one here would race with the kernel's
 * own lazy generation; skc_cookie is written once (0 -> cookie) and never
 * changes after, so reading it is safe and cheap.
 */
static __always_inline __u64 sk_cookie(const struct sock *sk)
{
	return (__u64)sk->__sk_common.skc_cookie.counter;
}

/*
 * True when a socket's snapshot should be written now: at once when `force`
 * (a congestion event just happened), else at most every export_interval_us.
 * Updates *last_us when it says yes. 32-bit microseconds wrap after 71
 * minutes, harmlessly: only differences are used.
 */
static __always_inline bool export_due(__u32 now_us, __u32 *last_us, bool force)
{
	if (!force && now_us - *last_us < export_interval_us)
		return false;
	*last_us = now_us;
	return true;
}

/*
 * Snapshots the state map refused (full at max_entries, or out of memory):
 * the snapshot is lost until the socket's next export. Read by user space
 * (bloatd_cc::Registration::export_failures, /metrics
 * bloatd_cc_export_failures_total).
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} export_failures SEC(".maps");

static __always_inline void export_write(void *states, __u64 *cookie, const void *snapshot)
{
	__u32 zero = 0;
	__u64 *failed;

	if (!bpf_map_update_elem(states, cookie, snapshot, BPF_ANY))
		return;
	failed = bpf_map_lookup_elem(&export_failures, &zero);
	if (failed)
		(*failed)++;
}

#endif /* BLOATD_CC_BPF_H */
