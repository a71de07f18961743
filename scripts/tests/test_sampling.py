#!/usr/bin/env python3
"""Issue 29: adaptive sampling counts what exact sampling counts.

Two daemons at once on the same traffic, one with `--sampling exact`, one
with the default (adaptive: a socket that is not bloated, watched, acted on
or dense is looked at in a share of its segments, each look weighted by
the segments it stands for; bpf/sampler.h):

- the papers' flows on the lab's 3.5g link (16 Mbit/s, 80 ms, 1 MB): a
  CUBIC download holding a standing queue, and 320 kB web fetches beside it;
- a busy server's sockets (scripts/bench/loadgen.c: 200 B ten times a
  second each way): 400 across the same bottleneck, behind the download's
  queue (bloated: sampled every interval in both modes), and 9,600 on the
  receiver's loopback with no queue (sparse: looked at 1 in 2^shift).

Over the same window, from each daemon's /metrics: every bucket's share of
the queueing delay histogram, per (cc, role) and over all, within 0.02
(or its sampling error where a key has few looks); the
p50 and p90 within one bucket; the floor of every path equal (`paths`);
the bloated-sockets gauge equal, read at the same moments, once both count
the victims (adaptive within 3 s of exact); and a real
Prometheus scraping both (the shipped rules, `for:` in seconds, per
instance) sees every alert fire for both within one scrape of each other.
"""

import math
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

from bloatdpy.harness import (FLOWS, RCV4, RULES, SND4, Loadgen, TestCase, main, rules_with_short_for,
                        wait_for)

BUCKETS = ["0.0005", "0.001", "0.002", "0.005", "0.01", "0.02", "0.05", "0.1", "0.2", "0.5", "1",
           "2", "4", "8", "16", "+Inf"]
QUEUE = "bloatd_tcp_queueing_delay_seconds"
VICTIMS, SPARSE = 200, 4800  # connections: two sockets each
WINDOW_S = 20


def buckets_of(text):
    """The queueing delay histogram's cumulative buckets per (cc, role),
    summed over services: {(cc, role): [count at each le of BUCKETS]}."""
    out = {}
    for line in text.splitlines():
        if not line.startswith(QUEUE + "_bucket{"):
            continue
        series, value = line.rsplit(" ", 1)
        labels = dict(re.findall(r'([a-z_]+)="([^"]*)"', series))
        row = out.setdefault((labels.get("cc", ""), labels["role"]), [0.0] * len(BUCKETS))
        row[BUCKETS.index(labels["le"])] += float(value)
    return out


def gauge(text, name):
    """{(cc, role): value} of an unbounded-label-free gauge family."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            series, value = line.rsplit(" ", 1)
            labels = dict(re.findall(r'([a-z_]+)="([^"]*)"', series))
            out[(labels.get("cc", ""), labels["role"])] = float(value)
    return out


def per_bucket(cum):
    return [b - a for a, b in zip([0.0] + cum[:-1], cum)]


def quantile_bucket(cum, q):
    total = cum[-1]
    return next(i for i, c in enumerate(cum) if c >= q * total)


class AdaptiveAgainstExact(TestCase):
    def test_adaptive_counts_what_exact_counts(self):
        tmp = tempfile.mkdtemp(prefix="bloatd-sampling-")
        self.addCleanup(shutil.rmtree, tmp, True)
        lab = self.lab("bsm", profile="3.5g")
        for side in ("snd", "rcv"):
            lab.exec(side, "sysctl", "-qw", "net.ipv4.ip_local_port_range=1024 65535",
                     "net.core.somaxconn=65535")
        gen = Loadgen(tmp)
        # The busy server's sockets first: both daemons find them at their
        # next segment, as on any server.
        gen.pair(lambda *c, **kw: lab.spawn("rcv", *c, **kw), lambda *c, **kw: lab.spawn("rcv", *c, **kw),
                 "127.0.0.1", 7000, SPARSE)
        gen.pair(lambda *c, **kw: lab.spawn("snd", *c, **kw), lambda *c, **kw: lab.spawn("rcv", *c, **kw),
                 SND4, 7100, VICTIMS)
        exact = self.daemon("--no-cc", "--sampling", "exact")
        exact.start()
        adaptive = self.daemon("--no-cc")
        adaptive.start()
        # One Prometheus for both, so both are scraped and their rules
        # evaluated on the same ticks (two servers' phases alone put up to
        # two seconds between the same alert's firing). The fleet-wide
        # rules sum over instances; here they keep the instance, nothing
        # else changes.
        short = rules_with_short_for(RULES, tmp)
        with open(short) as f:
            text = f.read().replace("sum by (cc, role", "sum by (instance, cc, role")
        with open(short, "w") as f:
            f.write(text)
        prom = self.prometheus(exact.port, adaptive.port, rules=[short])
        modes = {f"127.0.0.1:{exact.port}": "exact", f"127.0.0.1:{adaptive.port}": "adaptive"}
        idle = statistics.median(lab.ping("snd", RCV4, count=3))
        t0 = time.time()
        # The papers' flows: a CUBIC download and web fetches beside it.
        lab.iperf_server("snd")
        lab.download("cubic", WINDOW_S + 25)
        lab.spawn("snd", sys.executable, FLOWS, "serve", "--port", "8000")
        wait_for(lambda: lab.exec("rcv", "bash", "-c", f"exec 3<>/dev/tcp/{SND4}/8000",
                                  check=False).returncode == 0, what="flows.py server")
        lab.spawn("rcv", sys.executable, FLOWS, "fetch", "--addr", SND4, "--port", "8000",
                  "--bytes", "320000", "--count", "100", "--gap", "1", "--cc", "cubic")
        lab.wait_for_queue(idle, 150)

        firing = {}  # (alert, cc, role, service) -> {mode: seconds since t0}

        def poll_alerts():
            now = time.time() - t0
            for a in prom.alerts():
                if a["state"] != "firing":
                    continue
                ls = a["labels"]
                key = (ls["alertname"], ls.get("cc", ""), ls.get("role", ""), ls.get("service", ""))
                firing.setdefault(key, {}).setdefault(modes[ls["instance"]], now)

        def both():
            return exact.metrics(), adaptive.metrics()

        start = both()
        gauges = []
        deadline = time.time() + WINDOW_S
        while time.time() < deadline:
            e, a = both()
            gauges.append((gauge(e, "bloatd_tcp_bloated_sockets"), gauge(a, "bloatd_tcp_bloated_sockets")))
            poll_alerts()
            time.sleep(1)
        end = both()
        # The lab's paths: the root namespace carries the daemons' own API
        # and scrape connections, which come and go between two reads.
        lab_ns = {os.stat(f"/run/netns/{lab.ns(side)}").st_ino for side in ("snd", "rtr", "rcv")}
        paths = [{(p["netns"], p["peer"], p["interface"]): p["floor_us"]
                  for p in d.api("/v1/paths") if p["netns"] in lab_ns} for d in (exact, adaptive)]
        for _ in range(15):  # alerts whose `for:` ends after the window
            poll_alerts()
            time.sleep(1)
        odds = [line for line in adaptive.metrics().splitlines()
                if line.startswith(("bloatd_probe_sampling_odds", "bloatd_probe_hot_sockets"))]
        print("    adaptive: " + ", ".join(odds), flush=True)

        # Each bucket's share of socket-time, per (cc, role) and over all.
        got = {}
        for name, (s, e) in (("exact", (start[0], end[0])), ("adaptive", (start[1], end[1]))):
            b0, b1 = buckets_of(s), buckets_of(e)
            got[name] = {k: [y - x for x, y in zip(b0.get(k, [0.0] * len(BUCKETS)), v)]
                         for k, v in b1.items()}
        for name in got:
            got[name][("all", "")] = [sum(v[i] for v in got[name].values()) for i in range(len(BUCKETS))]
        compared = 0
        for key, cum_e in sorted(got["exact"].items()):
            cum_a = got["adaptive"].get(key, [0.0] * len(BUCKETS))
            if cum_e[-1] < 150:
                continue
            compared += 1
            share_e = [x / cum_e[-1] for x in per_bucket(cum_e)]
            share_a = [x / cum_a[-1] if cum_a[-1] else 0 for x in per_bucket(cum_a)]
            # A share counted from n looks is known within its sampling
            # error: 3 standard errors of a proportion, or 0.02 where that
            # is smaller (the busy server's million looks). A key of ~300
            # looks (the download's receiver: one a round trip) is known
            # within ~0.05; a noisy run put one 0.023 apart.
            n = max(min(cum_e[-1], cum_a[-1]), 1)
            tol = [max(0.02, 3 * math.sqrt(x * (1 - x) / n)) for x in share_e]
            worst = max(abs(x - y) for x, y in zip(share_e, share_a))
            over = max(abs(x - y) - t for x, y, t in zip(share_e, share_a, tol))
            q = [(quantile_bucket(c, p) if c[-1] else None) for c in (cum_e, cum_a) for p in (0.5, 0.9)]
            print(f"    {key}: observations exact {cum_e[-1]:.0f}, adaptive {cum_a[-1]:.0f}; "
                  f"worst bucket share difference {worst:.3f}; p50 bucket {q[0]}/{q[2]}, "
                  f"p90 {q[1]}/{q[3]} (le {BUCKETS[q[0]]}/{BUCKETS[q[2]]}, {BUCKETS[q[1]]}/{BUCKETS[q[3]]})",
                  flush=True)
            if worst > 0.01:
                print("      shares by bucket (exact/adaptive): " + " ".join(
                    f"{le}:{x:.3f}/{y:.3f}" for le, x, y in zip(BUCKETS, share_e, share_a) if x or y))
            self.assertLessEqual(over, 0, f"{key}: bucket shares, adaptive against exact, "
                                 f"within {', '.join(f'{t:.3f}' for t in tol if t > 0.02) or '0.02'}")
            self.assertLessEqual(abs(q[0] - q[2]), 1, f"{key}: p50 within one bucket")
            self.assertLessEqual(abs(q[1] - q[3]), 1, f"{key}: p90 within one bucket")
        self.assertGreaterEqual(compared, 3, "the download, the busy server's senders, and all")

        # The bloated-sockets gauge, read at the same moments.
        diffs = [sum(abs(e.get(k, 0) - a.get(k, 0)) for k in set(e) | set(a)) for e, a in gauges]
        bloated = [sum(e.values()) for e, _ in gauges]
        print(f"    bloated sockets (exact) each second: {' '.join(f'{x:.0f}' for x in bloated)}; "
              f"differences from adaptive: {' '.join(f'{x:.0f}' for x in diffs)}", flush=True)
        self.assertGreater(statistics.median(bloated), VICTIMS, "the victims are bloated")
        self.assertLessEqual(statistics.median(diffs), 0, "the gauge agrees")
        # The second the queue crosses the threshold, a victim is counted
        # by exact mode at its next segment, by adaptive mode once its path
        # is marked (sampler.h): the onset may differ. It lasted one second
        # in most runs, three in one (differences 59, 43, 9 of ~204): the
        # adaptive daemon must reach the plateau within 3 s of the exact
        # one, and from then on agree within 2% in 90% of the seconds.
        plateau = 0.98 * statistics.median(bloated)
        adaptive = [sum(a.values()) for _, a in gauges]
        first = [next((i for i, x in enumerate(xs) if x >= plateau), len(xs)) for xs in (bloated, adaptive)]
        print(f"    plateau reached at second {first[0]} (exact), {first[1]} (adaptive)", flush=True)
        self.assertLessEqual(first[1] - first[0], 3, "adaptive counts the victims within 3 s of exact")
        close = [x <= 0.02 * max(bloated) for x in diffs[first[1]:]]
        self.assertGreaterEqual(sum(close), 0.9 * len(close), "within 2% after the onset")

        # Every path's floor. A socket without a route (a fetch's socket
        # between its close and its end; the daemons read a moment apart)
        # has no interface: its path is there for one daemon's read and not
        # the other's, so only routed paths are compared (a CI run met one).
        for p in paths:
            unrouted = [k for k in p if not k[2]]
            if unrouted:
                print(f"    unrouted paths left out: {unrouted}", flush=True)
            for k in unrouted:
                del p[k]
        self.assertEqual(set(paths[0]), set(paths[1]), "the same paths")
        unequal = {k: (paths[0][k], paths[1][k]) for k in paths[0] if paths[0][k] != paths[1][k]}
        print(f"    {len(paths[0])} paths, floors unequal: {unequal}", flush=True)
        self.assertEqual(unequal, {}, "every path's floor equal")

        # The alerts, within one scrape (1 s) of each other.
        for key, at in sorted(firing.items()):
            print(f"    {key[0]}{{{','.join(x for x in key[1:] if x)}}}: "
                  + ", ".join(f"{m} at {t:.1f}s" for m, t in sorted(at.items())), flush=True)
        self.assertTrue([k for k in firing if k[0] in ("BloatdSocketsBloated", "BloatdQueueingDelayHigh")],
                        "the bloat alerts fired")
        for key, at in firing.items():
            self.assertEqual(set(at), {"exact", "adaptive"}, f"{key} fired for both daemons")
            self.assertLessEqual(abs(at["exact"] - at["adaptive"]), 1.5, f"{key}: within one scrape")

if __name__ == "__main__":
    main()
