// SPDX-License-Identifier: GPL-2.0-only
/*
 * The pure floor functions of floor.h for the daemon: reading a floor the
 * way the probes do (floor_get) when it lists the kernel's floors.
 */
#include "floor.h"

__u32 bloatd_floor_get(const struct bloatd_floor *f, __u32 win_s, __u32 t_s, __u32 *source)
{
	return floor_get(f, win_s, t_s, source);
}

__u32 bloatd_floor_infer(__u32 own_min_us, __u32 queue_us, __u32 route_floor_us)
{
	return floor_infer(own_min_us, queue_us, route_floor_us);
}
