// SPDX-License-Identifier: GPL-2.0-only
/*
 * stats.h for the daemon: the histograms' bucket bounds, which /metrics
 * writes as `le`, and the bucketing itself for its unit test.
 */
#include "stats.h"

__u32 bloatd_delay_bound_us(__u32 i)
{
	return delay_bound_us(i);
}

__u32 bloatd_cwnd_bound(__u32 i)
{
	return cwnd_bound(i);
}

__u32 bloatd_delay_bucket(__u32 us)
{
	return delay_bucket(us);
}

__u32 bloatd_cwnd_bucket(__u32 cwnd)
{
	return cwnd_bucket(cwnd);
}
