/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The probes' state: the constants the daemon sets before load, the
 * variables, the maps, and the two helpers every part counts with
 * (stat_inc, sock_refused). Included by probes.bpf.c and by the headers
 * of its parts (service_ops.h, sock_record.h, rcv_rtt.h, policy_ops.h), so
 * each compiles by itself.
 */
#ifndef BLOATD_PROBES_STATE_H
#define BLOATD_PROBES_STATE_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "bloatd.h"
#include "stats.h"
#include "sampler.h"

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
/* Path floors at all (config `floors`): off, each socket's queue is
 * measured against its own minimum and no floor is kept. */
const volatile __u32 floors_on = 1;
/* Queueing delay from which a socket counts as bloated. */
const volatile __u32 bloat_threshold_us = 100000;
/* The kernel has no tcp_cong_state_set tracepoint (before Linux 5.19): the
 * congestion state is read from the socket whenever the record is filled,
 * instead of as it changes. */
const volatile __u32 ca_state_from_sock = 0;
/* Sampling (config `sampling`): 1 adaptive (sampler.h), 0 exact (every
 * socket sampled every interval it carries traffic). */
const volatile __u32 sampling_adaptive = 1;

/* Records alive now: the bound of `socks` (socket storage has none). */
__u64 live_socks = 0;
/* Congestion control indexes handed out (see cc_index_of). */
__u32 next_cc = 0;

/* Adaptive sampling (sampler.h): the kernel clock's ticks per sampling
 * interval, 0 until calibrated (a second after the first sample; every
 * segment is looked at until then, so each socket carrying traffic gets its
 * record and its first sample at once), and the reading it is calibrated
 * from. */
__u32 interval_jiffies = 0;
__u64 calib_ns = 0;
__u64 calib_jiffies = 0;

/* Keeps every record type in the object's BTF (bloatd.h, struct bloatd_abi). */
struct bloatd_abi abi_anchor = {};

/* The longest receiver RTT a timestamp echo may give: older echoes are
 * refused (a peer's stale or bogus TSecr). */
#define RCV_TS_RTT_MAX_US (60 * 1000 * 1000)
/* How often a socket re-reads its path's floor and feeds it. */
#define FLOOR_REFRESH_NS NSEC_PER_SEC
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

/* Series points of watched sockets only (struct bloatd_sample). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} samples SEC(".maps");

/* Sockets whose series the daemon wants (the dashboard's detail socket,
 * the most queued while someone looks, API series requests). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u64);
	__type(value, __u8);
} watch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bloatd_control);
} control SEC(".maps");

/* Adaptive sampling (sampler.h): each CPU's state, and the hot sockets. A
 * map of its own each, not globals: the globals' section is large enough
 * to be mapped page by page (vmalloc), and one more TLB miss a segment is
 * measurable. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bloatd_sampler_cpu);
} sampler SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bloatd_hot);
} hot SEC(".maps");

/* The statistics /metrics reads: histograms, retransmissions and bloated
 * sockets per congestion control and role, on each CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BLOATD_CC_MAX);
	__type(key, __u32);
	__type(value, struct bloatd_cc_stats);
} cc_stats SEC(".maps");

/* Records alive by congestion control, role and state. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bloatd_sock_counts);
} sock_counts SEC(".maps");

/* Congestion control name -> index in the statistics, and back. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, char[BLOATD_CC_LEN]);
	__type(value, __u32);
} cc_index SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BLOATD_CC_MAX);
	__type(key, __u32);
	__type(value, char[BLOATD_CC_LEN]);
} cc_names SEC(".maps");

/* A mark on each socket the bound refused, so each is counted once, not
 * once per segment: socket storage too, so the mark goes with the socket
 * and no second bound can forget a socket and count it again (a byte per
 * refused socket, plus the kernel's element). */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u8);
} refused SEC(".maps");


struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BLOATD_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

/* Floors of peers, and of prefixes (apart, so no flood of peers pushes out
 * the prefixes: enum bloatd_floor_table); the least recently used go first when
 * full (the daemon counts them: created - present). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 32768);	/* floor_entries, set by the daemon */
	__type(key, struct bloatd_path_key);
	__type(value, struct bloatd_floor);
} floors SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);	/* floor_entries / 4, set by the daemon */
	__type(key, struct bloatd_path_key);
	__type(value, struct bloatd_floor);
} prefix_floors SEC(".maps");

/* The queue each route's bottleneck holds now: direct-mapped by a hash of
 * (netns, route), the newest reading wins a collision. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BOTTLENECK_SLOTS);
	__type(key, __u32);
	__type(value, struct bloatd_bottleneck);
} bottlenecks SEC(".maps");

/*
 * Where one read of the socket iterator puts the records, for the daemon to
 * fetch in one batch lookup; the read itself returns only their count. A
 * read that wrote every record into the iterator's output would stop every
 * 32 KiB (the seq buffer), and each restart walks its bucket again from the
 * head to where it left off (quadratic in a bucket's sockets: 1.3-2.1 s for
 * 100,000 here when the walk was over the socket storage map, as many
 * buckets as CPUs), against milliseconds in one pass. One slot per record
 * the bound allows (max_entries set at load to map_capacity plus slack).
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bloatd_sock);
} dump SEC(".maps");

/* Records placed in `dump` by the read under way (one reader at a time:
 * the daemon serialises reads), and the iterator session it counts for. */
__u32 dump_n = 0;
__u64 dump_session = 0;

/*
 * The network namespaces records were made in, for the read: a TCP
 * iterator walks only the reader's namespace, so the daemon enters each of
 * these in turn (dump_socks). Written once per namespace, at its first
 * record; the daemon removes a namespace it can no longer find (gone, or
 * held by nothing it can enter), and its next record writes it again.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u32);
} netns_seen SEC(".maps");

static __always_inline void stat_inc(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &idx);

	if (v)
		*v += 1;
}

/* Count a socket the probes could not track, once. */
static __always_inline void sock_refused(struct sock *sk)
{
	__u8 *mark = bpf_sk_storage_get(&refused, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);

	if (mark && !*mark) {
		*mark = 1;
		stat_inc(BLOATD_STAT_DROP_MAP_FULL);
	}
}

#endif /* BLOATD_PROBES_STATE_H */
