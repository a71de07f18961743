// SPDX-License-Identifier: GPL-2.0-only
/*
 * The pure functions of policy.h for the host, so the daemon's unit tests
 * run the arithmetic the sock_ops program runs (daemon/src/policy/kernel.rs).
 */
#include "policy.h"

__u32 bloatd_drwa_round(struct bloatd_policy_sock *p, const struct drwa_measure *m, __u32 prev)
{
	return drwa_round(p, m, prev);
}

__u32 bloatd_drwa_path_floor(const struct bloatd_drwa_path *l, __u64 now_us, __u64 fresh_us,
			     __u32 *held)
{
	return drwa_path_floor(l, now_us, fresh_us, held);
}

void bloatd_drwa_path_tell(struct bloatd_drwa_path *l, const struct bloatd_policy_sock *p,
			   __u64 now_us)
{
	drwa_path_tell(l, p, now_us);
}

__u32 bloatd_drwa_give_back(const struct bloatd_drwa_saved *sv, __u32 rcvbuf, __u32 scaling_ratio)
{
	return drwa_give_back(sv, rcvbuf, scaling_ratio);
}

void bloatd_drwa_saw_clamp(struct bloatd_drwa_saved *sv, __u32 clamp_now, __u32 rcvbuf,
			   __u32 scaling_ratio)
{
	drwa_saw_clamp(sv, clamp_now, rcvbuf, scaling_ratio);
}

int bloatd_policy_ports_match(const struct bloatd_policy_rule *r, __u16 sport, __u16 dport)
{
	return policy_ports_match(r, sport, dport);
}

int bloatd_policy_path_match(const struct bloatd_policy_rule *r, __u32 cls)
{
	return policy_path_match(r, cls);
}

int bloatd_policy_aqm_gated(__u32 cls, __u32 act_on_aqm)
{
	return policy_aqm_gated(cls, act_on_aqm);
}

/* The key the sock_ops program looks a peer's class up by (policy_ops.h,
 * path_class_of): the peer's floor key. */
void bloatd_path_class_key(struct bloatd_path_key *k, const struct bloatd_floor_subject *s)
{
	floor_key(k, s, floor_peer_bits(s));
}
