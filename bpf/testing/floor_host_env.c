// SPDX-License-Identifier: GPL-2.0-only
/*
 * floor_path.h compiled for the host, for the daemon's unit tests: the same
 * code the probes run, over an environment the Rust test supplies (a table
 * standing in for each of the kernel's floor maps and a fixed bottleneck
 * reading).
 * Only the tests reference it, so only they link it.
 */
#include "floor_path.h"

struct bloatd_floor *bloatd_test_floor_lookup(void *env, const struct bloatd_path_key *key,
					      __u32 table);
int bloatd_test_floor_insert(void *env, const struct bloatd_path_key *key,
			     const struct bloatd_floor *f, __u32 table);
__u32 bloatd_test_floor_infer(void *env, __u32 own_us);
void bloatd_test_floor_count(void *env, __u32 stat);

static struct bloatd_floor *floor_env_lookup(void *env, const struct bloatd_path_key *key,
					     __u32 table)
{
	return bloatd_test_floor_lookup(env, key, table);
}

static int floor_env_insert(void *env, const struct bloatd_path_key *key,
			    const struct bloatd_floor *f, __u32 table)
{
	return bloatd_test_floor_insert(env, key, f, table);
}

static __u32 floor_env_infer(void *env, __u32 own_us)
{
	return bloatd_test_floor_infer(env, own_us);
}

static void floor_env_count(void *env, __u32 stat)
{
	bloatd_test_floor_count(env, stat);
}

__u32 bloatd_floor_path_refresh(void *env, const struct bloatd_floor_cfg *cfg,
				const struct bloatd_floor_subject *s, __u32 now_s, __u32 *source)
{
	return floor_path_refresh(env, cfg, s, now_s, source);
}

