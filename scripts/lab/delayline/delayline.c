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
 * Changing the delay live (--delay-file FILE, then SIGHUP): the path's RTT
 * grows or shrinks mid-transfer on the same interface and gateway, as when
 * a phone falls back from LTE to 3G. The new delay applies to packets that
 * arrive from then on; packets already held keep theirs. The FIFO stays the
 * whole schedule: when the delay shrinks, a packet due before the one ahead
 * of it waits for it (the delay falls over one old delay, never out of
 * order).
 *
 * Usage: delayline -d DELAY_MS [-q QUEUE] [-p PIDFILE] [-r PRIO]
 *        delayline --trace FILE [--buffer-bytes N | --buffer-packets N]
 *                  [-d DELAY_MS] [-q QUEUE] [-p PIDFILE] [-r PRIO]
 *        delayline -t SECONDS [-r PRIO]   (the host's own timer lateness)
 * The pid file is written once the queue is bound: callers insert their
 * NFQUEUE rule only after it appears, so no packet meets an unbound queue
 * (the kernel would drop it).
 */
#define _GNU_SOURCE
#include <errno.h>
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
	uint32_t bytes;		/* trace mode: IP length */
	uint64_t due_ns;	/* release: departure + delay */
	uint64_t depart_ns;	/* trace mode: leaves the link (else = arrival) */
};

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
	uint64_t dropped;	/* trace mode: refused by the full buffer */
	uint64_t delivered_bytes;
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

/* Forget the packets that have left the link by `now` (buffer accounting). */
static void trace_departed(uint64_t now)
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
	if (trace_n) {
		bytes = ip_length(nfa);
		if (!bytes)
			bytes = OPP_BYTES;
		trace_departed(now);
		if ((buf_bytes_max && queued_bytes + bytes > buf_bytes_max) ||
		    (buf_pkts_max && ring_tail - dep_head + 1 > buf_pkts_max)) {
			st.dropped++;
			nfq_set_verdict(qh, id, NF_DROP, 0, NULL);
			return 0;
		}
		depart = trace_depart(now, bytes);
		queued_bytes += bytes;
		st.delivered_bytes += bytes;
	}
	ring[ring_tail % RING_SIZE] = (struct held){ id, bytes, depart + delay_ns, depart };
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

/* Accept every packet that is due, with one batch verdict. */
static void release_due(struct nfq_q_handle *qh, uint64_t now)
{
	uint32_t last_id = 0;
	int any = 0;

	/* released packets have left the link: keep the buffer count ahead */
	if (trace_n)
		trace_departed(now);
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
		last_id = h->id;
		any = 1;
		ring_head++;
	}
	if (any && nfq_set_verdict_batch(qh, last_id, NF_ACCEPT) < 0)
		fprintf(stderr, "delayline: verdict for id %u failed: %s\n",
			last_id, strerror(errno));
}

static uint64_t percentile_us(double p)
{
	uint64_t want, seen = 0;
	uint32_t i;

	if (!st.packets)
		return 0;
	want = (uint64_t)(p * st.packets);
	if (want >= st.packets)
		want = st.packets - 1;
	for (i = 0; i <= HIST_US; i++) {
		seen += st.late_hist[i];
		if (seen > want)
			return i;
	}
	return HIST_US;
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

	if (trace_n)
		trace_departed(now_ns());
	kernel_drops(queue, &qdrop, &udrop);
	fprintf(stderr,
		"delayline stats: delay_us=%llu packets=%llu held=%u held_max=%u "
		"queued_bytes=%llu "
		"late_us_mean=%.1f late_us_p50=%llu late_us_p99=%llu "
		"late_us_p999=%llu late_us_max=%llu ring_full=%llu "
		"queue_dropped=%lu user_dropped=%lu buffer_dropped=%llu "
		"delivered_bytes=%llu\n",
		(unsigned long long)(delay_ns / 1000),
		(unsigned long long)st.packets, held_count(), st.held_max,
		(unsigned long long)queued_bytes,
		st.packets ? (double)st.late_us_sum / st.packets : 0.0,
		(unsigned long long)percentile_us(0.50),
		(unsigned long long)percentile_us(0.99),
		(unsigned long long)percentile_us(0.999),
		(unsigned long long)st.late_us_max,
		(unsigned long long)st.ring_full, qdrop, udrop,
		(unsigned long long)st.dropped,
		(unsigned long long)st.delivered_bytes);
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
		"       delayline --trace FILE [--buffer-bytes N | --buffer-packets N] [-d MS] ...\n"
		"       delayline -t SECONDS [-r PRIO]\n"
		"  -d, --delay-ms MS   delay every queued packet by MS (fractions allowed)\n"
		"  -D, --delay-file F  the delay in ms from the file F, read again on SIGHUP\n"
		"                      (without it SIGHUP ends the program)\n"
		"  --trace FILE        send through a link following FILE (Mahimahi format:\n"
		"                      one 1500-byte opportunity per line, ms); -d then adds\n"
		"                      a constant delay after the link (default 0)\n"
		"  --buffer-bytes N    trace mode: drop-tail buffer of N bytes\n"
		"  --buffer-packets N  trace mode: drop-tail buffer of N packets\n"
		"                      (neither: unlimited, as Mahimahi's default)\n"
		"  -q, --queue N       NFQUEUE number to serve (default 0)\n"
		"  -p, --pidfile F     write our pid to F once the queue is bound\n"
		"  -r, --rt PRIO       run SCHED_FIFO at PRIO (1-99) for timer accuracy\n"
		"  -t, --timer-test S  no queue: measure this host's timer lateness for S seconds\n"
		"signals: USR1 prints lateness statistics, USR2 resets them, HUP re-reads\n"
		"--delay-file, TERM/INT exit\n");
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
	const char *pidfile, *trace;
	unsigned int queue;
	double delay_ms, timer_secs;
	int rt_prio;
};

/* The combinations getopt cannot refuse; loads the trace. */
static int check_args(struct args *a)
{
	if ((buf_bytes_max || buf_pkts_max) && !a->trace) {
		fprintf(stderr, "delayline: --buffer-bytes/--buffer-packets need --trace\n");
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
	 * Metadata only: the packet never leaves the kernel. A trace link
	 * needs each packet's length: its first 40 bytes (the IP header).
	 */
	if ((a->trace ? nfq_set_mode(*qh, NFQNL_COPY_PACKET, 40)
		      : nfq_set_mode(*qh, NFQNL_COPY_META, 0)) < 0 ||
	    nfq_set_queue_maxlen(*qh, RING_SIZE) < 0) {
		fprintf(stderr, "delayline: cannot configure queue %u (%s)\n",
			a->queue, strerror(errno));
		return 1;
	}
	/*
	 * Keep GSO packets whole: segmenting them only to delay them is waste.
	 * A trace link carries packets: there the kernel segments them first.
	 */
	if (!a->trace)
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
			memset(&st, 0, sizeof(st));
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
		uint64_t now = now_ns();
		int n;

		release_due(qh, now);
		if (ring_head != ring_tail) {
			uint64_t wait = ring[ring_head % RING_SIZE].due_ns - now;

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

	sfd = signal_fd();
	if (open_queue(&a, &h, &qh))
		return 1;
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
