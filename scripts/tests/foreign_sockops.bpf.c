// SPDX-License-Identifier: GPL-2.0-only
/*
 * Another tool's sock_ops program, for test_policy.py: attached to a child
 * cgroup, it turns on the RTT and header-option callbacks for its sockets
 * at the handshake and counts the callbacks it then gets. bloatd's own
 * program (on the root cgroup) runs after it and must not turn them off.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} foreign_seen SEC(".maps");

SEC("sockops")
int foreign_sock_ops(struct bpf_sock_ops *skops)
{
	__u64 *n;
	__u32 k;

	switch (skops->op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags |
					  BPF_SOCK_OPS_RTT_CB_FLAG |
					  BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG);
		return 1;
	case BPF_SOCK_OPS_RTT_CB:
		k = 0;
		break;
	case BPF_SOCK_OPS_HDR_OPT_LEN_CB:
		k = 1;
		break;
	default:
		return 1;
	}
	n = bpf_map_lookup_elem(&foreign_seen, &k);
	if (n)
		__sync_fetch_and_add(n, 1);
	return 1;
}

char LICENSE[] SEC("license") = "GPL";
