/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A path's floor, found and fed by one socket: which floor a socket's
 * queueing delay is measured against, and where it came from (floor.h).
 *
 * Pure C over four functions its includer defines (declared below), so
 * the probes run it on the kernel's maps and a unit test (root-free, on any
 * laptop) runs the very same code on a table of its own.
 */
#ifndef BLOATD_FLOOR_PATH_H
#define BLOATD_FLOOR_PATH_H

#include "bloatd.h"

/* The environment, defined by the includer (static, anywhere in its file):
 * `table` is an enum bloatd_floor_table, a constant at every call (each
 * inlined call reaches one map); insert returns 0 when it inserted; infer
 * is bottleneck_infer; `stat` an enum bloatd_stat. */
static struct bloatd_floor *floor_env_lookup(void *env, const struct bloatd_path_key *key,
					     __u32 table);
static int floor_env_insert(void *env, const struct bloatd_path_key *key,
			    const struct bloatd_floor *f, __u32 table);
static __u32 floor_env_infer(void *env, __u32 own_us);
static void floor_env_count(void *env, __u32 stat);

/* How recently another route must have fed a floor for a new route to
 * count as used beside it (multipath) rather than instead of it. Sockets
 * that carry traffic feed their floor every second. */
#define FLOOR_ROUTE_LIVE_S 3

/* Remember that a socket over `route` fed `f` now. */
static __always_inline void floor_route_fed(struct bloatd_floor *f, __u32 route, __u32 now_s)
{
	if (route == f->route_id) {
		f->route_s = now_s;
	} else if (route == f->route2_id) {
		f->route2_s = now_s;
	} else if (!f->route2_id || f->route2_s <= f->route_s) {
		f->route2_id = route;	/* the staler slot makes room */
		f->route2_s = now_s;
	} else {
		f->route_id = route;
		f->route_s = now_s;
	}
}

/*
 * Did the path to the peer change, as this socket sees it? A floor is the
 * propagation delay of the path it was learned over, and a new route says
 * nothing of it. But a peer reached over several next hops at once (ECMP:
 * each connection hashed to one) has several routes and one path delay,
 * and starting its floor over at every turn of a connection on another
 * next hop would lose it all the time. So:
 * - a route the floor knows (the last two seen) changes nothing;
 * - a socket whose own route changed under it to a route the floor does
 *   not know says the path changed: it was re-routed because the route
 *   table changed (ECMP keeps a connection on its next hop);
 * - a new socket over an unknown route while another route fed the floor
 *   in the last FLOOR_ROUTE_LIVE_S seconds is multipath: it joins;
 * - an unknown route while none did is a change.
 */
static __always_inline int floor_route_changed(struct bloatd_floor *f,
					       const struct bloatd_floor_subject *s, __u32 now_s)
{
	__u32 r = s->route_id;

	if (!r)
		return 0;
	if (!f->route_id) {
		f->route_id = r;
		f->route_s = now_s;
		return 0;
	}
	if (r == f->route_id || r == f->route2_id)
		return 0;
	if (s->moved)
		return 1;
	return now_s - f->route_s > FLOOR_ROUTE_LIVE_S &&
	       (!f->route2_id || now_s - f->route2_s > FLOOR_ROUTE_LIVE_S);
}

/* Insert a new floor for `key` into `table`, seeded with `seed` from
 * `source` and fed the socket's own minimum; returns the floor. */
static __always_inline __u32 floor_insert(void *env, const struct bloatd_path_key *key,
					  __u32 table, const struct bloatd_floor_cfg *cfg,
					  const struct bloatd_floor_subject *s, __u32 now_s,
					  __u32 seed, __u32 source, __u32 *got_source)
{
	struct bloatd_floor f = {};

	floor_reset(&f, now_s, seed, source);
	f.route_id = s->route_id;
	f.route_s = now_s;
	floor_update(&f, cfg->window_s, now_s, s->own_us, BLOATD_FLOOR_SOCKET);
	if (!floor_env_insert(env, key, &f, table))
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
	/* pkey zeroed: it is filled only with a prefix, and verifiers before
	 * 6.1 (5.14's) do not see that the insert is only with one too. */
	struct bloatd_path_key key, pkey = {};
	struct bloatd_floor *f, *pf = 0, *expired = 0;
	__u32 own = s->own_us, path_us, unused = 0, found = 0;
	__u32 seed = 0, seed_source = BLOATD_FLOOR_SOCKET;
	__u32 pbits = floor_peer_family(s) == FLOOR_AF_INET6 ? cfg->prefix_v6 : cfg->prefix_v4;
	__u32 has_prefix = pbits && pbits < floor_peer_bits(s);

	*source = BLOATD_FLOOR_NONE;
	if (!own)
		return 0;
	floor_key(&key, s, floor_peer_bits(s));
	f = floor_env_lookup(env, &key, BLOATD_FLOOR_PEERS);
	if (f && floor_route_changed(f, s, now_s)) {
		/* Another interface or gateway: the old floor says nothing. */
		floor_reset(f, now_s, own, BLOATD_FLOOR_SOCKET);
		f->route_id = s->route_id;
		f->route2_id = 0;
		floor_env_count(env, BLOATD_STAT_FLOOR_ROUTE);
	}
	if (f && !floor_get(f, cfg->window_s, now_s, &unused)) {
		expired = f;	/* every sample expired: no history */
		f = 0;
	}
	if (has_prefix) {
		floor_key(&pkey, s, pbits);
		pf = floor_env_lookup(env, &pkey, BLOATD_FLOOR_PREFIXES);
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
		floor_insert(env, &pkey, BLOATD_FLOOR_PREFIXES, cfg, s, now_s, seed, seed_source,
			     &unused);
	if (expired) {
		/* Start the expired floor over, in place. */
		floor_reset(expired, now_s, seed, seed_source);
		f = expired;
	}
	if (f) {
		floor_update(f, cfg->window_s, now_s, own, BLOATD_FLOOR_SOCKET);
		if (s->route_id)
			floor_route_fed(f, s->route_id, now_s);
		path_us = floor_get(f, cfg->window_s, now_s, &found);
	} else {
		path_us = floor_insert(env, &key, BLOATD_FLOOR_PEERS, cfg, s, now_s, seed, seed_source,
				       &found);
	}
	return floor_choose(own, path_us, found, source);
}

#endif /* BLOATD_FLOOR_PATH_H */
