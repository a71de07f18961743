/* SPDX-License-Identifier: GPL-2.0 */
/*
 * CoDel (RFC 8289) and FQ-CoDel (RFC 8290) for the delay line's links.
 *
 * Only the algorithms: which packet leaves a queue next and which ones are
 * dropped or marked on the way. The caller owns the packet slots (an array
 * of struct aqm_pkt it hands to aqm_init), the clock (every call takes
 * `now`, the instant the link could carry a packet), and what a drop means
 * (aqm_drop, which the caller defines). No I/O, no netfilter: aqm_test.c
 * runs the same code on a simulated link.
 */
#ifndef DELAYLINE_AQM_H
#define DELAYLINE_AQM_H

#include <stdint.h>

#define AQM_NIL		UINT32_MAX

enum aqm_kind { AQM_NONE, AQM_CODEL, AQM_FQ_CODEL };

enum aqm_drop_why {
	AQM_DROP_CODEL,		/* CoDel's control law */
	AQM_DROP_OVERLIMIT,	/* the queue's limit (packets or bytes) */
};

/* ECN field of the IP header (RFC 3168). */
#define ECN_NOT_ECT	0
#define ECN_ECT1	1
#define ECN_ECT0	2
#define ECN_CE		3

struct aqm_pkt {
	uint64_t enq_ns;	/* arrival: the sojourn time counts from here */
	uint32_t bytes;		/* IP length */
	uint32_t next;		/* next packet of the same flow's queue */
	uint32_t flow;		/* its queue: 0 for CoDel, the flow hash's bucket for FQ-CoDel */
	uint8_t ecn;		/* ECN field at arrival */
	uint8_t markable;	/* the caller can rewrite it (ECN-capable, whole packet held) */
	uint8_t ce;		/* set by the AQM: leave with CE instead of being dropped */
};

struct aqm_params {
	enum aqm_kind kind;
	uint64_t target_ns;	/* RFC 8289: 5 ms */
	uint64_t interval_ns;	/* RFC 8289: 100 ms */
	uint32_t flows;		/* FQ-CoDel's queues (Linux: 1024) */
	uint32_t quantum;	/* DRR quantum in IP bytes (Linux: 1514 with the Ethernet header) */
	uint32_t mtu;		/* CoDel keeps at least this much queued (MAXPACKET) */
	uint64_t limit_bytes;	/* 0: none */
	uint64_t limit_pkts;	/* 0: none */
	int ecn;		/* mark ECN-capable packets instead of dropping them */
};

struct aqm_stats {
	uint64_t codel_dropped, overlimit_dropped, ce_marked;
};

/* Defined by the caller: the AQM has let go of `slot` (it will not return it). */
void aqm_drop(uint32_t slot, enum aqm_drop_why why);

/* 0, or -1 with a message on stderr (out of memory, bad parameters). */
int aqm_init(const struct aqm_params *p, struct aqm_pkt *slots);
/* Queues `slot` (its fields set); may drop it or others (aqm_drop). */
void aqm_enqueue(uint32_t slot);
/* The packet the link sends at `now`, AQM_NIL when the queues are empty. */
uint32_t aqm_dequeue(uint64_t now);
uint64_t aqm_backlog_bytes(void);
uint32_t aqm_backlog_pkts(void);
const struct aqm_stats *aqm_stats(void);
void aqm_stats_reset(void);

#endif
