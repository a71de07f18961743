// SPDX-License-Identifier: GPL-2.0
/*
 * aqm_test: the delay line's CoDel and FQ-CoDel (aqm.c) on a simulated
 * constant-rate link, checked against what RFC 8289 and RFC 8290 say they
 * do. Simulated time, so every number is exact and the run takes
 * milliseconds; scripts/tests/test_lab_aqm.py builds and runs it, then
 * checks the same code on real traffic.
 *
 *   gcc -O2 -o aqm_test aqm_test.c aqm.c -lm && ./aqm_test
 *
 * Exit 0 when every check passes; one line per check either way.
 * `aqm_test bench`: the algorithms' own cost per packet (enqueue and
 * dequeue, drops included) on this CPU, no checks.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aqm.h"

#define MS		1000000ull
#define SLOTS		200000u
#define MAX_SOURCES	4
#define MAX_DROPS	100000u

/* A source sends `bytes` every `period_ns` from `start_ns` until `end_ns`. */
struct source {
	uint64_t start_ns, end_ns, period_ns, next_ns;
	uint32_t bytes, flow;
	uint8_t ecn;
};

struct result {
	uint64_t sent[MAX_SOURCES], sent_bytes[MAX_SOURCES], dropped[MAX_SOURCES];
	uint64_t marked[MAX_SOURCES], overlimit[MAX_SOURCES];
	uint64_t max_sojourn_ns[MAX_SOURCES];
	uint64_t drop_ns[MAX_DROPS];	/* CoDel drops and marks, in order */
	uint32_t ndrops;
};

static struct aqm_pkt pk[SLOTS];
static uint8_t pk_src[SLOTS];
static uint32_t used;
static struct result res;
static uint64_t sim_now;
static int failures;

void aqm_drop(uint32_t slot, enum aqm_drop_why why)
{
	if (why == AQM_DROP_CODEL) {
		res.dropped[pk_src[slot]]++;
		if (res.ndrops < MAX_DROPS)
			res.drop_ns[res.ndrops++] = sim_now;
	} else {
		res.overlimit[pk_src[slot]]++;
	}
}

/*
 * Runs the sources through the AQM on a link of rate_bps until end_ns:
 * the link dequeues whenever it has finished the packet before; what is
 * still queued at end_ns stays there.
 */
static void simulate(struct aqm_params *p, uint64_t rate_bps, struct source *src, int n,
		     uint64_t end_ns)
{
	uint64_t link_free = 0;
	int k;

	memset(&res, 0, sizeof(res));
	used = 0;
	if (aqm_init(p, pk) < 0)
		exit(2);
	for (k = 0; k < n; k++)
		src[k].next_ns = src[k].start_ns;
	for (;;) {
		uint64_t ta = UINT64_MAX;
		int next = -1;

		for (k = 0; k < n; k++) {
			if (src[k].next_ns < src[k].end_ns && src[k].next_ns < ta) {
				ta = src[k].next_ns;
				next = k;
			}
		}
		if (aqm_backlog_pkts() && link_free <= ta && link_free < end_ns) {
			uint32_t i;

			sim_now = link_free;
			i = aqm_dequeue(sim_now);
			if (i == AQM_NIL)
				continue;
			if (pk[i].ce) {
				res.marked[pk_src[i]]++;
				if (res.ndrops < MAX_DROPS)
					res.drop_ns[res.ndrops++] = sim_now;
			}
			res.sent[pk_src[i]]++;
			res.sent_bytes[pk_src[i]] += pk[i].bytes;
			if (sim_now - pk[i].enq_ns > res.max_sojourn_ns[pk_src[i]])
				res.max_sojourn_ns[pk_src[i]] = sim_now - pk[i].enq_ns;
			link_free = sim_now + (uint64_t)pk[i].bytes * 8000000000ull / rate_bps;
			continue;
		}
		if (next < 0 || ta >= end_ns)
			break;
		if (used == SLOTS) {
			fprintf(stderr, "aqm_test: out of slots\n");
			exit(2);
		}
		sim_now = ta;
		if (!aqm_backlog_pkts() && link_free < ta)
			link_free = ta;
		pk[used] = (struct aqm_pkt){ .enq_ns = ta, .bytes = src[next].bytes,
					     .flow = src[next].flow, .ecn = src[next].ecn,
					     .markable = 1 };
		pk_src[used] = (uint8_t)next;
		aqm_enqueue(used++);
		src[next].next_ns += src[next].period_ns;
	}
}

static void check(int ok, const char *what, const char *fmt, double a, double b)
{
	printf("%s %s: ", ok ? "ok  " : "FAIL", what);
	printf(fmt, a, b);
	printf("\n");
	if (!ok)
		failures++;
}

static struct aqm_params codel_params(void)
{
	return (struct aqm_params){ .kind = AQM_CODEL, .target_ns = 5 * MS,
				    .interval_ns = 100 * MS, .mtu = 1500,
				    .limit_pkts = 100000 };
}

/* 10 Mbit/s link (1.2 ms per 1500 B), an unresponsive source at twice that. */
static void codel_overload(void)
{
	struct aqm_params p = codel_params();
	struct source s[1] = { { 0, 1000 * MS, 600000, 0, 1500, 0, ECN_NOT_ECT } };
	uint64_t above = 0, first;
	uint32_t k, bad = 0;

	simulate(&p, 10000000, s, 1, 1000 * MS);
	/*
	 * The queue grows by one packet per 1.2 ms, so the sojourn time
	 * passes 5 ms about 5 ms in: the first drop must wait one interval
	 * after the first dequeue that saw it above target.
	 */
	for (k = 0; k * 1200000ull < 1000 * MS; k++) {
		uint64_t t = k * 1200000ull;		/* the k-th dequeue */
		uint64_t enq = k * 600000ull;		/* of the k-th arrival */

		if (t - enq >= 5 * MS) {
			above = t;
			break;
		}
	}
	first = res.ndrops ? res.drop_ns[0] : 0;
	check(res.ndrops > 0 && first >= above + 100 * MS && first < above + 100 * MS + 1200000,
	      "codel: first drop one interval after the sojourn time passed target",
	      "%.1f ms (above target from %.1f ms)", first / 1e6, above / 1e6);
	/* the control law: the n-th drop interval / sqrt(n) after the one before */
	for (k = 1; k < 20 && k < res.ndrops; k++) {
		double gap = (res.drop_ns[k] - res.drop_ns[k - 1]) / 1e6;
		double want = 100.0 / sqrt((double)k);

		/* each drop is at the first dequeue at or after its due time */
		if (fabs(gap - want) > 1.2 + 0.001)
			bad++;
	}
	check(res.ndrops >= 20 && !bad,
	      "codel: drops follow interval/sqrt(count) (20 drops, within one packet time)",
	      "%.0f drops, %.0f gaps off", res.ndrops, bad);
}

/*
 * The overload stops: once the sojourn time is below target the dropping
 * state ends and nothing more is dropped.
 */
static void codel_recovers(void)
{
	struct aqm_params p = codel_params();
	struct source s[1] = { { 0, 400 * MS, 600000, 0, 1500, 0, ECN_NOT_ECT } };
	uint32_t late = 0, k;
	double drain_ms;

	simulate(&p, 10000000, s, 1, 3000 * MS);
	/* after the source stops the queue drains; every drop after it
	 * emptied below target would be wrong */
	drain_ms = 400 + res.max_sojourn_ns[0] / 1e6;
	for (k = 0; k < res.ndrops; k++)
		if (res.drop_ns[k] > drain_ms * MS)
			late++;
	check(late == 0 && aqm_backlog_pkts() == 0,
	      "codel: no drop once the queue is below target",
	      "%.0f late drops, backlog %.0f", late, aqm_backlog_pkts());
}

/*
 * A queue that comes back soon after CoDel controlled it (within 16
 * intervals) starts near the old drop rate: count = the drops of the last
 * episode, so the second drop comes interval / sqrt(that count) after the
 * first, not a whole interval.
 */
static void codel_resumes(void)
{
	struct aqm_params p = codel_params();
	struct source s[2] = { { 0, 600 * MS, 600000, 0, 1500, 0, ECN_NOT_ECT },
			       { 1200 * MS, 2200 * MS, 600000, 0, 1500, 0, ECN_NOT_ECT } };
	uint32_t n1 = 0, k;
	double gap, want;

	simulate(&p, 10000000, s, 2, 2200 * MS);
	for (k = 0; k < res.ndrops; k++)
		if (res.drop_ns[k] < 1200 * MS)
			n1++;
	gap = n1 + 1 < res.ndrops ? (res.drop_ns[n1 + 1] - res.drop_ns[n1]) / 1e6 : 0;
	want = 100.0 / sqrt((double)(n1 - 1));
	check(n1 > 2 && fabs(gap - want) <= 1.2 + 0.001,
	      "codel: re-entering within 16 intervals resumes the drop rate",
	      "second drop %.2f ms after the first (interval/sqrt(%.0f drops - 1))", gap, n1);
}

/*
 * One packet queued is no standing queue: on a 150 kbit/s link (80 ms
 * per 1500 B) pairs of packets 200 ms apart make the second wait 80 ms,
 * far above target, but only ever with nothing behind it.
 */
static void codel_mtu_rule(void)
{
	struct aqm_params p = codel_params();
	struct source s[2] = { { 0, 5000 * MS, 200 * MS, 0, 1500, 0, ECN_NOT_ECT },
			       { 1000, 5000 * MS, 200 * MS, 0, 1500, 0, ECN_NOT_ECT } };

	simulate(&p, 150000, s, 2, 5000 * MS);
	check(res.ndrops == 0 && res.max_sojourn_ns[1] > 70 * MS,
	      "codel: a single packet waiting is never dropped (slow link)",
	      "%.0f drops, sojourn max %.1f ms", res.ndrops, res.max_sojourn_ns[1] / 1e6);
}

/* With ECN, ECT packets are marked where they would have been dropped. */
static void codel_ecn(void)
{
	struct aqm_params p = codel_params();
	struct source s[1] = { { 0, 1000 * MS, 600000, 0, 1500, 0, ECN_ECT0 } };
	uint64_t marks;

	p.ecn = 1;
	simulate(&p, 10000000, s, 1, 1000 * MS);
	marks = res.marked[0];
	check(res.dropped[0] == 0 && marks >= 20 && res.drop_ns[0] >= 100 * MS,
	      "codel+ecn: ECT(0) packets marked CE, none dropped",
	      "%.0f marks, %.0f drops", marks, res.dropped[0]);
	s[0].ecn = ECN_NOT_ECT;
	simulate(&p, 10000000, s, 1, 1000 * MS);
	check(res.marked[0] == 0 && res.dropped[0] >= 20,
	      "codel+ecn: Not-ECT packets still dropped",
	      "%.0f drops, %.0f marks", res.dropped[0], res.marked[0]);
}

static struct aqm_params fq_params(void)
{
	struct aqm_params p = codel_params();

	p.kind = AQM_FQ_CODEL;
	p.flows = 1024;
	p.quantum = 1500;
	p.limit_pkts = 10240;
	return p;
}

/* A sparse flow beside an overload: served within about one packet time. */
static void fq_sparse(void)
{
	struct aqm_params p = fq_params();
	struct source s[2] = { { 0, 2000 * MS, 600000, 0, 1500, 7, ECN_NOT_ECT },
			       { 3 * MS, 2000 * MS, 50 * MS, 0, 84, 300, ECN_NOT_ECT } };

	simulate(&p, 10000000, s, 2, 2000 * MS);
	check(res.max_sojourn_ns[1] <= 1200000 && res.dropped[1] == 0 && res.sent[1] >= 39,
	      "fq_codel: a sparse flow waits at most one packet time beside a bulk flow",
	      "sparse max sojourn %.3f ms (bulk %.1f ms)", res.max_sojourn_ns[1] / 1e6,
	      res.max_sojourn_ns[0] / 1e6);
}

/* DRR is fair in bytes: two saturating flows of different packet sizes. */
static void fq_fair(void)
{
	struct aqm_params p = fq_params();
	struct source s[2] = { { 0, 2000 * MS, 300000, 0, 1500, 1, ECN_NOT_ECT },
			       { 0, 2000 * MS, 100000, 0, 500, 2, ECN_NOT_ECT } };
	double r;

	simulate(&p, 10000000, s, 2, 2000 * MS);
	r = (double)res.sent_bytes[0] / res.sent_bytes[1];
	check(fabs(r - 1) < 0.01, "fq_codel: two bulk flows get the same bytes (1500 B vs 500 B packets)",
	      "ratio %.4f (%.0f dropped in all)", r, res.ndrops);
}

/* Over the limit, packets go from the fattest queue, not the arriving one. */
static void fq_overlimit(void)
{
	struct aqm_params p = fq_params();
	struct source s[2] = { { 0, 1000 * MS, 400000, 0, 1500, 1, ECN_NOT_ECT },
			       { 0, 1000 * MS, 4 * MS, 0, 1500, 2, ECN_NOT_ECT } };

	p.limit_pkts = 50;
	p.target_ns = 90 * MS;	/* let the limit, not CoDel, bound the queue */
	simulate(&p, 10000000, s, 2, 1000 * MS);
	check(res.overlimit[0] > 0 && res.overlimit[1] == 0,
	      "fq_codel: over the limit the fattest flow loses packets, the light one none",
	      "fat %.0f, light %.0f", res.overlimit[0], res.overlimit[1]);
}

/*
 * ns of CPU per packet for enqueue + dequeue: 150,000 packets of two
 * bulk flows at twice the link rate (the queue long, CoDel dropping) and
 * a sparse one. The simulator's own loop is in the number too.
 */
static void bench(enum aqm_kind kind, int ecn, const char *name)
{
	struct aqm_params p = kind == AQM_CODEL ? codel_params() : fq_params();
	struct source s[3] = { { 0, 9000 * MS, 120000, 0, 1500, 1, ECN_ECT0 },
			       { 0, 9000 * MS, 120000, 0, 1500, 2, ECN_ECT0 },
			       { 0, 9000 * MS, 10 * MS, 0, 84, 3, ECN_NOT_ECT } };
	struct timespec a, b;
	uint64_t n;

	p.ecn = ecn;
	clock_gettime(CLOCK_MONOTONIC, &a);
	simulate(&p, 50000000, s, 3, 9000 * MS);
	clock_gettime(CLOCK_MONOTONIC, &b);
	n = used;
	printf("bench %-14s %6.0f ns per packet (%llu packets, %llu CoDel drops, %llu marks)\n", name,
	       ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n,
	       (unsigned long long)n, (unsigned long long)(res.dropped[0] + res.dropped[1] + res.dropped[2]),
	       (unsigned long long)(res.marked[0] + res.marked[1] + res.marked[2]));
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "bench")) {
		bench(AQM_CODEL, 0, "codel");
		bench(AQM_CODEL, 1, "codel+ecn");
		bench(AQM_FQ_CODEL, 0, "fq_codel");
		return 0;
	}
	codel_overload();
	codel_recovers();
	codel_resumes();
	codel_mtu_rule();
	codel_ecn();
	fq_sparse();
	fq_fair();
	fq_overlimit();
	printf("%s\n", failures ? "aqm_test: FAILED" : "aqm_test: all passed");
	return failures ? 1 : 0;
}
