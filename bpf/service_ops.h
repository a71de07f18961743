/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Which service a socket serves, and who holds it: the part of the probes
 * (probes.bpf.c) that attributes sockets to services. Nothing here runs per
 * packet: a socket's service is resolved once, when its record is made,
 * and counted per sample (at most once per socket per sampling interval).
 *
 * A service is the socket's cgroup v2 (sk->sk_cgrp_data: the cgroup of the
 * process that created the socket, when it created it; an accepted
 * connection inherits its listener's), not the cgroup of whatever task
 * the probe happens to interrupt. The daemon names it (a systemd unit, a
 * container, the cgroup's path: daemon/src/service.rs).
 *
 * Hooks (called from probes.bpf.c and sock_record.h):
 *   sock_create             sock_service(): the cgroup id, and the owner
 *                           the socket carries (an accepted connection).
 *   inet_sock_set_state to TCP_LISTEN  listen_owner(): listen() runs in the
 *                           owner's context; its pid and comm go into the
 *                           listener's `owners` storage, which the kernel
 *                           clones into every connection it accepts
 *                           (BPF_F_CLONE): accepted connections get their
 *                           process without any walk of /proc.
 *   sock_stats              service_stats(): the sample's queueing delay and
 *                           RTT into the service's histograms (`svc_stats`).
 * Iterators, once at start (seed_owners' comment):
 *   iter/task_file seed_owners  sockets opened before bloatd (listeners
 *                           above all): the process holding them, from
 *                           every task's open files (bpf_sock_from_file,
 *                           Linux 5.11: every kernel the core runs on);
 *   iter/tcp seed_sockets   give it to them.
 */
#ifndef BLOATD_SERVICE_OPS_H
#define BLOATD_SERVICE_OPS_H

#include "probes_state.h"

/* The owner of a listener, cloned into each connection it accepts. */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC | BPF_F_CLONE);
	__type(key, int);
	__type(value, struct bloatd_owner);
} owners SEC(".maps");

/*
 * Queueing delay and RTT histograms per (cgroup, cc, role), shared by the
 * CPUs. Bounded (service_entries): the daemon folds entries that stopped
 * counting into its own totals and deletes them; samples that find the map
 * full go to the entry of cgroup 0 of their cc and role, which the daemon
 * makes at load and labels "other". Preallocated: a tracing program must
 * not allocate.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);	/* service_entries, set by the daemon */
	__type(key, struct bloatd_svc_key);
	__type(value, struct bloatd_svc_stats);
} svc_stats SEC(".maps");

/* The value a new svc_stats entry starts from. */
const struct bloatd_svc_stats svc_zero = {};

/*
 * The socket's cgroup v2. NULL with *root set where the kernel's own
 * sock_cgroup_ptr() answers the root without a pointer to give: before
 * 5.15 (RHEL 9's 5.14) the pointer shares one word with net_cls/net_prio
 * data (struct sock_cgroup_data's `val`), and a word holding no cgroup or
 * v1 data (a low bit set) means the root. NULL alone: unknown.
 *
 * The first word of sk_cgrp_data is `cgroup` from 5.15 and `val` before,
 * and it is read as a word on every kernel: a CO-RE read of the field one
 * of them lacks is poisoned by the loader, and the compiler may compute
 * both branches' reads on one path (it did: 6.18 refused the sock_ops
 * program), where the verifier then meets it.
 */
static __always_inline struct cgroup *sock_cgroup(const struct sock *sk, int *root)
{
	__u64 v = 0;

	*root = 0;
	bpf_probe_read_kernel(&v, sizeof(v), &sk->sk_cgrp_data);
	if (bpf_core_field_exists(struct sock_cgroup_data, cgroup))
		return (struct cgroup *)v;
	if (!v || (v & 3)) {
		*root = 1;
		return NULL;
	}
	return (struct cgroup *)v;
}

/*
 * The kernfs id of the socket's cgroup v2, which is the inode number of
 * its directory under the cgroup2 mount (1: the root). 0 if unknown.
 */
static __always_inline __u64 sock_cgroup_id(const struct sock *sk)
{
	int root;
	struct cgroup *cg = sock_cgroup(sk, &root);

	if (root)
		return 1;
	if (!cg)
		return 0;
	return BPF_CORE_READ(cg, kn, id);
}

/* A new record learns its service and, for an accepted connection, the
 * owner its listener passed on (then dropped: the record keeps it). */
static __always_inline void sock_service(struct bloatd_sock *s, struct sock *sk)
{
	struct bloatd_owner *o;

	s->cgroup_id = sock_cgroup_id(sk);
	o = bpf_sk_storage_get(&owners, sk, 0, 0);
	if (!o)
		return;
	if (!s->pid) {
		s->pid = o->pid;
		__builtin_memcpy(s->comm, o->comm, sizeof(s->comm));
	}
	bpf_sk_storage_delete(&owners, sk);
}

/* listen(): the caller owns the listener and what it will accept. */
static __always_inline void listen_owner(struct sock *sk)
{
	struct bloatd_owner *o = bpf_sk_storage_get(&owners, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);

	if (!o)
		return;
	o->pid = bpf_get_current_pid_tgid() >> 32;
	bpf_get_current_comm(o->comm, sizeof(o->comm));
}

/*
 * One sample into its service's histograms: the bucket indexes the caller
 * computed for the per-cc statistics, and the values. rx: the receiver's
 * histograms.
 */
static __always_inline void service_stats(const struct bloatd_sock *s, __u32 rx,
					  __u32 queue_b, __u32 queue_us, __u32 rtt_b, __u32 rtt_us,
					  __u32 k)
{
	struct bloatd_svc_key key = {
		.cgroup_id = s->cgroup_id,
		.cc_idx = s->cc_idx < BLOATD_CC_MAX ? s->cc_idx : BLOATD_CC_MAX - 1,
		.role = rx,
	};
	struct bloatd_svc_stats *v = bpf_map_lookup_elem(&svc_stats, &key);

	if (!v) {
		/* Another CPU may insert the same key first: look again. */
		bpf_map_update_elem(&svc_stats, &key, &svc_zero, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&svc_stats, &key);
		if (!v) {
			stat_inc(BLOATD_STAT_SVC_FULL);
			key.cgroup_id = 0;
			v = bpf_map_lookup_elem(&svc_stats, &key);
			if (!v)
				return;
		}
	}
	if (queue_b >= BLOATD_DELAY_BUCKETS || rtt_b >= BLOATD_DELAY_BUCKETS)
		return;
	__sync_fetch_and_add(&v->delay[BLOATD_HIST_QUEUE][queue_b], k);
	__sync_fetch_and_add(&v->delay_sum_us[BLOATD_HIST_QUEUE], (__u64)k * queue_us);
	__sync_fetch_and_add(&v->delay[BLOATD_HIST_RTT][rtt_b], k);
	__sync_fetch_and_add(&v->delay_sum_us[BLOATD_HIST_RTT], (__u64)k * rtt_us);
}

/*
 * Once at start, sockets opened before bloatd get the process that holds
 * them, in two walks. seed_owners walks every task's open files (the
 * reader's pid namespace, every network namespace) and notes each TCP
 * socket's holder under the socket's address (the last holder walked wins:
 * a listener systemd opened for socket activation names the service that
 * inherited it). It cannot give the socket its owner itself: from a file,
 * kernels since 6.x hand the socket's `sk` over as an untrusted pointer,
 * which no socket storage takes. Then a TCP iterator (seed_sockets, in
 * every namespace the daemon can enter), whose sockets are trusted, gives
 * each socket noted its owner
 * (seed_owner_apply): a record's pid, or a listener's `owners` storage for
 * the connections it will accept. Bounded: beyond 16,384 sockets open at
 * start, the rest get their process when they have one of their own
 * (listen, an accept).
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct bloatd_owner);
} seed_owner_of SEC(".maps");

SEC("iter/task_file")
int seed_owners(struct bpf_iter__task_file *ctx)
{
	struct task_struct *task = ctx->task;
	struct file *file = ctx->file;
	struct bloatd_owner o = {};
	struct socket *sock;
	__u64 addr = 0;

	if (!task || !file)
		return 0;
	sock = bpf_sock_from_file(file);
	if (!sock || bpf_probe_read_kernel(&addr, sizeof(addr), &sock->sk) || !addr)
		return 0;
	o.pid = task->tgid;
	bpf_probe_read_kernel_str(o.comm, sizeof(o.comm), task->comm);
	bpf_map_update_elem(&seed_owner_of, &addr, &o, BPF_ANY);
	return 0;
}

/* A socket a TCP iterator walks at start takes the owner seed_owners noted
 * for it, if any. */
static __always_inline void seed_owner_apply(struct tcp_sock *tp)
{
	__u64 addr = (__u64)tp;
	struct bloatd_owner *o = bpf_map_lookup_elem(&seed_owner_of, &addr), *lo;
	struct bloatd_sock *s;

	if (!o)
		return;
	s = bpf_sk_storage_get(&socks, tp, 0, 0);
	if (s) {
		if (!s->pid) {
			s->pid = o->pid;
			__builtin_memcpy(s->comm, o->comm, sizeof(s->comm));
		}
	} else {
		lo = bpf_sk_storage_get(&owners, tp, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (lo)
			*lo = *o;
	}
	bpf_map_delete_elem(&seed_owner_of, &addr);
}

#endif /* BLOATD_SERVICE_OPS_H */
