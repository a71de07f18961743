// SPDX-License-Identifier: GPL-2.0
/*
 * delayline: a constant delay for the lab's router, in user space.
 *
 * The lab needs a base RTT (tens to hundreds of milliseconds, the papers'
 * cellular paths) but this kernel has no sch_netem. iptables sends the
 * packets to delay into an NFQUEUE; this program learns each packet's id
 * from the queue, and gives the kernel its ACCEPT verdict once the packet
 * has spent the configured time in the queue. The packet itself stays in
 * the kernel the whole time: only its metadata crosses to user space.
 *
 * Why this is exact enough:
 * - The delay is the same for every packet, so the release order is the
 *   arrival order, and the queue's ids grow in arrival order (the kernel
 *   numbers them under the queue lock). A FIFO of (id, due time) is the
 *   whole schedule, and one batch verdict "accept every id <= N" releases
 *   all packets that are due at once, whatever the packet rate.
 * - Packets are never reordered or dropped by the delay line: reordering
 *   would look like loss to TCP (three duplicate ACKs) and change the very
 *   congestion behaviour the lab measures.
 * - We sleep until the head packet is due with a 1 ns timer slack, and
 *   optionally run SCHED_FIFO so a busy machine (compilers on both cores)
 *   does not add its scheduling latency to the lab's RTT.
 * - Every release records its lateness (release time - due time) in a
 *   histogram; SIGUSR1 prints it, SIGUSR2 resets it, so the lab can
 *   measure the delay line under the load it actually carries.
 *
 * Trace-driven link (--trace FILE): the packets of this queue also cross
 * a link whose capacity follows a measured cellular trace (Mahimahi's
 * format: one line per 1500-byte delivery opportunity, in milliseconds
 * from the start, repeating at the last line's time), behind a drop-tail
 * buffer (--buffer-bytes or --buffer-packets). Each packet's departure is
 * computed when it arrives, Mahimahi's way: an opportunity carries up to
 * 1500 bytes of the packets that had arrived by its time, a larger packet
 * spans opportunities, an opportunity nobody is waiting for is lost. It is
 * released at departure + the delay (-d, default 0 with a trace). The
 * order is still the arrival order, so the FIFO above stays the whole
 * schedule; a packet the full buffer refuses is dropped at once. Only
 * forwarded, MTU-sized packets should be queued (topo.sh: offloads off,
 * FORWARD chain), and GSO packets are segmented before they reach us.
 *
 * Starting a trace over (SIGRTMIN): opportunity times count from now,
 * from the trace's first line, as when the line started. lab --replay
 * starts each arm's flows there, so every arm meets the episode's
 * capacity from its first second (the line starts seconds before the
 * first flow, and the trace repeats). Packets already held keep their
 * departures: restart with an empty queue.
 *
 * Changing the delay live (--delay-file FILE, then SIGHUP): the path's RTT
 * grows or shrinks mid-transfer on the same interface and gateway, as when
 * a phone falls back from LTE to 3G. The new delay applies to packets that
 * arrive from then on; packets already held keep theirs. The FIFO stays the
 * whole schedule: when the delay shrinks, a packet due before the one ahead
 * of it waits for it (the delay falls over one old delay, never out of
 * order).
 *
 * Constant-rate link (--rate BITS): as the trace link, with a departure
 * every packet's transmission time after the one before (the queue a tbf
 * would hold, with no burst).
 *
 * Active queue management (--aqm codel|fq_codel, on a trace or rate link):
 * the lab also needs the bottlenecks that do not only tail-drop. An AQM
 * decides at dequeue, from how long the head packet waited, so here the
 * departures are no longer computed at arrival: packets wait in the AQM's
 * queues (CoDel: one FIFO; FQ-CoDel: one per flow, served by DRR) and the
 * link dequeues one whenever it can carry it (a rate link when the packet
 * before it has been sent, a trace link at each opportunity). CoDel (RFC
 * 8289: target 5 ms, interval 100 ms) drops the head while the queue has
 * stood above target for an interval, at the control law's rate; FQ-CoDel
 * (RFC 8290) runs one CoDel per flow, as Linux's fq_codel does. With --ecn
 * a packet CoDel would drop is marked CE instead when it is ECN-capable
 * (ECT(0), ECT(1); CE stays CE): its header is rewritten (IPv4: checksum
 * fixed; IPv6: traffic class) and returned with the verdict, so the
 * whole packet crosses to user space in this mode. Released packets get a
 * verdict each (flows leave out of arrival order); drops and marks are
 * counted in total and per source/destination/protocol, the lab's truth
 * of who sent what through the bottleneck and what it cost them. The
 * drop-tail modes above are not touched by any of this.
 *
 * Usage: delayline -d DELAY_MS [-q QUEUE] [-p PIDFILE] [-r PRIO]
 *        delayline --trace FILE | --rate BITS [--buffer-bytes N | --buffer-packets N]
 *                  [--aqm codel|fq_codel [--ecn] [--target-ms T] [--interval-ms I]]
 *                  [-d DELAY_MS] [-q QUEUE] [-p PIDFILE] [-r PRIO]
 *        delayline -t SECONDS [-r PRIO]   (the host's own timer lateness)
 * The pid file is written once the queue is bound: callers insert their
 * NFQUEUE rule only after it appears, so no packet meets an unbound queue
 * (the kernel would drop it).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <getopt.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/netlink.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

#include "aqm.h"

/*
 * Packets held at once: rate x delay. 100 Mbit/s of 1500-byte packets for
 * 1 s is 8333 packets; the ring and the kernel queue allow 8x that.
 */
#define RING_SIZE	65536u
#define HIST_US		20000u	/* lateness histogram: 1 us bins up to 20 ms */
#define NETLINK_RCVBUF	(8 << 20)
#define OPP_BYTES	1500u	/* what one trace opportunity carries */
#define TRACE_MAX	(1u << 24)

struct held {
	uint32_t id;
	uint32_t bytes;		/* link modes: IP length */
	uint64_t due_ns;	/* release: departure + delay */
	uint64_t depart_ns;	/* link modes: leaves the link (else = arrival) */
	uint32_t slot;		/* AQM mode: the packet's slot (its CE mark, its bytes) */
};

/* Constant-rate link (rate_bps == 0: none). */
static uint64_t rate_bps;
static uint64_t link_free_ns;	/* the rate link has sent everything before this */

/* Trace-driven link state (trace_n == 0: no trace, constant delay only). */
static uint32_t *trace_ms;	/* opportunity times within one period */
static uint32_t trace_n, trace_period_ms;
static uint64_t trace_start_ns;	/* opportunity times count from here */
static uint64_t opp;		/* current opportunity (free-running index) */
static uint32_t opp_left;	/* bytes it can still carry */
static uint64_t buf_bytes_max, buf_pkts_max;	/* 0: unlimited */
static uint64_t queued_bytes;	/* arrived, not departed */
static uint32_t dep_head;	/* first held packet not departed yet */

static const char *delay_file;	/* --delay-file: the delay, re-read on SIGHUP */

/*
 * AQM mode (aqm.kind != AQM_NONE, on a rate or trace link). A packet's
 * slot holds what the AQM needs (slots[]) and what its verdict needs
 * (slot_id, slot_data, slot_path); free slots are chained through
 * slots[].next. The link dequeues at link_free_ns (rate) or at the
 * current opportunity (trace); a packet bigger than what an opportunity
 * has left stays in transit over the next ones.
 */
static struct aqm_params aqm = {
	.kind = AQM_NONE, .target_ns = 5000000, .interval_ns = 100000000,
	.flows = 1024, .quantum = 1500, .mtu = 1500,
};
static struct aqm_pkt *slots;
static uint32_t *slot_id;
static unsigned char **slot_data;	/* --ecn: the whole packet, to rewrite */
static uint16_t *slot_path;
static uint32_t slot_free = AQM_NIL;
static uint32_t transit = AQM_NIL;	/* trace link: the packet being sent */
static uint32_t transit_left;		/* its bytes still to carry */
static uint32_t flow_seed;		/* FQ-CoDel's flow hash perturbation */

/*
 * Who sent what through the AQM: counters per (source, destination,
 * protocol), the lab's truth of whose packets waited, went, were dropped
 * or marked. A small open-addressed table; what does not fit counts in
 * the last entry (all zeros: "other").
 */
#define PATHS		64u
struct path {
	uint8_t family, proto, used;
	uint8_t src[16], dst[16];
	uint64_t packets, bytes, ect, delivered_pkts, delivered_bytes;
	uint64_t codel_dropped, overlimit_dropped, ce_marked;
};
static struct path paths[PATHS + 1];

#define SOJOURN_BIN_US	100u	/* AQM sojourn histogram: 0.1 ms bins up to 5 s */
#define SOJOURN_BINS	50000u
static uint64_t *sojourn_hist;

static struct held ring[RING_SIZE];
static uint32_t ring_head, ring_tail;	/* free-running; index with % RING_SIZE */
static uint64_t delay_ns;

static struct {
	uint64_t packets;
	uint64_t ring_full;
	uint32_t held_max;
	uint64_t late_us_sum;
	uint64_t late_us_max;
	uint64_t late_hist[HIST_US + 1];
	uint64_t dropped;	/* link modes: refused by the full buffer */
	uint64_t delivered_bytes;
	uint64_t sojourn_n;	/* AQM mode: packets the link sent */
} st;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static uint32_t held_count(void)
{
	return ring_tail - ring_head;
}

/* Time of opportunity k (CLOCK_MONOTONIC ns). */
static uint64_t opp_ns(uint64_t k)
{
	return trace_start_ns +
	       ((k / trace_n) * trace_period_ms + trace_ms[k % trace_n]) * 1000000ull;
}

/* The first opportunity at or after time t (ns), t >= trace_start_ns. */
static uint64_t opp_at_or_after(uint64_t t)
{
	uint64_t ms = (t - trace_start_ns + 999999) / 1000000; /* ceil */
	uint64_t cycle = ms / trace_period_ms;
	uint32_t off = (uint32_t)(ms % trace_period_ms), lo = 0, hi = trace_n;

	while (lo < hi) {	/* first trace_ms[i] >= off */
		uint32_t mid = lo + (hi - lo) / 2;

		if (trace_ms[mid] < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return cycle * trace_n + lo;	/* lo == trace_n: next period's first */
}

/*
 * When a packet of `bytes` arriving at `now` leaves the link: it uses the
 * current opportunity's remaining bytes if that opportunity is not in the
 * past, else waits for the next one, and spans as many as its size needs.
 */
static uint64_t trace_depart(uint64_t now, uint32_t bytes)
{
	if (!opp_left) {
		opp++;
		opp_left = OPP_BYTES;
	}
	if (opp_ns(opp) < now) {
		opp = opp_at_or_after(now);
		opp_left = OPP_BYTES;
	}
	while (bytes > opp_left) {
		bytes -= opp_left;
		opp++;
		opp_left = OPP_BYTES;
	}
	opp_left -= bytes;
	return opp_ns(opp);
}

/* Time the rate link takes to send `bytes`. */
static uint64_t tx_ns(uint32_t bytes)
{
	return (uint64_t)bytes * 8000000000ull / rate_bps;
}

/* When a packet of `bytes` arriving at `now` has crossed the rate link. */
static uint64_t rate_depart(uint64_t now, uint32_t bytes)
{
	if (link_free_ns < now)
		link_free_ns = now;
	link_free_ns += tx_ns(bytes);
	return link_free_ns;
}

static int link_on(void)
{
	return trace_n || rate_bps;
}

/* Forget the packets that have left the link by `now` (buffer accounting). */
static void link_departed(uint64_t now)
{
	while (dep_head != ring_tail) {
		struct held *h = &ring[dep_head % RING_SIZE];

		if (h->depart_ns > now)
			break;
		queued_bytes -= h->bytes;
		dep_head++;
	}
}

/* IP length of a queued packet, from the copied header (0 if unknown). */
static uint32_t ip_length(struct nfq_data *nfa)
{
	unsigned char *p;
	int n = nfq_get_payload(nfa, &p);

	if (n >= 20 && (p[0] >> 4) == 4)
		return (uint32_t)p[2] << 8 | p[3];
	if (n >= 40 && (p[0] >> 4) == 6)
		return ((uint32_t)p[4] << 8 | p[5]) + 40;
	return 0;
}

/* ------------------------------------------------------------ AQM mode */

/* What the AQM mode reads from a packet's headers. */
struct hdr {
	uint32_t bytes;		/* IP length (0: unknown) */
	uint8_t family, proto, ecn;
	uint8_t src[16], dst[16];
	uint16_t sport, dport;	/* TCP and UDP; 0 otherwise */
	uint32_t hdr_len;	/* the IP header's length */
};

static void parse_header(const unsigned char *p, int n, struct hdr *h)
{
	memset(h, 0, sizeof(*h));
	if (n >= 20 && (p[0] >> 4) == 4) {
		uint32_t ihl = (p[0] & 15u) * 4;
		int first_fragment = !(((p[6] & 0x1f) << 8) | p[7]);

		h->family = 4;
		h->bytes = (uint32_t)p[2] << 8 | p[3];
		h->ecn = p[1] & 3;
		h->proto = p[9];
		h->hdr_len = ihl;
		memcpy(h->src, p + 12, 4);
		memcpy(h->dst, p + 16, 4);
		if (ihl >= 20 && (uint32_t)n >= ihl + 4 && first_fragment &&
		    (h->proto == IPPROTO_TCP || h->proto == IPPROTO_UDP)) {
			h->sport = (uint16_t)(p[ihl] << 8 | p[ihl + 1]);
			h->dport = (uint16_t)(p[ihl + 2] << 8 | p[ihl + 3]);
		}
	} else if (n >= 40 && (p[0] >> 4) == 6) {
		h->family = 6;
		h->bytes = ((uint32_t)p[4] << 8 | p[5]) + 40;
		h->ecn = (p[1] >> 4) & 3;
		h->proto = p[6];	/* extension headers: counted as their own protocol */
		h->hdr_len = 40;
		memcpy(h->src, p + 8, 16);
		memcpy(h->dst, p + 24, 16);
		if (n >= 44 && (h->proto == IPPROTO_TCP || h->proto == IPPROTO_UDP)) {
			h->sport = (uint16_t)(p[40] << 8 | p[41]);
			h->dport = (uint16_t)(p[42] << 8 | p[43]);
		}
	}
}

static uint32_t mix(uint32_t h, uint32_t v)
{
	h ^= v;
	h *= 0x9e3779b1u;
	return h ^ (h >> 15);
}

/* A hash of the addresses, protocol and (with ports) the ports. */
static uint32_t hdr_hash(const struct hdr *h, int ports)
{
	uint32_t x = flow_seed, w, k;

	for (k = 0; k < 16; k += 4) {
		memcpy(&w, h->src + k, 4);
		x = mix(x, w);
		memcpy(&w, h->dst + k, 4);
		x = mix(x, w);
	}
	x = mix(x, h->proto);
	if (ports)
		x = mix(x, (uint32_t)h->sport << 16 | h->dport);
	x ^= x >> 16;
	x *= 0x85ebca6bu;
	x ^= x >> 13;
	return x;
}

/* The counters of the packet's (source, destination, protocol). */
static uint16_t path_of(const struct hdr *h)
{
	uint32_t k = hdr_hash(h, 0) % PATHS, n;

	for (n = 0; n < PATHS; n++, k = (k + 1) % PATHS) {
		struct path *e = &paths[k];

		if (!e->used) {
			e->used = 1;
			e->family = h->family;
			e->proto = h->proto;
			memcpy(e->src, h->src, 16);
			memcpy(e->dst, h->dst, 16);
			return (uint16_t)k;
		}
		if (e->family == h->family && e->proto == h->proto &&
		    !memcmp(e->src, h->src, 16) && !memcmp(e->dst, h->dst, 16))
			return (uint16_t)k;
	}
	return PATHS;
}

static void slot_release(uint32_t i)
{
	free(slot_data[i]);
	slot_data[i] = NULL;
	slots[i].next = slot_free;
	slot_free = i;
}

static struct nfq_q_handle *queue_h;	/* for the AQM's drop verdicts */

/* aqm.h: the AQM let go of a packet; the kernel frees it. */
void aqm_drop(uint32_t i, enum aqm_drop_why why)
{
	struct path *e = &paths[slot_path[i]];

	if (why == AQM_DROP_CODEL) {
		e->codel_dropped++;
	} else {
		e->overlimit_dropped++;
		st.dropped++;
	}
	if (nfq_set_verdict(queue_h, slot_id[i], NF_DROP, 0, NULL) < 0)
		fprintf(stderr, "delayline: drop verdict for id %u failed: %s\n",
			slot_id[i], strerror(errno));
	slot_release(i);
}

/* AQM mode: the packet joins the AQM's queues (or is dropped there). */
static int aqm_arrive(struct nfq_q_handle *qh, struct nfq_data *nfa,
		      uint32_t id, uint64_t now)
{
	unsigned char *p;
	int n = nfq_get_payload(nfa, &p);
	struct path *e;
	struct hdr h;
	uint32_t i;

	if (slot_free == AQM_NIL) {
		/* as with the ring above: never hold a packet forever */
		st.ring_full++;
		nfq_set_verdict(qh, id, NF_ACCEPT, 0, NULL);
		return 0;
	}
	parse_header(p, n, &h);
	i = slot_free;
	slot_free = slots[i].next;
	slots[i] = (struct aqm_pkt){
		.enq_ns = now, .bytes = h.bytes ? h.bytes : OPP_BYTES, .ecn = h.ecn,
		.flow = aqm.kind == AQM_FQ_CODEL ? hdr_hash(&h, 1) % aqm.flows : 0,
	};
	slot_id[i] = id;
	slot_path[i] = path_of(&h);
	e = &paths[slot_path[i]];
	e->packets++;
	e->bytes += slots[i].bytes;
	if (h.ecn != ECN_NOT_ECT)
		e->ect++;
	/* Only a packet we hold whole can leave with a rewritten header. */
	if (aqm.ecn && h.ecn != ECN_NOT_ECT && h.bytes && (uint32_t)n == h.bytes &&
	    h.hdr_len <= h.bytes) {
		slot_data[i] = malloc(n);
		if (slot_data[i]) {
			memcpy(slot_data[i], p, n);
			slots[i].markable = 1;
		}
	}
	/* An idle link starts on this packet: now, or its next opportunity. */
	if (!aqm_backlog_pkts() && transit == AQM_NIL) {
		if (trace_n) {
			if (opp_ns(opp) < now) {
				opp = opp_at_or_after(now);
				opp_left = OPP_BYTES;
			}
		} else if (link_free_ns < now) {
			link_free_ns = now;
		}
	}
	aqm_enqueue(i);
	if (held_count() + aqm_backlog_pkts() > st.held_max)
		st.held_max = held_count() + aqm_backlog_pkts();
	return 0;
}

/* The link sent packet i, dequeued at `deq` and fully across at `depart`. */
static void link_sent(uint32_t i, uint64_t deq, uint64_t depart)
{
	struct path *e = &paths[slot_path[i]];
	uint64_t us = deq > slots[i].enq_ns ? (deq - slots[i].enq_ns) / 1000 : 0;
	uint64_t bin = us / SOJOURN_BIN_US;

	sojourn_hist[bin < SOJOURN_BINS ? bin : SOJOURN_BINS]++;
	st.sojourn_n++;
	st.delivered_bytes += slots[i].bytes;
	e->delivered_pkts++;
	e->delivered_bytes += slots[i].bytes;
	if (slots[i].ce)
		e->ce_marked++;
	ring[ring_tail % RING_SIZE] = (struct held){
		slot_id[i], slots[i].bytes, depart + delay_ns, depart, i };
	ring_tail++;
}

/* Rate link: one packet each time the one before it has been sent. */
static void rate_serve(uint64_t now)
{
	while (aqm_backlog_pkts() && link_free_ns <= now) {
		uint64_t t = link_free_ns;
		uint32_t i = aqm_dequeue(t);

		if (i == AQM_NIL)
			break;
		link_free_ns = t + tx_ns(slots[i].bytes);
		link_sent(i, t, link_free_ns);
	}
}

/*
 * Trace link, Mahimahi's way: each opportunity up to `now` carries up to
 * 1500 bytes of what waits at its time; a packet longer than what is left
 * stays in transit over the next ones; what an opportunity does not carry
 * is lost. Each dequeue is at the opportunity's time, so CoDel sees the
 * sojourn time the emulated link gave, whenever this process ran.
 */
static void trace_serve(uint64_t now)
{
	static uint64_t transit_deq_ns;	/* when the packet in transit was dequeued */

	while ((transit != AQM_NIL || aqm_backlog_pkts()) && opp_ns(opp) <= now) {
		uint64_t t = opp_ns(opp);

		while (opp_left) {
			if (transit == AQM_NIL) {
				transit = aqm_dequeue(t);
				if (transit == AQM_NIL)
					break;
				transit_left = slots[transit].bytes;
				transit_deq_ns = t;
			}
			if (transit_left > opp_left) {
				transit_left -= opp_left;
				opp_left = 0;
				break;
			}
			opp_left -= transit_left;
			transit_left = 0;
			link_sent(transit, transit_deq_ns, t);
			transit = AQM_NIL;
		}
		opp++;
		opp_left = OPP_BYTES;
	}
}

/* Every packet the link can send by `now`. */
static void link_serve(uint64_t now)
{
	if (trace_n)
		trace_serve(now);
	else
		rate_serve(now);
}

/* IPv4: ECN bits of the TOS byte, header checksum recomputed; IPv6: traffic class. */
static void set_ce(unsigned char *p)
{
	uint32_t sum = 0, k, ihl;

	if ((p[0] >> 4) != 4) {
		p[1] |= ECN_CE << 4;
		return;
	}
	ihl = (p[0] & 15u) * 4;
	p[1] |= ECN_CE;
	p[10] = p[11] = 0;
	for (k = 0; k + 1 < ihl; k += 2)
		sum += (uint32_t)p[k] << 8 | p[k + 1];
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	sum = ~sum & 0xffff;
	p[10] = (unsigned char)(sum >> 8);
	p[11] = (unsigned char)sum;
}

/*
 * AQM mode's release: one verdict per packet (FQ-CoDel sends flows out of
 * arrival order, so "every id up to N" would release packets still
 * queued); a packet CoDel marked goes back rewritten.
 */
static void aqm_release(struct nfq_q_handle *qh, const struct held *h)
{
	uint32_t i = h->slot;
	int rc;

	if (slots[i].ce && slot_data[i]) {
		set_ce(slot_data[i]);
		rc = nfq_set_verdict(qh, h->id, NF_ACCEPT, slots[i].bytes, slot_data[i]);
	} else {
		rc = nfq_set_verdict(qh, h->id, NF_ACCEPT, 0, NULL);
	}
	if (rc < 0)
		fprintf(stderr, "delayline: verdict for id %u failed: %s\n", h->id, strerror(errno));
	slot_release(i);
}

/* The slots and counters of AQM mode; 0, or -1 with a message. */
static int aqm_setup(void)
{
	uint32_t i;

	slots = calloc(RING_SIZE, sizeof(*slots));
	slot_id = calloc(RING_SIZE, sizeof(*slot_id));
	slot_data = calloc(RING_SIZE, sizeof(*slot_data));
	slot_path = calloc(RING_SIZE, sizeof(*slot_path));
	sojourn_hist = calloc(SOJOURN_BINS + 1, sizeof(*sojourn_hist));
	if (!slots || !slot_id || !slot_data || !slot_path || !sojourn_hist) {
		fprintf(stderr, "delayline: out of memory for the AQM's slots\n");
		return -1;
	}
	for (i = RING_SIZE; i-- > 0;) {
		slots[i].next = slot_free;
		slot_free = i;
	}
	flow_seed = (uint32_t)now_ns() | 1;
	return aqm_init(&aqm, slots);
}

/* Called by libnetfilter_queue once per queued packet. */
static int on_packet(struct nfq_q_handle *qh, struct nfgenmsg *msg,
		     struct nfq_data *nfa, void *data)
{
	struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
	uint64_t now = now_ns(), depart = now;
	uint32_t id, bytes = 0;

	if (!ph)
		return 0;
	id = ntohl(ph->packet_id);
	if (held_count() == RING_SIZE) {
		/*
		 * Cannot happen with the kernel queue capped at RING_SIZE, but
		 * if it did, passing the packet undelayed beats holding it
		 * forever (which the kernel would turn into a drop).
		 */
		st.ring_full++;
		nfq_set_verdict(qh, id, NF_ACCEPT, 0, NULL);
		return 0;
	}
	if (aqm.kind != AQM_NONE)
		return aqm_arrive(qh, nfa, id, now);
	if (link_on()) {
		bytes = ip_length(nfa);
		if (!bytes)
			bytes = OPP_BYTES;
		link_departed(now);
		if ((buf_bytes_max && queued_bytes + bytes > buf_bytes_max) ||
		    (buf_pkts_max && ring_tail - dep_head + 1 > buf_pkts_max)) {
			st.dropped++;
			nfq_set_verdict(qh, id, NF_DROP, 0, NULL);
			return 0;
		}
		depart = trace_n ? trace_depart(now, bytes) : rate_depart(now, bytes);
		queued_bytes += bytes;
		st.delivered_bytes += bytes;
	}
	ring[ring_tail % RING_SIZE] = (struct held){ id, bytes, depart + delay_ns, depart, 0 };
	ring_tail++;
	if (held_count() > st.held_max)
		st.held_max = held_count();
	return 0;
}

/*
 * Read a Mahimahi trace: one opportunity time (ms) per line, non-decreasing,
 * the last one > 0 (it is also the period). Returns 0, or -1 with a message.
 */
static int load_trace(const char *path)
{
	FILE *f = fopen(path, "r");
	char line[64];
	uint32_t cap = 4096, lineno = 0;

	if (!f) {
		fprintf(stderr, "delayline: cannot open trace %s: %s\n", path, strerror(errno));
		return -1;
	}
	trace_ms = malloc(cap * sizeof(*trace_ms));
	while (trace_ms && fgets(line, sizeof(line), f)) {
		char *end;
		unsigned long v;

		lineno++;
		if (line[0] == '\n' || line[0] == '#')
			continue;
		errno = 0;
		v = strtoul(line, &end, 10);
		if (errno || end == line || (*end && *end != '\n' && *end != '\r') ||
		    v > 0xffffffffUL || (trace_n && v < trace_ms[trace_n - 1])) {
			fprintf(stderr, "delayline: %s line %u: want a millisecond time, "
				"not before the line above it\n", path, lineno);
			fclose(f);
			return -1;
		}
		if (trace_n == TRACE_MAX) {
			fprintf(stderr, "delayline: %s: more than %u lines\n", path, TRACE_MAX);
			fclose(f);
			return -1;
		}
		if (trace_n == cap) {
			cap *= 2;
			trace_ms = realloc(trace_ms, cap * sizeof(*trace_ms));
			if (!trace_ms)
				break;
		}
		trace_ms[trace_n++] = (uint32_t)v;
	}
	fclose(f);
	if (!trace_ms) {
		fprintf(stderr, "delayline: out of memory reading %s\n", path);
		return -1;
	}
	if (!trace_n || !trace_ms[trace_n - 1]) {
		fprintf(stderr, "delayline: %s: no opportunities, or the last one at 0 ms\n", path);
		return -1;
	}
	trace_period_ms = trace_ms[trace_n - 1];
	return 0;
}

/* Accept every packet that is due: with one batch verdict (AQM mode: one each). */
static void release_due(struct nfq_q_handle *qh, uint64_t now)
{
	uint32_t last_id = 0;
	int any = 0;

	/* released packets have left the link: keep the buffer count ahead */
	if (link_on() && aqm.kind == AQM_NONE)
		link_departed(now);
	while (ring_head != ring_tail) {
		struct held *h = &ring[ring_head % RING_SIZE];
		uint64_t late_us;

		if (h->due_ns > now)
			break;
		late_us = (now - h->due_ns) / 1000;
		st.late_us_sum += late_us;
		if (late_us > st.late_us_max)
			st.late_us_max = late_us;
		st.late_hist[late_us < HIST_US ? late_us : HIST_US]++;
		st.packets++;
		if (aqm.kind != AQM_NONE) {
			aqm_release(qh, h);
		} else {
			last_id = h->id;
			any = 1;
		}
		ring_head++;
	}
	if (any && nfq_set_verdict_batch(qh, last_id, NF_ACCEPT) < 0)
		fprintf(stderr, "delayline: verdict for id %u failed: %s\n",
			last_id, strerror(errno));
}

/* The bin holding the p-quantile of the n samples in hist[0..bins]. */
static uint64_t hist_percentile(const uint64_t *hist, uint32_t bins, uint64_t n, double p)
{
	uint64_t want, seen = 0;
	uint32_t i;

	if (!n)
		return 0;
	want = (uint64_t)(p * n);
	if (want >= n)
		want = n - 1;
	for (i = 0; i <= bins; i++) {
		seen += hist[i];
		if (seen > want)
			return i;
	}
	return bins;
}

static uint64_t percentile_us(double p)
{
	return hist_percentile(st.late_hist, HIST_US, st.packets, p);
}

static uint64_t sojourn_us(double p)
{
	return hist_percentile(sojourn_hist, SOJOURN_BINS, st.sojourn_n, p) * SOJOURN_BIN_US;
}

static const char *aqm_name(void)
{
	return aqm.kind == AQM_CODEL ? "codel" : aqm.kind == AQM_FQ_CODEL ? "fq_codel" : "droptail";
}

/* One line per (source, destination, protocol) the AQM has seen. */
static void print_paths(void)
{
	uint32_t k;

	for (k = 0; k <= PATHS; k++) {
		const struct path *e = &paths[k];
		char src[INET6_ADDRSTRLEN] = "other", dst[INET6_ADDRSTRLEN] = "other";
		int af = e->family == 6 ? AF_INET6 : AF_INET;

		if (!e->packets)
			continue;
		if (e->used) {
			inet_ntop(af, e->src, src, sizeof(src));
			inet_ntop(af, e->dst, dst, sizeof(dst));
		}
		fprintf(stderr, "delayline path: src=%s dst=%s proto=%u packets=%llu bytes=%llu "
			"ect=%llu delivered_packets=%llu delivered_bytes=%llu codel_dropped=%llu "
			"overlimit_dropped=%llu ce_marked=%llu\n", src, dst, e->proto,
			(unsigned long long)e->packets, (unsigned long long)e->bytes,
			(unsigned long long)e->ect, (unsigned long long)e->delivered_pkts,
			(unsigned long long)e->delivered_bytes,
			(unsigned long long)e->codel_dropped,
			(unsigned long long)e->overlimit_dropped,
			(unsigned long long)e->ce_marked);
	}
}

/* AQM mode: queued, in transit or sent and awaiting release. */
static uint32_t held_now(void)
{
	if (aqm.kind == AQM_NONE)
		return held_count();
	return held_count() + aqm_backlog_pkts() + (transit != AQM_NIL);
}

/*
 * The kernel's own counters for the queue: queue_dropped counts packets
 * refused because the queue was full, user_dropped those the netlink
 * socket could not take. Both must stay 0 for the delay to be lossless.
 */
static void kernel_drops(unsigned int queue, unsigned long *qdrop,
			 unsigned long *udrop)
{
	FILE *f = fopen("/proc/net/netfilter/nfnetlink_queue", "r");
	unsigned int num, portid, total, mode, range;
	unsigned long qd, ud;

	*qdrop = *udrop = 0;
	if (!f)
		return;
	while (fscanf(f, "%u %u %u %u %u %lu %lu %*u %*u",
		      &num, &portid, &total, &mode, &range, &qd, &ud) == 7) {
		if (num == queue) {
			*qdrop = qd;
			*udrop = ud;
		}
	}
	fclose(f);
}

static void print_stats(unsigned int queue)
{
	unsigned long qdrop, udrop;

	if (link_on() && aqm.kind == AQM_NONE)
		link_departed(now_ns());
	if (aqm.kind != AQM_NONE) {
		queued_bytes = aqm_backlog_bytes() + (transit != AQM_NIL ? transit_left : 0);
		/* the paths first: a reader that sees the stats line has them all */
		print_paths();
	}
	kernel_drops(queue, &qdrop, &udrop);
	fprintf(stderr,
		"delayline stats: delay_us=%llu packets=%llu held=%u held_max=%u "
		"queued_bytes=%llu "
		"late_us_mean=%.1f late_us_p50=%llu late_us_p99=%llu "
		"late_us_p999=%llu late_us_max=%llu ring_full=%llu "
		"queue_dropped=%lu user_dropped=%lu buffer_dropped=%llu "
		"delivered_bytes=%llu aqm=%s",
		(unsigned long long)(delay_ns / 1000),
		(unsigned long long)st.packets, held_now(), st.held_max,
		(unsigned long long)queued_bytes,
		st.packets ? (double)st.late_us_sum / st.packets : 0.0,
		(unsigned long long)percentile_us(0.50),
		(unsigned long long)percentile_us(0.99),
		(unsigned long long)percentile_us(0.999),
		(unsigned long long)st.late_us_max,
		(unsigned long long)st.ring_full, qdrop, udrop,
		(unsigned long long)st.dropped,
		(unsigned long long)st.delivered_bytes, aqm_name());
	if (aqm.kind != AQM_NONE) {
		const struct aqm_stats *a = aqm_stats();

		fprintf(stderr, " ecn=%d target_us=%llu interval_us=%llu codel_dropped=%llu "
			"overlimit_dropped=%llu ce_marked=%llu sent_packets=%llu "
			"sojourn_us_p50=%llu sojourn_us_p90=%llu sojourn_us_p99=%llu",
			aqm.ecn, (unsigned long long)(aqm.target_ns / 1000),
			(unsigned long long)(aqm.interval_ns / 1000),
			(unsigned long long)a->codel_dropped,
			(unsigned long long)a->overlimit_dropped,
			(unsigned long long)a->ce_marked,
			(unsigned long long)st.sojourn_n,
			(unsigned long long)sojourn_us(0.50),
			(unsigned long long)sojourn_us(0.90),
			(unsigned long long)sojourn_us(0.99));
	}
	fputc('\n', stderr);
	fflush(stderr);
}

/*
 * The platform's own timer lateness, measured the same way: sleep to 1 ms
 * deadlines for `seconds` and histogram how late each wake-up is. The
 * delay line cannot release a packet earlier than the kernel wakes it, so
 * this is the floor under its own lateness (on a busy or virtualised host,
 * a real-time task can still be held off the CPU for milliseconds).
 */
static int timer_test(double seconds)
{
	uint64_t due = now_ns(), end = due + (uint64_t)(seconds * 1e9);

	delay_ns = 0;
	while (due < end) {
		struct timespec ts;
		uint64_t now, late_us;

		due += 1000000;
		ts.tv_sec = due / 1000000000ull;
		ts.tv_nsec = due % 1000000000ull;
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
		now = now_ns();
		late_us = now > due ? (now - due) / 1000 : 0;
		st.late_us_sum += late_us;
		if (late_us > st.late_us_max)
			st.late_us_max = late_us;
		st.late_hist[late_us < HIST_US ? late_us : HIST_US]++;
		st.packets++;
	}
	fprintf(stderr, "timer test: wakeups=%llu late_us_mean=%.1f late_us_p50=%llu "
		"late_us_p99=%llu late_us_p999=%llu late_us_max=%llu\n",
		(unsigned long long)st.packets, (double)st.late_us_sum / st.packets,
		(unsigned long long)percentile_us(0.50),
		(unsigned long long)percentile_us(0.99),
		(unsigned long long)percentile_us(0.999),
		(unsigned long long)st.late_us_max);
	return 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: delayline -d DELAY_MS [-q QUEUE] [-p PIDFILE] [-r PRIO]\n"
		"       delayline --trace FILE | --rate BITS [--buffer-bytes N | --buffer-packets N]\n"
		"                 [--aqm codel|fq_codel [--ecn] [--target-ms T] [--interval-ms I]] [-d MS] ...\n"
		"       delayline -t SECONDS [-r PRIO]\n"
		"  -d, --delay-ms MS   delay every queued packet by MS (fractions allowed)\n"
		"  -D, --delay-file F  the delay in ms from the file F, read again on SIGHUP\n"
		"                      (without it SIGHUP ends the program)\n"
		"  --trace FILE        send through a link following FILE (Mahimahi format:\n"
		"                      one 1500-byte opportunity per line, ms); -d then adds\n"
		"                      a constant delay after the link (default 0)\n"
		"  --rate BITS         send through a constant-rate link (bit/s; k, m, g and a\n"
		"                      trailing 'bit' allowed: 16mbit); -d adds a delay after it\n"
		"  --buffer-bytes N    link modes: buffer of N bytes (drop-tail, or the AQM's limit)\n"
		"  --buffer-packets N  link modes: buffer of N packets\n"
		"                      (neither: unlimited, as Mahimahi's default; with --aqm,\n"
		"                      Linux's limits: codel 1000, fq_codel 10240 packets)\n"
		"  --aqm KIND          link modes: codel (RFC 8289) or fq_codel (RFC 8290)\n"
		"                      instead of drop-tail\n"
		"  --ecn               with --aqm: mark ECN-capable packets CE instead of dropping\n"
		"  --target-ms T       CoDel's target (default 5)\n"
		"  --interval-ms I     CoDel's interval (default 100)\n"
		"  --flows N           FQ-CoDel's queues (default 1024)\n"
		"  --quantum B         FQ-CoDel's DRR quantum in IP bytes (default 1500)\n"
		"  -q, --queue N       NFQUEUE number to serve (default 0)\n"
		"  -p, --pidfile F     write our pid to F once the queue is bound\n"
		"  -r, --rt PRIO       run SCHED_FIFO at PRIO (1-99) for timer accuracy\n"
		"  -t, --timer-test S  no queue: measure this host's timer lateness for S seconds\n"
		"signals: USR1 prints statistics (with --aqm, a line per source/destination/\n"
		"protocol first), USR2 resets them, HUP re-reads\n"
		"--delay-file, RTMIN starts the trace over (from its first line, now),\n"
		"TERM/INT exit\n");
}

/* The delay in milliseconds from --delay-file (0..60000); -1 if unreadable. */
static double read_delay_file(const char *path)
{
	FILE *f = fopen(path, "r");
	double ms = -1;

	if (!f)
		return -1;
	if (fscanf(f, "%lf", &ms) != 1 || ms < 0 || ms > 60000)
		ms = -1;
	fclose(f);
	return ms;
}

static int write_pidfile(const char *path)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -1;
	fprintf(f, "%d\n", getpid());
	return fclose(f);
}

struct args {
	const char *pidfile, *trace, *rate, *aqm;
	unsigned int queue;
	double delay_ms, timer_secs, target_ms, interval_ms;
	long flows, quantum;
	int rt_prio;
};

/* A rate in bit/s: "16000000", "16mbit", "1.5m", "150kbit"; 0 if malformed. */
static uint64_t parse_rate(const char *s)
{
	char *end;
	double v = strtod(s, &end), unit = 1;

	if (end == s || v <= 0)
		return 0;
	switch (*end) {
	case 'k': case 'K': unit = 1e3; end++; break;
	case 'm': case 'M': unit = 1e6; end++; break;
	case 'g': case 'G': unit = 1e9; end++; break;
	}
	if (!strcmp(end, "bit"))
		end += 3;
	if (*end)
		return 0;
	return (uint64_t)(v * unit + 0.5);
}

/* The AQM options, once the link is known; -1, or the exit code. */
static int check_aqm_args(struct args *a)
{
	if (!a->aqm) {
		if (a->target_ms > 0 || a->interval_ms > 0 || a->flows || a->quantum || aqm.ecn) {
			fprintf(stderr, "delayline: --ecn, --target-ms, --interval-ms, --flows "
				"and --quantum need --aqm\n");
			return 2;
		}
		return -1;
	}
	if (!strcmp(a->aqm, "codel")) {
		aqm.kind = AQM_CODEL;
	} else if (!strcmp(a->aqm, "fq_codel")) {
		aqm.kind = AQM_FQ_CODEL;
	} else {
		fprintf(stderr, "delayline: --aqm %s: want codel or fq_codel\n", a->aqm);
		return 2;
	}
	if (!link_on()) {
		fprintf(stderr, "delayline: --aqm needs a link to queue at: --rate or --trace\n");
		return 2;
	}
	if (a->target_ms > 0)
		aqm.target_ns = (uint64_t)(a->target_ms * 1e6 + 0.5);
	if (a->interval_ms > 0)
		aqm.interval_ns = (uint64_t)(a->interval_ms * 1e6 + 0.5);
	if (a->target_ms < 0 || a->interval_ms < 0 || aqm.target_ns >= aqm.interval_ns) {
		fprintf(stderr, "delayline: want 0 < --target-ms < --interval-ms\n");
		return 2;
	}
	if (a->flows)
		aqm.flows = (uint32_t)a->flows;
	if (a->quantum)
		aqm.quantum = (uint32_t)a->quantum;
	if (a->flows < 0 || a->flows > 65536 || a->quantum < 0 ||
	    (a->quantum && a->quantum < 64)) {
		fprintf(stderr, "delayline: --flows 1..65536, --quantum >= 64\n");
		return 2;
	}
	aqm.limit_bytes = buf_bytes_max;
	aqm.limit_pkts = buf_pkts_max;
	if (!buf_bytes_max && !buf_pkts_max)
		aqm.limit_pkts = aqm.kind == AQM_CODEL ? 1000 : 10240;
	return -1;
}

/* The combinations getopt cannot refuse; loads the trace. */
static int check_args(struct args *a)
{
	int rc;

	if (a->rate) {
		if (a->trace) {
			fprintf(stderr, "delayline: --rate and --trace exclude each other\n");
			return 2;
		}
		rate_bps = parse_rate(a->rate);
		if (!rate_bps) {
			fprintf(stderr, "delayline: --rate %s: want bits per second (16mbit, 150kbit)\n",
				a->rate);
			return 2;
		}
		if (a->delay_ms < 0)
			a->delay_ms = 0;
	}
	if ((buf_bytes_max || buf_pkts_max) && !a->trace && !a->rate) {
		fprintf(stderr, "delayline: --buffer-bytes/--buffer-packets need --trace or --rate\n");
		return 2;
	}
	if (buf_bytes_max && buf_pkts_max) {
		fprintf(stderr, "delayline: give --buffer-bytes or --buffer-packets, not both\n");
		return 2;
	}
	if (buf_bytes_max && buf_bytes_max < OPP_BYTES) {
		fprintf(stderr, "delayline: --buffer-bytes must hold one packet (>= %u)\n", OPP_BYTES);
		return 2;
	}
	if (a->trace) {
		if (load_trace(a->trace) < 0)
			return 2;
		if (a->delay_ms < 0)
			a->delay_ms = 0;
	}
	rc = check_aqm_args(a);
	if (rc >= 0)
		return rc;
	if (a->delay_ms < 0 && a->timer_secs <= 0) {
		fprintf(stderr, "delayline: -d DELAY_MS is required (0..60000)\n");
		usage();
		return 2;
	}
	if (a->delay_ms > 60000) {
		fprintf(stderr, "delayline: -d DELAY_MS must be at most 60000\n");
		usage();
		return 2;
	}
	if (a->delay_ms >= 0)
		delay_ns = (uint64_t)(a->delay_ms * 1e6 + 0.5);
	return -1;
}

/* Returns -1 when the options are good, else the exit code for main. */
static int parse_args(int argc, char **argv, struct args *a)
{
	static const struct option opts[] = {
		{ "delay-ms", required_argument, NULL, 'd' },
		{ "delay-file", required_argument, NULL, 'D' },
		{ "queue", required_argument, NULL, 'q' },
		{ "pidfile", required_argument, NULL, 'p' },
		{ "rt", required_argument, NULL, 'r' },
		{ "timer-test", required_argument, NULL, 't' },
		{ "trace", required_argument, NULL, 'T' },
		{ "buffer-bytes", required_argument, NULL, 'B' },
		{ "buffer-packets", required_argument, NULL, 'P' },
		{ "rate", required_argument, NULL, 'R' },
		{ "aqm", required_argument, NULL, 'A' },
		{ "ecn", no_argument, NULL, 'E' },
		{ "target-ms", required_argument, NULL, 1 },
		{ "interval-ms", required_argument, NULL, 2 },
		{ "flows", required_argument, NULL, 3 },
		{ "quantum", required_argument, NULL, 4 },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	int c;

	*a = (struct args){ .delay_ms = -1 };
	while ((c = getopt_long(argc, argv, "d:D:q:p:r:t:h", opts, NULL)) != -1) {
		switch (c) {
		case 'd': a->delay_ms = strtod(optarg, NULL); break;
		case 'D':
			delay_file = optarg;
			a->delay_ms = read_delay_file(optarg);
			if (a->delay_ms < 0) {
				fprintf(stderr, "delayline: %s: want a delay in ms (0..60000)\n", optarg);
				return 2;
			}
			break;
		case 'q': a->queue = (unsigned int)strtoul(optarg, NULL, 10); break;
		case 'p': a->pidfile = optarg; break;
		case 'r': a->rt_prio = atoi(optarg); break;
		case 't': a->timer_secs = strtod(optarg, NULL); break;
		case 'T': a->trace = optarg; break;
		case 'B': buf_bytes_max = strtoull(optarg, NULL, 10); if (!buf_bytes_max) { fprintf(stderr, "delayline: --buffer-bytes must be a positive integer\n"); return 2; } break;
		case 'P': buf_pkts_max = strtoull(optarg, NULL, 10); if (!buf_pkts_max) { fprintf(stderr, "delayline: --buffer-packets must be a positive integer\n"); return 2; } break;
		case 'R': a->rate = optarg; break;
		case 'A': a->aqm = optarg; break;
		case 'E': aqm.ecn = 1; break;
		case 1: a->target_ms = strtod(optarg, NULL); if (a->target_ms <= 0) a->target_ms = -1; break;
		case 2: a->interval_ms = strtod(optarg, NULL); if (a->interval_ms <= 0) a->interval_ms = -1; break;
		case 3: a->flows = strtol(optarg, NULL, 10); if (!a->flows) a->flows = -1; break;
		case 4: a->quantum = strtol(optarg, NULL, 10); if (!a->quantum) a->quantum = -1; break;
		case 'h': usage(); return 0;
		default: usage(); return 2;
		}
	}
	return check_args(a);
}

static void set_priority(int rt_prio)
{
	/* Timer slack would add up to 50 us to every wake-up. */
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	if (rt_prio > 0) {
		struct sched_param sp = { .sched_priority = rt_prio };

		if (sched_setscheduler(0, SCHED_FIFO, &sp) < 0)
			fprintf(stderr, "delayline: SCHED_FIFO refused (%s): "
				"running without real-time priority\n",
				strerror(errno));
		/* A page fault while packets wait would show up as delay. */
		mlockall(MCL_CURRENT | MCL_FUTURE);
	}
}

/* The signals the loop reads from a signalfd instead of handlers. */
static int signal_fd(void)
{
	sigset_t sigs;

	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	sigaddset(&sigs, SIGUSR1);
	sigaddset(&sigs, SIGUSR2);
	sigaddset(&sigs, SIGRTMIN);
	sigprocmask(SIG_BLOCK, &sigs, NULL);
	return signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC);
}

/* Binds and configures the queue: 0, or 1 once the error is printed. */
static int open_queue(const struct args *a, struct nfq_handle **h,
		      struct nfq_q_handle **qh)
{
	int one = 1;

	*h = nfq_open();
	if (!*h) {
		fprintf(stderr, "delayline: cannot open nfnetlink_queue (%s): "
			"needs root (CAP_NET_ADMIN) and the kernel's "
			"CONFIG_NETFILTER_NETLINK_QUEUE\n", strerror(errno));
		return 1;
	}
	*qh = nfq_create_queue(*h, a->queue, on_packet, NULL);
	if (!*qh) {
		fprintf(stderr, "delayline: cannot bind queue %u (%s): is "
			"another delayline serving it in this namespace?\n",
			a->queue, strerror(errno));
		return 1;
	}
	/*
	 * Metadata only: the packet never leaves the kernel. A link needs
	 * each packet's length: its first 40 bytes (the IP header); an AQM
	 * also its ports (FQ-CoDel's flows), and marking ECN the whole
	 * packet, which goes back rewritten.
	 */
	if ((aqm.kind != AQM_NONE ? nfq_set_mode(*qh, NFQNL_COPY_PACKET, aqm.ecn ? 0xffff : 64)
	     : link_on() ? nfq_set_mode(*qh, NFQNL_COPY_PACKET, 40)
	     : nfq_set_mode(*qh, NFQNL_COPY_META, 0)) < 0 ||
	    nfq_set_queue_maxlen(*qh, RING_SIZE) < 0) {
		fprintf(stderr, "delayline: cannot configure queue %u (%s)\n",
			a->queue, strerror(errno));
		return 1;
	}
	/*
	 * Keep GSO packets whole: segmenting them only to delay them is waste.
	 * A link carries packets: there the kernel segments them first.
	 */
	if (!link_on())
		nfq_set_queue_flags(*qh, NFQA_CFG_F_GSO, NFQA_CFG_F_GSO);
	nfnl_rcvbufsiz(nfq_nfnlh(*h), NETLINK_RCVBUF);
	setsockopt(nfq_fd(*h), SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof(one));
	return 0;
}

static void print_start(const struct args *a)
{
	fprintf(stderr, "delayline: queue %u, delay %.3f ms, %s\n", a->queue,
		a->delay_ms, a->rt_prio > 0 ? "SCHED_FIFO" : "normal priority");
	if (a->trace)
		fprintf(stderr, "delayline: trace %s: %u opportunities in %u ms "
			"(%.3f Mbit/s), buffer %llu %s, start_ns=%llu\n", a->trace,
			trace_n, trace_period_ms,
			(double)trace_n * OPP_BYTES * 8 / trace_period_ms / 1000,
			(unsigned long long)(buf_bytes_max ? buf_bytes_max : buf_pkts_max),
			buf_bytes_max ? "bytes" : buf_pkts_max ? "packets" : "(unlimited)",
			(unsigned long long)trace_start_ns);
	if (a->rate)
		fprintf(stderr, "delayline: rate %.3f Mbit/s, buffer %llu %s\n", rate_bps / 1e6,
			(unsigned long long)(buf_bytes_max ? buf_bytes_max : buf_pkts_max),
			buf_bytes_max ? "bytes" : buf_pkts_max ? "packets" : "(unlimited)");
	if (aqm.kind != AQM_NONE)
		fprintf(stderr, "delayline: aqm %s, ecn %s, target %.3f ms, interval %.3f ms, "
			"limit %llu %s\n", aqm_name(), aqm.ecn ? "on" : "off",
			aqm.target_ns / 1e6, aqm.interval_ns / 1e6,
			(unsigned long long)(aqm.limit_bytes ? aqm.limit_bytes : aqm.limit_pkts),
			aqm.limit_bytes ? "bytes" : "packets");
	if (aqm.kind == AQM_FQ_CODEL)
		fprintf(stderr, "delayline: fq_codel %u flows, quantum %u B\n", aqm.flows, aqm.quantum);
}

/* SIGUSR2: every counter and histogram from zero (the paths keep their keys). */
static void reset_stats(void)
{
	uint32_t k;

	memset(&st, 0, sizeof(st));
	if (aqm.kind == AQM_NONE)
		return;
	aqm_stats_reset();
	memset(sojourn_hist, 0, (SOJOURN_BINS + 1) * sizeof(*sojourn_hist));
	for (k = 0; k <= PATHS; k++) {
		struct path *e = &paths[k];

		e->packets = e->bytes = e->ect = e->delivered_pkts = e->delivered_bytes = 0;
		e->codel_dropped = e->overlimit_dropped = e->ce_marked = 0;
	}
}

/* SIGRTMIN: the trace from its first line, from now (no trace: nothing). */
static void restart_trace(void)
{
	if (!trace_n)
		return;
	trace_start_ns = now_ns();
	opp = 0;
	opp_left = OPP_BYTES;
	fprintf(stderr, "delayline: trace restarted, start_ns=%llu\n",
		(unsigned long long)trace_start_ns);
}

/* Reads the pending signals; returns 1 when one asks the line to stop. */
static int on_signals(int sfd, unsigned int queue)
{
	struct signalfd_siginfo si;
	int stop = 0;

	while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
		if (si.ssi_signo == SIGUSR1) {
			print_stats(queue);
		} else if (si.ssi_signo == SIGUSR2) {
			reset_stats();
		} else if ((int)si.ssi_signo == SIGRTMIN) {
			restart_trace();
		} else if (si.ssi_signo == SIGHUP && delay_file) {
			double ms = read_delay_file(delay_file);

			if (ms < 0) {
				fprintf(stderr, "delayline: %s: want a delay in ms (0..60000); keeping %.3f ms\n",
					delay_file, delay_ns / 1e6);
				continue;
			}
			delay_ns = (uint64_t)(ms * 1e6 + 0.5);
			fprintf(stderr, "delayline: delay now %.3f ms\n", ms);
		} else {
			stop = 1;
		}
	}
	return stop;
}

/* Sleeps until the head packet is due or the kernel or a signal wakes us. */
static void run(struct nfq_handle *h, struct nfq_q_handle *qh, int sfd,
		unsigned int queue)
{
	static char buf[65536] __attribute__((aligned));
	int fd = nfq_fd(h);

	for (;;) {
		struct pollfd pfd[2] = { { fd, POLLIN, 0 }, { sfd, POLLIN, 0 } };
		struct timespec ts, *tsp = NULL;
		uint64_t now = now_ns(), next = UINT64_MAX;
		int n;

		if (aqm.kind != AQM_NONE) {
			link_serve(now);
			/* the link's next chance to send what waits */
			if (aqm_backlog_pkts() || transit != AQM_NIL)
				next = trace_n ? opp_ns(opp) : link_free_ns;
		}
		release_due(qh, now);
		if (ring_head != ring_tail && ring[ring_head % RING_SIZE].due_ns < next)
			next = ring[ring_head % RING_SIZE].due_ns;
		if (next != UINT64_MAX) {
			uint64_t wait = next > now ? next - now : 0;

			ts.tv_sec = wait / 1000000000ull;
			ts.tv_nsec = wait % 1000000000ull;
			tsp = &ts;
		}
		n = ppoll(pfd, 2, tsp, NULL);
		if (n < 0 && errno != EINTR) {
			perror("delayline: ppoll");
			return;
		}
		if (n <= 0)
			continue;
		if (pfd[0].revents & POLLIN) {
			ssize_t len;

			while ((len = recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0)
				nfq_handle_packet(h, buf, (int)len);
			if (len < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
			    errno != ENOBUFS) {
				perror("delayline: recv");
				return;
			}
		}
		if ((pfd[1].revents & POLLIN) && on_signals(sfd, queue))
			return;
	}
}

int main(int argc, char **argv)
{
	struct nfq_handle *h;
	struct nfq_q_handle *qh;
	struct args a;
	int rc, sfd;

	rc = parse_args(argc, argv, &a);
	if (rc >= 0)
		return rc;
	set_priority(a.rt_prio);
	if (a.timer_secs > 0)
		return timer_test(a.timer_secs);

	if (aqm.kind != AQM_NONE && aqm_setup() < 0)
		return 1;
	sfd = signal_fd();
	if (open_queue(&a, &h, &qh))
		return 1;
	queue_h = qh;
	if (a.pidfile && write_pidfile(a.pidfile) < 0) {
		fprintf(stderr, "delayline: cannot write %s: %s\n", a.pidfile,
			strerror(errno));
		return 1;
	}
	trace_start_ns = now_ns();
	opp_left = OPP_BYTES;
	print_start(&a);
	run(h, qh, sfd, a.queue);
	print_stats(a.queue);
	/* Packets still held are dropped by the kernel when the queue closes. */
	nfq_destroy_queue(qh);
	nfq_close(h);
	if (a.pidfile)
		unlink(a.pidfile);
	return 0;
}
