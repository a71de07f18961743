// SPDX-License-Identifier: GPL-2.0-only
/*
 * The pure functions of policy.h for the host, so the daemon's unit tests
 * run the arithmetic the sock_ops program runs (daemon/src/policy.rs).
 */
#include "policy.h"

__u32 bloatd_drwa_window(__u32 cwnd_est, __u32 floor_us, __u32 rtt_us, __u32 lambda_x256,
			 __u32 min_bytes, __u32 resolution_us)
{
	return drwa_window(cwnd_est, floor_us, rtt_us, lambda_x256, min_bytes, resolution_us);
}

__u32 bloatd_drwa_restore_clamp(__u32 orig, __u32 now, __u32 rcvbuf, __u32 scaling_ratio)
{
	return drwa_restore_clamp(orig, now, rcvbuf, scaling_ratio);
}

int bloatd_policy_ports_match(const struct bloatd_policy_rule *r, __u16 sport, __u16 dport)
{
	return policy_ports_match(r, sport, dport);
}
