"""The trace-driven link (topo.sh's trace profiles: umts, evdo, lte) delivers
packets at the trace's opportunities.

A saturating UDP flow (four times the trace's mean rate, 1500-byte packets:
one opportunity each) crosses the lab's router; the oracle is the other
end's kernel: it stamps each packet as it arrives in the far namespace
(SO_TIMESTAMPNS, moved onto CLOCK_MONOTONIC, which every namespace shares;
the reading process's own wake-ups do not count), and the trace file
says when the link could deliver one (counted from the start the link
emulator logs). While the buffer holds packets every opportunity carries
exactly one, so:

- packets delivered per 10 s window match the trace's opportunities within
  2%, and per 100 ms window within max(3 packets, 10%) for 90% of windows;
- each packet's lateness (arrival minus its opportunity plus the base delay)
  is small: median under 1 ms, 99th percentile under 5 ms (the VM's timer
  tail, see test_lab_delay.py).

The downlink (the .down trace, no delay) and the uplink (the .up trace, then
the profile's base delay) of `lte`, and the downlink of `umts`. Nothing may
be left behind after the lab goes (harness.lab_leftovers;
test_lab_topo.py interrupts a trace link's `up` too).
"""
import bisect
import json
import os
import re
import subprocess
import sys
import time

from bloatdpy.harness import FLOWS, LAB_RUN, RCV4, SND4, TOPO, TestCase, lab_leftovers, main, run, stolen_s, \
                              topo_profile, wait_for

BLAST_S = 12.0
SETTLE_S = 1.5      # the buffer fills (1 MB at 3x the mean rate beyond it: < 0.5 s)
WINDOW_NS = 100_000_000


def profile(name):
    p = topo_profile(name)
    return p["trace"], float(p["delay_ms"])


class Trace:
    """Opportunity times of a Mahimahi trace, repeating, from `start_ns`."""

    def __init__(self, path, start_ns):
        with open(path) as f:
            self.ms = [int(x) for x in f.read().split()]
        self.n = len(self.ms)
        self.period_ms = self.ms[-1]
        self.start_ns = start_ns

    def mean_pps(self):
        return self.n * 1000 / self.period_ms

    def opp_ns(self, k):
        return self.start_ns + ((k // self.n) * self.period_ms + self.ms[k % self.n]) * 1_000_000

    def index_at_or_before(self, t_ns):
        """The last opportunity at or before t_ns."""
        ms = (t_ns - self.start_ns) // 1_000_000
        cycle, off = divmod(ms, self.period_ms)
        i = bisect.bisect_right(self.ms, off) - 1
        return cycle * self.n + i

    def count(self, a_ns, b_ns):
        """Opportunities in [a_ns, b_ns)."""
        return self.index_at_or_before(b_ns - 1) - self.index_at_or_before(a_ns - 1)


def align(trace, span):
    """The opportunity the span's first packet took. Not simply the last one
    before it arrived: a first packet released a few ms late (this VM's
    timer) would shift every match by some opportunities, and all later
    packets would seem to leave before their opportunity. No packet leaves
    before its opportunity, so it is the latest choice that keeps the first
    2,000 packets at or after theirs (100 us of clock tolerance)."""
    head = span[:2000]
    j = trace.index_at_or_before(span[0])
    for k in range(j, j - 50, -1):
        if all(x - trace.opp_ns(k + i) >= -100_000 for i, x in enumerate(head)):
            return k
    return j


def emulator_start(lab, role):
    """Where the emulator's trace starts: when it started, or where it was
    last started over (topo.sh restart-trace)."""
    with open(os.path.join(LAB_RUN, f"{lab}.{role}.log")) as f:
        starts = re.findall(r"trace .*start_ns=(\d+)", f.read())
    return int(starts[-1])


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


class TraceLink(TestCase):
    def measure(self, lab, direction, trace_path, start_ns, delay_ms):
        """Blast through one direction of the lab; returns the arrivals
        (ns, shifted back by the base delay) and the blast's span."""
        trace = Trace(trace_path, start_ns)
        src, dst, addr = ("snd", "rcv", RCV4) if direction == "down" else ("rcv", "snd", SND4)
        sink = lab.spawn(dst, sys.executable, FLOWS, "udp-sink", "--port", "9000",
                         "--seconds", str(BLAST_S + 20), stdout=subprocess.PIPE, stderr=None)
        self.assertIn("listening", sink.stdout.readline())
        pps = int(4 * trace.mean_pps())
        role = "link" if direction == "down" else "delay"
        lab.emulator_reset(role)
        blast = lab.exec(src, sys.executable, FLOWS, "udp-blast", "--addr", addr,
                         "--pps", str(pps), "--seconds", str(BLAST_S), timeout=BLAST_S + 30)
        sent = json.loads(blast.stdout)
        arrivals = json.loads(sink.stdout.readline())
        sink.wait(timeout=30)
        st = lab.emulator_stats(role)
        own = int(st["late_us_p99"]), int(st["late_us_max"])
        self.assertLess(abs(arrivals["clock_drift_ns"]), 1_000_000,
                        "CLOCK_REALTIME moved against CLOCK_MONOTONIC during the blast")
        shift = int(delay_ms * 1e6)
        t = [x - shift for x in arrivals["t_ns"]]
        return trace, t, sent, own

    def check_link(self, lab, name, direction, trace_path, start_ns, delay_ms):
        """The link against the trace. The lateness checks judge it by the
        machine's clock, which a stretch of CPU the hypervisor takes makes
        late (test_lab_delay's case; a local run once measured p99 7.8 ms,
        the next 1.0 ms). So do the counts: a stretch of stolen CPU moves
        packets from one 100 ms window to the next, and CI once failed
        both trace links in one run while the rest of the suite ran late
        too. A blast whose timing checks fail is made again, up to three
        times, with the CPU time stolen meanwhile printed; an emulator
        that is wrong by itself fails all three."""
        for attempt in (1, 2, 3):
            steal0 = stolen_s()
            off = self.check_blast(lab, name, direction, trace_path, start_ns, delay_ms, attempt == 3)
            if not off:
                return
            print(f"  attempt {attempt}: {'; '.join(off)} ({stolen_s() - steal0:.2f} s of CPU "
                  "stolen by the hypervisor meanwhile): once more", flush=True)

    def check_blast(self, lab, name, direction, trace_path, start_ns, delay_ms, last):
        """One blast, checked; the timing checks that failed (raised on the
        last attempt)."""
        trace, t, sent, own = self.measure(lab, direction, trace_path, start_ns, delay_ms)
        label = f"{name} {direction} ({os.path.basename(trace_path)}, {trace.mean_pps() * 12e-3:.2f} Mbit/s mean)"
        self.assertGreater(len(t), 100, f"{label}: only {len(t)} packets arrived")
        # the saturated span, in whole windows counted from the trace's start
        first_w = (sent["start_ns"] + int(SETTLE_S * 1e9) - start_ns) // WINDOW_NS + 1
        last_w = (sent["end_ns"] - start_ns) // WINDOW_NS
        span = [x for x in t if first_w <= (x - start_ns) // WINDOW_NS < last_w]
        per_w = {}
        for x in span:
            w = (x - start_ns) // WINDOW_NS
            per_w[w] = per_w.get(w, 0) + 1
        rows = []
        for w in range(first_w, last_w):
            a = start_ns + w * WINDOW_NS
            rows.append((per_w.get(w, 0), trace.count(a, a + WINDOW_NS)))
        # 10 s windows
        tens = []
        for i in range(0, len(rows) - 99, 100):
            got = sum(r[0] for r in rows[i:i + 100])
            want = sum(r[1] for r in rows[i:i + 100])
            tens.append((got, want))
        self.assertTrue(tens, f"{label}: the saturated span is shorter than 10 s")
        good = sum(1 for got, want in rows if abs(got - want) <= max(3, 0.1 * want))
        abs_err = sorted(abs(got - want) for got, want in rows)
        # lateness: while saturated, the i-th packet takes the i-th opportunity
        # from the one just before the first packet of the span
        j0 = align(trace, span)
        late_us = [(x - trace.opp_ns(j0 + i)) / 1000 for i, x in enumerate(span)]
        p50, p99, p999 = (percentile(late_us, q) for q in (0.5, 0.99, 0.999))
        print(f"  {label}: sent {sent['sent']} at 4x the mean rate, {len(t)} arrived; "
              f"10 s windows delivered/opportunities "
              + ", ".join(f"{g}/{w} ({g / w:.4f})" for g, w in tens)
              + f"; 100 ms windows within max(3, 10%): {good}/{len(rows)}, |error| median "
              f"{abs_err[len(abs_err) // 2]} p90 {abs_err[int(0.9 * len(abs_err))]} packets; "
              f"lateness p50 {p50:.0f} us, p99 {p99:.0f} us, p99.9 {p999:.0f} us, max {max(late_us):.0f} us "
              f"(the emulator's own release: p99 {own[0]} us, max {own[1]} us)",
              flush=True)
        self.assertGreater(min(late_us), -1000, f"{label}: a packet before its opportunity "
                           "(the alignment or the emulator is wrong)")
        checks = [(abs(got / want - 1) <= 0.02, f"{label}: {got} delivered in 10 s for {want} opportunities")
                  for got, want in tens]
        checks += [(good >= 0.9 * len(rows), f"{label}: 100 ms windows off: {rows[:20]}"),
                   (p50 < 1000, f"{label}: median lateness {p50:.0f} us"),
                   (p99 < 5000, f"{label}: p99 lateness {p99:.0f} us")]
        off = [why for ok, why in checks if not ok]
        if last:
            self.assertEqual(off, [], "the link's timing")
        return off

    def test_lte_both_directions(self):
        lab = self.lab("bltrace", profile="lte")
        down, delay_ms = profile("lte")
        up = down[: -len(".down")] + ".up"
        self.assertTrue(os.path.exists(up), up)
        self.check_link(lab, "lte", "down", down, emulator_start("bltrace", "link"), 0)
        self.check_link(lab, "lte", "up", up, emulator_start("bltrace", "delay"), delay_ms)
        backlog = int(run(TOPO, "backlog", "bltrace").stdout)
        print(f"  topo.sh backlog after the blasts: {backlog} B")
        lab.close()
        self.assertEqual(lab_leftovers("bltrace"), [], "left behind")

    def test_umts_downlink(self):
        """Started over (topo.sh restart-trace, as lab --replay does before
        each arm) 1.3 s after the line came up: the link follows the trace
        from the restart, not from the line's start."""
        lab = self.lab("bltrace", profile="umts")
        down, _ = profile("umts")
        first = emulator_start("bltrace", "link")
        time.sleep(1.3)
        run(TOPO, "restart-trace", "bltrace")
        wait_for(lambda: emulator_start("bltrace", "link") != first, timeout=5,
                 what="the delay line's restart line")
        start = emulator_start("bltrace", "link")
        print(f"  trace started over {(start - first) / 1e9:.2f} s after the line came up")
        self.check_link(lab, "umts", "down", down, start, 0)
        lab.close()
        self.assertEqual(lab_leftovers("bltrace"), [], "left behind")


if __name__ == "__main__":
    main()
