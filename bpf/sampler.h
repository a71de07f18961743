/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Adaptive sampling (config `sampling = "adaptive"`, the default): which
 * segments of a socket the probe looks at, and how much of the statistics
 * each sample stands for.
 *
 * Why: on a busy server most sockets are sparse (a segment or two per
 * sampling interval), so nearly every segment is due its sample, and a due
 * sample must reach the socket's record and the tcp_sock lines the stack has
 * not touched yet for this segment: 600-800 ns a segment on our VM, where an
 * empty program costs 70 (docs/measurements.md, "Adaptive sampling"). So a
 * socket that is not hot is looked at in a few of its segments only, chosen
 * at random before anything of the socket is read, and what was skipped is
 * carried by weights:
 *
 * - Both modes count socket-time (sampler_time_weight): one observation
 *   per interval of traffic, each segment closing the part of an interval
 *   since the socket's previous one, at most a whole. Exact mode adds it
 *   at every segment it sees. A random look at a segment that came a gap g
 *   after the socket's previous one (the kernel's own stamps of it,
 *   rcv_tstamp and lrcvtime) adds min(g, interval) / interval times 2^shift,
 *   the segments each look stands for (Horvitz-Thompson: each segment is
 *   looked at with probability 2^-shift, so the expected sum is the
 *   socket-time exact mode counts). Weights add up in the record
 *   (`pending_ns`, nanoseconds of socket-time) and the next sample that
 *   measured the socket's side counts their whole part, the fraction
 *   carried to the one after (sampler_count): histograms stay unbiased in
 *   socket-time, bucket by bucket, because which segment is looked at is
 *   independent of its delay, and what a look measures (a receiver's echo,
 *   probes.bpf.c) is the segment's own, not the record's. A seen segment
 *   after unseen ones counts its own gap (sampler_seen_weight).
 * - Hot sockets keep exact mode's per-interval sampling, each sample one
 *   observation: bloated at their last sample, watched, acted on by the
 *   policy, or dense (a segment in most ticks of the kernel's clock). A
 *   socket decides at each sample and counts itself in a slot of the hot
 *   table picked by its hash; the probe reads that slot first (when any
 *   socket is hot at all), so a segment of a socket that is not hot costs a
 *   read of the CPU's sampler state, a random number and at most one read
 *   of a small table. Sockets sharing a slot with a hot one are sampled as
 *   hot: more often, never less.
 * - Counters (retransmissions, bytes) are read from the socket at each
 *   sample and counted as differences: exact whenever a sample comes.
 *   Floors fold the kernel's own windowed minimum RTT of the socket, which
 *   holds every sample since the last one.
 *
 * Pure C, no BPF helpers and no kernel types, as floor.h and stats.h: the
 * probes and the host's unit tests (daemon/src/probes/sampler_tests.rs) run
 * the same code.
 */
#ifndef BLOATD_SAMPLER_H
#define BLOATD_SAMPLER_H

#ifdef __bpf__
#include "vmlinux.h"	/* __u32 and the like, as every BPF object has them */
#else
#include <linux/types.h>
#endif

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

/*
 * How often a socket that is not hot is looked at: with probability
 * 2^-shift per segment, the shift chosen on each CPU from what a look costs
 * there (a moving average, measured around looks) and how many segments
 * come there a second, so that looks cost at most SAMPLER_BUDGET_NS a
 * segment plus SAMPLER_ALLOWANCE_NS a second: a quiet machine looks at
 * every segment (a few thousand a second cost less than the allowance), a
 * busy one backs off as bpftune does. On a machine where a cold socket's
 * record and tcp_sock lines are a few hundred nanoseconds away, a busy CPU
 * looks at one segment in 16-32; where they are microseconds away (the VMs
 * the project is measured on, docs/measurements.md), one in hundreds. Each
 * look is weighted by 2^shift, so the statistics stay unbiased whatever
 * the shift; only their noise grows with it.
 */
#define SAMPLER_BUDGET_NS 16
#define SAMPLER_ALLOWANCE_NS 500000ULL
#define SAMPLER_SHIFT_MAX 12
#define SAMPLER_SHIFT_START 6
/* Slots of the hot table (struct bloatd_hot): 16 kB, a socket's by its hash. */
#define SAMPLER_HOT_SLOTS 4096

/* The look decision's generator: a 64-bit LCG (Knuth's MMIX constants)
 * per CPU, its high half as the number. Cheaper than a helper call, and
 * independent of the traffic, which is all unbiasedness asks of it. */
static __always_inline __u32 sampler_rand(__u64 *rng)
{
	*rng = *rng * 6364136223846793005ULL + 1442695040888963407ULL;
	return *rng >> 32;
}

/* Whether a segment of a socket that is not hot is looked at. */
static __always_inline int sampler_draw(__u64 *rng, __u32 shift)
{
	return !(sampler_rand(rng) & ((1U << shift) - 1));
}

/* A look's cost into the CPU's moving average (an eighth per look; the
 * first look sets it). */
static __always_inline void sampler_cost(__u64 *look_ns, __u64 ns)
{
	if (!*look_ns)
		*look_ns = ns;
	else
		*look_ns = *look_ns - *look_ns / 8 + ns / 8;
}

/* The smallest shift whose share of a look's cost is within the budget, at
 * `rate` segments a second on this CPU (0: not measured yet). */
static __always_inline __u32 sampler_shift_for(__u64 look_ns, __u64 rate)
{
	__u64 budget = SAMPLER_BUDGET_NS + SAMPLER_ALLOWANCE_NS / (rate ? rate : 1);
	__u32 s;

	for (s = 0; s < SAMPLER_SHIFT_MAX; s++)
		if ((look_ns >> s) <= budget)
			break;
	return s;
}

/* Segments a second on this CPU, measured over windows of a second at
 * least (`win_*` hold the window's start; `rate` keeps the last window's). */
static __always_inline void sampler_rate(__u64 *win_ns, __u64 *win_events, __u64 *rate,
					 __u64 now_ns, __u64 events)
{
	__u64 dt = now_ns - *win_ns;

	if (!*win_ns) {
		*win_ns = now_ns;
		*win_events = events;
		return;
	}
	if (dt < 1000000000ULL)
		return;
	*rate = (events - *win_events) * 1000000000ULL / dt;
	*win_ns = now_ns;
	*win_events = events;
}

/*
 * Socket-time, which both modes count: each segment a record sees closes
 * the part of a sampling interval since the one it saw before, at most one
 * whole interval (a socket idle longer carried no traffic meanwhile).
 * Exact mode and hot sockets add it at every segment they look at
 * (sampler_time_weight, the TCP clock's gap); a random look adds the same
 * for the segment it sees, times the segments it stands for
 * (sampler_look_weight). So a sample that stands for k intervals of
 * traffic counts k, whichever way the socket was looked at: a bucket's
 * share is a share of socket-time in both modes, and a socket that moves
 * between hot and not counts the same traffic the same. Kept in
 * nanoseconds, not in fractions of an observation: a bulk flow's segments
 * come microseconds apart, and a fixed-point fraction per segment would
 * round each to nothing.
 */
static __always_inline __u64 sampler_time_weight(__s64 gap_ns, __u64 interval_ns)
{
	if (gap_ns <= 0)
		return 0;
	return (__u64)gap_ns < interval_ns ? (__u64)gap_ns : interval_ns;
}

/*
 * The weight of a random look at a segment that came `gap_j` ticks of the
 * kernel's clock after the socket's previous segment, with `interval_j`
 * ticks to a sampling interval of `interval_ns` (interval_j 0: not known
 * yet, then the look counts whole), taken with probability 2^-shift.
 */
static __always_inline __u64 sampler_look_weight(__u32 gap_j, __u32 interval_j, __u64 interval_ns,
						 __u32 shift)
{
	if (!interval_j || gap_j >= interval_j)
		return interval_ns << shift;
	return ((__u64)gap_j * interval_ns / interval_j) << shift;
}

/*
 * The socket-time a segment the record sees adds (exact mode, a hot
 * socket): the time since the record's previous write (`since_ns`, 0 for
 * a record made at this one), while the record saw the socket's previous
 * segment; where it did not (a random look's record, or one cold until
 * now: the kernel stamped the previous segment, at `prev_j`, in a tick
 * after the record's last write at `update_j`), this segment's own gap,
 * `now_j - prev_j` ticks, which is what a look would add at odds 1: the
 * segments it missed are counted by the looks that stood for them.
 * Counted from the record's last write, a socket entering sees-all would
 * add a whole interval for a gap of milliseconds at each hand-over.
 * (Segments passed over in the tick of a seen one, probe_passes_over, leave
 * the kernel's stamp in that tick: the record saw them.)
 */
/* Ticks from the socket's previous segment (`prev_j`) to this one. */
static __always_inline __u32 sampler_gap_j(__u32 prev_j, __u32 now_j)
{
	return (__s32)(now_j - prev_j) > 0 ? now_j - prev_j : 0;
}

static __always_inline __u64 sampler_seen_weight(__u32 prev_j, __u32 update_j, __u32 now_j,
						 __s64 since_ns, __u32 interval_j,
						 __u64 interval_ns)
{
	if ((__s32)(prev_j - update_j) > 0)
		return sampler_look_weight(sampler_gap_j(prev_j, now_j), interval_j, interval_ns,
					   0);
	return sampler_time_weight(since_ns, interval_ns);
}

/* A sample takes the whole intervals of socket-time its record holds, as
 * observations, and leaves the rest for the next one. */
static __always_inline __u32 sampler_take(__u64 *pending_ns, __u64 interval_ns)
{
	__u64 k;

	if (!interval_ns)
		return 0;
	k = *pending_ns / interval_ns;
	*pending_ns -= k * interval_ns;
	return k;
}

/* The record's last word (its socket closes): what it still holds, its
 * fraction of an observation counted with that probability (`r`: a random
 * number), so that short connections count their socket-time on average:
 * rounded to the nearest, a web server's 40 ms connections would count
 * nothing at all. */
static __always_inline __u32 sampler_take_last(__u64 *pending_ns, __u64 interval_ns, __u32 r)
{
	__u64 k, rest;

	if (!interval_ns)
		return 0;
	k = *pending_ns / interval_ns;
	rest = *pending_ns - k * interval_ns;
	*pending_ns = 0;
	return k + ((((__u64)r * interval_ns) >> 32) < rest);
}

/*
 * The observations a sample counts: none where it did not measure the
 * socket's side of the transfer (`measured`: a receiver whose echoes all
 * failed in the interval, a socket without an RTT yet), whose socket-time
 * then waits in the record for the next sample that does; else the whole
 * intervals its record holds, and at the record's last word (`last`) its
 * fraction with that probability (`r`). So each stretch of a socket's
 * traffic counts at the next measurement of it, in both modes, never at a
 * stale one: a stale value would stand for its socket until the next
 * passing measurement, which comes an interval later in exact mode and
 * 2^shift looks later in adaptive mode for a cold socket, but at once for
 * a hot (bloated) one, so the two modes would weigh a socket's values
 * differently.
 */
static __always_inline __u32 sampler_count(__u64 *pending_ns, __u64 interval_ns, int measured,
					   int last, __u32 r)
{
	if (!measured)
		return 0;
	if (last)
		return sampler_take_last(pending_ns, interval_ns, r);
	return sampler_take(pending_ns, interval_ns);
}

/*
 * The path of a socket, as a slot of the hot table's paths: its peer's
 * prefix (the first `plen` bits, at most 64, of the address's first two
 * words, network order, in the socket's first line, which the socket
 * lookup has just read) and its network namespace (`netns`, its inode). A socket on a path where another was bloated within
 * SAMPLER_PATH_HOLD_S is sampled every interval: a queue grows for every
 * flow through the bottleneck at once, and the bloated-sockets gauge must
 * count each within its second, not at its next random look.
 */
#define SAMPLER_PATH_HOLD_S 2

static __always_inline __u32 sampler_path_slot(__u32 w0, __u32 w1, __u32 netns, __u32 plen)
{
	__u64 a = ((__u64)__builtin_bswap32(w0) << 32) | __builtin_bswap32(w1), h;

	if (plen < 64)
		a &= plen ? ~0ULL << (64 - plen) : 0;
	h = (a ^ netns) * 0x9e3779b97f4a7c15ULL;
	return (h >> 40) & (SAMPLER_HOT_SLOTS - 1);
}

/* Whether a path's mark (the jiffies it was last marked, 0 never) still
 * holds at `now_j`, with `interval_j` ticks to an interval of 100 ms or so
 * (the hold is counted in intervals: 10 a second at the default). */
static __always_inline int sampler_path_held(__u32 mark_j, __u32 now_j, __u32 interval_j,
					     __u64 interval_ns)
{
	__u64 hold_j;

	if (!mark_j || !interval_j || !interval_ns)
		return 0;
	hold_j = (__u64)interval_j * SAMPLER_PATH_HOLD_S * 1000000000ULL / interval_ns;
	return (__u32)(now_j - mark_j) <= hold_j;
}

/* Dense: a segment in at least every other tick since the last sample. */
static __always_inline int sampler_dense(__u32 d_segs, __u32 d_jiffies)
{
	return d_jiffies && 2 * d_segs >= d_jiffies;
}

/* What makes a socket hot: bloated at this sample, watched, acted on by
 * the policy, or dense. */
static __always_inline int sampler_hot(__u32 queue_us, __u32 bloat_threshold_us, int watched,
				       int acted, int dense)
{
	return (bloat_threshold_us && queue_us >= bloat_threshold_us) || watched || acted || dense;
}

/*
 * Ticks of the kernel's clock (jiffies) per sampling interval, calibrated
 * against CLOCK_MONOTONIC: HZ is a build option of the kernel (100 to
 * 1000) that no BPF program can read without the kernel's config. `ref_*`
 * hold the first reading; 0 until a second has passed.
 */
static __always_inline __u32 sampler_interval_jiffies(__u64 *ref_ns, __u64 *ref_j, __u64 now_ns,
						      __u64 now_j, __u64 interval_ns)
{
	__u64 dt = now_ns - *ref_ns, j;

	if (!*ref_ns) {
		*ref_ns = now_ns;
		*ref_j = now_j;
		return 0;
	}
	if (dt < 1000000000ULL)
		return 0;
	j = ((now_j - *ref_j) * interval_ns + dt / 2) / dt;
	return j ? j : 1;
}

#endif /* BLOATD_SAMPLER_H */
