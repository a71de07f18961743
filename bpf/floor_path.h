/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A path's floor, found and fed by one socket: which floor a socket's
 * queueing delay is measured against, and where it came from (floor.h).
 *
 * Pure C over four functions its includer defines before including it, so
 * the probes run it on the kernel's maps and a unit test (root-free, on any
 * laptop) runs the very same code on a table of its own:
 *   struct bloatd_floor *floor_env_lookup(void *env, const struct bloatd_path_key *key);
 *   int floor_env_insert(void *env, const struct bloatd_path_key *key,
 *                        const struct bloatd_floor *f);        0: inserted
 *   __u32 floor_env_infer(void *env, __u32 own_us);             bottleneck_infer
 *   void floor_env_count(void *env, __u32 stat);                enum bloatd_stat
 */
#ifndef BLOATD_FLOOR_PATH_H
#define BLOATD_FLOOR_PATH_H

#include "bloatd.h"

#define FLOOR_AF_INET 2
#define FLOOR_AF_INET6 10

/* An IPv4 peer of a dual-stack socket, held as ::ffff:a.b.c.d. */
static __always_inline int floor_v4_mapped(const struct bloatd_floor_subject *s)
{
	const __u8 *a = s->daddr;

	return s->family == FLOOR_AF_INET6 && !a[0] && !a[1] && !a[2] && !a[3] && !a[4] &&
	       !a[5] && !a[6] && !a[7] && !a[8] && !a[9] && a[10] == 0xff && a[11] == 0xff;
}

/* The family the peer is reached by: IPv4 for a v4-mapped peer, so its
 * floor is the same whether the socket was opened as IPv4 or IPv6. */
static __always_inline __u16 floor_peer_family(const struct bloatd_floor_subject *s)
{
	return floor_v4_mapped(s) ? FLOOR_AF_INET : s->family;
}

static __always_inline __u32 floor_peer_bits(const struct bloatd_floor_subject *s)
{
	return floor_peer_family(s) == FLOOR_AF_INET6 ? 128 : 32;
}

/* The key of a peer's floor (prefix_len 32/128) or of its prefix's. */
static __always_inline void floor_key(struct bloatd_path_key *k,
				      const struct bloatd_floor_subject *s, __u32 bits)
{
	int i;

	k->netns = s->netns;
	k->family = floor_peer_family(s);
	k->prefix_len = bits;
	k->pad = 0;
	for (i = 0; i < 16; i++)
		k->addr[i] = 0;
	if (floor_v4_mapped(s)) {
		for (i = 0; i < 4; i++)
			k->addr[i] = s->daddr[12 + i];
	} else {
		for (i = 0; i < 16; i++)
			k->addr[i] = s->daddr[i];
	}
	floor_mask(k->addr, bits);
}

/* Insert a new floor for `key`, seeded with `seed` from `source` and fed
 * the socket's own minimum; returns the floor. */
static __always_inline __u32 floor_insert(void *env, const struct bloatd_path_key *key,
					  const struct bloatd_floor_cfg *cfg,
					  const struct bloatd_floor_subject *s, __u32 now_s,
					  __u32 seed, __u32 source, __u32 *got_source)
{
	struct bloatd_floor f = {};

	floor_reset(&f, now_s, seed, source);
	f.route_id = s->route_id;
	floor_update(&f, cfg->window_s, now_s, s->own_us, BLOATD_FLOOR_SOCKET);
	if (!floor_env_insert(env, key, &f))
		floor_env_count(env, BLOATD_STAT_FLOOR_NEW);
	return floor_get(&f, cfg->window_s, now_s, got_source);
}

/*
 * Feed the socket's minimum into its peer's and prefix's floors and return
 * the floor its queueing delay is measured against, with its provenance in
 * `*source` (floor_choose). A peer seen for the first time takes its floor
 * from its prefix, else from its bottleneck's queue (floor_infer), else from
 * this socket; a new prefix starts from the same seed. A peer now reached
 * through another route (interface or gateway) starts over. 0 when the
 * socket has no RTT sample yet.
 */
static __always_inline __u32 floor_path_refresh(void *env, const struct bloatd_floor_cfg *cfg,
						const struct bloatd_floor_subject *s,
						__u32 now_s, __u32 *source)
{
	struct bloatd_path_key key, pkey;
	struct bloatd_floor *f, *pf = 0, *expired = 0;
	__u32 own = s->own_us, path_us, unused = 0, found = 0;
	__u32 seed = 0, seed_source = BLOATD_FLOOR_SOCKET;
	__u32 pbits = floor_peer_family(s) == FLOOR_AF_INET6 ? cfg->prefix_v6 : cfg->prefix_v4;
	__u32 has_prefix = pbits && pbits < floor_peer_bits(s);

	*source = BLOATD_FLOOR_NONE;
	if (!own)
		return 0;
	floor_key(&key, s, floor_peer_bits(s));
	f = floor_env_lookup(env, &key);
	if (f && s->route_id && f->route_id && f->route_id != s->route_id) {
		/* Another interface or gateway: the old floor says nothing. */
		floor_reset(f, now_s, own, BLOATD_FLOOR_SOCKET);
		f->route_id = s->route_id;
		floor_env_count(env, BLOATD_STAT_FLOOR_ROUTE);
	}
	if (f && !floor_get(f, cfg->window_s, now_s, &unused)) {
		expired = f;	/* every sample expired: no history */
		f = 0;
	}
	if (has_prefix) {
		floor_key(&pkey, s, pbits);
		pf = floor_env_lookup(env, &pkey);
	}
	if (!f) {
		if (pf)
			seed = floor_get(pf, cfg->window_s, now_s, &unused);
		if (seed) {
			seed_source = BLOATD_FLOOR_PREFIX;
		} else if (cfg->infer && (seed = floor_env_infer(env, own))) {
			seed_source = BLOATD_FLOOR_INFERRED;
			floor_env_count(env, BLOATD_STAT_FLOOR_INFERRED);
		}
		if (!seed)
			seed = own;
	}
	if (pf)
		floor_update(pf, cfg->window_s, now_s, own, BLOATD_FLOOR_SOCKET);
	else if (has_prefix)
		floor_insert(env, &pkey, cfg, s, now_s, seed, seed_source, &unused);
	if (expired) {
		/* Start the expired floor over, in place. */
		floor_reset(expired, now_s, seed, seed_source);
		f = expired;
	}
	if (f) {
		floor_update(f, cfg->window_s, now_s, own, BLOATD_FLOOR_SOCKET);
		if (!f->route_id)
			f->route_id = s->route_id;
		path_us = floor_get(f, cfg->window_s, now_s, &found);
	} else {
		path_us = floor_insert(env, &key, cfg, s, now_s, seed, seed_source, &found);
	}
	return floor_choose(own, path_us, found, source);
}

#endif /* BLOATD_FLOOR_PATH_H */
