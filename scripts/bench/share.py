#!/usr/bin/env python3
"""The kernel's share and the watcher's, side by side (a benchmark: it
reports, it does not judge).

One command gives the figures of the overhead goals, for this build and a
baseline build measured in the same run, in alternating order, on the same
load (scripts/bench/loadgen.c over a veth pair at line rate,
`topo.sh --direct`):

  cold   10,000 busy sockets (5,000 connections, 200 B ten times a second):
         the machine's CPU without bloatd, with this build, with the
         baseline (no BPF statistics: they cost time themselves), then each
         build again under the kernel's BPF statistics: every bloatd
         program's share of one core, and tcp_probe's ns per event beside
         a truly empty program attached to the same tracepoint in the same
         window (bpf/testing/baseline.bpf.c's bench_empty: `return 0`), and
         the difference, which is what bloatd's probe adds;
  saturated  5,000 connections (10,000 sockets) each keeping a 200-byte
         message going back and forth as fast as the machine allows
         (loadgen echo/pingpong): round trips per second without bloatd
         and with each build, adjacent windows; bloatd's cost shows as
         work not done (the cold phase's machine CPU drifts by several
         points over a run on this VM, a saturated machine much less);
  watch  the same load with `bloatd top` open in a terminal (tmux) and
         /metrics scraped every 5 s: the daemon's and the dashboard's CPU;
  hot    one download at line rate (iperf3 -R): tcp_probe's ns per event;
  100k   100,000 established sockets (10,000 busy): `bloatd sockets --json`
         into a file: wall time of the first after the sockets appeared
         and the median of five more (a daemon that has run a while reads
         into the last read's memory); the whole /v1/snapshot: wall time,
         size, and how much the daemon's resident memory grew while it
         answered.

Each figure is the median of --rounds runs, with its range. The machine's
CPU is compared side by side: each round measures without bloatd and with
each build, in an order that alternates from round to round.

Usage: scripts/bench/share.py [--rounds N] [--seconds S] [--baseline BIN]
                              [--phase cold|watch|hot|100k]...   (root)
--baseline takes a bloatd binary; scripts/bench/baseline.sh COMMIT builds
one from a commit into target/baseline-COMMIT/ (what `make bench` does).
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

from scale import (BLOATD, PORT, PORTS, REPO, Load, machine_busy_s, nsx, proc_cpu_s, proc_rss_mb, scale_lab, sh,
                   sockets_json, start_daemon)

METRICS = "http://127.0.0.1:9498/metrics"
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target"))
BENCH_PROBES = os.path.join(TARGET, "release", "examples", "bench_probes")


def prog_runs():
    """run_time_ns and run_cnt of every BPF program loaded, by id."""
    return {p["id"]: (p.get("name", ""), p.get("run_time_ns", 0), p.get("run_cnt", 0))
            for p in json.loads(sh("bpftool", "-j", "prog", "show").stdout)}


def ns_per_run(i, before, after):
    """Program `i`'s mean run time between two prog_runs() (nan: no run)."""
    if i not in before or i not in after or after[i][2] <= before[i][2]:
        return float("nan")
    return (after[i][1] - before[i][1]) / (after[i][2] - before[i][2])


def bpf_share(ids, before, after, wall_s):
    """The programs `ids`' time over `wall_s`, as % of one core, and
    tcp_probe's ns per event."""
    total, probe_ns = 0, float("nan")
    for i in ids:
        if i not in before or i not in after:
            continue
        total += after[i][1] - before[i][1]
        if after[i][0] == "tcp_probe":
            probe_ns = ns_per_run(i, before, after)
    return 100 * total / 1e9 / wall_s, probe_ns


class EmptyBeside:
    """A truly empty tp_btf/tcp_probe program (bench_empty, `return 0`)
    attached beside bloatd's for as long as the context lasts: it sees the
    same events in the same window, so its cost per event is the floor any
    program pays there, measurement included (daemon/examples/bench_probes.rs)."""

    def __enter__(self):
        before = set(prog_runs())
        self.p = subprocess.Popen([BENCH_PROBES, "baseline", "tcp_probe", "bench_empty"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True)
        if self.p.stdout.readline().strip() != "ready":
            raise SystemExit("bench_probes did not attach bench_empty")
        self.ids = set(prog_runs()) - before
        return self

    def ns(self, before, after):
        return next((ns_per_run(i, before, after) for i in self.ids), float("nan"))

    def __exit__(self, *exc):
        self.p.stdin.close()
        self.p.wait(timeout=30)


def metric_values(*names):
    """The values of these unlabelled series in the running daemon's
    /metrics (nan where absent: a build without them)."""
    text = urllib.request.urlopen(METRICS, timeout=10).read().decode()
    got = dict(line.split(" ", 1) for line in text.splitlines()
               if line and not line.startswith("#") and "{" not in line)
    return [float(got.get(n, "nan")) for n in names]


class Build:
    """One bloatd binary under measurement; its programs are those that
    appear when it starts."""

    def __init__(self, name, binary, extra=()):
        self.name, self.binary, self.extra = name, binary, tuple(extra)

    def start(self, bpf_stats=False):
        before = set(prog_runs())
        d = start_daemon(self.binary, self.extra, bpf_stats=bpf_stats)
        d.progs = set(prog_runs()) - before
        return d


def busy_pct(seconds, during=None):
    """The machine's CPU over `seconds` as % of one core (`during` runs the
    window instead of a sleep)."""
    m0, t0 = machine_busy_s(), time.monotonic()
    (during or time.sleep)(seconds)
    return 100 * (machine_busy_s() - m0) / (time.monotonic() - t0)


def span(values):
    v = [x for x in values if x == x]
    if not v:
        return "-"
    return f"{statistics.median(v):.{2 if max(v) < 10 else 1 if max(v) < 100 else 0}f}" + \
        (f" ({min(v):.3g}–{max(v):.3g})" if len(v) > 1 else "")


def side_by_side(builds, r, measure):
    """`measure()` without bloatd and with each build running (3 s after
    its start), in adjacent windows, the order reversed every other round
    `r`: {"none": value, build name: value, ...}."""
    got = {}
    order = [None] + builds
    for b in (order if r % 2 == 0 else order[::-1]):
        if b is None:
            got["none"] = measure()
            continue
        d = b.start()
        try:
            time.sleep(3)
            got[b.name] = measure()
        finally:
            d.cleanup()
    return got


def cold(builds, rounds, seconds, res):
    """The machine's CPU without bloatd and with each build in adjacent
    windows (the order alternating round by round), each build's minus
    none's of the same round; then each build under BPF statistics. The
    load drifts by several points over a run here: a difference within a
    round sees less of that than a difference of medians."""
    for r in range(rounds):
        got = side_by_side(builds, r, lambda: busy_pct(seconds))
        for name, pct in got.items():
            res.setdefault(name, {}).setdefault("machine", []).append(pct)
            if name != "none":
                res[name].setdefault("machine_delta", []).append(pct - got["none"])
        for b in builds:
            d = b.start(bpf_stats=True)
            try:
                with EmptyBeside() as empty:
                    time.sleep(2)
                    p0, t0 = prog_runs(), time.monotonic()
                    time.sleep(seconds)
                    p1 = prog_runs()
                    share, ns = bpf_share(d.progs, p0, p1, time.monotonic() - t0)
                    empty_ns = empty.ns(p0, p1)
                    sampling = metric_values("bloatd_probe_sampling_odds", "bloatd_probe_hot_sockets")
            finally:
                d.cleanup()
            res[b.name].setdefault("bpf_share", []).append(share)
            res[b.name].setdefault("probe_cold_ns", []).append(ns)
            res[b.name].setdefault("empty_cold_ns", []).append(empty_ns)
            res[b.name].setdefault("probe_cold_over_empty_ns", []).append(ns - empty_ns)
            for key, v in zip(("sampling_odds", "hot_sockets"), sampling):
                res[b.name].setdefault(key, []).append(v)
        print(f"  cold round {r + 1}/{rounds}: " + ", ".join(
            f"{k} {v:.1f}%" for k, v in got.items()), flush=True)


class Scraper(threading.Thread):
    """/metrics every `every` seconds, as Prometheus would."""

    def __init__(self, every=5.0):
        super().__init__(daemon=True)
        self.every, self.stop, self.count = every, threading.Event(), 0

    def run(self):
        while not self.stop.is_set():
            try:
                urllib.request.urlopen(METRICS, timeout=5).read()
                self.count += 1
            except OSError:
                pass
            self.stop.wait(self.every)


def top_in_tmux(binary, run_dir):
    """`bloatd top` in a detached tmux session (a real terminal); returns
    (server name, the top process's pid)."""
    server = f"bshare-{os.getpid()}"
    sh("tmux", "-L", server, "new-session", "-d", "-s", "top", "-x", "200", "-y", "50",
       f"{binary} --run-dir {run_dir} top")
    pid = int(sh("tmux", "-L", server, "list-panes", "-t", "top", "-F", "#{pane_pid}").stdout.split()[0])
    return server, pid


def watch(builds, rounds, seconds, res):
    """Daemon and dashboard CPU while top is open and /metrics is scraped."""
    for r in range(rounds):
        for b in (builds if r % 2 == 0 else builds[::-1]):
            d = b.start()
            server = None
            try:
                server, top = top_in_tmux(b.binary, d.run_dir)
                scraper = Scraper()
                scraper.start()
                time.sleep(5)
                c0, k0, t0 = proc_cpu_s(d.pid()), proc_cpu_s(top), time.monotonic()
                time.sleep(seconds)
                c1, k1, t1 = proc_cpu_s(d.pid()), proc_cpu_s(top), time.monotonic()
                scraper.stop.set()
                dcpu, tcpu = 100 * (c1 - c0) / (t1 - t0), 100 * (k1 - k0) / (t1 - t0)
            finally:
                if server:
                    subprocess.run(["tmux", "-L", server, "kill-server"], capture_output=True)
                d.cleanup()
            res[b.name].setdefault("daemon_watch", []).append(dcpu)
            res[b.name].setdefault("top_watch", []).append(tcpu)
            res[b.name].setdefault("watch_total", []).append(dcpu + tcpu)
            print(f"  watch round {r + 1}/{rounds} {b.name}: daemon {dcpu:.2f}%, top {tcpu:.2f}%", flush=True)


class PingPong:
    """`conns` connections each keeping one 200-byte message going back and
    forth (loadgen echo / pingpong) as fast as the machine allows, each end
    on its own CPU: left to the scheduler, where the two ends and the
    softirqs ran moved the rate by ±12% from one window to the next."""

    def __init__(self, loadgen, conns):
        self.srv = subprocess.Popen(nsx("snd", "taskset", "-c", "0", loadgen, "echo", "10.9.1.1", str(PORT), str(PORTS), str(conns)),
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self.srv.stdout.readline().strip() != "listening":
            raise SystemExit("loadgen echo did not listen")
        self.cli = subprocess.Popen(nsx("rcv", "taskset", "-c", "1", loadgen, "pingpong", "10.9.1.1", str(PORT), str(PORTS), str(conns)),
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for p in (self.cli, self.srv):
            line = p.stdout.readline().strip()
            if not line.startswith("ready"):
                raise SystemExit(f"loadgen did not get ready: {line!r}")

    def count(self):
        self.cli.stdin.write("count\n")
        self.cli.stdin.flush()
        return int(self.cli.stdout.readline().split()[1])

    def rate(self, seconds):
        c0, t0 = self.count(), time.monotonic()
        time.sleep(seconds)
        return (self.count() - c0) / (time.monotonic() - t0)

    def close(self):
        for p in (self.cli, self.srv):
            p.stdin.close()
        for p in (self.cli, self.srv):
            p.wait(timeout=60)


def saturated(builds, rounds, seconds, res, loadgen):
    """Round trips per second with the machine saturated (5,000
    connections, 10,000 sockets, closed loop), without bloatd and with each
    build in adjacent windows, order alternating: what bloatd costs shows
    as work not done, each build's against none's of the same round."""
    pp = PingPong(loadgen, 5000)
    try:
        time.sleep(3)
        for r in range(rounds):
            got = side_by_side(builds, r, lambda: pp.rate(seconds))
            for name, rate in got.items():
                res.setdefault(name, {}).setdefault("rt_per_s", []).append(rate / 1000)
                if name != "none":
                    res[name].setdefault("rt_cost", []).append(100 * (1 - rate / got["none"]))
            print(f"  saturated round {r + 1}/{rounds}: " + ", ".join(
                f"{k} {v:,.0f}/s" for k, v in got.items()), flush=True)
    finally:
        pp.close()


def download(seconds):
    subprocess.run(nsx("snd", "iperf3", "-s", "-1", "-D", "-p", "5400"), check=True, capture_output=True)
    time.sleep(0.3)
    subprocess.run(nsx("rcv", "iperf3", "-c", "10.9.1.1", "-p", "5400", "-C", "cubic",
                       "-t", str(int(seconds)), "-R"), check=True, capture_output=True)


def hot(builds, rounds, seconds, res):
    """tcp_probe per event on one flow at line rate."""
    for r in range(rounds):
        for b in (builds if r % 2 == 0 else builds[::-1]):
            d = b.start(bpf_stats=True)
            try:
                time.sleep(1)
                p0, t0 = prog_runs(), time.monotonic()
                download(seconds)
                _, ns = bpf_share(d.progs, p0, prog_runs(), time.monotonic() - t0)
            finally:
                d.cleanup()
            res[b.name].setdefault("probe_hot_ns", []).append(ns)
        print(f"  hot round {r + 1}/{rounds}: " + ", ".join(
            f"{b.name} {res[b.name]['probe_hot_ns'][-1]:.0f} ns" for b in builds), flush=True)


def timed_ms(fn):
    t0 = time.monotonic()
    out = fn()
    return (time.monotonic() - t0) * 1000, out


def snapshot_rss(d):
    """The whole /v1/snapshot: wall ms, bytes, and the daemon's resident
    memory growth while it answered (peak RSS reset before, MB)."""
    with open(f"/proc/{d.pid()}/clear_refs", "w") as f:
        f.write("5")
    rss0 = proc_rss_mb(d.pid())
    ms, body = timed_ms(lambda: subprocess.run(
        ["curl", "-sf", "--unix-socket", os.path.join(d.run_dir, "bloatd.sock"), "http://bloatd/v1/snapshot"],
        check=True, capture_output=True).stdout)
    for line in open(f"/proc/{d.pid()}/status"):
        if line.startswith("VmHWM:"):
            peak = int(line.split()[1]) / 1024
    return ms, len(body), peak - rss0


def many(builds, rounds, load, res):
    """`bloatd sockets --json` and the whole snapshot with 100,000 sockets."""
    for r in range(rounds):
        for b in (builds if r % 2 == 0 else builds[::-1]):
            d = b.start()
            try:
                load.touch()
                time.sleep(3)
                # The first read after the load's sockets appeared, then
                # five more as a daemon that has run for a while answers.
                first, listed = sockets_json(d)
                # Apart: back to back they are a loop, which the daemon
                # paces (a user's next whole answer waits six times what
                # its last took, at most 5 s: stream.rs).
                again = []
                for _ in range(5):
                    time.sleep(5)
                    again.append(sockets_json(d)[0])
                res[b.name].setdefault("sockets_json_first_ms", []).append(first)
                res[b.name].setdefault("sockets_json_ms", []).append(statistics.median(again))
                res[b.name].setdefault("sockets_listed", []).append(listed)
                time.sleep(2)
                ms, size, grew = snapshot_rss(d)
                res[b.name].setdefault("snapshot_ms", []).append(ms)
                res[b.name].setdefault("snapshot_mb", []).append(size / 1e6)
                res[b.name].setdefault("snapshot_rss_mb", []).append(grew)
            finally:
                d.cleanup()
        print(f"  100k round {r + 1}/{rounds}: " + ", ".join(
            f"{b.name} sockets --json {res[b.name]['sockets_json_ms'][-1]:.0f} ms" for b in builds), flush=True)


ROWS = [
    ("all bloatd BPF programs, 10k busy sockets (% of one core)", "bpf_share", "<= 2"),
    ("tcp_probe per event, cold sockets (ns)", "probe_cold_ns", ""),
    ("  a truly empty program beside it, same window (ns)", "empty_cold_ns", ""),
    ("  tcp_probe minus the empty program (ns)", "probe_cold_over_empty_ns", "<= 50"),
    ("  segments of a socket not hot per look, at the window's end", "sampling_odds", ""),
    ("  hot sockets (sampled every interval) then", "hot_sockets", ""),
    ("tcp_probe per event, line rate (ns)", "probe_hot_ns", "<= 100"),
    ("machine CPU, same load (% of one core)", "machine", ""),
    ("  minus none's, same round (points)", "machine_delta", "<= +3"),
    ("thousand round trips/s, 10k sockets, saturated", "rt_per_s", ""),
    ("  fewer than none's, same round (%)", "rt_cost", ""),
    ("daemon, top open, 5 s scrapes, 10k busy (%)", "daemon_watch", ""),
    ("bloatd top itself (%)", "top_watch", ""),
    ("daemon + top (%)", "watch_total", "<= 3"),
    ("bloatd sockets --json > FILE, 100k sockets (ms, median of 5)", "sockets_json_ms", "<= 300"),
    ("  the first after the sockets appeared (ms)", "sockets_json_first_ms", ""),
    ("/v1/snapshot, 100k sockets (ms)", "snapshot_ms", ""),
    ("/v1/snapshot size (MB)", "snapshot_mb", ""),
    ("daemon RSS growth during it (MB)", "snapshot_rss_mb", "bounded"),
]


def report(res, names):
    cols = ["none"] + names if "none" in res else names
    print(f"\n  {'':52s}" + "".join(f"{c:>22s}" for c in cols) + f"{'goal':>18s}")
    for label, key, goal in ROWS:
        if not any(key in res.get(c, {}) for c in cols):
            continue
        print(f"  {label:52s}" + "".join(f"{span(res.get(c, {}).get(key, [])):>22s}" for c in cols)
              + f"{goal:>18s}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=10, help="each measurement window")
    ap.add_argument("--watch-seconds", type=float, default=30)
    ap.add_argument("--baseline", metavar="BIN", help="a bloatd binary measured beside this build")
    ap.add_argument("--sampling", action="append", choices=["adaptive", "exact"],
                    help="this build's sampling modes to measure (repeatable; default both)")
    ap.add_argument("--phase", action="append", choices=["cold", "saturated", "watch", "hot", "100k"])
    ap.add_argument("--json", metavar="FILE", help="also write the raw figures here")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("share.py: run as root (BPF, network namespaces)")
    # A timeout's SIGTERM unwinds like ^C: daemons, tmux and the lab go.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    phases = args.phase or ["cold", "saturated", "watch", "hot", "100k"]
    builds = [Build(m, BLOATD, ["--sampling", m]) for m in args.sampling or ["adaptive", "exact"]]
    if args.baseline:
        builds.append(Build("baseline", os.path.abspath(args.baseline)))
    res = {b.name: {} for b in builds}
    if "cold" in phases:
        sh("cargo", "build", "--release", "-q", "-p", "bloatd", "--example", "bench_probes", cwd=REPO)
    with scale_lab() as loadgen:
        if "cold" in phases or "watch" in phases:
            print("== 10,000 busy sockets (5,000 connections, 200 B ten times a second)", flush=True)
            load = Load(loadgen, 10_000, 10_000)
            try:
                time.sleep(10)
                if "cold" in phases:
                    cold(builds, args.rounds, args.seconds, res)
                if "watch" in phases:
                    watch(builds, max(1, args.rounds // 2), args.watch_seconds, res)
            finally:
                load.close()
        if "saturated" in phases:
            print("== 5,000 connections in a closed loop, the machine saturated", flush=True)
            saturated(builds, args.rounds, args.seconds, res, loadgen)
        if "hot" in phases:
            print("== one download at line rate", flush=True)
            hot(builds, args.rounds, args.seconds, res)
        if "100k" in phases:
            print("== 100,000 established sockets, 10,000 busy", flush=True)
            load = Load(loadgen, 100_000, 10_000)
            try:
                time.sleep(5)
                many(builds, max(1, args.rounds // 2), load, res)
            finally:
                load.close()
    print(f"\n== medians of the rounds (range), {time.strftime('%Y-%m-%d')}, "
          f"{' vs '.join(f'{b.name}: {b.binary}' for b in builds)}")
    report(res, [b.name for b in builds])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
