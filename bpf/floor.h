/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Path floors: the lowest RTT toward a peer (or its prefix) over a long
 * window, learned from every socket toward it, alive or closed.
 *
 * Why: a socket's own minimum RTT is not the path's. A connection opened
 * while the bottleneck already holds a standing queue (a web fetch beside a
 * bulk download) measures that queue in its handshake, so srtt - its own
 * minimum hides most of the queue. The path's floor, learned by earlier
 * sockets before the queue formed, does not.
 *
 * Pure C on purpose: no BPF helpers and no kernel types, so the probes and a
 * host-compiled unit test (daemon/src/probes/floor_test.c via Rust) run the
 * same code. Times are seconds of CLOCK_MONOTONIC, RTTs microseconds.
 *
 * The windowed minimum is the kernel's own algorithm (lib/win_minmax.c,
 * Kathleen Nichols'): three samples, the best, the second best in the
 * later part of the window and the third in the last part, so a minimum
 * expires `win` seconds after it was seen while better-than-later samples
 * take its place without a rescan. Each sample carries where it came from,
 * so the floor's provenance follows the sample that is the floor.
 */
#ifndef BLOATD_FLOOR_H
#define BLOATD_FLOOR_H

#ifdef __bpf__
#include "vmlinux.h"	/* __u32 and the like, as every BPF object has them */
#else
#include <linux/types.h>
#endif

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

/* Where a floor came from. */
enum bloatd_floor_source {
	BLOATD_FLOOR_NONE = 0,
	BLOATD_FLOOR_SOCKET = 1,	/* the socket's own minimum RTT */
	BLOATD_FLOOR_PEER = 2,		/* observed by another socket toward the same peer */
	BLOATD_FLOOR_PREFIX = 3,	/* observed toward the peer's prefix (/24, /64) */
	BLOATD_FLOOR_INFERRED = 4,	/* handshake RTT minus the queue its bottleneck held */
};

struct bloatd_floor_sample {
	__u32 t_s;		/* when it was seen, seconds */
	__u32 rtt_us;		/* the RTT */
	__u32 source;		/* enum bloatd_floor_source of this sample */
};

/* Value of the `floors` map (one per peer) and of `prefix_floors` (one per
 * prefix). */
struct bloatd_floor {
	struct bloatd_floor_sample s[3];	/* s[0] is the floor */
	__u32 route_id;		/* route it was learned over (bloatd_route_id) */
	__u32 updated_s;	/* last update, seconds */
	__u32 route_s;		/* when a socket over route_id last fed it */
	__u32 route2_id;	/* a second route in use beside it (ECMP), 0 none */
	__u32 route2_s;		/* when a socket over route2_id last fed it */
};

/* Key of the `floors` map. */
struct bloatd_path_key {
	__u32 netns;		/* network namespace inode */
	__u16 family;		/* AF_INET or AF_INET6 */
	__u8 prefix_len;	/* 32 / 128 for a peer, less for a prefix */
	__u8 pad;
	__u8 addr[16];		/* masked to prefix_len */
};

/* The two floor tables. Peers and prefixes keep their floors apart: peers
 * come and go by the thousand (a remote host can use any number of IPv6
 * addresses), and a flood of them must not push out the prefixes' floors,
 * which serve every new peer. */
enum bloatd_floor_table {
	BLOATD_FLOOR_PEERS = 0,
	BLOATD_FLOOR_PREFIXES = 1,
};

/* What a socket brings to its path's floor. */
struct bloatd_floor_subject {
	__u32 netns;
	__u32 route_id;		/* floor_route_id() of its route, 0 unknown */
	__u32 own_us;		/* its own minimum RTT */
	__u16 family;		/* the socket's family */
	__u16 moved;		/* its route changed under it since it last fed */
	__u8 daddr[16];		/* the peer as the socket holds it (maybe ::ffff:a.b.c.d) */
};

/* Floor settings (`floor_*` in the config). */
struct bloatd_floor_cfg {
	__u32 window_s;		/* how long a floor is remembered */
	__u32 prefix_v4;	/* prefix whose floor serves a new peer, 0: off */
	__u32 prefix_v6;
	__u32 infer;		/* infer a new peer's floor from its bottleneck */
};

static __always_inline void floor_reset(struct bloatd_floor *f, __u32 t_s,
					__u32 rtt_us, __u32 source)
{
	f->s[0].t_s = t_s;
	f->s[0].rtt_us = rtt_us;
	f->s[0].source = source;
	f->s[1] = f->s[0];
	f->s[2] = f->s[0];
}

/*
 * Feed one RTT observation; returns the floor (lib/win_minmax.c,
 * minmax_running_min, with provenance).
 */
static __always_inline __u32 floor_update(struct bloatd_floor *f, __u32 win_s,
					  __u32 t_s, __u32 rtt_us, __u32 source)
{
	struct bloatd_floor_sample val = { .t_s = t_s, .rtt_us = rtt_us, .source = source };
	__u32 dt;

	f->updated_s = t_s;
	if (!f->s[0].rtt_us || rtt_us <= f->s[0].rtt_us ||
	    t_s - f->s[2].t_s > win_s) {
		floor_reset(f, t_s, rtt_us, source);
		return rtt_us;
	}
	if (rtt_us <= f->s[1].rtt_us)
		f->s[2] = f->s[1] = val;
	else if (rtt_us <= f->s[2].rtt_us)
		f->s[2] = val;

	dt = t_s - f->s[0].t_s;
	if (dt > win_s) {
		/* The best expired: the second best takes over, and the third
		 * too if the second is as old. */
		f->s[0] = f->s[1];
		f->s[1] = f->s[2];
		f->s[2] = val;
		if (t_s - f->s[0].t_s > win_s) {
			f->s[0] = f->s[1];
			f->s[1] = f->s[2];
			f->s[2] = val;
		}
	} else if (f->s[1].t_s == f->s[0].t_s && dt > win_s / 4) {
		/* A quarter of the window passed with no second choice. */
		f->s[2] = f->s[1] = val;
	} else if (f->s[2].t_s == f->s[1].t_s && dt > win_s / 2) {
		f->s[2] = val;
	}
	return f->s[0].rtt_us;
}

/*
 * The floor now, or 0 when nothing was seen within the window (every
 * sample expired: the path has no history any more).
 */
static __always_inline __u32 floor_get(const struct bloatd_floor *f, __u32 win_s,
				       __u32 t_s, __u32 *source)
{
	if (!f->s[0].rtt_us || t_s - f->s[2].t_s > win_s)
		return 0;
	/* The best is older than the window but no sample replaced it yet. */
	if (t_s - f->s[0].t_s > win_s) {
		if (t_s - f->s[1].t_s <= win_s) {
			*source = f->s[1].source;
			return f->s[1].rtt_us;
		}
		*source = f->s[2].source;
		return f->s[2].rtt_us;
	}
	*source = f->s[0].source;
	return f->s[0].rtt_us;
}

/*
 * The floor of a connection toward a peer with no history, from the queue
 * its bottleneck holds now: a handshake through a queue of `queue_us`
 * measured `own_min_us`, so the empty path takes own_min_us - queue_us.
 * The two readings are not of the same instant (the queue is the smoothed
 * RTT of other sockets, the handshake one sample), so when the queue they
 * report is as large as the handshake, the floor is taken no lower than
 * `route_floor_us`, the lowest floor of those sockets: the bottleneck's own
 * share of every path through it. Returns 0 (no inference) when the queue
 * is negligible (< 1 ms): the socket's own minimum is then the path's.
 */
static __always_inline __u32 floor_infer(__u32 own_min_us, __u32 queue_us, __u32 route_floor_us)
{
	__u32 floor_us;

	if (queue_us < 1000 || !own_min_us)
		return 0;
	floor_us = queue_us < own_min_us ? own_min_us - queue_us : 0;
	if (floor_us < route_floor_us)
		floor_us = route_floor_us;
	if (!floor_us || floor_us >= own_min_us)
		return 0;
	return floor_us;
}

/*
 * The provenance to show for a socket whose own minimum is `own_min_us`
 * and whose path floor is `path_us` with source `path_source` (as stored:
 * SOCKET for observed, or PREFIX, INFERRED). Returns the floor to use.
 */
static __always_inline __u32 floor_choose(__u32 own_min_us, __u32 path_us,
					  __u32 path_source, __u32 *source)
{
	if (!path_us || (own_min_us && own_min_us <= path_us)) {
		*source = own_min_us ? BLOATD_FLOOR_SOCKET : BLOATD_FLOOR_NONE;
		return own_min_us;
	}
	*source = path_source == BLOATD_FLOOR_SOCKET ? BLOATD_FLOOR_PEER : path_source;
	return path_us;
}

/* Mask an address to its first `bits` bits. */
static __always_inline void floor_mask(__u8 *addr, __u32 bits)
{
	int i;

	for (i = 0; i < 16; i++) {
		if (bits >= 8) {
			bits -= 8;
		} else {
			addr[i] &= (__u8)(0xff00 >> bits);
			bits = 0;
		}
	}
}

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

/* The key of a peer's floor (prefix_len 32/128) or of its prefix's; with
 * the peer's bits, also the key of its path's class (policy_ops.h,
 * `path_classes`), as the daemon groups paths: an IPv4 peer of a
 * dual-stack socket is IPv4 there too (tracker.rs, addr). */
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

/* A route, as the floors see it: the egress interface and the gateway
 * (zero for on-link peers), folded into 32 bits. */
static __always_inline __u32 floor_route_id(__u32 ifindex, const __u32 gw[4])
{
	__u32 h = ifindex * 0x9e3779b1u;

	h = (h ^ gw[0]) * 0x85ebca6bu;
	h = (h ^ gw[1]) * 0xc2b2ae35u;
	h = (h ^ gw[2]) * 0x9e3779b1u;
	h = (h ^ gw[3]) * 0x85ebca6bu;
	return (h ^ (h >> 16)) | 1;	/* never 0: 0 means "unknown" */
}

#endif /* BLOATD_FLOOR_H */
