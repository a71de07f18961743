// SPDX-License-Identifier: GPL-2.0
/*
 * CoDel (RFC 8289) and FQ-CoDel (RFC 8290), written from the RFCs'
 * pseudocode; where they leave a choice open, the choice of Linux's
 * sch_codel / sch_fq_codel (the AQM the lab's results are compared with),
 * each named where it is made.
 *
 * CoDel looks at the sojourn time of the packet it dequeues. Once that has
 * stayed at or above `target` for a whole `interval` (and more than one
 * MTU is queued: a single packet is no standing queue), it drops the head
 * and enters the dropping state, in which the next drop comes
 * interval / sqrt(count) after the last: the rate rises until the
 * sojourn time falls below target, which ends the state. Re-entering soon
 * after (within 16 intervals) resumes near the old count, so a persistent
 * queue is not granted a new slow start of drops each time.
 *
 * FQ-CoDel hashes each flow into one of `flows` queues, each with its own
 * CoDel state, and serves them by deficit round robin with a quantum of
 * one MTU. A queue that becomes active joins the new flows list, which is
 * served first: a sparse flow (ping, a request, a DNS query) finds its
 * packet sent before the bulk flows' next quantum, so its delay is not
 * theirs. When the whole AQM exceeds its limit, packets go from the head
 * of the queue holding the most bytes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "aqm.h"

/* RFC 8289's per-queue state. */
struct codel {
	uint64_t first_above_ns;	/* when ok_to_drop may start; 0: below target */
	uint64_t drop_next_ns;		/* the next drop in the dropping state */
	uint32_t count;			/* drops since the dropping state began */
	uint32_t lastcount;		/* count when it last began */
	int dropping;
};

struct flow {
	uint32_t head, tail;	/* its packets, oldest first */
	uint64_t backlog;	/* bytes */
	int64_t deficit;	/* DRR: bytes it may still send this round */
	uint32_t next;		/* next flow on the same list */
	uint8_t list;		/* LIST_NONE, LIST_NEW or LIST_OLD */
	struct codel cv;
};

enum { LIST_NONE, LIST_NEW, LIST_OLD };

struct flist {
	uint32_t head, tail;
};

static struct aqm_params par;
static struct aqm_pkt *pk;
static struct flow *flows;
static uint32_t nflows;
static struct flist new_flows = { AQM_NIL, AQM_NIL }, old_flows = { AQM_NIL, AQM_NIL };
static uint64_t q_bytes;
static uint32_t q_pkts;
static struct aqm_stats st;

int aqm_init(const struct aqm_params *p, struct aqm_pkt *slots)
{
	uint32_t i;

	if (p->kind != AQM_CODEL && p->kind != AQM_FQ_CODEL) {
		fprintf(stderr, "aqm: unknown kind %d\n", p->kind);
		return -1;
	}
	if (!p->interval_ns || !p->mtu || (p->kind == AQM_FQ_CODEL && (!p->flows || !p->quantum))) {
		fprintf(stderr, "aqm: interval, mtu, flows and quantum must be > 0\n");
		return -1;
	}
	par = *p;
	pk = slots;
	nflows = p->kind == AQM_FQ_CODEL ? p->flows : 1;
	free(flows);
	flows = calloc(nflows, sizeof(*flows));
	if (!flows) {
		fprintf(stderr, "aqm: out of memory for %u flows\n", nflows);
		return -1;
	}
	for (i = 0; i < nflows; i++)
		flows[i].head = flows[i].tail = flows[i].next = AQM_NIL;
	new_flows = old_flows = (struct flist){ AQM_NIL, AQM_NIL };
	q_bytes = q_pkts = 0;
	return 0;
}

static void list_push(struct flist *l, uint32_t f, uint8_t which)
{
	flows[f].next = AQM_NIL;
	flows[f].list = which;
	if (l->tail == AQM_NIL)
		l->head = f;
	else
		flows[l->tail].next = f;
	l->tail = f;
}

static uint32_t list_pop(struct flist *l)
{
	uint32_t f = l->head;

	if (f == AQM_NIL)
		return f;
	l->head = flows[f].next;
	if (l->head == AQM_NIL)
		l->tail = AQM_NIL;
	flows[f].next = AQM_NIL;
	flows[f].list = LIST_NONE;
	return f;
}

static uint32_t flow_pop(struct flow *f)
{
	uint32_t i = f->head;

	if (i == AQM_NIL)
		return i;
	f->head = pk[i].next;
	if (f->head == AQM_NIL)
		f->tail = AQM_NIL;
	f->backlog -= pk[i].bytes;
	q_bytes -= pk[i].bytes;
	q_pkts--;
	return i;
}

static void drop(uint32_t i, enum aqm_drop_why why)
{
	if (why == AQM_DROP_CODEL)
		st.codel_dropped++;
	else
		st.overlimit_dropped++;
	aqm_drop(i, why);
}

/*
 * RFC 8289 Sec. 5.5 (ECN, and Linux's codel_dequeue): with ECN on, a packet
 * CoDel would drop is marked CE instead when it can carry the mark; a
 * packet that arrived with CE already counts as marked, as in Linux's
 * INET_ECN_set_ce. Returns 1 when marked (the packet stays).
 */
static int mark(uint32_t i)
{
	if (!par.ecn || pk[i].ecn == ECN_NOT_ECT || !pk[i].markable)
		return 0;
	pk[i].ce = 1;
	st.ce_marked++;
	return 1;
}

static uint64_t control_law(uint64_t t, uint32_t count)
{
	return t + (uint64_t)(par.interval_ns / sqrt((double)count));
}

/*
 * RFC 8289's dodequeue: the head packet and whether CoDel may drop it.
 * "Bytes queued" for the MTU check is the whole AQM's backlog after the
 * packet left, as in Linux (fq_codel passes the qdisc's backlog to every
 * flow's CoDel): one packet queued in total is no standing queue.
 */
static uint32_t dodequeue(struct flow *f, uint64_t now, int *ok_to_drop)
{
	uint32_t i = flow_pop(f);
	struct codel *c = &f->cv;

	*ok_to_drop = 0;
	if (i == AQM_NIL) {
		c->first_above_ns = 0;
		return i;
	}
	if (now < pk[i].enq_ns + par.target_ns || q_bytes <= par.mtu) {
		/* went below: stay below for at least an interval */
		c->first_above_ns = 0;
	} else if (!c->first_above_ns) {
		c->first_above_ns = now + par.interval_ns;
	} else if (now >= c->first_above_ns) {
		*ok_to_drop = 1;
	}
	return i;
}

/* RFC 8289's dequeue, for one queue's CoDel. */
static uint32_t codel_dequeue(struct flow *f, uint64_t now)
{
	struct codel *c = &f->cv;
	int ok;
	uint32_t i = dodequeue(f, now, &ok);

	if (i == AQM_NIL) {
		c->dropping = 0;
		return i;
	}
	if (c->dropping) {
		if (!ok) {
			/* sojourn time below target: leave the dropping state */
			c->dropping = 0;
			return i;
		}
		while (c->dropping && now >= c->drop_next_ns) {
			c->count++;
			if (mark(i)) {
				/* a mark, like a drop, schedules the next one */
				c->drop_next_ns = control_law(c->drop_next_ns, c->count);
				return i;
			}
			drop(i, AQM_DROP_CODEL);
			i = dodequeue(f, now, &ok);
			if (!ok)
				c->dropping = 0;
			else
				c->drop_next_ns = control_law(c->drop_next_ns, c->count);
		}
	} else if (ok) {
		uint32_t delta;

		if (!mark(i)) {
			drop(i, AQM_DROP_CODEL);
			i = dodequeue(f, now, &ok);
		}
		c->dropping = 1;
		/*
		 * Back in the dropping state soon after leaving it: the
		 * drop rate that controlled the queue then is near what it
		 * needs now.
		 */
		delta = c->count - c->lastcount;
		if (delta > 1 && (int64_t)(now - c->drop_next_ns) < (int64_t)(16 * par.interval_ns))
			c->count = delta;
		else
			c->count = 1;
		c->lastcount = c->count;
		c->drop_next_ns = control_law(now, c->count);
	}
	return i;
}

/*
 * The queue is over its limit: drop from the head of the fattest queue
 * (RFC 8290 Sec. 4.1.2). Linux drops up to 64 packets at once, until half
 * of that queue's bytes are gone, so one overflow costs one scan of the
 * queues and not one per packet: so do we.
 */
static void fq_drop_fattest(void)
{
	uint64_t fat = 0, freed = 0;
	uint32_t f, best = 0, n = 0;

	for (f = 0; f < nflows; f++) {
		if (flows[f].backlog > fat) {
			fat = flows[f].backlog;
			best = f;
		}
	}
	if (!fat)
		return;
	do {
		uint32_t i = flow_pop(&flows[best]);

		if (i == AQM_NIL)
			break;
		freed += pk[i].bytes;
		drop(i, AQM_DROP_OVERLIMIT);
	} while (++n < 64 && freed < fat / 2);
}

static int over_limit(uint64_t bytes, uint32_t pkts)
{
	return (par.limit_bytes && bytes > par.limit_bytes) ||
	       (par.limit_pkts && pkts > par.limit_pkts);
}

void aqm_enqueue(uint32_t i)
{
	struct flow *f;

	if (par.kind == AQM_CODEL) {
		/* Linux's sch_codel: the arriving packet is refused at a full queue */
		pk[i].flow = 0;
		if (over_limit(q_bytes + pk[i].bytes, q_pkts + 1)) {
			drop(i, AQM_DROP_OVERLIMIT);
			return;
		}
	}
	f = &flows[pk[i].flow];
	pk[i].next = AQM_NIL;
	pk[i].ce = 0;
	if (f->tail == AQM_NIL)
		f->head = i;
	else
		pk[f->tail].next = i;
	f->tail = i;
	f->backlog += pk[i].bytes;
	q_bytes += pk[i].bytes;
	q_pkts++;
	if (par.kind != AQM_FQ_CODEL)
		return;
	if (f->list == LIST_NONE) {
		/* RFC 8290 Sec. 4.1.1: a flow that was idle starts as new */
		list_push(&new_flows, pk[i].flow, LIST_NEW);
		f->deficit = par.quantum;
	}
	while (over_limit(q_bytes, q_pkts))
		fq_drop_fattest();
}

/* RFC 8290 Sec. 4.2: DRR over the new flows first, then the old ones. */
static uint32_t fq_dequeue(uint64_t now)
{
	for (;;) {
		struct flist *l = new_flows.head != AQM_NIL ? &new_flows : &old_flows;
		uint32_t fi = l->head, i;
		struct flow *f;

		if (fi == AQM_NIL)
			return AQM_NIL;
		f = &flows[fi];
		if (f->deficit <= 0) {
			f->deficit += par.quantum;
			list_pop(l);
			list_push(&old_flows, fi, LIST_OLD);
			continue;
		}
		i = codel_dequeue(f, now);
		if (i == AQM_NIL) {
			/*
			 * An empty new flow goes to the old list (if others
			 * wait there), so a flow cannot stay new by emptying
			 * its queue every round (RFC 8290 Sec. 4.2).
			 */
			list_pop(l);
			if (l == &new_flows && old_flows.head != AQM_NIL)
				list_push(&old_flows, fi, LIST_OLD);
			continue;
		}
		f->deficit -= pk[i].bytes;
		return i;
	}
}

uint32_t aqm_dequeue(uint64_t now)
{
	if (par.kind == AQM_FQ_CODEL)
		return fq_dequeue(now);
	return codel_dequeue(&flows[0], now);
}

uint64_t aqm_backlog_bytes(void)
{
	return q_bytes;
}

uint32_t aqm_backlog_pkts(void)
{
	return q_pkts;
}

const struct aqm_stats *aqm_stats(void)
{
	return &st;
}

void aqm_stats_reset(void)
{
	st = (struct aqm_stats){ 0 };
}
