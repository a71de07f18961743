/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Acting on bloat, in the kernel: the part of the cgroup sock_ops program
 * (probes.bpf.c, `sock_ops`) that applies bloatd's policy. It uses the
 * socket record (sock_record.h) and the receiver's RTT from echoed
 * timestamps (rcv_rtt.h).
 *
 * Hooks, all callbacks of the one sock_ops program, asked for per socket:
 *   ACTIVE/PASSIVE_ESTABLISHED_CB  match the rules once: set the congestion
 *                 control (bpf_setsockopt(TCP_CONGESTION)) and the unsent
 *                 backlog's bound (TCP_NOTSENT_LOWAT), and ask for the
 *                 callbacks below only where a rule or DRWA needs them.
 *   RTT_CB        (bulk rules) one per ACK that carries an RTT sample, while
 *                 the connection has sent less than the rule's bytes; then the
 *                 switch, and the callback is given back.
 *   HDR_OPT_LEN_CB (DRWA) one per segment the socket sends: a receiver's ACKs.
 *                 It is the one callback a pure receiver gets for each data
 *                 segment on this kernel: RTT_CB needs newly acknowledged
 *                 data, which a receiver does not send, and PARSE_HDR_OPT_CB
 *                 comes only on the slow path (tcp_validate_incoming), which
 *                 header prediction skips for in-order data. An ACK is built
 *                 under the socket's lock and before tcp_select_window(), so
 *                 a clamp set here is in the window of the ACK being sent.
 *                 Nothing is reserved in the header: no option is written.
 *
 * Callback flags are shared by every sock_ops program that sees a socket
 * (another tool's, in a child cgroup): bloatd turns off only those it
 * turned on itself (`cb_owned`).
 *
 * What DRWA must give back lives in `drwa_saved`, socket storage the daemon
 * pins under bpffs: a daemon that dies without stopping leaves it to the
 * next one, whose `restore_windows` gives every window back.
 */
#ifndef BLOATD_POLICY_OPS_H
#define BLOATD_POLICY_OPS_H

#include <bpf/bpf_endian.h>
#include "probes_state.h"
#include "sock_record.h"
#include "rcv_rtt.h"
#include "policy.h"

#define SOL_TCP 6
#define TCP_WINDOW_CLAMP 10
#define TCP_CONGESTION 13
#define TCP_NOTSENT_LOWAT 25
#define SOCKOPS_RTT_CB 12
#define SOCKOPS_HDR_OPT_LEN_CB 14
#define SOCKOPS_RTT_CB_FLAG 0x8
#define SOCKOPS_WRITE_HDR_OPT_CB_FLAG 0x40

/* Set by the daemon before load. */
/* Rules in `policy_rules` (0: no rule, the policy code is dead code). */
const volatile __u32 policy_nrules = 0;
/* Ask every new connection for a callback per segment it sends, so DRWA
 * can act on it when switched on (config drwa = "on" or "off"; "disabled"
 * or absent: nothing is asked, nothing is paid). */
const volatile __u32 drwa_armed = 0;
/* DRWA's lambda, 8 fraction bits (paper: 3). */
const volatile __u32 drwa_lambda_x256 = 3 * 256;
/* Bytes a connection receives before DRWA clamps it: only receivers. */
const volatile __u64 drwa_min_bytes = 8192;
/* DRWA and the bulk switch act on paths classified aqm or ecn-aqm too
 * (config act_on_aqm; policy.h, policy_aqm_gated). */
const volatile __u32 act_on_aqm = 0;

/* A receiver that gets data ACKs at least this often (the kernel's delayed
 * ACK ceiling, TCP_DELACK_MAX): a longer silence, and one longer than an
 * RTT, is an application pause (drwa_idle). */
#define DRWA_IDLE_MIN_US 200000

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BLOATD_POLICY_RULES);
	__type(key, __u32);
	__type(value, struct bloatd_policy_rule);
} policy_rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bloatd_policy_ctl);
} policy_ctl SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bloatd_policy_counts);
} policy_counts SEC(".maps");

/* What DRWA must give back (policy.h, struct bloatd_drwa_saved): pinned by
 * the daemon, so it outlives it. */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct bloatd_drwa_saved);
} drwa_saved SEC(".maps");

/* The paths DRWA's receivers are on (policy.h, struct bloatd_drwa_path):
 * a slot per (network namespace, route, peer). */
#define DRWA_PATH_SLOTS 256
/* A slot another path has not counted into for this long is taken over. */
#define DRWA_PATH_IDLE_US 1000000
/* How long what a receiver told its path holds (drwa_path_floor): a round
 * is an RTT, over a second on a busy 3g link, so a second lost it between
 * a download's rounds; a few rounds there. */
#define DRWA_PATH_FRESH_US 4000000

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DRWA_PATH_SLOTS);
	__type(key, __u32);
	__type(value, struct bloatd_drwa_path);
} drwa_paths SEC(".maps");

/*
 * Each classified path's class (policy.h, enum bloatd_path_class), keyed
 * by namespace and peer as the floors key a peer (floor.h, floor_key).
 * The daemon writes an entry only when a path's class changes and deletes
 * it when the path is forgotten or becomes unknown. Full, a path has no
 * entry: unknown, the policy acts on it as without classes.
 */
#define PATH_CLASS_ENTRIES 4096

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PATH_CLASS_ENTRIES);
	__type(key, struct bloatd_path_key);
	__type(value, __u32);
} path_classes SEC(".maps");

/* One DRWA round's measure (drwa_round_close), per CPU: a slot for a
 * callback in process context and one for a softirq's that interrupts it
 * (sock_ops runs with migration, not bottom halves, disabled). */
struct drwa_scratch {
	__u32 depth;		/* slots in use on this CPU */
	__u32 pad;
	struct drwa_measure m[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct drwa_scratch);
} drwa_scratch SEC(".maps");

/* The callback's socket as a tcp_sock (read once: the verifier tracks the
 * NULL check on the register it was made on). */
static __always_inline struct tcp_sock *skops_tcp_sock(const struct bpf_sock_ops *skops)
{
	struct bpf_sock *sk = skops->sk;

	if (!sk)
		return NULL;
	return bpf_skc_to_tcp_sock(sk);
}

static __always_inline void policy_count(__u32 idx, __s64 d)
{
	struct bloatd_policy_counts *c;
	__u32 zero = 0;

	c = bpf_map_lookup_elem(&policy_counts, &zero);
	if (c && idx < BLOATD_PC_MAX)
		__sync_fetch_and_add(&c->n[idx], d);
}

/*
 * The class of the path toward a peer (`path_classes`): one hash lookup,
 * made at a handshake a path= rule is reached at, at a bulk switch and
 * once per DRWA round, never per packet. The peer's 16 bytes as two
 * words: a global function (its own frame, verified once) takes scalars.
 */
__noinline int path_class_of(__u32 netns, __u32 family, __u64 peer_lo, __u64 peer_hi)
{
	struct bloatd_floor_subject subj = {};
	struct bloatd_path_key key;
	__u32 *cls;

	subj.netns = netns;
	subj.family = family;
	__builtin_memcpy(subj.daddr, &peer_lo, 8);
	__builtin_memcpy(subj.daddr + 8, &peer_hi, 8);
	floor_key(&key, &subj, floor_peer_bits(&subj));
	cls = bpf_map_lookup_elem(&path_classes, &key);
	return cls ? *cls : BLOATD_PATH_UNKNOWN;
}

/* The class of the path of the socket whose record is `s`. */
static __always_inline __u32 sock_path_class(const struct bloatd_sock *s)
{
	__u64 lo, hi;

	__builtin_memcpy(&lo, s->daddr, 8);
	__builtin_memcpy(&hi, s->daddr + 8, 8);
	return path_class_of(s->netns, s->family, lo, hi);
}

/* The class of the path of a connection at its handshake (its record may
 * not exist yet: sock_identity's fields, read the same way). */
static __always_inline __u32 sk_path_class(const struct sock *sk)
{
	const struct sock_common *skc = &sk->__sk_common;
	__u64 a[2] = {};

	if (skc->skc_family == AF_INET6)
		__builtin_memcpy(a, &skc->skc_v6_daddr, 16);
	else
		__builtin_memcpy(a, &skc->skc_daddr, 4);
	return path_class_of(skc->skc_net.net->ns.inum, skc->skc_family, a[0], a[1]);
}

/* Before 6.1 a cgroup keeps its ancestors' kernfs ids, not pointers. */
struct cgroup___v60 {
	__u64 ancestor_ids[0];
} __attribute__((preserve_access_index));

/*
 * The kernfs id of cgroup `cg`'s ancestor at `level` (at most cg's level),
 * one function per layout: a call is never computed ahead of its branch,
 * so the verifier meets only the read this kernel's layout allows (the
 * other's field is poisoned by the loader).
 */
static __noinline __u64 cgroup_ancestor_id(const struct cgroup *cg, __u32 level)
{
	struct cgroup *anc = NULL;
	__u64 at = (__u64)cg + bpf_core_field_offset(struct cgroup, ancestors) +
		   (__u64)(level & 0xff) * sizeof(anc);

	if (bpf_probe_read_kernel(&anc, sizeof(anc), (void *)at) || !anc)
		return 0;
	return BPF_CORE_READ(anc, kn, id);
}

static __noinline __u64 cgroup_ancestor_id_v60(const struct cgroup *cg, __u32 level)
{
	__u64 id = 0, at = (__u64)cg + bpf_core_field_offset(struct cgroup___v60, ancestor_ids) +
			   (__u64)(level & 0xff) * sizeof(id);

	if (bpf_probe_read_kernel(&id, sizeof(id), (void *)at))
		return 0;
	return id;
}

/* The socket's cgroup is the rule's cgroup or one below it: its ancestor at
 * the rule's level is the rule's (cgroup v2 keeps every ancestor by level;
 * service_ops.h, sock_cgroup, finds the socket's on every kernel). */
static __always_inline int policy_cgroup_match(const struct bloatd_policy_rule *r,
					       const struct sock *sk)
{
	struct cgroup *cg;
	__u64 id;
	int root;

	cg = sock_cgroup(sk, &root);
	if (root)
		return r->cgroup_level == 0;
	if (!cg || r->cgroup_level > 255 || BPF_CORE_READ(cg, level) < (int)r->cgroup_level)
		return 0;
	if (bpf_core_field_exists(struct cgroup, ancestors))
		id = cgroup_ancestor_id(cg, r->cgroup_level);
	else
		id = cgroup_ancestor_id_v60(cg, r->cgroup_level);
	return id && id == r->cgroup_id;
}

static __always_inline int policy_set_cc(struct bpf_sock_ops *skops,
					 const struct bloatd_policy_rule *r)
{
	char name[BLOATD_POLICY_CC_LEN];

	__builtin_memcpy(name, r->cc, sizeof(name));
	name[sizeof(name) - 1] = 0;
	if (bpf_setsockopt(skops, SOL_TCP, TCP_CONGESTION, name, sizeof(name))) {
		policy_count(BLOATD_PC_CC_FAILED, 1);
		return -1;
	}
	return 0;
}

/* Bound the sender's own backlog: a write waits while the socket holds
 * more than the rule's bytes unsent (TCP_NOTSENT_LOWAT). */
static __always_inline int policy_set_lowat(struct bpf_sock_ops *skops,
					    const struct bloatd_policy_rule *r)
{
	int bytes = r->notsent_lowat;

	if (bpf_setsockopt(skops, SOL_TCP, TCP_NOTSENT_LOWAT, &bytes, sizeof(bytes))) {
		policy_count(BLOATD_PC_LOWAT_FAILED, 1);
		return -1;
	}
	policy_count(BLOATD_PC_LOWAT_SET, 1);
	return 0;
}

/* What the rules chose for a connection at its handshake: 1-based rule
 * indexes (0: none), and whether a setsockopt the rule asked for failed. */
struct policy_choice {
	__u32 cc_rule, bulk_rule, drwa_rule, lowat_rule;
	__u32 cc_failed, lowat_failed;
};

/* The first rule without a byte count that selects the connection applies
 * its actions now; the first bulk rule that selects it is remembered. */
static __always_inline void policy_choose(struct bpf_sock_ops *skops, struct sock *sk,
					  struct policy_choice *c)
{
	struct bloatd_policy_rule *r;
	__u16 sport = sk->__sk_common.skc_num;
	__u16 dport = bpf_ntohs(sk->__sk_common.skc_dport);
	__u32 i, key, cls = BLOATD_PATH_CLASSES;	/* not looked up yet */

	for (i = 0; i < BLOATD_POLICY_RULES && i < policy_nrules; i++) {
		/* The key on the stack, the counter in a register: a counter
		 * whose address a helper took would lose its bounds. */
		key = i;
		r = bpf_map_lookup_elem(&policy_rules, &key);
		if (!r || !r->enabled || !policy_ports_match(r, sport, dport))
			continue;
		if ((r->selectors & BLOATD_PM_CGROUP) && !policy_cgroup_match(r, sk))
			continue;
		if (r->selectors & BLOATD_PM_BULK) {
			/* Its path= is the class at the switch (policy_rtt):
			 * a new path has none yet at its first handshake. */
			if (!c->bulk_rule)
				c->bulk_rule = i + 1;
			continue;
		}
		if (c->cc_rule || c->drwa_rule || c->lowat_rule)
			continue;	/* the first selecting rule decided */
		if (r->selectors & BLOATD_PM_PATH) {
			if (cls == BLOATD_PATH_CLASSES)
				cls = sk_path_class(sk);
			if (!policy_path_match(r, cls))
				continue;
		}
		if (r->actions & BLOATD_PA_CC) {
			if (policy_set_cc(skops, r))
				c->cc_failed = 1;
			else
				c->cc_rule = i + 1;
		}
		if (r->actions & BLOATD_PA_DRWA)
			c->drwa_rule = i + 1;
		if (r->actions & BLOATD_PA_NOTSENT_LOWAT) {
			if (policy_set_lowat(skops, r))
				c->lowat_failed = 1;
			else
				c->lowat_rule = i + 1;
		}
	}
}

/* Keep the choice in the socket's record; returns the callback flags the
 * socket needs for it (a bulk rule's RTT callback, DRWA's header option). */
static __always_inline __u32 policy_remember(struct bpf_sock_ops *skops, struct tcp_sock *tp,
					     struct bloatd_sock *s,
					     const struct policy_choice *c)
{
	__u32 cb = 0, min_rtt;

	if (c->cc_rule && !s->pol.cc_rule)
		policy_count(BLOATD_PC_CC_SOCKETS, 1);
	s->pol.cc_rule = c->cc_rule;
	s->pol.lowat_rule = c->lowat_rule;
	if (c->cc_failed)
		s->pol.flags |= BLOATD_POL_CC_FAILED;
	if (c->lowat_failed)
		s->pol.flags |= BLOATD_POL_LOWAT_FAILED;
	if (c->bulk_rule) {
		s->pol.bulk_rule = c->bulk_rule;
		s->pol.flags |= BLOATD_POL_BULK_WAIT;
		cb |= SOCKOPS_RTT_CB_FLAG;
	}
	if (c->drwa_rule || drwa_armed) {
		s->pol.drwa_rule = c->drwa_rule;
		s->pol.flags |= BLOATD_POL_DRWA_ARMED;
		/* DRWA's RTT_min starts from the handshake's RTT (the kernel's
		 * windowed minimum holds it now). */
		min_rtt = tp->rtt_min.s[0].v;
		if (min_rtt && min_rtt != ~0U)
			s->pol.drwa_min_us = min_rtt;
		cb |= SOCKOPS_WRITE_HDR_OPT_CB_FLAG;
	}
	/* Ours to turn off later: what no other program had turned on. */
	s->pol.cb_owned |= cb & ~skops->bpf_sock_ops_cb_flags;
	return cb;
}

/*
 * At the handshake: the first rule without a byte count that selects the
 * connection decides its congestion control and whether DRWA is forced on
 * it; the first bulk rule that selects it waits for its bytes. Returns the
 * callback flags the socket needs for that.
 */
static __always_inline __u32 policy_established(struct bpf_sock_ops *skops)
{
	struct policy_choice c = {};
	struct bloatd_sock *s;
	struct tcp_sock *tp;
	struct sock *sk;

	if (!policy_nrules && !drwa_armed)
		return 0;
	if (!(tp = skops_tcp_sock(skops)))
		return 0;
	sk = (struct sock *)tp;
	policy_choose(skops, sk, &c);
	if (c.cc_rule)
		policy_count(BLOATD_PC_CC_SET, 1);
	if (!c.cc_rule && !c.bulk_rule && !c.drwa_rule && !c.cc_failed && !drwa_armed &&
	    !c.lowat_rule && !c.lowat_failed)
		return 0;
	/* A passive open meets this callback before its ESTABLISHED
	 * tracepoint: the record may not exist yet. */
	s = bpf_sk_storage_get(&socks, sk, 0, 0);
	if (!s)
		s = sock_create(sk, tp, bpf_get_socket_cookie(skops));
	if (!s)
		return 0;	/* beyond map_capacity: the cc is set, nothing to follow */
	return policy_remember(skops, tp, s, &c);
}

/* Stop a callback bloatd asked for: only if bloatd turned it on. */
static __always_inline void policy_cb_clear(struct bpf_sock_ops *skops, struct bloatd_sock *s,
					    __u32 flag)
{
	flag &= s->pol.cb_owned;
	if (!flag)
		return;
	s->pol.cb_owned &= ~flag;
	bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags & ~flag);
}

/* A bulk rule's bytes are reached: switch the running flow. */
static __always_inline void policy_rtt(struct bpf_sock_ops *skops)
{
	struct bloatd_policy_rule *r;
	struct bloatd_sock *s;
	struct tcp_sock *tp;
	__u32 idx, cls;

	if (!policy_nrules || !(tp = skops_tcp_sock(skops)))
		return;
	s = bpf_sk_storage_get(&socks, tp, 0, 0);
	if (!s)
		return;
	if (!(s->pol.flags & BLOATD_POL_BULK_WAIT) || !s->pol.bulk_rule) {
		policy_cb_clear(skops, s, SOCKOPS_RTT_CB_FLAG);
		return;
	}
	idx = s->pol.bulk_rule - 1;
	r = bpf_map_lookup_elem(&policy_rules, &idx);
	if (!r)
		return;
	/* A rule switched off live keeps its sockets waiting, unswitched. */
	if (!r->enabled || tp->bytes_acked < r->bulk_bytes)
		return;
	s->pol.flags &= ~BLOATD_POL_BULK_WAIT;
	policy_cb_clear(skops, s, SOCKOPS_RTT_CB_FLAG);
	/* The path's class now: the switch is made once or never (waiting
	 * on would look it up at every ACK). */
	cls = sock_path_class(s);
	if (!policy_path_match(r, cls) || policy_aqm_gated(cls, act_on_aqm)) {
		s->pol.flags |= BLOATD_POL_GATED;
		policy_count(BLOATD_PC_BULK_GATED, 1);
		return;
	}
	if (policy_set_cc(skops, r)) {
		s->pol.flags |= BLOATD_POL_CC_FAILED;
		return;
	}
	s->pol.flags |= BLOATD_POL_BULK_DONE;
	policy_count(BLOATD_PC_BULK_SET, 1);
	policy_count(BLOATD_PC_BULK_SOCKETS, 1);
}

/* tp->scaling_ratio (6.6+: the share of the buffer the window may use, 8
 * fraction bits); before it, tcp_adv_win_scale's default of half. */
static __always_inline __u32 drwa_scaling_ratio(const struct tcp_sock *tp)
{
	__u32 ratio = 0;

	if (bpf_core_field_exists(tp->scaling_ratio))
		ratio = BPF_CORE_READ(tp, scaling_ratio);
	return ratio ? ratio : 128;
}

static __always_inline __u32 drwa_rcvbuf(const struct tcp_sock *tp)
{
	return tp->inet_conn.icsk_inet.sk.sk_rcvbuf;
}

/* DRWA let go of the socket (err: whether setting the clamp back failed). */
static __always_inline void drwa_released(struct bloatd_sock *s, long err)
{
	struct bloatd_policy_sock *p = &s->pol;

	if (err)
		policy_count(BLOATD_PC_DRWA_FAILED, 1);
	p->flags &= ~BLOATD_POL_DRWA_CLAMPED;
	p->drwa_clamp = 0;
	p->drwa_round_us = 0;
	policy_count(BLOATD_PC_DRWA_SOCKETS, -1);
	policy_count(BLOATD_PC_DRWA_RESTORED, 1);
}

/* The receive window DRWA let go of, given back at the socket's next ACK:
 * what it found (policy.h, drwa_give_back). */
static __always_inline void drwa_release(struct bpf_sock_ops *skops, struct bloatd_sock *s,
					 struct tcp_sock *tp)
{
	struct bloatd_drwa_saved *sv = bpf_sk_storage_get(&drwa_saved, tp, 0, 0);
	long err = -1;
	int clamp;

	if (sv) {
		clamp = drwa_give_back(sv, drwa_rcvbuf(tp), drwa_scaling_ratio(tp));
		err = bpf_setsockopt(skops, SOL_TCP, TCP_WINDOW_CLAMP, &clamp, sizeof(clamp));
		bpf_sk_storage_delete(&drwa_saved, tp);
	}
	drwa_released(s, err);
}

/* Is DRWA on for this socket now? */
static __always_inline int drwa_on(const struct bloatd_sock *s)
{
	struct bloatd_policy_ctl *ctl;
	struct bloatd_policy_rule *r;
	__u32 zero = 0, idx;

	ctl = bpf_map_lookup_elem(&policy_ctl, &zero);
	if (!ctl || ctl->stopping)
		return 0;
	if (!s->pol.drwa_rule)
		return ctl->drwa_on;
	idx = s->pol.drwa_rule - 1;
	r = bpf_map_lookup_elem(&policy_rules, &idx);
	return r && r->enabled;
}

/*
 * An application pause: no ACK for longer than 1.5 RTT (and than the
 * delayed-ACK ceiling). The round under way spans it: the data it counted
 * says nothing of the sender's window, and the first segment after it
 * echoes an ACK from before it, an RTT sample as long as the pause. Not
 * one RTT: a window of 2 segments is one ACK an RTT, and with a gap of
 * one RTT give or take its jitter, half its ACKs were pauses that began
 * the round again, so no round closed (test_drwa_harm, case 6).
 */
static __always_inline int drwa_idle(struct bloatd_policy_sock *p, __u64 now_us)
{
	__u64 last = p->drwa_last_us;
	__u32 rtt = p->drwa_rtt_us > p->drwa_min_us ? p->drwa_rtt_us : p->drwa_min_us;

	p->drwa_last_us = now_us;
	rtt += rtt / 2;
	if (rtt < DRWA_IDLE_MIN_US)
		rtt = DRWA_IDLE_MIN_US;
	return last && now_us - last > rtt;
}

/* The receiver's RTT from the timestamp the sender echoed (each new echo
 * once): into the connection's own minimum and the round's samples. */
static __always_inline void drwa_sample(struct bloatd_policy_sock *p, const struct tcp_sock *tp,
					int idle)
{
	__u32 tsecr = tp->rx_opt.rcv_tsecr, sample;

	if (tp->tcp_header_len <= 20 || tsecr == p->drwa_last_tsecr)
		return;
	p->drwa_last_tsecr = tsecr;
	if (idle)
		return;		/* it echoes an ACK from before the pause */
	sample = rcv_ts_rtt_us(tp, tsecr);
	if (!sample)
		return;
	if (!p->drwa_min_us || sample < p->drwa_min_us)
		p->drwa_min_us = sample;
	if (!p->drwa_round_low_us || sample < p->drwa_round_low_us)
		p->drwa_round_low_us = sample;
	p->drwa_rtt_sum_us += sample;
	p->drwa_rtt_n++;
}

/*
 * Count what the socket received since its last ACK into its path's slot
 * (the receivers DRWA acts on toward the same peer through the same
 * network namespace, interface and gateway: drwa_round's m->path_rcvd).
 * Returns the slot, or NULL: no route known (floors off), or the slot is
 * another path's.
 */
static __always_inline struct bloatd_drwa_path *drwa_path_count(struct bloatd_sock *s,
								const struct tcp_sock *tp,
								__u64 now_us)
{
	struct bloatd_policy_sock *p = &s->pol;
	struct bloatd_drwa_path *l;
	__u32 peer = 0, idx, i;
	__u64 got = tp->bytes_received;

	for (i = 0; i < 16; i++)
		peer = peer * 31 + s->daddr[i];
	idx = ((s->netns * 0x9e3779b1u) ^ s->route_id ^ (peer * 0x85ebca6bu)) &
	      (DRWA_PATH_SLOTS - 1);
	if (!s->route_id || !(l = bpf_map_lookup_elem(&drwa_paths, &idx)))
		return NULL;
	if (l->netns != s->netns || l->route_id != s->route_id || l->peer != peer) {
		if (now_us - l->used_us < DRWA_PATH_IDLE_US)
			return NULL;
		l->netns = s->netns;
		l->route_id = s->route_id;
		l->peer = peer;
		l->base_us = 0;
		l->held_us = 0;
	}
	/* The first count only marks where it starts: what the socket got
	 * before (DRWA switched on under a long download) is no round's. */
	if (p->drwa_path_rcvd && got > p->drwa_path_rcvd)
		__sync_fetch_and_add(&l->bytes, got - p->drwa_path_rcvd);
	p->drwa_path_rcvd = got;
	l->used_us = now_us;
	return l;
}

/* Out-of-order segments the socket received (5.4+; 0 before). */
static __always_inline __u32 drwa_ooo(const struct tcp_sock *tp)
{
	if (bpf_core_field_exists(tp->rcv_ooopack))
		return BPF_CORE_READ(tp, rcv_ooopack);
	return 0;
}

static __always_inline void drwa_round_start(struct bloatd_policy_sock *p,
					     const struct tcp_sock *tp, __u64 now_us,
					     const struct bloatd_drwa_path *l)
{
	p->drwa_round_us = now_us;
	p->drwa_round_rcvd = tp->bytes_received;
	p->drwa_round_path = l ? l->bytes : 0;
	p->drwa_round_ooo = drwa_ooo(tp);
	p->drwa_rtt_sum_us = 0;
	p->drwa_rtt_n = 0;
	p->drwa_round_low_us = 0;
}

/* Set DRWA's clamp on the socket, remembering what to give back. */
static __always_inline void drwa_apply(struct bpf_sock_ops *skops, struct bloatd_sock *s,
				       struct tcp_sock *tp, struct drwa_measure *m)
{
	struct bloatd_policy_sock *p = &s->pol;
	struct bloatd_drwa_saved *sv;
	__u32 rcvbuf = drwa_rcvbuf(tp), clamped = p->flags & BLOATD_POL_DRWA_CLAMPED;
	__u32 ratio = drwa_scaling_ratio(tp);
	int clamp;

	sv = bpf_sk_storage_get(&drwa_saved, tp, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!sv) {
		policy_count(BLOATD_PC_DRWA_FAILED, 1);
		return;
	}
	if (!clamped) {
		sv->orig_clamp = tp->window_clamp;
		sv->orig_rcvbuf = rcvbuf;
		sv->clamp = 0;
	} else {
		drwa_saw_clamp(sv, tp->window_clamp, rcvbuf, ratio);
	}
	m->limit = drwa_give_back(sv, rcvbuf, ratio);
	clamp = drwa_round(p, m, clamped ? p->drwa_clamp : 0);
	/* Autotuning overwrites the clamp when it grows the buffer: set it
	 * again each round, not only when it changes. */
	if (tp->window_clamp != (__u32)clamp &&
	    bpf_setsockopt(skops, SOL_TCP, TCP_WINDOW_CLAMP, &clamp, sizeof(clamp))) {
		policy_count(BLOATD_PC_DRWA_FAILED, 1);
		if (!clamped)
			bpf_sk_storage_delete(&drwa_saved, tp);
		return;
	}
	sv->clamp = clamp;
	sv->rcvbuf = rcvbuf;
	if (!clamped) {
		p->flags |= BLOATD_POL_DRWA_CLAMPED;
		policy_count(BLOATD_PC_DRWA_SOCKETS, 1);
	}
	p->drwa_clamp = clamp;
	p->drwa_rounds++;
	policy_count(BLOATD_PC_DRWA_ROUNDS, 1);
}

/*
 * Once per RTT, DRWA (policy.h, drwa_round): the receiver's RTT of the round
 * (RTT_est: the average of its echoed-timestamp samples, the kernel's
 * estimate without timestamps), the data it received in the round, and the
 * lowest of the connection's own minimum RTT and its path's floor decide the
 * clamp of the advertised window.
 */
static __always_inline void drwa_round_close(struct bpf_sock_ops *skops, struct bloatd_sock *s,
					     struct tcp_sock *tp, __u64 now_us,
					     struct bloatd_drwa_path *l)
{
	struct bloatd_policy_sock *p = &s->pol;
	struct drwa_scratch *sc;
	struct drwa_measure *mp;
	__u64 rcvd, dur;
	__u32 rtt_us, mss, held = p->drwa_held, zero = 0, slot;

	if (p->drwa_rtt_n)
		rtt_us = p->drwa_rtt_sum_us / p->drwa_rtt_n;
	else if (p->drwa_rtt_us)
		rtt_us = p->drwa_rtt_us;
	else
		rtt_us = tp->rcv_rtt_est.rtt_us >> 3;
	dur = now_us - p->drwa_round_us;
	if (!rtt_us || dur < rtt_us)
		return;
	/* The round is over: its path's class, once per round. On an AQM's
	 * path DRWA runs no round, and gives back a clamp it set before the
	 * path was classified (the class flipped mid-clamp). */
	if (policy_aqm_gated(sock_path_class(s), act_on_aqm)) {
		if (p->flags & BLOATD_POL_DRWA_CLAMPED)
			drwa_release(skops, s, tp);
		p->flags |= BLOATD_POL_GATED;
		policy_count(BLOATD_PC_DRWA_GATED, 1);
		drwa_round_start(p, tp, now_us, l);
		return;
	}
	p->flags &= ~BLOATD_POL_GATED;

	/* The round is over. Its measure lives in a per-CPU scratch slot:
	 * on the stack it took the program and the floor code past the
	 * verifier's 512 bytes. */
	sc = bpf_map_lookup_elem(&drwa_scratch, &zero);
	if (!sc || sc->depth > 1)
		return;
	slot = sc->depth;
	sc->depth = slot + 1;
	/* The index masked where it is used: clang drops the mask, knowing
	 * depth <= 1, and keeps the check on a copy whose bound 6.1's
	 * verifier does not carry to the spilled original ("R0 unbounded
	 * memory access": sock_ops refused, no policy, no DRWA). */
	barrier_var(slot);
	mp = &sc->m[slot & 1];
	__builtin_memset(mp, 0, sizeof(*mp));
	rcvd = tp->bytes_received - p->drwa_round_rcvd;
	mp->rcvd = rcvd;
	mp->holes = drwa_ooo(tp) - p->drwa_round_ooo;
	if (l && p->drwa_round_path && l->bytes > p->drwa_round_path)
		mp->path_rcvd = l->bytes - p->drwa_round_path;
	mp->dur_us = dur > 0xffffffff ? 0xffffffff : (__u32)dur;
	mp->rtt_us = rtt_us;
	mp->low_us = p->drwa_round_low_us;
	mss = tp->inet_conn.icsk_ack.rcv_mss;
	mp->min_bytes = 2 * (mss ? mss : 1460);
	/* RTT_est from millisecond timestamps (unless the connection agreed
	 * on microsecond ones) has a millisecond's resolution. */
	mp->resolution_us = tp->tcp_header_len > 20 &&
			  !tcp_usec_ts(tp) ? 1000 : 0;
	mp->lambda_x256 = drwa_lambda_x256;
	/* The path's floor, as the probes keep it in the record (floor.h);
	 * in the connection's first rounds only what the other receivers on
	 * its path use (drwa_path_floor), and after them too while one of
	 * them holds its RTT_min after a cut that drained nothing: the
	 * probes' floor is then below the path (one learned before the path
	 * got longer), and a connection opened beside the holder cut itself
	 * to 2 segments by it, 0.13x of its goodput without DRWA for 16 s,
	 * the sibling's queue moving its RTT too much for the flat rule to
	 * take the cuts back (test_drwa_harm, case 6, one CI run). Not for
	 * a connection that has held itself: its own take-backs judge the
	 * floor, and the held RTT_min it told the path would stand in for
	 * the floor it retries. Kept in the measure, not on the stack: 6.1's
	 * verifier counts the program's and the floor code's frames
	 * together, 512 bytes at most. */
	mp->first = tp->bytes_received < DRWA_TRUSTED_BYTES;
	mp->floor_us = drwa_path_floor(l, now_us, DRWA_PATH_FRESH_US, &mp->path_held);
	mp->floor_src = BLOATD_DRWA_BASE_RECEIVERS;
	if (!mp->first && (!mp->path_held || p->drwa_held)) {
		mp->floor_us = s->floor_us;
		mp->floor_src = s->floor_source;
	}
	/* cwnd_est, for the view: the data of one RTT */
	rcvd = rcvd * rtt_us / dur;
	p->drwa_rcvd_rtt = rcvd > 0xffffffff ? 0xffffffff : (__u32)rcvd;
	p->drwa_rtt_us = rtt_us;
	drwa_round_start(p, tp, now_us, l);
	/* What it used last round, for the others on the path (non-atomic
	 * pairs: a torn read costs one round's floor; before the round, not
	 * after: 6.1's verifier counted the 16 bytes kept across it). */
	if (l && !mp->first)
		drwa_path_tell(l, p, now_us);
	drwa_apply(skops, s, tp, mp);
	sc->depth = slot;
	if (p->drwa_held != held)
		policy_count(BLOATD_PC_DRWA_HELD, 1);
}

/* The callback per segment an armed socket sends: a receiver's ACKs. */
static __always_inline void drwa_ack(struct bpf_sock_ops *skops)
{
	struct bloatd_policy_sock *p;
	struct bloatd_drwa_path *l;
	struct bloatd_sock *s;
	struct tcp_sock *tp;
	__u64 now_us;
	int idle;

	if (!(tp = skops_tcp_sock(skops)))
		return;
	s = bpf_sk_storage_get(&socks, tp, 0, 0);
	if (!s || !(s->pol.flags & BLOATD_POL_DRWA_ARMED))
		return;
	p = &s->pol;
	now_us = tp->tcp_mstamp;
	idle = drwa_idle(p, now_us);
	drwa_sample(p, tp, idle);
	/* A receiver is a socket that received drwa_min_bytes and more than
	 * it sent: a server that read a request above drwa_min_bytes and
	 * answers it is a sender, whose own samples (its download's queue)
	 * would shut a window it may need for an upload later. */
	if (tp->bytes_received < drwa_min_bytes || tp->bytes_acked > tp->bytes_received) {
		/* A window DRWA clamped while the socket was receiving goes
		 * back (clamped, it received drwa_min_bytes: it is a sender
		 * now). A bulk sender does not need a callback per segment it
		 * sends, whether DRWA is on or not. */
		if (p->flags & BLOATD_POL_DRWA_CLAMPED)
			drwa_release(skops, s, tp);
		if (tp->bytes_acked > drwa_min_bytes && !p->drwa_rule) {
			p->flags &= ~BLOATD_POL_DRWA_ARMED;
			policy_cb_clear(skops, s, SOCKOPS_WRITE_HDR_OPT_CB_FLAG);
		} else if (drwa_on(s)) {
			/* Not clamped yet, but on its path: a web fetch's slow
			 * start takes its share from the others. */
			drwa_path_count(s, tp, now_us);
		}
		return;
	}
	if (!drwa_on(s)) {
		if (p->flags & BLOATD_POL_DRWA_CLAMPED)
			drwa_release(skops, s, tp);
		p->drwa_round_us = 0;
		p->drwa_path_rcvd = 0;
		return;
	}
	l = drwa_path_count(s, tp, now_us);
	if (idle || !p->drwa_round_us) {
		drwa_round_start(p, tp, now_us, l);
		return;
	}
	drwa_round_close(skops, s, tp, now_us, l);
}

/*
 * Gives back every window DRWA clamps in the reader's network namespace:
 * at stop, for receivers that send no ACK while bloatd waits (an idle
 * download), and at start, for what a bloatd that did not stop left in the
 * pinned `drwa_saved`. The TCP iterator holds the socket's lock, so it may
 * set the option; the daemon runs it in each namespace. Writes one word
 * per window given back.
 */
SEC("iter/tcp")
int restore_windows(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct bloatd_drwa_saved *sv;
	struct bloatd_sock *s;
	struct tcp_sock *tp;
	long err;
	int clamp;

	if (!skc || !(tp = bpf_skc_to_tcp_sock(skc)))
		return 0;
	sv = bpf_sk_storage_get(&drwa_saved, tp, 0, 0);
	if (!sv)
		return 0;
	clamp = drwa_give_back(sv, drwa_rcvbuf(tp), drwa_scaling_ratio(tp));
	err = bpf_setsockopt(tp, SOL_TCP, TCP_WINDOW_CLAMP, &clamp, sizeof(clamp));
	bpf_sk_storage_delete(&drwa_saved, tp);
	s = bpf_sk_storage_get(&socks, tp, 0, 0);
	if (s && (s->pol.flags & BLOATD_POL_DRWA_CLAMPED)) {
		drwa_released(s, err);
	} else {
		policy_count(BLOATD_PC_DRWA_RECOVERED, 1);
		if (err)
			policy_count(BLOATD_PC_DRWA_FAILED, 1);
	}
	bpf_seq_write(ctx->meta->seq, &clamp, sizeof(clamp));
	return 0;
}

/* The record of a closing socket goes: it leaves the gauges. */
static __always_inline void policy_forget(const struct bloatd_sock *s)
{
	if (s->pol.cc_rule)
		policy_count(BLOATD_PC_CC_SOCKETS, -1);
	if (s->pol.flags & BLOATD_POL_BULK_DONE)
		policy_count(BLOATD_PC_BULK_SOCKETS, -1);
	if (s->pol.flags & BLOATD_POL_DRWA_CLAMPED)
		policy_count(BLOATD_PC_DRWA_SOCKETS, -1);
}

#endif /* BLOATD_POLICY_OPS_H */
