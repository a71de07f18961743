// SPDX-License-Identifier: GPL-2.0-only
/*
 * Feature probes: programs that are never attached, only loaded once at
 * start (daemon/src/kernel.rs) to ask the verifier whether this kernel has
 * what bloatd's probes are built on. Each program uses one kernel feature
 * and nothing else, so a refusal names that feature.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);
} probe_storage SEC(".maps");

__u64 probe_counter = 0;

/* Socket local storage from a tracing program (Linux 5.11): where the
 * probes keep each socket's record. */
SEC("tp_btf/tcp_probe")
int BPF_PROG(sk_storage_tracing, struct sock *sk, const struct sk_buff *skb)
{
	bpf_sk_storage_get(&probe_storage, sk, 0, 0);
	return 0;
}

/* An atomic add that returns the old value (BPF_FETCH, Linux 5.12): how
 * the probes reserve a place under the socket map's bound. */
SEC("tp_btf/tcp_probe")
int BPF_PROG(atomic_fetch, struct sock *sk, const struct sk_buff *skb)
{
	return __sync_fetch_and_add(&probe_counter, 1) == 0;
}

/* bpf_setsockopt from the TCP iterator (Linux 5.15): how DRWA gives the
 * receive windows it clamps back, at stop and at the start after a crash
 * (policy_ops.h, restore_windows). */
SEC("iter/tcp")
int tcp_iter_setsockopt(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct tcp_sock *tp;
	int clamp = 0;

	if (!skc || !(tp = bpf_skc_to_tcp_sock(skc)))
		return 0;
	return bpf_setsockopt(tp, 6 /* SOL_TCP */, 10 /* TCP_WINDOW_CLAMP */, &clamp, sizeof(clamp)) != 0;
}
