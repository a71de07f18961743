#!/usr/bin/env python3
"""Server scale, measured side by side in one run (a benchmark: it reports,
it does not judge).

Two namespaces joined by a veth pair at line rate (scripts/lab/topo.sh
--direct); scripts/bench/loadgen.c holds the connections from one epoll
loop. For each case: N established sockets of which B busy (a busy
connection sends 200 bytes ten times a second, both of its sockets are
busy), measured for --seconds:

  - the daemon: CPU (% of one core), RSS, and what clients wait for:
    `bloatd sockets --json`, a /metrics scrape, a dashboard snapshot;
  - what users do instead: `ss -tin` in both namespaces polled every
    100 ms (bloatd's sampling interval) over the same sockets, its CPU;
  - the kernel: the whole machine's CPU with the load, with and without
    bloatd's probes attached, and tcp_probe's cost per event (BPF stats).

Usage: scripts/bench/scale.py [--seconds S] [--case NAME]... [--baseline BIN]
                              [--churn N] [--churn-rate R] [--churn-peers P]   (root)
Cases: 10k-busy (10,000 sockets, all busy), 100k (100,000 sockets, 10,000
busy) and churn (60,000 short connections at 1,000/s from 200 client
addresses). Each is measured with bloatd as built, with `--no-floors` (the
cost of keeping path floors) and, with --baseline, with another build.
"""
import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time

from bloatdpy.harness import Daemon

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOPO = os.path.join(REPO, "scripts", "lab", "topo.sh")
BLOATD = os.environ.get("BLOATD_BIN", os.path.join(REPO, "target", "release", "bloatd"))
LAB = "bscale"
PORT, PORTS = 7000, 4
CASES = {"10k-busy": (10_000, 10_000), "100k": (100_000, 10_000)}
HZ = os.sysconf("SC_CLK_TCK")


def sh(*cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def nsx(side, *cmd):
    return ["ip", "netns", "exec", f"{LAB}-{side}", *cmd]


def proc_cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / HZ


def proc_rss_mb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def machine_busy_s():
    f = open("/proc/stat").readline().split()
    return (int(f[1]) + int(f[2]) + int(f[3]) + int(f[6]) + int(f[7])) / HZ


def timed(fn, runs=3):
    """Median wall time of `fn()` in ms, and its last result."""
    times, out = [], None
    for _ in range(runs):
        t0 = time.monotonic()
        out = fn()
        times.append((time.monotonic() - t0) * 1000)
    return statistics.median(times), out


# The daemons' metrics port, which share.py's scrapers read.
METRICS_PORT = 9498


def start_daemon(binary=BLOATD, extra=(), bpf_stats=False):
    """A daemon for a measurement, started (harness.Daemon: its own run
    and state directories, the tests' one class): no congestion controls
    registered, room for every socket of the largest case."""
    d = Daemon("--no-cc", "--map-capacity", "262144", *extra, *(["--bpf-stats"] if bpf_stats else []),
               binary=binary, port=METRICS_PORT, sandbox=False)
    d.start()
    return d


def sockets_json(d):
    """`bloatd sockets --json > FILE`: wall ms and the sockets listed.
    Into a file, as a user keeps it: read through a Python pipe, the
    same 63 MB took Python's reading 100-250 ms more."""
    with tempfile.TemporaryFile() as f:
        t0 = time.monotonic()
        subprocess.run([d.binary, *d.dirs(), "sockets", "--json"], stdout=f, check=True)
        ms = (time.monotonic() - t0) * 1000
        f.seek(0)
        return ms, len(json.load(f))


class Load:
    """N sockets (N/2 connections) of which B busy (B/2 connections), spread
    over pairs of loadgen processes of at most PER_PROC connections each
    (a process may hold only RLIMIT_NOFILE's hard limit of descriptors, and
    without CAP_SYS_RESOURCE that cannot be raised: 20,000 here)."""

    PER_PROC = 15_000

    def __init__(self, loadgen, sockets, busy):
        conns, busy_conns = sockets // 2, busy // 2
        n = -(-conns // self.PER_PROC)
        self.procs = []
        for i in range(n):
            c, b = conns // n + (i < conns % n), busy_conns // n + (i < busy_conns % n)
            port = str(PORT + i * PORTS)
            srv = subprocess.Popen(nsx("snd", loadgen, "serve", "10.9.1.1", port, str(PORTS), str(c)),
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            self.procs.append(srv)
            line = srv.stdout.readline().strip()
            if line != "listening":
                raise SystemExit(f"loadgen serve did not listen: {line!r}")
            cli = subprocess.Popen(nsx("rcv", loadgen, "connect", "10.9.1.1", port, str(PORTS), str(c), str(b)),
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            self.procs.append(cli)
            for p in (cli, srv):
                line = p.stdout.readline().strip()
                if not line.startswith("ready"):
                    raise SystemExit(f"loadgen did not get ready: {line!r}")

    def touch(self):
        """One segment on every idle connection, so a daemon started after
        they were established sees them (it learns a socket of another
        namespace at its next segment)."""
        for cli in self.procs[1::2]:
            cli.stdin.write("touch\n")
            cli.stdin.flush()
        for cli in self.procs[1::2]:
            line = cli.stdout.readline().strip()
            if not line.startswith("touched"):
                raise SystemExit(f"loadgen did not touch: {line!r}")

    def close(self):
        for p in self.procs:
            p.stdin.close()
        for p in self.procs:
            p.wait(timeout=60)


def ss_cpu(seconds):
    """CPU of `ss -tin` in both namespaces every 100 ms for `seconds`, as a
    share of one core."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        t = time.monotonic()
        for side in ("snd", "rcv"):
            subprocess.run(nsx(side, "ss", "-tinH"), stdout=subprocess.DEVNULL, check=True)
        time.sleep(max(0, 0.1 - (time.monotonic() - t)))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.monotonic() - t0
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return 100 * cpu / wall


def measure_daemon(d, seconds):
    c0, m0, t0 = proc_cpu_s(d.pid()), machine_busy_s(), time.monotonic()
    time.sleep(seconds)
    c1, m1, t1 = proc_cpu_s(d.pid()), machine_busy_s(), time.monotonic()
    return 100 * (c1 - c0) / (t1 - t0), 100 * (m1 - m0) / (t1 - t0), proc_rss_mb(d.pid())


def tcp_probe_ns():
    progs = json.loads(sh("bpftool", "-j", "prog", "show").stdout)
    p = [x for x in progs if x.get("name") == "tcp_probe" and x.get("run_cnt", 0) > 0]
    return p[0]["run_time_ns"] / p[0]["run_cnt"] if p else float("nan")


def measure(binary, extra, seconds, load):
    """One daemon binary under the running load: its CPU, RSS and what its
    clients wait for."""
    d = start_daemon(binary, extra)
    try:
        load.touch()
        time.sleep(3)
        cpu, machine, rss = measure_daemon(d, seconds)
        status = json.loads(d.cli("status", "--json").stdout)
        # A user's next whole answer waits six times what its last took
        # (at most 5 s, stream.rs): 5 s apart, each call times the read.
        sockets = []
        for i in range(3):
            time.sleep(5 if i else 0)
            sockets.append(sockets_json(d))
        sockets_ms = statistics.median(ms for ms, _ in sockets)
        metrics_ms, text = timed(lambda: sh("curl", "-sf", "http://127.0.0.1:9498/metrics").stdout, runs=5)
        snap_ms, snap = timed(lambda: d.api("/v1/snapshot", check=False))
        return {"cpu": cpu, "machine": machine, "rss": rss, "tracked": status["sockets"],
                "listed": sockets[-1][1], "sockets_ms": sockets_ms, "metrics_ms": metrics_ms,
                "metrics_kb": len(text) / 1000, "snap_ms": snap_ms, "snap_kb": len(json.dumps(snap)) / 1000}
    finally:
        d.cleanup()


def table(runs, rows):
    cols = list(runs)
    print(f"  {'':42s}" + "".join(f"{c:>14s}" for c in cols))
    for label, fmt, key in rows:
        print(f"  {label:42s}" + "".join(f"{fmt.format(runs[c][key]) if key in runs[c] else '-':>14s}"
                                         for c in cols))


def probe_ns(variants, seconds, runs):
    for name, binary, extra in variants:
        d = start_daemon(binary, extra, bpf_stats=True)
        try:
            time.sleep(seconds)
            runs[name]["probe_ns"] = tcp_probe_ns()
        finally:
            d.cleanup()


def run_case(name, loadgen, seconds, variants):
    sockets, busy = CASES[name]
    print(f"\n== {name}: {sockets:,} established sockets, {busy:,} busy (200 B x 10/s each way)", flush=True)
    load = Load(loadgen, sockets, busy)
    try:
        time.sleep(3)
        # The kernel alone: the same load, no probes.
        m0, t0 = machine_busy_s(), time.monotonic()
        time.sleep(seconds)
        base = 100 * (machine_busy_s() - m0) / (time.monotonic() - t0)
        runs = {v[0]: measure(v[1], v[2], seconds, load) for v in variants}
        ss = ss_cpu(min(seconds, 10))
        probe_ns(variants, seconds / 2, runs)
    finally:
        load.close()
    r = runs["bloatd"]
    print(f"  sockets tracked {r['tracked']:,}, listed by `bloatd sockets --json` {r['listed']:,}")
    table(runs, [
        ("daemon CPU (% of one core)", "{:.2f}", "cpu"),
        ("daemon RSS (MB)", "{:.1f}", "rss"),
        ("bloatd sockets --json (ms)", "{:.0f}", "sockets_ms"),
        ("/metrics scrape (ms)", "{:.1f}", "metrics_ms"),
        ("/metrics size (kB)", "{:.0f}", "metrics_kb"),
        ("/v1/snapshot, all sockets (ms)", "{:.0f}", "snap_ms"),
        ("/v1/snapshot size (kB)", "{:.0f}", "snap_kb"),
        ("machine CPU with the daemon (%)", "{:.2f}", "machine"),
        ("tcp_probe, ns/event (BPF stats)", "{:.0f}", "probe_ns"),
    ])
    print(f"  {'machine CPU, same load, no probes (%)':42s}{base:14.2f}")
    print(f"  {'ss -tin every 100 ms, both sides (%)':42s}{ss:14.2f}   = {ss / max(r['cpu'], 0.01):.0f}x bloatd's CPU")


def churn(loadgen, n, rate, peers, d=None):
    """n short connections at `rate`/s from `peers` source addresses; the
    daemon's CPU and RSS over them (d), and the machine's."""
    srv = subprocess.Popen(nsx("snd", loadgen, "serve", "10.9.1.1", str(PORT), str(PORTS)),
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        if srv.stdout.readline().strip() != "listening":
            raise SystemExit("loadgen serve did not listen")
        c0 = proc_cpu_s(d.pid()) if d else 0
        m0, t0 = machine_busy_s(), time.monotonic()
        out = sh(*nsx("rcv", loadgen, "churn", "10.9.1.1", str(PORT), str(PORTS), str(n), str(rate),
                      "10.9.3", str(peers)), timeout=n / rate * 3 + 60).stdout.strip()
        t1 = time.monotonic()
        r = {"machine": 100 * (machine_busy_s() - m0) / (t1 - t0), "out": out}
        if d:
            r["cpu"] = 100 * (proc_cpu_s(d.pid()) - c0) / (t1 - t0)
            r["rss"] = proc_rss_mb(d.pid())
            st = json.loads(d.cli("status", "--json").stdout)
            r["tracked"] = st["sockets"]
            r["floors"] = len(d.api("/v1/floors", check=False).get("floors", [])) if d.binary == BLOATD else 0
        return r
    finally:
        srv.stdin.close()
        srv.wait(timeout=60)


def prog_stats():
    return {p["name"]: (p.get("run_time_ns", 0), p.get("run_cnt", 0))
            for p in json.loads(sh("bpftool", "-j", "prog", "show").stdout)}


def run_churn(loadgen, n, rate, peers, variants):
    """The churn with each variant under the kernel's BPF statistics: what
    every program costs per connection, the daemon's CPU and memory."""
    print(f"\n== churn: {n:,} short connections at {rate:,}/s from {peers} client addresses "
          "(200 B each, then close)", flush=True)
    for i in range(1, peers + 1):
        sh("ip", "-n", f"{LAB}-rcv", "addr", "add", f"10.9.3.{i}/16", "dev", "eth0")
    churn(loadgen, min(n, 3000), rate, peers)  # warm up: neighbours, routes, caches
    base = churn(loadgen, n, rate, peers)
    runs = {}
    for name, binary, extra in variants:
        d = start_daemon(binary, extra, bpf_stats=True)
        try:
            time.sleep(2)
            p0 = prog_stats()
            runs[name] = churn(loadgen, n, rate, peers, d)
            p1 = prog_stats()
        finally:
            d.cleanup()
        for prog in ("tcp_probe", "inet_sock_set_state", "sock_ops"):
            dt = p1.get(prog, (0, 0))[0] - p0.get(prog, (0, 0))[0]
            dc = p1.get(prog, (0, 0))[1] - p0.get(prog, (0, 0))[1]
            if dc:
                runs[name][f"{prog}_ns"] = dt / dc
        total = sum(p1[k][0] - p0.get(k, (0, 0))[0] for k in p1)
        runs[name]["bpf_us_per_conn"] = total / 1000 / n
        runs[name]["bpf_core"] = 100 * total / 1e9 / (n / rate)
    table(runs, [
        ("daemon CPU (% of one core)", "{:.2f}", "cpu"),
        ("daemon RSS (MB)", "{:.1f}", "rss"),
        ("floors kept at the end", "{:d}", "floors"),
        ("tcp_probe, ns/event", "{:.0f}", "tcp_probe_ns"),
        ("inet_sock_set_state, ns/event", "{:.0f}", "inet_sock_set_state_ns"),
        ("sock_ops, ns/event", "{:.0f}", "sock_ops_ns"),
        ("all probes, us per connection", "{:.1f}", "bpf_us_per_conn"),
        ("all probes, % of one core", "{:.2f}", "bpf_core"),
        ("machine CPU during the churn (%)", "{:.2f}", "machine"),
    ])
    print(f"  {'machine CPU, same churn, no probes (%)':42s}{base['machine']:14.2f}")


@contextlib.contextmanager
def scale_lab():
    """The direct lab (LAB), its namespaces tuned to hold many sockets, and
    loadgen built: yields loadgen's path; removes it all after."""
    out = tempfile.mkdtemp(prefix="bloatd-loadgen-")
    loadgen = os.path.join(out, "loadgen")
    sh("gcc", "-O2", "-Wall", "-o", loadgen, os.path.join(REPO, "scripts", "bench", "loadgen.c"))
    subprocess.run([TOPO, "down", LAB], capture_output=True)
    sh(TOPO, "up", LAB, "--direct", timeout=120)
    try:
        for side in ("snd", "rcv"):
            sh(*nsx(side, "sysctl", "-qw", "net.ipv4.ip_local_port_range=1024 65535",
                    "net.core.somaxconn=65535", "net.ipv4.tcp_max_syn_backlog=65535"))
        yield loadgen
    finally:
        subprocess.run([TOPO, "down", LAB], capture_output=True)
        shutil.rmtree(out, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--case", action="append", choices=sorted(CASES) + ["churn"])
    ap.add_argument("--baseline", metavar="BIN",
                    help="another bloatd binary (e.g. an older build) measured under the same load")
    ap.add_argument("--churn", type=int, default=60_000, metavar="N",
                    help="short connections in the churn case")
    ap.add_argument("--churn-rate", type=int, default=1000, metavar="R", help="churn connections per second")
    ap.add_argument("--churn-peers", type=int, default=200, metavar="P", help="client addresses of the churn")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("scale.py: run as root (BPF, network namespaces)")
    with scale_lab() as loadgen:
        variants = [("bloatd", BLOATD, ()), ("no floors", BLOATD, ("--no-floors",))]
        if args.baseline:
            variants.append(("baseline", args.baseline, ()))
        for name in args.case or ["10k-busy", "100k", "churn"]:
            if name == "churn":
                run_churn(loadgen, args.churn, args.churn_rate, args.churn_peers, variants)
            else:
                run_case(name, loadgen, args.seconds, variants)


if __name__ == "__main__":
    main()
