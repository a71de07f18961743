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

#ifdef __bpf__
#include "vmlinux.h"	/* __u32 and the like, as every BPF object has them */
#else
#include <linux/types.h>
#endif

#include "floor.h"

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
	BLOATD_PM_PATH = 0x10,		/* its path's class is one of path_classes */
};

/*
 * A path's class as the daemon's classifier decides it (daemon/src/
 * bottleneck.rs), the value of the `path_classes` map: written when a
 * path's class changes, deleted when the classifier forgets the path or
 * cannot tell (UNKNOWN is never written: an absent entry is unknown).
 */
enum bloatd_path_class {
	BLOATD_PATH_UNKNOWN = 0,
	BLOATD_PATH_CLEAR = 1,
	BLOATD_PATH_DROPTAIL = 2,
	BLOATD_PATH_AQM = 3,
	BLOATD_PATH_ECN_AQM = 4,
	BLOATD_PATH_CLASSES = 5,
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
	__u8 path_classes;	/* BLOATD_PM_PATH: bit 1 << enum bloatd_path_class */
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
	BLOATD_PC_DRWA_HELD = 9,	/* cuts taken back: the window fell, the RTT did not */
	BLOATD_PC_DRWA_RECOVERED = 10,	/* windows given back that a bloatd which
					 * did not stop had clamped */
	BLOATD_PC_LOWAT_SET = 11,	/* TCP_NOTSENT_LOWAT set at a handshake */
	BLOATD_PC_LOWAT_FAILED = 12,	/* bpf_setsockopt(TCP_NOTSENT_LOWAT) refused */
	BLOATD_PC_BULK_GATED = 13,	/* bulk switches not made: an AQM's path
					 * (act_on_aqm off) or a path= the rule does
					 * not select, at the switch */
	BLOATD_PC_DRWA_GATED = 14,	/* DRWA rounds not run: an AQM's path */
	BLOATD_PC_MAX = 15,
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
	BLOATD_POL_GATED = 0x40,	/* the AQM gate withheld a bulk switch or
					 * DRWA's last round (policy_aqm_gated) */
};

/* What the policy did to one socket: part of its record (bloatd_sock.pol),
 * written only by the sock_ops program, under the socket's lock. */
struct bloatd_policy_sock {
	__u64 drwa_round_us;	/* TCP clock when the current DRWA round began */
	__u64 drwa_round_rcvd;	/* bytes_received then */
	__u64 drwa_rtt_sum_us;	/* receiver RTT samples of the round, summed */
	__u64 drwa_last_us;	/* TCP clock of its last ACK: a gap longer than an
				 * RTT is an application pause (drwa_idle) */
	__u64 drwa_ref_rate;	/* bytes/s delivered when the RTT last fell (drwa_round) */
	__u64 drwa_max_rate;	/* the highest rate of recent rounds (an eighth
				 * forgotten a round): what a cut taken back restores */
	__u64 drwa_path_rcvd;	/* bytes_received when it last counted into its path */
	__u64 drwa_round_path;	/* its path's bytes when the round began */
	__u64 drwa_ref_path_rate;	/* its path's rate (bytes/s) when drwa_ref_rate was set */
	__u32 drwa_rtt_n;	/* and counted */
	__u32 drwa_round_low_us;	/* the round's lowest sample */
	__u32 drwa_last_tsecr;	/* the last echoed timestamp sampled */
	__u32 drwa_rcvd_rtt;	/* bytes received in the last round: the sender's
				 * window as the receiver sees it (cwnd_est) */
	__u32 drwa_rtt_us;	/* the last round's RTT (the paper's RTT_est) */
	__u32 drwa_min_us;	/* the connection's own minimum RTT: its handshake
				 * and every sample since (the paper's RTT_min) */
	__u32 drwa_base_us;	/* the RTT_min the last round used: drwa_min_us, or
				 * the RTT it held at after a cut that drained nothing */
	__u32 drwa_ref_low_us;	/* the lowest sample of the round that set drwa_ref_rate */
	__u32 drwa_retry;	/* rounds left on a held RTT_min before drwa_min_us is
				 * tried again (0: none held) */
	__u32 drwa_held;	/* cuts taken back: the window fell, the RTT did not */
	__u32 drwa_clamp;	/* window clamp DRWA set, bytes; 0 none */
	__u32 drwa_rounds;	/* rounds that set a clamp */
	__u32 drwa_round_ooo;	/* out-of-order segments received when the round began */
	__u8 cc_rule;		/* 1 + index of the rule that set its cc, 0 none */
	__u8 bulk_rule;		/* 1 + index of the bulk rule (waiting or done), 0 none */
	__u8 drwa_rule;		/* 1 + index of the rule that asked for DRWA, 0 the switch */
	__u8 flags;		/* enum bloatd_policy_flag */
	__u8 drwa_fails;	/* cut sequences in a row that drained nothing */
	__u8 cb_owned;		/* sock_ops callback flags bloatd turned on (and only
				 * those it may turn off: another program's stay) */
	__u8 lowat_rule;	/* 1 + index of the rule that set TCP_NOTSENT_LOWAT, 0 none */
	__u8 drwa_base_src;	/* where drwa_base_us came from: enum bloatd_floor_source
				 * (SOCKET: the connection's own minimum; PEER, PREFIX,
				 * INFERRED: the path's floor), or enum bloatd_drwa_base */
	__u32 drwa_cut_low_us;	/* the lowest sample of the round that began the
				 * current cut sequence, or of the last round whose
				 * RTT rose (0: not cutting) */
	__u8 drwa_flat;		/* rounds in a row at the smallest window with the
				 * RTT no lower than drwa_cut_low_us */
	__u8 pad[3];
};

/* drwa_base_src beyond the floors' sources (enum bloatd_floor_source). */
enum bloatd_drwa_base {
	/* An RTT_min held at the RTT a connection had when a cut drained
	 * nothing (drwa_round). */
	BLOATD_DRWA_BASE_HELD = 8,
	/* The RTT_min the other receivers on the same path use (a
	 * connection's first rounds: drwa_path_floor). */
	BLOATD_DRWA_BASE_RECEIVERS = 9,
};

/*
 * A connection's first rounds, before it received this much: its sender is
 * in slow start, and a round's rate is not yet one the take-back rule can
 * judge a cut by. A floor no round has tested (a prefix's, an inferred one,
 * a peer's from before the path got longer) then cut the window round
 * after round to 2 segments (docs/measurements.md, "DRWA from 8 KiB").
 */
#define DRWA_TRUSTED_BYTES 65536

/*
 * What DRWA found on a socket before it first clamped it: the value of the
 * `drwa_saved` socket storage, which bloatd pins under bpffs so that it
 * outlives a daemon that dies without stopping (kill -9, a panic, the OOM
 * killer): the next `bloatd start` or `bloatd stop` finds every clamped
 * socket there and gives its window back. A contract between bloatd
 * versions (the map's value size is checked before it is reused).
 */
struct bloatd_drwa_saved {
	__u32 orig_clamp;	/* window_clamp before DRWA (the kernel's, or the
				 * application's TCP_WINDOW_CLAMP) */
	__u32 orig_rcvbuf;	/* sk_rcvbuf then */
	__u32 clamp;		/* the clamp DRWA set last */
	__u32 rcvbuf;		/* sk_rcvbuf when it set it */
};

/* The receivers DRWA acts on along one path (network namespace,
 * interface and gateway, peer: a path floor's): the value of the
 * `drwa_paths` array, a slot per path (policy_ops.h, drwa_path_count). */
struct bloatd_drwa_path {
	__u64 bytes;		/* bytes they received, counted at each ACK */
	__u64 used_us;		/* TCP clock when one last counted */
	__u64 base_at_us;	/* TCP clock when base_us was last set */
	__u64 held_at_us;	/* TCP clock when held_us was last set */
	__u32 netns;
	__u32 route_id;
	__u32 peer;		/* the peer's address folded to 32 bits */
	__u32 base_us;		/* the RTT_min the last round of a receiver past its
				 * first rounds (DRWA_TRUSTED_BYTES) used, not held */
	__u32 held_us;		/* the RTT_min a receiver on the path holds at after
				 * a cut that drained nothing (drwa_path_floor) */
	__u32 pad;
};

/* One DRWA round as the receiver measured it (policy_ops.h, drwa_ack). */
struct drwa_measure {
	__u64 rcvd;		/* bytes received in the round */
	__u64 path_rcvd;	/* bytes every receiver DRWA acts on along the same
				 * path received in the round, its own included; 0:
				 * not known */
	__u32 dur_us;		/* how long it lasted (at least its RTT) */
	__u32 rtt_us;		/* RTT_est: the average of its samples */
	__u32 low_us;		/* its lowest sample (0: none) */
	__u32 min_bytes;	/* the clamp's floor */
	__u32 limit;		/* the clamp the socket has without DRWA: never above */
	__u32 floor_us;		/* the path's floor as bloatd knows it (floor.h), 0 none */
	__u32 floor_src;	/* where it came from: enum bloatd_floor_source, or
				 * BLOATD_DRWA_BASE_RECEIVERS (drwa_path_floor) */
	__u32 resolution_us;	/* RTT_est's granularity (millisecond timestamps: 1000) */
	__u32 lambda_x256;	/* lambda, 8 fraction bits */
	__u32 holes;		/* out-of-order segments it received: a loss stalled
				 * its delivery */
	__u32 path_held;	/* a receiver on the path holds its RTT_min after a
				 * cut that drained nothing (drwa_path_floor) */
	__u32 first;		/* one of the connection's first rounds
				 * (DRWA_TRUSTED_BYTES) */
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

/* The path classes a rule selects (BLOATD_PM_PATH); a rule without the
 * selector selects every class. An unknown class (no entry) is selected
 * only by a rule that names `unknown`. */
static __always_inline int policy_path_match(const struct bloatd_policy_rule *r, __u32 cls)
{
	if (!(r->selectors & BLOATD_PM_PATH))
		return 1;
	return cls < BLOATD_PATH_CLASSES && (r->path_classes & (1u << cls));
}

/*
 * Do no harm where an AQM already does the job: on a path classified `aqm`
 * or `ecn-aqm` the queue is held near the AQM's target (5 ms for CoDel),
 * so a congestion control switched mid-flow or a receive window DRWA
 * clamps can cut nothing but goodput. Off there unless the operator said
 * otherwise (act_on_aqm); every other class, unknown included (no entry,
 * a map that was full), acts as it did without the gate.
 */
static __always_inline int policy_aqm_gated(__u32 cls, __u32 act_on_aqm)
{
	return !act_on_aqm && (cls == BLOATD_PATH_AQM || cls == BLOATD_PATH_ECN_AQM);
}

/* Rounds DRWA keeps a held RTT_min before it tries the connection's own
 * minimum again: 16, doubling with each try that fails, up to 256. */
#define DRWA_RETRY_ROUNDS 16
#define DRWA_RETRY_MAX_SHIFT 4
/* Rounds at the smallest window with the RTT flat before the cuts that got
 * there are taken back (drwa_round). */
#define DRWA_FLAT_ROUNDS 4

/* The clamp never goes above `limit` nor below `floor`. */
static __always_inline __u32 drwa_bound(__u64 w, __u32 floor, __u32 limit)
{
	if (w < floor)
		w = floor;
	if (limit && w > limit)
		w = limit;
	return w > 0x7fffffff ? 0x7fffffff : (__u32)w;
}

/*
 * What the other receivers DRWA acts on along the same path say of its
 * RTT_min, within `fresh_us` of `now_us`: the RTT a receiver holds at after
 * a cut that drained nothing (*held = 1: the path's floors are below the
 * path now, and a share one gives up is not drained by the other), else
 * the RTT_min a receiver past its first rounds uses, whose cuts the
 * take-back rule has judged (the download a web fetch opens beside), else
 * 0. A connection's first rounds take only this (its own minimum aside);
 * while one is held, no round counts a share it gave up as a sibling's.
 */
static __always_inline __u32 drwa_path_floor(const struct bloatd_drwa_path *l, __u64 now_us,
					     __u64 fresh_us, __u32 *held)
{
	*held = 0;
	if (!l)
		return 0;
	if (l->held_us && now_us - l->held_at_us <= fresh_us) {
		*held = 1;
		return l->held_us;
	}
	if (l->base_us && now_us - l->base_at_us <= fresh_us)
		return l->base_us;
	return 0;
}

/* What a receiver's round tells the others on its path (drwa_path_floor). */
static __always_inline void drwa_path_tell(struct bloatd_drwa_path *l,
					   const struct bloatd_policy_sock *p, __u64 now_us)
{
	if (!p->drwa_base_us)
		return;
	if (p->drwa_base_src == BLOATD_DRWA_BASE_HELD) {
		l->held_us = p->drwa_base_us;
		l->held_at_us = now_us;
	} else {
		l->base_us = p->drwa_base_us;
		l->base_at_us = now_us;
	}
}

/* RTT_min for the round: the lowest of the connection's own minimum and
 * the path's floor, and where it came from (drwa_round). */
static __always_inline void drwa_lowest_min(struct bloatd_policy_sock *p,
					    const struct drwa_measure *m)
{
	if (m->floor_us && m->floor_us < p->drwa_min_us) {
		p->drwa_base_us = m->floor_us;
		p->drwa_base_src = m->floor_src;
	} else {
		p->drwa_base_us = p->drwa_min_us;
		p->drwa_base_src = BLOATD_FLOOR_SOCKET;
	}
}

/* Hold RTT_min at `low`, the RTT the connection has now, from `src`, for
 * `retry` rounds: the window goes back to what delivered the best recent
 * rate, and the cut sequence's measures start over (drwa_take_back,
 * drwa_adopt_hold). */
static __always_inline __u32 drwa_hold(struct bloatd_policy_sock *p, const struct drwa_measure *m,
				       __u32 low, __u32 prev, __u32 retry, __u8 src)
{
	__u32 b;
	__u64 w;

	p->drwa_retry = retry;
	p->drwa_base_us = low;
	p->drwa_base_src = src;
	p->drwa_ref_low_us = 0;
	p->drwa_cut_low_us = 0;
	p->drwa_flat = 0;
	b = low < m->resolution_us ? m->resolution_us : low;
	w = (p->drwa_max_rate * b / 1000000 * m->lambda_x256) >> 8;
	return drwa_bound(w > prev ? w : prev, m->min_bytes, m->limit);
}

/* A cut that drained nothing, taken back (drwa_round): the window goes
 * back to what delivered the best recent rate, and RTT_min is held at the
 * RTT the connection has now (`low`) for DRWA_RETRY_ROUNDS rounds, twice as
 * many after each try that fails the same way. */
static __always_inline __u32 drwa_take_back(struct bloatd_policy_sock *p,
					    const struct drwa_measure *m, __u32 low, __u32 prev)
{
	__u32 shift;

	p->drwa_held++;
	shift = p->drwa_fails < DRWA_RETRY_MAX_SHIFT ? p->drwa_fails : DRWA_RETRY_MAX_SHIFT;
	if (p->drwa_fails < 255)
		p->drwa_fails++;
	return drwa_hold(p, m, low, prev, DRWA_RETRY_ROUNDS << shift, BLOATD_DRWA_BASE_HELD);
}

/* Another receiver on the path holds (drwa_round): this one, which never
 * held, holds at its own RTT now as that one did, with the window of its
 * best recent rate, for as long as a receiver on the path holds and
 * DRWA_RETRY_ROUNDS after. Its RTT_min's source says RECEIVERS, so it
 * tells the path what it uses (drwa_path_tell) without holding the path
 * itself: only a cut that drained nothing does. */
static __always_inline __u32 drwa_adopt_hold(struct bloatd_policy_sock *p,
					     const struct drwa_measure *m, __u32 low, __u32 prev)
{
	return drwa_hold(p, m, low, prev, DRWA_RETRY_ROUNDS, BLOATD_DRWA_BASE_RECEIVERS);
}

/*
 * One DRWA round (Algorithm 1 of Jiang et al.): the window the receiver
 * advertises is lambda x RTT_min / RTT_est x cwnd_est, where cwnd_est is
 * the data of the last RTT: lambda x RTT_min x the delivery rate, the
 * bandwidth-delay product at the rate the connection gets, lambda times.
 * Below a queue of (lambda - 1) x RTT_min the sender may grow by lambda per
 * round; above it the window shrinks toward lambda x the BDP, and the RTT
 * settles at lambda x RTT_min with the link full.
 *
 * RTT_min is the lowest of the connection's own minimum and the path's
 * floor as bloatd knows it (m->floor_us: learned by every socket toward the
 * same peer over the same interface and gateway within the floor's window,
 * else its prefix's, else inferred from its bottleneck's queue; floor.h).
 * A connection opened behind a standing queue (a web fetch beside a
 * download) has that queue in its own minimum and would take it for the
 * path; the floor, learned before the queue formed, does not. In its
 * first rounds (DRWA_TRUSTED_BYTES) the floor is only the RTT_min the
 * other receivers on the path use (drwa_path_floor): a slow start's rate
 * gives the take-back rule nothing to judge a wrong floor by; and so it
 * is after them while another receiver on the path holds its RTT_min
 * (a cut that drained nothing: the floor is below the path), until the
 * connection has held itself (policy_ops.h, drwa_round_close). A floor can
 * also be below the connection's propagation delay (a prefix's or an
 * inferred one that is wrong, one learned before the path got longer):
 * the second rule below catches that, as it does a stale own minimum.
 * With lambda >= 2 a window with no queue behind it grows at least as fast
 * as the sender's slow start.
 *
 * Two rules keep DRWA from ever doing worse than not acting, from the
 * connection's own evidence:
 * - It cuts only when the RTT is above lambda x RTT_min (a queue beyond its
 *   target); otherwise the window may only grow. A round in which the
 *   application sent less than its window (a pause, a short response)
 *   says nothing about a queue and cannot shut the window.
 * - A cut must drain a queue: a window-limited sender over a queue keeps
 *   its rate while its RTT falls. If instead the rate falls (by more than
 *   3/16 since the RTT last moved) while the RTT stays where it was
 *   (within 1/16: a growing queue, a new flow's or a slower link's, resets
 *   the measure, so the flow still yields to a web transfer that starts
 *   beside it), what lies above RTT_min is not a queue this window holds:
 *   the path's delay grew (an LTE phone falling back to 3G on the same
 *   interface), or other flows hold the queue. Unless the receivers DRWA
 *   acts on along the same path (m->path_rcvd, its own included: the same
 *   peer through the same interface and gateway, so the same floor and
 *   target) kept their rate: then the share it gave up went to one of
 *   them, whose queue it is and which DRWA cuts as well (a web fetch beside
 *   a download), and it cuts on. Otherwise DRWA takes the cut back (`drwa_held`): the window
 *   goes back to what delivered the best recent rate, RTT_min is held at
 *   the RTT the connection has now (BLOATD_DRWA_BASE_HELD), and it tries the
 *   lowest RTT_min again after DRWA_RETRY_ROUNDS rounds, twice as many
 *   after every try that fails the same way (a try costs about one round
 *   at a reduced rate). Cuts that reach the smallest window with the RTT,
 *   for DRWA_FLAT_ROUNDS rounds, no lower (by 1/16) than when they began
 *   or last rose are taken back too, whoever kept the rate: there the rate cannot fall any more, and a window held
 *   at 2 segments behind someone else's queue (a sibling held at a path
 *   that got longer) would stay there.
 * A round in which data arrived out of order (m->holes: a loss, its
 * retransmission a round later) delivered less than its window let
 * through: it neither sets nor tests the rate a cut is judged by, and a
 * cut in it is measured against the best recent rate (a buffer of a few
 * segments overflows at every slow start, and took such rounds for cuts
 * that drained nothing).
 * The clamp stays within [m->min_bytes, m->limit]; `prev` is the clamp set
 * last. 0 (none yet) means the socket has the window it has without DRWA,
 * m->limit: a first round with no queue (an application-limited receiver,
 * 3 kB in an RTT) must not cut that to lambda x what arrived.
 */
static __always_inline __u32 drwa_round(struct bloatd_policy_sock *p,
					const struct drwa_measure *m, __u32 prev)
{
	__u64 rate, path_rate, w, b;
	__u32 low = m->low_us ? m->low_us : m->rtt_us;

	if (!prev)
		prev = m->limit;
	if (!m->dur_us || !m->rtt_us)
		return prev;
	if (!p->drwa_min_us || low < p->drwa_min_us)
		p->drwa_min_us = low;
	if (p->drwa_retry) {
		/* A hold taken from another receiver lasts while one holds. */
		if (m->path_held && !p->drwa_held && p->drwa_retry == 1)
			;
		else if (--p->drwa_retry == 0)
			drwa_lowest_min(p, m);	/* try it again */
		else if (low < p->drwa_base_us)
			p->drwa_base_us = low;
	} else {
		drwa_lowest_min(p, m);
	}
	rate = m->rcvd * 1000000 / m->dur_us;
	p->drwa_max_rate -= p->drwa_max_rate >> 3;
	if (rate > p->drwa_max_rate)
		p->drwa_max_rate = rate;
	/* A receiver on the path holds its RTT_min (a cut of its drained
	 * nothing: the path's floors are below the path now) and this one
	 * has never held: it holds too (drwa_adopt_hold), at its RTT now,
	 * with the window of its best recent rate, while one holds, rather
	 * than cut by a floor the holder has found wrong until its own rules
	 * catch up. A connection
	 * opened as the path grew 40 -> 200 ms beside a download was cut to
	 * 2 segments in its first rounds (the download's floor, before the
	 * download held) and stayed far below (0.13 and 0.50 of not acting
	 * over 16 s, test_drwa_harm case 6): at 2 segments its rate cannot
	 * fall, its RTT moved with the download's queue, so neither the rate
	 * nor the flat rule fired, and the window regrew only at the pace of
	 * its rounds. */
	if (m->path_held && !p->drwa_held && !p->drwa_retry)
		return drwa_adopt_hold(p, m, low, prev);
	b = p->drwa_base_us < m->resolution_us ? m->resolution_us : p->drwa_base_us;
	if (m->holes && (__u64)m->rtt_us * 256 > b * m->lambda_x256) {
		/* A loss stalled delivery behind a hole: the round's rate is
		 * not the window's. Cut against the best recent rate, and
		 * judge nothing. */
		w = (p->drwa_max_rate * b / 1000000 * m->lambda_x256) >> 8;
		return drwa_bound(w < prev ? w : prev, m->min_bytes, m->limit);
	}
	/* lambda x RTT_min x rate, as lambda x RTT_min / RTT_est x cwnd_est */
	w = (m->rcvd * b / m->dur_us * m->lambda_x256) >> 8;
	if ((__u64)m->rtt_us * 256 <= b * m->lambda_x256) {
		/* No queue beyond the target: the window may only grow. */
		if (!p->drwa_retry)
			p->drwa_fails = 0;
		p->drwa_ref_low_us = 0;
		p->drwa_cut_low_us = 0;
		p->drwa_flat = 0;
		return drwa_bound(w > prev ? w : prev, m->min_bytes, m->limit);
	}
	/* The cuts reached the smallest window and for DRWA_FLAT_ROUNDS the
	 * RTT is no lower than when they began (or last rose: someone else's
	 * queue growing beside them): they drained nothing, whoever kept the
	 * rate (at 2 segments the rate cannot fall any more, so the rule
	 * below would hold the window there for good). */
	if (!p->drwa_cut_low_us || low * 16 > p->drwa_cut_low_us * 17) {
		p->drwa_cut_low_us = low;
		p->drwa_flat = 0;
	} else if (prev <= m->min_bytes && low * 16 >= p->drwa_cut_low_us * 15) {
		if (++p->drwa_flat >= DRWA_FLAT_ROUNDS)
			return drwa_take_back(p, m, low, prev);
	} else {
		p->drwa_flat = 0;
	}
	path_rate = m->path_rcvd >= m->rcvd ? m->path_rcvd * 1000000 / m->dur_us : 0;
	if (!p->drwa_ref_low_us || low * 16 < p->drwa_ref_low_us * 15 ||
	    low * 16 > p->drwa_ref_low_us * 17) {
		/* The RTT fell (the cuts drain a queue), rose (someone else's
		 * queue grows: a new flow, a slower link), or the cuts begin:
		 * measure the rate from here. */
		p->drwa_ref_low_us = low;
		p->drwa_ref_rate = rate;
		p->drwa_ref_path_rate = path_rate;
		return drwa_bound(w, m->min_bytes, m->limit);
	}
	if (rate * 16 >= p->drwa_ref_rate * 13)
		return drwa_bound(w, m->min_bytes, m->limit);
	/* Its rate fell, but the receivers DRWA acts on along its path kept
	 * theirs: its share went to one of them (a web transfer beside a
	 * download), whose queue it is, and which DRWA cuts too. */
	if (path_rate && p->drwa_ref_path_rate && !m->path_held &&
	    path_rate * 16 >= p->drwa_ref_path_rate * 13)
		return drwa_bound(w, m->min_bytes, m->limit);
	/* The rate fell and the RTT did not: take the cut back. */
	return drwa_take_back(p, m, low, prev);
}

/*
 * The window clamp to give back when DRWA lets go, and the most DRWA may
 * ever set: what the socket would have without DRWA. That is the clamp
 * DRWA found (the kernel's, or an application's own TCP_WINDOW_CLAMP),
 * exactly, unless receive-buffer autotuning has grown the buffer since:
 * tcp_rcv_space_adjust then sets window_clamp to what it makes of the new
 * buffer (tcp_win_from_space(sk_rcvbuf), overriding an application's clamp
 * too), and the socket gets that. scaling_ratio is the kernel's (8
 * fraction bits; 128, half the buffer, where the kernel has none).
 */
static __always_inline __u32 drwa_give_back(const struct bloatd_drwa_saved *sv, __u32 rcvbuf,
					    __u32 scaling_ratio)
{
	__u64 auto_clamp;

	if (rcvbuf <= sv->orig_rcvbuf)
		return sv->orig_clamp;
	auto_clamp = (__u64)rcvbuf * scaling_ratio >> 8;
	return auto_clamp > 0x7fffffff ? 0x7fffffff : (__u32)auto_clamp;
}

/*
 * Before a round: who set the clamp since DRWA's last round? Autotuning
 * moves it only as it grows the buffer, and then to what the buffer gives
 * (drwa_give_back). DRWA's own clamp with the buffer as it was is DRWA's.
 * Any other clamp is the application's own (TCP_WINDOW_CLAMP), also when
 * the buffer grew in the same round, and also when it is the value DRWA
 * set, if the buffer grew since: autotuning then moved the clamp to its
 * own, and the application set it back (a DRWA clamp held at the
 * application's ceiling looked like DRWA's, and the grown buffer's clamp
 * became DRWA's ceiling: issue 34, the lab's autotuned-buffer case). That
 * is what DRWA gives back and never exceeds. (Autotuning's clamp under a
 * scaling_ratio that has moved since is taken for the application's: it is
 * still what the socket had, and a buffer that grows again moves it.)
 */
static __always_inline void drwa_saw_clamp(struct bloatd_drwa_saved *sv, __u32 clamp_now,
					   __u32 rcvbuf, __u32 scaling_ratio)
{
	if (!sv->clamp || (clamp_now == sv->clamp && rcvbuf == sv->rcvbuf) ||
	    clamp_now == drwa_give_back(sv, rcvbuf, scaling_ratio))
		return;
	sv->orig_clamp = clamp_now;
	sv->orig_rcvbuf = rcvbuf;
}

#endif /* BLOATD_POLICY_H */
