/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The record that crosses the kernel boundary, defined once: it is the value
 * of the `socks` socket storage map (the live state of one TCP socket), the
 * sample that the probes push through the `samples` ring buffer at most once
 * per socket per sampling interval, and what the map iterator writes out. daemon/src/probes/abi.rs mirrors it; a test pins
 * the layout against this header.
 */
#ifndef BLOATD_H
#define BLOATD_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define BLOATD_COMM_LEN 16
#define BLOATD_CC_LEN 16

/* Why a record is in the ring buffer. */
enum bloatd_kind {
	BLOATD_SAMPLE = 1,	/* periodic sample of a socket carrying traffic */
	BLOATD_CLOSED = 2,	/* last record of a socket: it went to TCP_CLOSE */
};

/* Counters in the per-CPU `stats` array. */
enum bloatd_stat {
	BLOATD_STAT_PROBE = 0,		/* tcp_probe events */
	BLOATD_STAT_STATE = 1,		/* inet_sock_set_state events (TCP) */
	BLOATD_STAT_RETRANS = 2,	/* tcp_retransmit_skb events */
	BLOATD_STAT_CONG = 3,		/* tcp_cong_state_set events */
	BLOATD_STAT_ITER = 4,		/* sockets visited by the iterator */
	BLOATD_STAT_DROP_MAP_FULL = 5,	/* socket not tracked: max_socks reached */
	BLOATD_STAT_DROP_RINGBUF = 6,	/* sample lost: ring buffer full */
	BLOATD_STAT_CREATED = 7,	/* records created */
	BLOATD_STAT_DELETED = 8,	/* records deleted at close */
	BLOATD_STAT_MAX = 9,
};

struct bloatd_sock {
	__u64 cookie;		/* socket cookie: the key of `socks` */
	__u64 update_ns;	/* CLOCK_MONOTONIC of the last probe write */
	__u64 sample_ns;	/* CLOCK_MONOTONIC of the last sample sent */
	__u64 bytes_acked;
	__u64 bytes_received;
	__u64 ca_ops;		/* icsk_ca_ops address: a change means a new cc */
	__u32 netns;		/* network namespace inode */
	__u32 pid;		/* tgid that connect()ed, 0 if unknown */
	__u32 cwnd;		/* snd_cwnd, segments */
	__u32 ssthresh;		/* snd_ssthresh, segments */
	__u32 inflight;		/* tcp_packets_in_flight() */
	__u32 mss;		/* mss_cache, bytes */
	__u32 srtt_us;		/* srtt_us >> 3 */
	__u32 min_rtt_us;	/* tcp_min_rtt(): windowed minimum */
	__u32 rcv_rtt_us;	/* rcv_rtt_est.rtt_us >> 3: receiver's estimate */
	__u32 rcv_min_rtt_us;	/* receiver's floor: min of rcv_rtt_us and min_rtt_us */
	__u32 total_retrans;	/* segments retransmitted over the life */
	__u32 lost;		/* segments marked lost over the life */
	__u32 rate_delivered;	/* segments delivered in the last rate sample */
	__u32 rate_interval_us;	/* and the interval they took */
	__u16 family;		/* AF_INET or AF_INET6 */
	__u16 sport;		/* local port, host order */
	__u16 dport;		/* remote port, host order */
	__u8 state;		/* TCP_ESTABLISHED, ... */
	__u8 ca_state;		/* TCP_CA_Open, ... */
	__u8 kind;		/* enum bloatd_kind (ring buffer records) */
	__u8 pad[7];
	__u8 saddr[16];		/* IPv4 in the first 4 bytes */
	__u8 daddr[16];
	char comm[BLOATD_COMM_LEN];
	char cc[BLOATD_CC_LEN];
};

#endif /* BLOATD_H */
