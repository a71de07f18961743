/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Acting on bloat: per-flow congestion control policy and the receiver's
 * Dynamic Receive Window Adjustment (DRWA, Jiang, Wang, Lee, Rhee: "Tackling
 * Bufferbloat in 3G/4G Networks", IMC 2012). The records user space shares
 * with the sock_ops program, and the arithmetic both sides use.
 *
 * Pure C on purpose, like floor.h: no BPF helpers and no kernel types, so
 * the probes and the daemon's unit tests (bpf/policy_host.c via Rust) run the
 * same code. The kernel glue is in policy_ops.h.
 */
#ifndef BLOATD_POLICY_H
#define BLOATD_POLICY_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

#define BLOATD_POLICY_CC_LEN 16

enum bloatd_policy_limits {
	/* Rules in the `policy_rules` map; a connection is matched against
	 * each at its handshake, so the bound is the cost bound too. */
	BLOATD_POLICY_RULES = 32,
};

/* What a rule selects; every selector it has must hold. */
enum bloatd_policy_match {
	BLOATD_PM_DPORT = 0x1,		/* the peer's port in [dport_lo, dport_hi] */
	BLOATD_PM_SPORT = 0x2,		/* our port in [sport_lo, sport_hi] */
	BLOATD_PM_CGROUP = 0x4,		/* the socket's cgroup is cgroup_id or below it */
	BLOATD_PM_BULK = 0x8,		/* once the connection has sent bulk_bytes */
};

/* What a rule does. */
enum bloatd_policy_action {
	BLOATD_PA_CC = 0x1,		/* set the congestion control to `cc` */
	BLOATD_PA_DRWA = 0x2,		/* DRWA on the receiving side, whatever the switch */
	BLOATD_PA_NOTSENT_LOWAT = 0x4,	/* TCP_NOTSENT_LOWAT = notsent_lowat bytes */
};

/* Value of the `policy_rules` array, index = the rule's place in the
 * config (first match wins). */
struct bloatd_policy_rule {
	__u64 cgroup_id;	/* kernfs id of the cgroup (its inode in cgroupfs) */
	__u64 bulk_bytes;	/* BLOATD_PM_BULK: bytes acknowledged by the peer */
	__u32 cgroup_level;	/* its depth below the root (0 = root) */
	__u16 dport_lo, dport_hi;
	__u16 sport_lo, sport_hi;
	__u8 selectors;	/* enum bloatd_policy_match bits */
	__u8 actions;		/* enum bloatd_policy_action bits */
	__u8 enabled;		/* the daemon can switch a rule off live */
	__u8 pad;
	char cc[BLOATD_POLICY_CC_LEN];
	/* BLOATD_PA_NOTSENT_LOWAT: the most bytes the application may keep
	 * written and unsent in the socket before a write waits (poll() says
	 * not writable): the sender's own backlog, bounded. */
	__u32 notsent_lowat;
};

/* Value of the `policy_ctl` array (one entry): what the daemon switches
 * live. */
struct bloatd_policy_ctl {
	__u32 drwa_on;		/* DRWA for every armed receiver (--drwa, the API, `bloatd top`) */
	__u32 stopping;		/* bloatd is stopping: give every receiver its window back */
};

/* Sockets under each action now, and what the actions did (value of the
 * `policy_counts` array, one entry). */
enum bloatd_policy_count {
	BLOATD_PC_CC_SOCKETS = 0,	/* live sockets whose cc a rule chose at the handshake */
	BLOATD_PC_BULK_SOCKETS = 1,	/* live sockets a bulk rule switched */
	BLOATD_PC_DRWA_SOCKETS = 2,	/* live sockets whose window DRWA clamps now */
	BLOATD_PC_CC_SET = 3,		/* congestion controls set at a handshake */
	BLOATD_PC_BULK_SET = 4,		/* congestion controls switched mid-flow */
	BLOATD_PC_CC_FAILED = 5,	/* bpf_setsockopt(TCP_CONGESTION) refused */
	BLOATD_PC_DRWA_ROUNDS = 6,	/* DRWA rounds (one RTT each) that set a clamp */
	BLOATD_PC_DRWA_RESTORED = 7,	/* windows given back (switch off, stop) */
	BLOATD_PC_DRWA_FAILED = 8,	/* bpf_setsockopt(TCP_WINDOW_CLAMP) refused */
	BLOATD_PC_LOWAT_SET = 9,	/* TCP_NOTSENT_LOWAT set at a handshake */
	BLOATD_PC_LOWAT_FAILED = 10,	/* bpf_setsockopt(TCP_NOTSENT_LOWAT) refused */
	BLOATD_PC_MAX = 11,
};

struct bloatd_policy_counts {
	__s64 n[BLOATD_PC_MAX];
};

/* bloatd_policy_sock.flags */
enum bloatd_policy_flag {
	BLOATD_POL_DRWA_ARMED = 0x1,	/* asked for a callback per ACK it sends */
	BLOATD_POL_DRWA_CLAMPED = 0x2,	/* its window_clamp is DRWA's now */
	BLOATD_POL_BULK_WAIT = 0x4,	/* a bulk rule waits for its bytes */
	BLOATD_POL_CC_FAILED = 0x8,	/* a rule's congestion control was refused */
	BLOATD_POL_BULK_DONE = 0x10,	/* a bulk rule switched it */
	BLOATD_POL_LOWAT_FAILED = 0x20,	/* a rule's TCP_NOTSENT_LOWAT was refused */
};

/* What the policy did to one socket: part of its record (bloatd_sock.pol),
 * written only by the sock_ops program, under the socket's lock. */
struct bloatd_policy_sock {
	__u64 drwa_round_us;	/* TCP clock when the current DRWA round began */
	__u64 drwa_round_rcvd;	/* bytes_received then */
	__u64 drwa_rtt_sum_us;	/* receiver RTT samples of the round, summed */
	__u32 drwa_rtt_n;	/* and counted */
	__u32 drwa_last_tsecr;	/* the last echoed timestamp sampled */
	__u32 drwa_rcvd_rtt;	/* bytes received in the last round: the sender's
				 * window as the receiver sees it (cwnd_est) */
	__u32 drwa_rtt_us;	/* the last round's RTT (the paper's RTT_est) */
	__u32 drwa_floor_us;	/* the floor it was set against (the paper's RTT_min) */
	__u32 drwa_clamp;	/* window clamp DRWA set, bytes; 0 none */
	__u32 drwa_orig_clamp;	/* window_clamp before DRWA first clamped it */
	__u32 drwa_rounds;	/* rounds that set a clamp */
	__u8 cc_rule;		/* 1 + index of the rule that set its cc, 0 none */
	__u8 bulk_rule;		/* 1 + index of the bulk rule (waiting or done), 0 none */
	__u8 drwa_rule;		/* 1 + index of the rule that asked for DRWA, 0 the switch */
	__u8 flags;		/* enum bloatd_policy_flag */
	__u8 lowat_rule;	/* 1 + index of the rule that set TCP_NOTSENT_LOWAT, 0 none */
};

/* The ports a rule selects. */
static __always_inline int policy_ports_match(const struct bloatd_policy_rule *r,
					      __u16 sport, __u16 dport)
{
	if ((r->selectors & BLOATD_PM_DPORT) && (dport < r->dport_lo || dport > r->dport_hi))
		return 0;
	if ((r->selectors & BLOATD_PM_SPORT) && (sport < r->sport_lo || sport > r->sport_hi))
		return 0;
	return 1;
}

/*
 * The window DRWA advertises: lambda x (RTT_min / RTT_est) x cwnd_est, where
 * cwnd_est is the data received in the last RTT. Below a queue of
 * (lambda - 1) x RTT_min it lets the sender grow (by up to lambda per round
 * with an empty queue), above it it shrinks the window toward lambda x the
 * bandwidth-delay product: the RTT settles at lambda x the floor while the
 * link stays full. A sender the window limits delivers the whole window per
 * RTT (cwnd_est = C x RTT_est), so one round lands on lambda x C x RTT_min:
 * no smoothing is needed, and an average over rounds only delays that (on
 * 3g, where a round lasts a second, by more than a web transfer lasts). RTT_min is the path's floor (never
 * above RTT_est), lambda a fixed point number with 8 fraction bits. Never
 * below min_bytes, so a round with little data (an application pause) does
 * not shut the window. resolution_us is the granularity of RTT_est: with
 * millisecond TCP timestamps a LAN's 50 us RTT reads 500-1000 us, and a
 * floor below that would look like a queue of 10-20 floors; the floor is
 * counted at the resolution at least.
 */
static __always_inline __u32 drwa_window(__u32 cwnd_est, __u32 floor_us, __u32 rtt_us,
					 __u32 lambda_x256, __u32 min_bytes, __u32 resolution_us)
{
	__u64 w;

	if (!rtt_us)
		return 0;
	if (floor_us < resolution_us)
		floor_us = resolution_us;
	if (floor_us > rtt_us)
		floor_us = rtt_us;
	w = (__u64)cwnd_est * floor_us / rtt_us;
	w = w * lambda_x256 >> 8;
	if (w < min_bytes)
		w = min_bytes;
	return w > 0x7fffffff ? 0x7fffffff : (__u32)w;
}

/*
 * The window clamp to give back when DRWA lets go: what receive-buffer
 * autotuning made it (tcp_rcv_space_adjust sets window_clamp to
 * tcp_win_from_space(rcvbuf) each time it grows the buffer, which it may
 * have done under DRWA's clamp), never less than before DRWA touched it.
 * scaling_ratio is the kernel's (tp->scaling_ratio, 8 fraction bits), 0
 * where unknown.
 */
static __always_inline __u32 drwa_restore_clamp(__u32 orig, __u32 now, __u32 rcvbuf,
						__u32 scaling_ratio)
{
	__u64 auto_clamp = (__u64)rcvbuf * scaling_ratio >> 8;
	__u32 c = orig > now ? orig : now;

	if (auto_clamp > c)
		c = auto_clamp > 0x7fffffff ? 0x7fffffff : (__u32)auto_clamp;
	return c;
}

#endif /* BLOATD_POLICY_H */
