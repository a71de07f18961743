// SPDX-License-Identifier: GPL-2.0
/*
 * cubic_idle_us (struct_ops/cc_idle.h, the code bloatd_cubic runs on
 * CA_EVENT_TX_START) compiled for the host, so struct_ops/src/algo.rs's
 * unit test runs the kernel's arithmetic around the jiffies wraps.
 */
#include <linux/types.h>
#include "cc_idle.h"

__u64 bloatd_cubic_idle_us(__u32 now_jiffies, __u32 lsndtime, __u32 hz)
{
	return cubic_idle_us(now_jiffies, lsndtime, hz);
}
