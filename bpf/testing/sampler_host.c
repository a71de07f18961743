// SPDX-License-Identifier: GPL-2.0-only
/*
 * Adaptive sampling's arithmetic (bpf/sampler.h) for the host's unit tests
 * (daemon/src/probes/sampler_tests.rs): the functions the probes inline.
 */
#include "sampler.h"

__u32 bloatd_sampler_rand(__u64 *rng) { return sampler_rand(rng); }
int bloatd_sampler_draw(__u64 *rng, __u32 shift) { return sampler_draw(rng, shift); }
void bloatd_sampler_cost(__u64 *look_ns, __u64 ns) { sampler_cost(look_ns, ns); }
__u32 bloatd_sampler_shift_for(__u64 look_ns, __u64 rate) { return sampler_shift_for(look_ns, rate); }
void bloatd_sampler_rate(__u64 *win_ns, __u64 *win_events, __u64 *rate, __u64 now_ns, __u64 events)
{
	sampler_rate(win_ns, win_events, rate, now_ns, events);
}
__u64 bloatd_sampler_look_weight(__u32 gap_j, __u32 interval_j, __u64 interval_ns, __u32 shift)
{
	return sampler_look_weight(gap_j, interval_j, interval_ns, shift);
}
__u32 bloatd_sampler_take(__u64 *pending_ns, __u64 interval_ns)
{
	return sampler_take(pending_ns, interval_ns);
}
int bloatd_sampler_dense(__u32 d_segs, __u32 d_jiffies) { return sampler_dense(d_segs, d_jiffies); }
int bloatd_sampler_hot(__u32 queue_us, __u32 threshold_us, int watched, int acted, int dense)
{
	return sampler_hot(queue_us, threshold_us, watched, acted, dense);
}
__u32 bloatd_sampler_interval_jiffies(__u64 *ref_ns, __u64 *ref_j, __u64 now_ns, __u64 now_j,
				      __u64 interval_ns)
{
	return sampler_interval_jiffies(ref_ns, ref_j, now_ns, now_j, interval_ns);
}
__u64 bloatd_sampler_time_weight(__s64 gap_ns, __u64 interval_ns)
{
	return sampler_time_weight(gap_ns, interval_ns);
}
__u32 bloatd_sampler_take_last(__u64 *pending_ns, __u64 interval_ns, __u32 r)
{
	return sampler_take_last(pending_ns, interval_ns, r);
}
__u64 bloatd_sampler_seen_weight(__u32 prev_j, __u32 update_j, __u32 now_j, __s64 since_ns,
				 __u32 interval_j, __u64 interval_ns)
{
	return sampler_seen_weight(prev_j, update_j, now_j, since_ns, interval_j, interval_ns);
}
__u32 bloatd_sampler_count(__u64 *pending_ns, __u64 interval_ns, int measured, int last, __u32 r)
{
	return sampler_count(pending_ns, interval_ns, measured, last, r);
}
