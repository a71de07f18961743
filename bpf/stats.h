/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The buckets of the statistics' histograms (struct bloatd_role_stats),
 * defined once. The probes count each sample into them; the daemon, which
 * reads the buckets at scrape time, takes their upper bounds from here too
 * (stats_host.c, linked into it), so every bucket of /metrics carries the
 * bound the probes counted it with.
 *
 * Pure C, no BPF helpers and no kernel types, as floor.h.
 */
#ifndef BLOATD_STATS_H
#define BLOATD_STATS_H

#include "bloatd.h"

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

/* Upper bound (inclusive, Prometheus `le`) of delay bucket i < 15, in
 * microseconds: 0.5 ms .. 16 s, a LAN's queue to a bloated cellular
 * buffer. The last bucket has none (+Inf). */
static __always_inline __u32 delay_bound_us(__u32 i)
{
	static const __u32 bounds[BLOATD_DELAY_BUCKETS - 1] = {
		500, 1000, 2000, 5000, 10000, 20000, 50000, 100000,
		200000, 500000, 1000000, 2000000, 4000000, 8000000, 16000000,
	};

	return bounds[i];
}

/* Upper bound of cwnd bucket i < 13, in segments: 2, 4, .. 8192. */
static __always_inline __u32 cwnd_bound(__u32 i)
{
	return 2U << i;
}

/*
 * The buckets are counted without a branch: for each bound, the sign of
 * bound - v in 64 bits (1 if v is above it). A bucket found by comparisons
 * leaves the verifier one path per bucket, and a sample's buckets
 * multiplied (queue x RTT x floor x cwnd, live at once): Linux 5.14's and
 * 5.15's verifiers gave up on tcp_probe at their 1,000,000 instructions.
 * Counted this way a bucket is one value in a range, on one path. `v` is
 * hidden from the compiler first (stats_opaque): knowing it fits 32 bits,
 * it would turn each sign back into a comparison, a branch in BPF.
 */
static __always_inline __u64 stats_opaque(__u32 v)
{
	__u64 w = v;

	__asm__ volatile("" : "+r"(w));
	return w;
}

/* Index of a delay in the delay buckets: the bounds it is above. */
static __always_inline __u32 delay_bucket(__u32 us)
{
	__u64 w = stats_opaque(us);
	__u32 i, above = 0;

	for (i = 0; i < BLOATD_DELAY_BUCKETS - 1; i++)
		above += ((__u64)delay_bound_us(i) - w) >> 63;
	return above;
}

/* Index of a cwnd in the cwnd buckets. */
static __always_inline __u32 cwnd_bucket(__u32 cwnd)
{
	__u64 w = stats_opaque(cwnd);
	__u32 i, above = 0;

	for (i = 0; i < BLOATD_CWND_BUCKETS - 1; i++)
		above += ((__u64)cwnd_bound(i) - w) >> 63;
	return above;
}

#endif /* BLOATD_STATS_H */
