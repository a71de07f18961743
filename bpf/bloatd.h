/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The records that cross the kernel boundary, defined once. `bloatd_sock` is
 * the value of the `socks` socket storage map (the live state of one TCP
 * socket) and what the map iterator writes out; `bloatd_sample` the point
 * of a watched socket's series; `bloatd_cc_stats` and `bloatd_sock_counts`
 * the statistics /metrics reads. The Rust side is generated from the object's BTF at
 * build time (bpf/build_bpf.rs), so there is no second definition to keep
 * in step.
 */
#ifndef BLOATD_H
#define BLOATD_H

#ifdef __bpf__
#include "vmlinux.h"	/* __u32 and the like, as every BPF object has them */
#else
#include <linux/types.h>
#endif

#include "floor.h"
#include "policy.h"
#include "sampler.h"

#define BLOATD_COMM_LEN 16
#define BLOATD_CC_LEN 16
#define BLOATD_IFNAME_LEN 16

/* Sizes of the statistics (an enum, so user space sees them in the BTF). */
enum bloatd_limits {
	/* Congestion controls with a label of their own (index by name, first
	 * come first served; the last index takes every further name,
	 * labelled "other"). */
	BLOATD_CC_MAX = 16,
	/* Histogram buckets, upper bounds inclusive (Prometheus `le`), +Inf
	 * last: stats.h defines the bounds. */
	BLOATD_DELAY_BUCKETS = 16,
	BLOATD_CWND_BUCKETS = 14,
	/* TCP states counted in the sockets gauge (TCP_ESTABLISHED ..
	 * TCP_CLOSING, plus 0 for "unknown"). */
	BLOATD_STATES = 13,
	/* Histograms kept per service (struct bloatd_svc_stats): the first
	 * two of enum bloatd_hist, queueing delay and RTT. */
	BLOATD_SVC_HISTS = 2,
	/* Slots of the hot sockets' table (struct bloatd_hot, sampler.h). */
	BLOATD_HOT_SLOTS = SAMPLER_HOT_SLOTS,
};

/* The delay histograms, per congestion control and role. */
enum bloatd_hist {
	BLOATD_HIST_QUEUE = 0,		/* queueing delay (sender or receiver view) */
	BLOATD_HIST_RTT = 1,		/* srtt (senders), the measured receiver RTT (receivers) */
	BLOATD_HIST_FLOOR = 2,		/* the floor the queue is measured against */
	BLOATD_HIST_MAX = 3,
};

/* Statistics of one role (sender, receiver) of one congestion control on
 * one CPU, fed at most once per socket per sampling interval while the
 * socket carries traffic: a bucket's share is a share of socket-time. */
struct bloatd_role_stats {
	__u64 delay[BLOATD_HIST_MAX][BLOATD_DELAY_BUCKETS];	/* samples per bucket */
	__u64 delay_sum_us[BLOATD_HIST_MAX];
	__u64 cwnd[BLOATD_CWND_BUCKETS];	/* senders only */
	__u64 cwnd_sum;
	__u64 retrans;		/* segments retransmitted */
	/* Distinct sockets at or above the bloat threshold, by second:
	 * bloated[i] counts second bloated_sec[i] (sec % 4 == i). */
	__u64 bloated[4];
	__u64 bloated_sec[4];
};

/* Value of the per-CPU `cc_stats` array, one entry per congestion control. */
struct bloatd_cc_stats {
	struct bloatd_role_stats role[2];	/* [0] sender, [1] receiver */
};

/* Value of the `sock_counts` array (one entry): records alive now by
 * congestion control, role and state, kept by the probes as sockets come,
 * change and go. */
struct bloatd_sock_counts {
	__s64 n[BLOATD_CC_MAX][2][BLOATD_STATES];
};

/* What the daemon tells the probes at run time (`control`, one entry). */
struct bloatd_control {
	__u32 watching;		/* entries in `watch`: 0 = stream no sample at all */
	__u32 pad;
};

/* Adaptive sampling's state on one CPU (value of the per-CPU `sampler`
 * array, one entry; sampler.h). */
struct bloatd_sampler_cpu {
	__u64 events;		/* tcp_probe events on this CPU */
	__u64 rng;		/* the look decision's generator */
	__u64 looks;		/* random looks taken */
	__u64 look_ns;		/* what a look costs here, moving average */
	__u64 rate;		/* tcp_probe events a second here (sampler_rate) */
	__u64 win_ns;		/* the rate's window: its start */
	__u64 win_events;	/* and the events then */
	__u32 shift;		/* a segment of a socket that is not hot is looked at
				 * with probability 2^-shift */
	__u32 interval_j;	/* the clock's ticks per interval (interval_jiffies) */
	__u32 primed;		/* shift set (SAMPLER_SHIFT_START until measured) */
	__u32 pad;
};

/* The hot sockets (value of the `hot` array, one entry; sampler.h): each
 * counted in the slot of its hash while it is sampled every interval; and
 * the paths a bloated socket was sampled on lately, whose every socket is
 * sampled every interval too. */
struct bloatd_hot {
	__u32 total;		/* hot sockets now */
	__u32 marked_j;		/* jiffies of the last bloated path's mark */
	__u32 slot[SAMPLER_HOT_SLOTS];
	__u32 path_j[SAMPLER_HOT_SLOTS];	/* jiffies a socket toward the path in
						 * this slot (its peer's prefix, its
						 * namespace) was last bloated */
};

/*
 * One point of a watched socket's series, pushed through the `samples`
 * ring buffer at the sampling interval. Only sockets the daemon watches
 * (the dashboard's detail socket, the most queued ones while someone looks,
 * API series requests) are streamed: nothing per sample reaches user space
 * otherwise.
 */
struct bloatd_sample {
	__u64 cookie;
	__u64 sample_ns;	/* CLOCK_MONOTONIC */
	__u64 throughput_bps;
	__u32 srtt_us;
	__u32 min_rtt_us;
	__u32 floor_us;
	__u32 queue_delay_us;
	__u32 rcv_rtt_us;	/* the receiver RTT the receiver queue is measured from */
	__u32 rcv_queue_delay_us;
	__u32 cwnd;
	__u32 inflight;
	__u32 drwa_clamp;	/* the window clamp DRWA set, bytes, 0 none (policy.h) */
	__u32 drwa_rcvd_rtt;	/* bytes received in DRWA's last round (one RTT) */
	__u8 role;
	__u8 flags;
	__u8 pad[6];
};

/* Which side of the transfer a socket is on, from what moved since its
 * previous sample (not from its whole life: a connection can turn). */
enum bloatd_role {
	BLOATD_ROLE_UNKNOWN = 0,	/* nothing moved yet */
	BLOATD_ROLE_SENDER = 1,		/* the peer acknowledged more than we received */
	BLOATD_ROLE_RECEIVER = 2,
};

/* bloatd_sock.flags */
enum bloatd_flag {
	BLOATD_F_TIMESTAMPS = 0x1,	/* TCP timestamps negotiated */
	BLOATD_F_ACTIVE = 0x2,		/* data moved in the interval this sample closes
					 * (delivered or arrived, in order or not) */
	BLOATD_F_RCV_TS = 0x4,		/* rcv_ts_rtt_us holds a measurement */
	BLOATD_F_OFO = 0x8,		/* data waited out of order at the last sample */
	BLOATD_F_HOT = 0x10,		/* counted in `hot_slots`: sampled every interval
					 * (adaptive sampling, probes.bpf.c) */
	BLOATD_F_RCV_FRESH = 0x20,	/* the interval this sample closes measured
					 * rcv_ts_rtt_us (not carried from an earlier one) */
};

/* Counters in the per-CPU `stats` array. */
enum bloatd_stat {
	BLOATD_STAT_PROBE = 0,		/* tcp_probe events: counted in `sampler` (one per-CPU
					 * lookup a segment), this slot stays 0 */
	BLOATD_STAT_STATE = 1,		/* inet_sock_set_state events (TCP) */
	BLOATD_STAT_RETRANS = 2,	/* tcp_retransmit_skb events */
	BLOATD_STAT_CONG = 3,		/* tcp_cong_state_set events */
	BLOATD_STAT_ITER = 4,		/* sockets visited by the iterator */
	BLOATD_STAT_DROP_MAP_FULL = 5,	/* sockets not tracked: map_capacity reached (each once) */
	BLOATD_STAT_DROP_RINGBUF = 6,	/* watched sample lost: ring buffer full */
	BLOATD_STAT_CREATED = 7,	/* records created */
	BLOATD_STAT_DELETED = 8,	/* records deleted at close */
	BLOATD_STAT_SOCKOPS = 9,	/* sock_ops callbacks (closing senders) */
	BLOATD_STAT_FLOOR_NEW = 10,	/* floors created (peers and prefixes) */
	BLOATD_STAT_FLOOR_ROUTE = 11,	/* floors reset: the route toward the peer changed */
	BLOATD_STAT_FLOOR_INFERRED = 12,	/* floors inferred from a bottleneck's queue */
	BLOATD_STAT_SVC_FULL = 13,	/* samples counted as "other": svc_stats was full */
	BLOATD_STAT_MAX = 14,
};

/*
 * The queue a bottleneck holds now, as sockets with a trusted floor measure
 * it: value of the direct-mapped `bottlenecks` array, indexed by a hash of
 * (netns, route). A new connection toward a peer with no history reads it
 * at its handshake (floor.h, floor_infer).
 */
struct bloatd_bottleneck {
	__u64 updated_ns;	/* CLOCK_MONOTONIC of the last reading */
	__u32 netns;
	__u32 route_id;
	__u32 queue_us;		/* the smallest queueing delay read in the interval */
	__u32 floor_us;		/* the smallest floor of the sockets that read it */
};

struct bloatd_sock {
	/* What every segment touches, together in the first cache line: a
	 * busy server's records are cold when their next segment comes. */
	__u64 cookie;		/* socket cookie: the socket's identity */
	__u64 update_ns;	/* TCP clock of the last probe write */
	__u64 sample_ns;	/* CLOCK_MONOTONIC of the last sample */
	__u32 rcv_ts_min_us;	/* the lowest sample of the interval under way, 0 none yet */
	__u32 update_j;		/* jiffies of the last probe write (sampler_seen_weight) */
	__u8 flags;		/* enum bloatd_flag bits */
	__u8 pad_hot[7];
	__u64 pending_ns;	/* socket-time not yet counted in the statistics
				 * (sampler.h): added at every segment the record
				 * sees */
	__u64 bytes_acked;
	__u64 bytes_received;
	__u64 ca_ops;		/* icsk_ca_ops address: a change means a new cc */
	__u64 throughput_bps;	/* data that crossed the link between the last two
				 * samples, bit/s (sock_rate_bps) */
	__u64 prev_acked;	/* bytes_acked at the previous sample */
	__u64 prev_received;	/* bytes_received at the previous sample */
	__u64 floor_ns;		/* CLOCK_MONOTONIC of the last floor refresh */
	__u64 cgroup_id;	/* the socket's cgroup v2 (kernfs id), its service: read
				 * once at creation (service_ops.h), 0 unknown */
	__u32 netns;		/* network namespace inode */
	__u32 pid;		/* tgid that holds it: connect()'s caller, or the
				 * listener's owner for an accepted one; 0 unknown */
	__u32 cwnd;		/* snd_cwnd, segments */
	__u32 ssthresh;		/* snd_ssthresh, segments */
	__u32 inflight;		/* tcp_packets_in_flight() */
	__u32 mss;		/* mss_cache, bytes */
	__u32 srtt_us;		/* srtt_us >> 3 */
	__u32 min_rtt_us;	/* tcp_min_rtt(): the socket's own windowed minimum, 0 before any sample */
	__u32 rcv_rtt_us;	/* rcv_rtt_est.rtt_us >> 3: the kernel's receiver estimate (ss rcv_rtt) */
	__u32 rcv_ts_rtt_us;	/* receiver RTT measured by bloatd from echoed timestamps: the
				 * lowest sample of the last interval that had one */
	__u32 floor_us;		/* the path's floor the queueing delays are measured against */
	__u32 queue_delay_us;	/* sender view: srtt_us - floor_us */
	__u32 rcv_queue_delay_us;	/* receiver view: the receiver RTT - floor_us */
	__u32 total_retrans;	/* segments retransmitted over the life */
	__u32 lost;		/* segments marked lost over the life */
	__u32 delivered_ce;	/* segments delivered with an ECN echo (ECE: the receiver saw
				 * CE) over the life, tp->delivered_ce */
	__u32 rate_delivered;	/* segments delivered in the last rate sample */
	__u32 rate_interval_us;	/* and the interval they took */
	__u32 unsent_bytes;	/* written by the application, not sent yet (write_seq - snd_nxt) */
	__u32 route_id;		/* floor_route_id(egress interface, gateway), 0 unknown */
	__u32 ifindex;		/* egress interface */
	__u32 prev_delivered;	/* tp->delivered at the previous sample (SACKed count) */
	__u32 prev_segs_in;	/* tp->data_segs_in at the previous sample */
	__u32 prev_sacked;	/* tp->sacked_out at the previous sample */
	__u32 prev_ooopack;	/* tp->rcv_ooopack at the previous sample */
	__u32 prev_tsval;	/* the peer's TSval at the previous sample */
	__u32 prev_retrans;	/* total_retrans already counted in the statistics */
	__u32 bloated_sec;	/* the last second this socket counted as bloated */
	__u32 prev_segs_all;	/* tp->segs_in at the previous sample */
	__u32 sample_jiffies;	/* jiffies at the previous sample */
	__u16 hot_slot;		/* its slot in `hot_slots` while BLOATD_F_HOT */
	__u16 counted;		/* its slot in `sock_counts` + 1, 0 = not counted */
	__u16 family;		/* AF_INET or AF_INET6 */
	__u16 sport;		/* local port, host order */
	__u16 dport;		/* remote port, host order */
	__u8 state;		/* TCP_ESTABLISHED, ... */
	__u8 ca_state;		/* TCP_CA_Open, ... */
	__u8 cc_idx;		/* index of its congestion control in the statistics */
	__u8 role;		/* enum bloatd_role */
	__u8 floor_source;	/* enum bloatd_floor_source */
	__u8 saddr[16];		/* IPv4 in the first 4 bytes */
	__u8 daddr[16];
	char comm[BLOATD_COMM_LEN];
	char cc[BLOATD_CC_LEN];
	char ifname[BLOATD_IFNAME_LEN];	/* egress interface name */
	/* What bloatd's policy did to it (policy.h): touched by sock_ops only. */
	struct bloatd_policy_sock pol;
};

/*
 * The process that holds a socket (value of the `owners` socket storage,
 * service_ops.h): set on a listener by listen(), which runs in its
 * owner's context, and cloned by the kernel into every connection it
 * accepts.
 */
struct bloatd_owner {
	__u32 pid;		/* tgid */
	__u32 pad;
	char comm[BLOATD_COMM_LEN];
};

/* Key of `svc_stats`: one service (cgroup), congestion control and role.
 * cgroup_id 0 holds what did not fit ("other"). */
struct bloatd_svc_key {
	__u64 cgroup_id;
	__u32 cc_idx;		/* as bloatd_sock.cc_idx */
	__u32 role;		/* 0 sender, 1 receiver, as bloatd_cc_stats.role */
};

/* Value of `svc_stats`: the queueing delay and RTT histograms of one key,
 * counted at each sample as bloatd_role_stats counts them, shared by the
 * CPUs (atomic adds: one entry per CPU would multiply the bound by the
 * CPUs). */
struct bloatd_svc_stats {
	__u64 delay[BLOATD_SVC_HISTS][BLOATD_DELAY_BUCKETS];	/* enum bloatd_hist order */
	__u64 delay_sum_us[BLOATD_SVC_HISTS];
};

/* Anchors every type user space reads into the object's BTF, from which
 * the build generates the Rust side (bpf/build_bpf.rs). */
struct bloatd_abi {
	struct bloatd_sock sock;
	struct bloatd_sample sample;
	struct bloatd_cc_stats cc_stats;
	struct bloatd_sock_counts sock_counts;
	struct bloatd_control control;
	struct bloatd_sampler_cpu sampler_cpu;
	struct bloatd_hot hot;
	struct bloatd_floor floor;
	struct bloatd_path_key path_key;
	struct bloatd_bottleneck bottleneck;
	struct bloatd_floor_subject floor_subject;
	struct bloatd_floor_cfg floor_cfg;
	struct bloatd_policy_rule policy_rule;
	struct bloatd_policy_ctl policy_ctl;
	struct bloatd_policy_counts policy_counts;
	struct bloatd_drwa_saved drwa_saved;
	struct bloatd_drwa_path drwa_path;
	struct drwa_measure drwa_measure;
	struct bloatd_owner owner;
	struct bloatd_svc_key svc_key;
	struct bloatd_svc_stats svc_stats;
	enum bloatd_hist hist;
	enum bloatd_limits limits;
	enum bloatd_role role;
	enum bloatd_flag flag;
	enum bloatd_stat stat;
	enum bloatd_floor_source floor_source;
	enum bloatd_policy_limits policy_limits;
	enum bloatd_policy_match policy_match;
	enum bloatd_policy_action policy_action;
	enum bloatd_policy_count policy_count;
	enum bloatd_policy_flag policy_flag;
	enum bloatd_drwa_base drwa_base;
	enum bloatd_path_class path_class;
};

#endif /* BLOATD_H */
