/* SPDX-License-Identifier: GPL-2.0 */
/*
 * CUBIC's idle shift as plain arithmetic, shared by cubic.bpf.c and the
 * host test that checks it (idle_test.c, run by build.rs, asserted in
 * src/algo.rs): the includer provides __u32/__s32/__u64.
 */
#ifndef BLOATD_CC_IDLE_H
#define BLOATD_CC_IDLE_H

/*
 * Microseconds to move CUBIC's epoch forward when a connection starts
 * sending again after being application limited. The kernel's reference
 * (tcp_cubic.c, CA_EVENT_TX_START): the time since the last send,
 * tcp_jiffies32 - lsndtime, a signed 32-bit difference of jiffies, so a
 * pause counts in full up to 2^31 jiffies (24.8 days at HZ 1000). A signed
 * 32-bit difference of microseconds would wrap after 35.8 minutes and leave
 * the epoch where it was: cwnd would then jump along the curve.
 * 0 when the last send is not in the past or HZ is unknown.
 */
static inline __u64 cubic_idle_us(__u32 now_jiffies, __u32 lsndtime, __u32 hz)
{
	__s32 idle = (__s32)(now_jiffies - lsndtime);

	if (idle <= 0 || !hz)
		return 0;
	return (__u64)idle * 1000000ULL / hz;
}

#endif /* BLOATD_CC_IDLE_H */
