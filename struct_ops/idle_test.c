// SPDX-License-Identifier: GPL-2.0
/*
 * Host program run by build.rs: cubic_idle_us (cc_idle.h, the code the BPF
 * object runs) on idle periods around the wraps; src/algo.rs asserts the
 * output. One line per case: now_jiffies lsndtime hz -> microseconds.
 */
#include <stdio.h>
#include <linux/types.h>
#include "cc_idle.h"

static void run(__u32 now, __u32 lsnd, __u32 hz)
{
	printf("%u %u %u %llu\n", now, lsnd, hz, (unsigned long long)cubic_idle_us(now, lsnd, hz));
}

int main(void)
{
	run(1000, 900, 1000);			/* 100 ms */
	run(3000000, 600000, 1000);		/* 40 min at HZ 1000: past the 35.8-min microsecond wrap */
	run(600000, 0, 250);			/* 40 min at HZ 250 */
	run(100, 0xFFFFFF00u, 1000);		/* jiffies wrapped between send and now */
	run(900, 1000, 1000);			/* last send after now: no shift */
	run(1000, 1000, 1000);			/* no idle */
	run(1000, 900, 0);			/* HZ unknown */
	return 0;
}
