// SPDX-License-Identifier: GPL-2.0-only
/*
 * loadgen: many TCP connections for bloatd's server-scale benchmark, some
 * of them busy, from one epoll loop (Python cannot hold 100,000 sockets).
 *
 *   loadgen serve ADDR PORT [PORTS]       accept on PORT..PORT+PORTS-1, read and discard
 *   loadgen connect ADDR PORT PORTS N B   open N connections spread over the
 *                                         ports; B of them send 200 bytes ten
 *                                         times a second, staggered
 *   loadgen echo ADDR PORT [PORTS [N]]    as serve, writing back what it reads
 *   loadgen pingpong ADDR PORT PORTS N    open N connections, each with one
 *                                         200-byte message going back and
 *                                         forth to an echo server as fast as
 *                                         the machine allows; a line "count"
 *                                         on stdin answers "count TOTAL", the
 *                                         round trips done so far
 *   loadgen churn ADDR PORT PORTS N RATE [SRC COUNT]
 *                                         N short connections at RATE/s, each
 *                                         200 bytes then close, from source
 *                                         addresses SRC.1..SRC.COUNT
 *
 * Prints "ready N" on stdout once N connections are established (connect)
 * or accepted (serve), then runs until stdin closes. A line "touch" on a
 * connect process's stdin sends one byte on each idle connection (answered
 * "touched N"). A connection that
 * fails is reported and counted; the program exits 1 if fewer than N are
 * established within 60 s.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define MSG_BYTES 200
#define SENDS_PER_S 10
#define TICK_MS 10

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void raise_nofile(long n)
{
	struct rlimit r;

	if (getrlimit(RLIMIT_NOFILE, &r))
		die("getrlimit");
	if ((long)r.rlim_cur < n + 64) {
		r.rlim_cur = n + 64;
		if ((long)r.rlim_max < n + 64)
			r.rlim_max = n + 64;
		if (setrlimit(RLIMIT_NOFILE, &r))
			die("setrlimit (run as root, or raise ulimit -n)");
	}
}

static struct sockaddr_in addr_of(const char *ip, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };

	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
		fprintf(stderr, "loadgen: bad IPv4 address %s\n", ip);
		exit(2);
	}
	return a;
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* 1 when stdin closed; a line "touch" sets *touch (connect only). */
static int stdin_closed_or(int *touch)
{
	struct pollfd p = { .fd = 0, .events = POLLIN };
	char buf[64];
	ssize_t n;

	if (poll(&p, 1, 0) <= 0)
		return 0;
	n = read(0, buf, sizeof(buf));
	if (n <= 0)
		return 1;
	if (touch && memchr(buf, 't', n))
		*touch = 1;
	return 0;
}

static int stdin_closed(void)
{
	return stdin_closed_or(NULL);
}

static int serve(const char *ip, int port, int ports, long want, int echo)
{
	int ep = epoll_create1(0), one = 1, i, n;
	long accepted = 0;
	struct epoll_event ev, evs[256];
	static char sink[65536];

	if (ep < 0)
		die("epoll_create1");
	for (i = 0; i < ports; i++) {
		struct sockaddr_in a = addr_of(ip, port + i);
		int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);

		if (l < 0)
			die("socket");
		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 65535))
			die("bind/listen");
		ev = (struct epoll_event){ .events = EPOLLIN, .data.u64 = (1ULL << 32) | l };
		epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev);
	}
	printf("listening\n");
	fflush(stdout);
	for (;;) {
		n = epoll_wait(ep, evs, 256, 200);
		for (i = 0; i < n; i++) {
			int fd = (int)(evs[i].data.u64 & 0xffffffff);

			if (evs[i].data.u64 >> 32) {
				int c;

				while ((c = accept4(fd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
					ev = (struct epoll_event){ .events = EPOLLIN, .data.u64 = c };
					epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
					if (++accepted == want) {
						printf("ready %ld\n", accepted);
						fflush(stdout);
					}
				}
				continue;
			}
			ssize_t got = read(fd, sink, sizeof(sink));

			if (got == 0) {
				epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
				close(fd);
			} else if (got > 0 && echo && write(fd, sink, got) < 0 && errno != EAGAIN) {
				die("write");
			}
		}
		if (stdin_closed())
			return 0;
	}
}

/*
 * Opens n connections, a few thousand at a time so the listener's backlog
 * keeps up, into fds. Returns 0 when all are established.
 */
static int open_all(const char *ip, int port, int ports, long n, int *fds)
{
	int ep = epoll_create1(0), i, k;
	long established = 0, failed = 0;
	struct epoll_event ev, evs[256];
	double t0 = now_s();

	if (ep < 0)
		die("epoll");
	for (long i0 = 0; i0 < n; i0 += 2000) {
		for (long j = i0; j < n && j < i0 + 2000; j++) {
			struct sockaddr_in a = addr_of(ip, port + (int)(j % ports));
			int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);

			if (fd < 0)
				die("socket");
			if (connect(fd, (struct sockaddr *)&a, sizeof(a)) && errno != EINPROGRESS)
				die("connect");
			fds[j] = fd;
			ev = (struct epoll_event){ .events = EPOLLOUT, .data.u64 = j };
			epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
		}
		while (established + failed < (i0 + 2000 < n ? i0 + 2000 : n)) {
			k = epoll_wait(ep, evs, 256, 1000);
			for (i = 0; i < k; i++) {
				long j = (long)evs[i].data.u64;
				int err = 0;
				socklen_t len = sizeof(err);

				getsockopt(fds[j], SOL_SOCKET, SO_ERROR, &err, &len);
				epoll_ctl(ep, EPOLL_CTL_DEL, fds[j], NULL);
				if (err) {
					failed++;
					fprintf(stderr, "loadgen: connection %ld: %s\n", j, strerror(err));
				} else {
					established++;
				}
			}
			if (now_s() - t0 > 60) {
				fprintf(stderr, "loadgen: %ld of %ld connections after 60 s\n", established, n);
				return 1;
			}
		}
	}
	close(ep);
	if (failed) {
		fprintf(stderr, "loadgen: %ld connections failed\n", failed);
		return 1;
	}
	return 0;
}

static int connect_all(const char *ip, int port, int ports, long n, long busy)
{
	int tfd;
	int *fds = calloc(n, sizeof(int));
	long next_busy = 0;
	struct itimerspec tick = { .it_interval = { 0, TICK_MS * 1000000 }, .it_value = { 0, TICK_MS * 1000000 } };
	static char msg[MSG_BYTES];

	if (!fds)
		die("setup");
	if (open_all(ip, port, ports, n, fds))
		return 1;
	printf("ready %ld\n", n);
	fflush(stdout);
	tfd = timerfd_create(CLOCK_MONOTONIC, 0);
	if (tfd < 0 || timerfd_settime(tfd, 0, &tick, NULL))
		die("timerfd");
	/* Each tick sends on the next busy/(1000/TICK_MS/SENDS_PER_S) busy
	 * connections: every busy connection sends SENDS_PER_S times a second. */
	long per_tick = busy * SENDS_PER_S * TICK_MS / 1000;
	if (busy && !per_tick)
		per_tick = 1;
	int touch = 0;

	for (;;) {
		uint64_t ticks;

		if (read(tfd, &ticks, sizeof(ticks)) != sizeof(ticks))
			die("read timerfd");
		for (long s = 0; s < per_tick * (long)ticks && busy; s++) {
			if (write(fds[next_busy], msg, sizeof(msg)) < 0 && errno != EAGAIN)
				die("write");
			next_busy = (next_busy + 1) % busy;
		}
		if (stdin_closed_or(&touch))
			return 0;
		if (touch) {
			/* One byte on every idle connection: its sockets (both
			 * ends) carry a segment, so a probe started after they
			 * were established in another namespace sees them. */
			for (long i = busy; i < n; i++)
				if (write(fds[i], msg, 1) < 0 && errno != EAGAIN)
					die("write");
			touch = 0;
			printf("touched %ld\n", n - busy);
			fflush(stdout);
		}
	}
}

/*
 * Closed loop: every connection keeps one message in flight, sending the
 * next when the echo of the last has come back whole. The round trips per
 * second are what the machine's CPU allows: a cost added per segment shows
 * as fewer of them.
 */
static int pingpong(const char *ip, int port, int ports, long n)
{
	int ep = epoll_create1(0), i, k;
	int *fds = calloc(n, sizeof(int));
	unsigned *got = calloc(n, sizeof(unsigned));
	long total = 0;
	struct epoll_event ev, evs[256];
	static char msg[MSG_BYTES], buf[65536];
	char line[64];

	if (ep < 0 || !fds || !got)
		die("setup");
	if (open_all(ip, port, ports, n, fds))
		return 1;
	printf("ready %ld\n", n);
	fflush(stdout);
	for (long j = 0; j < n; j++) {
		ev = (struct epoll_event){ .events = EPOLLIN, .data.u64 = j };
		epoll_ctl(ep, EPOLL_CTL_ADD, fds[j], &ev);
		if (write(fds[j], msg, sizeof(msg)) != sizeof(msg))
			die("write");
	}
	for (;;) {
		struct pollfd p = { .fd = 0, .events = POLLIN };

		k = epoll_wait(ep, evs, 256, 100);
		for (i = 0; i < k; i++) {
			long j = (long)evs[i].data.u64;
			ssize_t r = read(fds[j], buf, sizeof(buf));

			if (r <= 0) {
				if (r < 0 && errno == EAGAIN)
					continue;
				fprintf(stderr, "loadgen: connection %ld closed\n", j);
				return 1;
			}
			got[j] += r;
			while (got[j] >= MSG_BYTES) {
				got[j] -= MSG_BYTES;
				total++;
				if (write(fds[j], msg, sizeof(msg)) < 0 && errno != EAGAIN)
					die("write");
			}
		}
		if (poll(&p, 1, 0) > 0) {
			ssize_t r = read(0, line, sizeof(line));

			if (r <= 0)
				return 0;
			if (memchr(line, 'c', r)) {
				printf("count %ld\n", total);
				fflush(stdout);
			}
		}
	}
}

/*
 * Short connections: N of them at RATE a second, each sending 200 bytes and
 * closing at once (FIN after the data), from source addresses
 * SRC.1..SRC.COUNT in turn when given (so the server sees COUNT peers).
 * Prints "done N failed F" when the last one is closed.
 */
static int churn(const char *ip, int port, int ports, long n, long rate, const char *src, int count)
{
	struct itimerspec tick = { .it_interval = { 0, TICK_MS * 1000000 }, .it_value = { 0, TICK_MS * 1000000 } };
	long per_tick = rate * TICK_MS / 1000, opened = 0, failed = 0;
	int tfd = timerfd_create(CLOCK_MONOTONIC, 0);
	char msg[MSG_BYTES];

	memset(msg, 'x', sizeof(msg));
	if (per_tick < 1)
		per_tick = 1;
	if (tfd < 0 || timerfd_settime(tfd, 0, &tick, NULL))
		die("timerfd");
	while (opened < n) {
		uint64_t ticks;

		if (read(tfd, &ticks, sizeof(ticks)) != sizeof(ticks))
			die("read timerfd");
		for (long k = 0; k < per_tick * (long)ticks && opened < n; k++, opened++) {
			struct sockaddr_in a = addr_of(ip, port + (int)(opened % ports));
			int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

			if (fd < 0)
				die("socket");
			if (src) {
				char buf[32];
				struct sockaddr_in b;

				snprintf(buf, sizeof(buf), "%s.%ld", src, 1 + opened % count);
				b = addr_of(buf, 0);
				setsockopt(fd, SOL_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
				if (bind(fd, (struct sockaddr *)&b, sizeof(b)))
					die("bind source address");
			}
			if (connect(fd, (struct sockaddr *)&a, sizeof(a)) ||
			    write(fd, msg, sizeof(msg)) != sizeof(msg))
				failed++;
			close(fd);
		}
	}
	printf("done %ld failed %ld\n", opened, failed);
	fflush(stdout);
	return failed ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc >= 4 && (!strcmp(argv[1], "serve") || !strcmp(argv[1], "echo"))) {
		int ports = argc > 4 ? atoi(argv[4]) : 1;
		long want = argc > 5 ? atol(argv[5]) : -1;

		raise_nofile(want > 0 ? want : 16000);
		return serve(argv[2], atoi(argv[3]), ports, want, !strcmp(argv[1], "echo"));
	}
	if (argc == 6 && !strcmp(argv[1], "pingpong")) {
		long n = atol(argv[5]);

		if (n <= 0) {
			fprintf(stderr, "loadgen: N must be > 0\n");
			return 2;
		}
		raise_nofile(n);
		return pingpong(argv[2], atoi(argv[3]), atoi(argv[4]), n);
	}
	if (argc == 7 && !strcmp(argv[1], "connect")) {
		long n = atol(argv[5]), busy = atol(argv[6]);

		if (n <= 0 || busy < 0 || busy > n) {
			fprintf(stderr, "loadgen: N must be > 0 and 0 <= B <= N\n");
			return 2;
		}
		raise_nofile(n);
		return connect_all(argv[2], atoi(argv[3]), atoi(argv[4]), n, busy);
	}
	if ((argc == 7 || argc == 9) && !strcmp(argv[1], "churn")) {
		long n = atol(argv[5]), rate = atol(argv[6]);
		int count = argc == 9 ? atoi(argv[8]) : 0;

		if (n <= 0 || rate <= 0 || (argc == 9 && count <= 0)) {
			fprintf(stderr, "loadgen: N, RATE and COUNT must be > 0\n");
			return 2;
		}
		return churn(argv[2], atoi(argv[3]), atoi(argv[4]), n, rate,
			     argc == 9 ? argv[7] : NULL, count);
	}
	fprintf(stderr,
		"usage: loadgen serve ADDR PORT [PORTS [N]]\n"
		"       loadgen echo ADDR PORT [PORTS [N]]\n"
		"       loadgen pingpong ADDR PORT PORTS N\n"
		"       loadgen connect ADDR PORT PORTS N B\n"
		"       loadgen churn ADDR PORT PORTS N RATE [SRC COUNT]\n");
	return 2;
}
