#!/usr/bin/env python3
"""Issue 17: the shipped rules on what bloatd really serves, and rates an
operator can trust.

A real Prometheus (Debian's) loads daemon/dist/prometheus/bloatd.rules.yml
with only its `for:` durations shortened (minutes become seconds), scrapes a
real bloatd every second during lab traffic, and its HTTP API is the oracle:

- a bloated CUBIC download (16 Mbit/s, 80 ms, 500 kB buffer: CUBIC keeps
  more than 100 ms of queue even right after a loss) fires
  BloatdSocketsBloated and BloatdQueueingDelayHigh for the cubic sender and
  for the receiving end (which carries no cc label); a socket map filled
  past 90% of a small --map-capacity fires BloatdMapNearFull, and the
  sockets it refused fire BloatdProbeDrops; the recording rules agree with
  ping through the same bottleneck;
- the same link with bloatd_westwood (its cwnd = BWE x RTTmin after a loss
  drains the queue) keeps ping's queue under 100 ms, and no alert fires.

The CUBIC download has loss recoveries: its sender's and receiver's sampled
throughput stay within 10% of the link in every interval (the maximum, not
a percentile), and agree with each other interval by interval: each
receiver interval's bytes within 10% of what the sender's intervals can have
carried over the same stretch (exactly its bytes while the link is full;
where the link dipped inside an interval, the bounds of where the dip fell).
"""

import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bloatdpy.harness import (RCV4, RULES, TOPO, Lab, TestCase, main, rules_with_short_for, run, stolen_s,
                        wait_for)

LINK_BPS = 16_000_000
# What the link carries of TCP payload: 1448 of every 1514 bytes on the wire.
PAYLOAD_BPS = LINK_BPS * 1448 / 1514
# The queueing delay histogram's upper bounds (bpf/stats.h), seconds.
BUCKETS = ["0.0005", "0.001", "0.002", "0.005", "0.01", "0.02", "0.05", "0.1", "0.2", "0.5", "1", "2",
           "4", "8", "16"]
DELAY_MS = 80
BUFFER = 500_000
# The alerts, as an operator's Prometheus names them.
BLOATED, HIGH, MAP, DROPS = ("BloatdSocketsBloated", "BloatdQueueingDelayHigh",
                             "BloatdMapNearFull", "BloatdProbeDrops")


def data_sockets(d, port):
    """bloatd's sender and receiver of the download served on `port`:
    the two sockets of that port that moved the most."""
    socks = d.sockets()
    snd = max((s for s in socks if s["local_port"] == port), key=lambda s: s["bytes_acked"], default=None)
    rcv = max((s for s in socks if s["remote_port"] == port), key=lambda s: s["bytes_received"],
              default=None)
    if snd and rcv and snd["bytes_acked"] > 1_000_000 and rcv["bytes_received"] > 1_000_000:
        return snd, rcv
    return None


def intervals(samples):
    """(start ms, end ms, bit/s) of each sampled interval: a sample's rate
    covers the time since the sample before it."""
    return [(a["t_ms"], b["t_ms"], b["throughput_bps"]) for a, b in zip(samples, samples[1:])]


def bytes_between(ivs, t0, t1, cap_bps):
    """The bytes the intervals `ivs` can have carried between t0 and t1
    (ms), as (least, most): an interval's bytes are known only in total, so
    the part of it inside [t0, t1] is anything from none to all, except that
    no stretch carries more than `cap_bps` (the link). While the link is full
    the two bounds meet (each interval's rate is the cap); where it dipped
    inside an interval they are as far apart as where the dip fell is
    unknown. None unless the intervals cover [t0, t1]."""
    if not ivs or t0 < ivs[0][0] or t1 > ivs[-1][1]:
        return None
    least = most = 0.0
    for a, b, bps in ivs:
        inside = min(b, t1) - max(a, t0)
        if inside > 0:
            total = bps / 8 * (b - a) / 1000
            room = cap_bps / 8 / 1000
            least += max(0.0, total - room * (b - a - inside))
            most += min(total, room * inside)
    return least, most


class Watch:
    """Polls Prometheus' alerts once a second: when each (alert, labels)
    was first seen pending and firing, in seconds since `t0`."""

    def __init__(self, prom, t0):
        self.prom, self.t0 = prom, t0
        self.seen = {}
        self.polls = []  # (seconds, {key: state}, bloated gauge of the cubic sender)

    def poll(self, gauge=None):
        now = time.time() - self.t0
        states = {}
        for a in self.prom.alerts():
            key = (a["labels"]["alertname"],
                   tuple(sorted((k, v) for k, v in a["labels"].items()
                                if k not in ("alertname", "severity", "instance", "job"))))
            self.seen.setdefault(key, {}).setdefault(a["state"], now)
            states[key] = a["state"]
        g = None
        if gauge:
            res = self.prom.query(gauge)
            g = sum(float(r["value"][1]) for r in res) if res else None
        self.polls.append((now, states, g))

    def firing_until_end(self, name, **labels):
        """Whether `name` with these labels, once firing, stayed firing
        in every later poll."""
        key = (name, tuple(sorted(labels.items())))
        since = [i for i, (_, st, _) in enumerate(self.polls) if st.get(key) == "firing"]
        return bool(since) and all(st.get(key) == "firing" for _, st, _ in self.polls[since[0]:])

    def firing(self, name, **labels):
        """Seconds until `name` with these labels (exactly) fired, or None."""
        want = tuple(sorted(labels.items()))
        for (n, ls), states in self.seen.items():
            if n == name and ls == want and "firing" in states:
                return states["firing"]
        return None

    def fired(self):
        return sorted((n, ls, s["firing"]) for (n, ls), s in self.seen.items() if "firing" in s)

    def report(self):
        for (n, ls), s in sorted(self.seen.items()):
            states = ", ".join(f"{k} at {v:.1f}s" for k, v in sorted(s.items(), key=lambda x: x[1]))
            print(f"    {n}{dict(ls)}: {states}")


class ShippedRules(TestCase):
    @classmethod
    def setUpClass(cls):
        run(TOPO, "down", "al1", check=False)
        cls.lab = Lab("al1", rate="16mbit", buffer_bytes=BUFFER, delay_ms=DELAY_MS)
        cls.idle_ms = statistics.median(cls.lab.ping("snd", RCV4, count=5))

    @classmethod
    def tearDownClass(cls):
        cls.lab.close()

    def rules(self):
        tmp = tempfile.mkdtemp(prefix="bloatd-rules-")
        self.addCleanup(shutil.rmtree, tmp, True)
        return rules_with_short_for(RULES, tmp)

    def download(self, d, cc, port, seconds):
        """A download with `cc` from the sender's iperf3 on `port`; ping
        through the bottleneck meanwhile. (sender, receiver, pinger, t0)."""
        lab = self.lab
        lab.iperf_server("snd", port)
        t0 = time.time()
        lab.download(cc, seconds, port=port)
        pinger = lab.ping_background("snd", RCV4, seconds, interval=0.2)
        snd, rcv = wait_for(lambda: data_sockets(d, port), timeout=15, what=f"the {cc} download in bloatd")
        # Asking for their series streams their samples from now on.
        for s in (snd, rcv):
            d.api(f"/v1/series/{s['cookie']}")
        return snd, rcv, pinger, t0

    def test_1_bloated_cubic_download_fires_every_alert(self):
        d = self.daemon("--no-cc", "--map-capacity", "64")
        d.start()
        prom = self.prometheus(d.port, rules=[self.rules()])
        seconds = 30
        snd, rcv, pinger, t0 = self.download(d, "cubic", 5201, seconds)
        watch = Watch(prom, t0)
        # Idle connections on the sender's loopback fill the map past its
        # bound: 100 records for 64 places.
        filler = self.lab.spawn("snd", sys.executable, "-c", """
import socket, time
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(128)
keep = []
for _ in range(50):
    c = socket.create_connection(l.getsockname()); keep += [c, l.accept()[0]]
time.sleep(600)
""")
        self.addCleanup(filler.kill)
        # Every CPU samples the flow, as on any busy host: the delay line,
        # in whose context the ACKs reach the sender, moves between the two
        # CPUs every 3 s (on this idle VM a flow otherwise stays on one).
        steal0 = stolen_s()
        self.move_delay_line(t0, seconds,
                             lambda: watch.poll('bloatd_tcp_bloated_sockets{cc="cubic",role="sender"}'))
        watch.report()
        print("    bloated gauge (cubic sender) each second: "
              + " ".join("-" if g is None else f"{g:.0f}" for _, _, g in watch.polls))
        pings = [p - self.idle_ms for p in pinger.result()]
        print(f"    ping queue through the bottleneck: median {statistics.median(pings):.0f} ms, "
              f"{sum(p > 100 for p in pings) / len(pings):.0%} of {len(pings)} pings above 100 ms")

        # Every alert whose condition held fired, with the labels it says:
        # the receiving end of the download has no cc label.
        self.assertIsNotNone(watch.firing(BLOATED, cc="cubic", role="sender"), "cubic sender bloated")
        self.assertIsNotNone(watch.firing(BLOATED, role="receiver"), "the download's receiving end")
        self.assertIsNotNone(watch.firing(HIGH, cc="cubic", role="sender"), "cubic sender delay high")
        self.assertIsNotNone(watch.firing(HIGH, role="receiver"), "receivers' delay high")
        self.assertIsNotNone(watch.firing(MAP), "map past 90%")
        self.assertIsNotNone(watch.firing(DROPS, reason="map_full"), "map_full drops")
        for key in [k for k in watch.seen if k[0] in (BLOATED, HIGH)]:
            self.assertIn(key[1], [(("cc", "cubic"), ("role", "sender")), (("role", "receiver"),)],
                          "only the download's two ends, a receiver with no cc")
        # Persistent bloat keeps the alert firing to the end (before the
        # per-CPU stamps were merged by value, the gauge read 0 as soon as
        # both CPUs had stamped a slot, and the alert never fired).
        self.assertTrue(watch.firing_until_end(BLOATED, cc="cubic", role="sender"),
                        "the bloated cubic sender keeps the alert firing while it stays bloated")

        self.recorded_against_ping(prom, "cubic", pings)
        # Sender and receiver are compared at a 100 ms grain, which a
        # stretch of CPU the hypervisor takes can break (CI once: one
        # interval 14.8% outside among 280): a disagreement is measured
        # again on a second download, with the stolen CPU printed; a
        # sampling that is wrong by itself fails both.
        off = self.rates(d, snd, rcv)
        if off >= 0.10:
            print(f"    {off:.1%} outside ({stolen_s() - steal0:.2f} s of CPU stolen by the hypervisor "
                  "during the download): once more, on a second download", flush=True)
            snd, rcv, pinger, t0 = self.download(d, "cubic", 5203, seconds)
            self.move_delay_line(t0, seconds, lambda: None)
            pinger.result()
            off = self.rates(d, snd, rcv)
        self.assertLess(off, 0.10, "sender and receiver agree in every interval")
        text = d.metrics()
        r = subprocess.run(["promtool", "check", "metrics"], input=text, text=True, capture_output=True)
        self.assertEqual(r.returncode, 0, f"promtool: {r.stdout}{r.stderr}")

    def move_delay_line(self, t0, seconds, each_second):
        """Until `seconds` after t0, every second: `each_second()`, and the
        delay line moved to the CPU of this 3 s stretch."""
        delay_line = self.lab.delay_line_pid()
        while time.time() - t0 < seconds:
            each_second()
            run("taskset", "-a", "-p", "-c", str(int(time.time() - t0) // 3 % 2), str(delay_line))
            time.sleep(1)

    def test_2_westwood_on_the_same_link_stays_silent(self):
        d = self.daemon()
        d.start()
        prom = self.prometheus(d.port, rules=[self.rules()])
        seconds = 25
        _, _, pinger, t0 = self.download(d, "bloatd_westwood", 5202, seconds)
        watch = Watch(prom, t0)
        while time.time() - t0 < seconds:
            watch.poll()
            time.sleep(1)
        watch.report()
        pings = [p - self.idle_ms for p in pinger.result()]
        print(f"    ping queue through the bottleneck: median {statistics.median(pings):.0f} ms, "
              f"{sum(p > 100 for p in pings) / len(pings):.0%} of {len(pings)} pings above 100 ms")
        self.assertLess(statistics.median(pings), 100, "Westwood+ keeps the queue under the threshold")
        self.assertEqual(watch.fired(), [], "no alert fires")
        self.recorded_against_ping(prom, "bloatd_westwood", pings)

    def recorded_against_ping(self, prom, cc, pings):
        """The recording rules of the `cc` sender against ping through the
        same bottleneck over the same flow: the share of time above 100 ms
        within 0.1, and each recorded quantile's histogram bucket holding
        ping's quantile (a histogram knows a delay to its bucket only)."""
        def recorded(rule):
            res = prom.query(f'cc_role:bloatd_tcp_queueing_delay_seconds:{rule}{{cc="{cc}",role="sender"}}')
            self.assertTrue(res, f"{rule} recorded for {cc}")
            return float(res[0]["value"][1])
        pings = sorted(pings)

        def ping_q(q):
            return pings[min(len(pings) - 1, int(q * len(pings)))] / 1000
        share = recorded("share_above_100ms_rate5m")
        ping_share = sum(p > 100 for p in pings) / len(pings)
        print(f"    {cc}: recorded share above 100 ms {share:.2f}, ping {ping_share:.2f}")
        self.assertLess(abs(share - ping_share), 0.1, "share of time above 100 ms")
        bounds = [0] + sorted(float(b) for b in BUCKETS)
        for rule, q in (("p50_rate5m", 0.5), ("p90_rate5m", 0.9)):
            v = recorded(rule)
            hi = next(b for b in bounds if b >= v)
            lo = bounds[bounds.index(hi) - 1] if hi > 0 else 0
            print(f"    {cc}: recorded {rule} {v * 1000:.0f} ms (bucket {lo * 1000:.1f}-{hi * 1000:.0f} ms), "
                  f"ping p{q * 100:.0f} {ping_q(q) * 1000:.0f} ms")
            self.assertTrue(ping_q(q - 0.1) <= hi and ping_q(q + 0.1) >= lo,
                            f"{rule}: ping's p{q * 100:.0f} in the recorded bucket")

    def rates(self, d, snd, rcv):
        """The download's sampled rates over every interval: never more
        than 10% above the link; how far the receiver's lie outside the
        sender's bounds at worst (the caller holds it under 10%)."""
        s_samples = d.api(f"/v1/series/{snd['cookie']}")["samples"]
        r_samples = d.api(f"/v1/series/{rcv['cookie']}")["samples"]
        s_iv, r_iv = intervals(s_samples), intervals(r_samples)
        # A loss recovery cuts cwnd (CUBIC: to 0.7 of it, over the
        # recovery's round trip).
        cuts, peak = 0, 0
        for c in (x["cwnd"] for x in s_samples):
            if c < 0.8 * peak:
                cuts, peak = cuts + 1, c
            peak = max(peak, c)
        retrans = [x["retrans"] for x in d.sockets(all=True) if x["cookie"] == snd["cookie"]]
        print(f"    sender: {cuts} loss recoveries in the series (cwnd cut), "
              f"{retrans[0] - snd['retrans'] if retrans else '?'} segments retransmitted")
        self.assertGreaterEqual(cuts, 2, "the download had loss recoveries to measure through")
        for name, ivs in (("sender", s_iv), ("receiver", r_iv)):
            rates = sorted(x[2] for x in ivs)
            print(f"    {name}: {len(ivs)} intervals, min {rates[0] / 1e6:.2f}, median "
                  f"{statistics.median(rates) / 1e6:.2f}, max {rates[-1] / 1e6:.2f} Mbit/s "
                  f"(link {LINK_BPS / 1e6:.0f}, {PAYLOAD_BPS / 1e6:.2f} of TCP payload)")
            self.assertGreater(len(ivs), 200, f"{name}'s intervals streamed")
            self.assertLessEqual(rates[-1], 1.1 * LINK_BPS, f"{name}: no interval above the link")
            self.assertGreater(statistics.median(rates), 0.9 * PAYLOAD_BPS, f"{name} runs at the link")
        # Each receiver interval against the sender's data acknowledged over
        # the same stretch of time one floor (the ACKs' way back) later;
        # every interval that the sender's series covers (all but the
        # first and last floor's worth). The two ends sample at different
        # instants, so the sender's bytes in a receiver's interval are known
        # within bounds (bytes_between, the link's payload rate plus 2% as
        # the cap): equal while the link is full, apart by as much as a dip
        # inside a sender interval leaves open. The receiver's bytes must lie
        # within 10% of those bounds.
        # One floor is the ACKs' way back only while they flow: where the
        # machine or the path stalled (a sample over 15% later than the
        # sampling interval, on either end: quiet runs sample within 5%, a
        # CI run's one 122 ms interval among 104 ms ones put its receiver
        # interval 12.5% outside the sender's bounds), the sender sees what the
        # receiver saw later by as long as the stall, and no constant shift
        # lines the two up. Receiver intervals within one interval of such a
        # stall are left out and counted; at most 5% may be.
        floor_ms = snd["floor_us"] / 1000
        usual = statistics.median(b - a for a, b, _ in r_iv)
        stalls = [(a, b) for a, b, _ in r_iv if b - a > 1.15 * usual] + \
                 [(a - floor_ms, b - floor_ms) for a, b, _ in s_iv if b - a > 1.15 * usual]
        diffs, left_out = [], 0
        for a, b, bps in r_iv:
            if any(a - usual < y and x < b + usual for x, y in stalls):
                left_out += 1
                continue
            band = bytes_between(s_iv, a + floor_ms, b + floor_ms, 1.02 * PAYLOAD_BPS)
            if band is not None:
                got = bps / 8 * (b - a) / 1000
                least, most = band
                off = max(least - got, got - most, 0) / max(least if got < least else most, 1)
                to_bps = 8 * 1000 / (b - a)
                diffs.append((off, a - r_iv[0][0], bps, least * to_bps, most * to_bps))
        print(f"    {len(stalls)} stalls (an interval over {1.15 * usual:.0f} ms on either end): "
              f"{left_out} receiver intervals next to them left out")
        self.assertLessEqual(left_out, 0.05 * len(r_iv), "intervals next to stalls, at most 5%")
        worst = max(diffs)
        print(f"    sender and receiver: {len(diffs)} of {len(r_iv)} receiver intervals compared, "
              f"worst {worst[0]:.1%} outside the sender's bounds at {worst[1] / 1000:.1f}s (receiver "
              f"{worst[2] / 1e6:.2f}, sender {worst[3] / 1e6:.2f}-{worst[4] / 1e6:.2f} Mbit/s); "
              f"bounds wider than 5% in {sum(d[4] > 1.05 * d[3] for d in diffs)} intervals")
        # The stretch around the worst: each side's intervals (start s from
        # the receiver's first, ms long, Mbit/s), the sender's one floor back.
        t_w = worst[1] + r_iv[0][0]
        for name, ivs, shift in (("receiver", r_iv, 0), ("sender", s_iv, floor_ms)):
            near = [f"{(a - shift - r_iv[0][0]) / 1000:.2f}+{b - a:.0f}:{bps / 1e6:.2f}"
                    for a, b, bps in ivs if t_w - 400 <= a - shift <= t_w + 400]
            print(f"      {name} near it: " + " ".join(near))
        self.assertGreater(len(diffs), len(r_iv) - 5 - left_out,
                           "every interval but the series' ends and the stalls' compared")
        return worst[0]


if __name__ == "__main__":
    main()
