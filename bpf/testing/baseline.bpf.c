// SPDX-License-Identifier: GPL-2.0-only
/*
 * Reference programs for `make bench`, attached beside bloatd's probes to
 * the same tracepoint so every program sees the same events and their
 * costs compare side by side in one run.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u64);
} seen SEC(".maps");

/* The floor: the cost of running any program on this tracepoint, as the
 * kernel's BPF statistics measure it. */
SEC("tp_btf/tcp_probe")
int BPF_PROG(bench_empty, struct sock *sk, const struct sk_buff *skb)
{
	return 0;
}

/* The simplest useful probe: count segments per socket in a hash map. */
SEC("tp_btf/tcp_probe")
int BPF_PROG(bench_hash_update, struct sock *sk, const struct sk_buff *skb)
{
	__u64 cookie = bpf_get_socket_cookie(sk);
	__u64 one = 1;

	bpf_map_update_elem(&seen, &cookie, &one, BPF_ANY);
	return 0;
}
