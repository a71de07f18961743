/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The records that cross the kernel boundary, defined once. `bloatd_sock` is
 * the value of the `socks` socket storage map (the live state of one TCP
 * socket), the sample that the probes push through the `samples` ring
 * buffer at most once per socket per sampling interval, and what the map
 * iterator writes out. The Rust side is generated from the object's BTF at
 * build time (bpf/build_bpf.rs), so there is no second definition to keep
 * in step.
 */
#ifndef BLOATD_H
#define BLOATD_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#include "floor.h"

#define BLOATD_COMM_LEN 16
#define BLOATD_CC_LEN 16
#define BLOATD_IFNAME_LEN 16

/* Why a record is in the ring buffer. */
enum bloatd_kind {
	BLOATD_SAMPLE = 1,	/* periodic sample of a socket carrying traffic */
	BLOATD_CLOSED = 2,	/* last record of a socket: it went to TCP_CLOSE */
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
};

/* Counters in the per-CPU `stats` array. */
enum bloatd_stat {
	BLOATD_STAT_PROBE = 0,		/* tcp_probe events */
	BLOATD_STAT_STATE = 1,		/* inet_sock_set_state events (TCP) */
	BLOATD_STAT_RETRANS = 2,	/* tcp_retransmit_skb events */
	BLOATD_STAT_CONG = 3,		/* tcp_cong_state_set events */
	BLOATD_STAT_ITER = 4,		/* sockets visited by the iterator */
	BLOATD_STAT_DROP_MAP_FULL = 5,	/* socket not tracked: map_capacity reached */
	BLOATD_STAT_DROP_RINGBUF = 6,	/* sample lost: ring buffer full */
	BLOATD_STAT_CREATED = 7,	/* records created */
	BLOATD_STAT_DELETED = 8,	/* records deleted at close */
	BLOATD_STAT_SOCKOPS = 9,	/* sock_ops callbacks (closing senders) */
	BLOATD_STAT_FLOOR_NEW = 10,	/* floors created (peers and prefixes) */
	BLOATD_STAT_FLOOR_ROUTE = 11,	/* floors reset: the route toward the peer changed */
	BLOATD_STAT_FLOOR_INFERRED = 12,	/* floors inferred from a bottleneck's queue */
	BLOATD_STAT_MAX = 13,
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
	__u64 cookie;		/* socket cookie: the socket's identity */
	__u64 update_ns;	/* TCP clock of the last probe write */
	__u64 sample_ns;	/* CLOCK_MONOTONIC of the last sample */
	__u64 bytes_acked;
	__u64 bytes_received;
	__u64 ca_ops;		/* icsk_ca_ops address: a change means a new cc */
	__u64 throughput_bps;	/* goodput between the last two samples, bit/s */
	__u64 prev_acked;	/* bytes_acked at the previous sample */
	__u64 prev_received;	/* bytes_received at the previous sample */
	__u64 floor_ns;		/* CLOCK_MONOTONIC of the last floor refresh */
	__u64 ts_ns;		/* TCP clock of the last receiver RTT measurement */
	__u32 netns;		/* network namespace inode */
	__u32 pid;		/* tgid that connect()ed, 0 if unknown */
	__u32 cwnd;		/* snd_cwnd, segments */
	__u32 ssthresh;		/* snd_ssthresh, segments */
	__u32 inflight;		/* tcp_packets_in_flight() */
	__u32 mss;		/* mss_cache, bytes */
	__u32 srtt_us;		/* srtt_us >> 3 */
	__u32 min_rtt_us;	/* tcp_min_rtt(): the socket's own windowed minimum, 0 before any sample */
	__u32 rcv_rtt_us;	/* rcv_rtt_est.rtt_us >> 3: the kernel's receiver estimate (ss rcv_rtt) */
	__u32 rcv_ts_rtt_us;	/* receiver RTT measured by bloatd from echoed timestamps, smoothed */
	__u32 rcv_last_tsecr;	/* the last echoed timestamp measured */
	__u32 floor_us;		/* the path's floor the queueing delays are measured against */
	__u32 queue_delay_us;	/* sender view: srtt_us - floor_us */
	__u32 rcv_queue_delay_us;	/* receiver view: the receiver RTT - floor_us */
	__u32 total_retrans;	/* segments retransmitted over the life */
	__u32 lost;		/* segments marked lost over the life */
	__u32 rate_delivered;	/* segments delivered in the last rate sample */
	__u32 rate_interval_us;	/* and the interval they took */
	__u32 unsent_bytes;	/* written by the application, not sent yet (write_seq - snd_nxt) */
	__u32 route_id;		/* floor_route_id(egress interface, gateway), 0 unknown */
	__u32 ifindex;		/* egress interface */
	__u32 prev_delivered;	/* tp->delivered at the previous sample (SACKed count) */
	__u32 prev_segs_in;	/* tp->data_segs_in at the previous sample */
	__u16 family;		/* AF_INET or AF_INET6 */
	__u16 sport;		/* local port, host order */
	__u16 dport;		/* remote port, host order */
	__u8 state;		/* TCP_ESTABLISHED, ... */
	__u8 ca_state;		/* TCP_CA_Open, ... */
	__u8 kind;		/* enum bloatd_kind (ring buffer records) */
	__u8 role;		/* enum bloatd_role */
	__u8 floor_source;	/* enum bloatd_floor_source */
	__u8 flags;		/* enum bloatd_flag bits */
	__u8 saddr[16];		/* IPv4 in the first 4 bytes */
	__u8 daddr[16];
	char comm[BLOATD_COMM_LEN];
	char cc[BLOATD_CC_LEN];
	char ifname[BLOATD_IFNAME_LEN];	/* egress interface name */
};

/* Anchors every type user space reads into the object's BTF, from which
 * the build generates the Rust side (bpf/build_bpf.rs). */
struct bloatd_abi {
	struct bloatd_sock sock;
	struct bloatd_floor floor;
	struct bloatd_path_key path_key;
	struct bloatd_bottleneck bottleneck;
	struct bloatd_floor_subject floor_subject;
	struct bloatd_floor_cfg floor_cfg;
	enum bloatd_kind kind;
	enum bloatd_role role;
	enum bloatd_flag flag;
	enum bloatd_stat stat;
	enum bloatd_floor_source floor_source;
};

#endif /* BLOATD_H */
