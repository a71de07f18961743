#!/usr/bin/env python3
"""The chart's DaemonSet pod under the server-scale loads (a benchmark: it
reports, it does not judge): the numbers behind the chart's resources
(daemon/dist/helm/bloatd/values.yaml, README "Fleet").

The pod runs from the image (make image) with the chart's defaults, as
scripts/tests/test_image.py runs it (harness.Pod); the loads are
scripts/bench/scale.py's (10k-busy: 10,000 sockets all busy; 100k:
100,000 sockets, 10,000 busy). Measured for --seconds: the pod's CPU, what
its memory cgroup holds (the daemon, the clients `kubectl exec` would run
in it, and the kernel memory its BPF maps take), before and after a
`bloatd sockets --json`, a /metrics scrape and the probes, and the peak.

Usage: scripts/bench/pod.py [--seconds S] [--case NAME]... [--memory-limit Q]   (root)
"""
import argparse
import json
import os
import time
import urllib.request

from bloatdpy.harness import Pod, render
from scale import CASES, Load, proc_cpu_s, scale_lab, timed

MIB = 1 << 20


def exec_ok(pod, *cmd):
    """A command in the pod (as `kubectl exec`): its output, or exit naming
    how it failed (the memory limit's OOM kill among the causes)."""
    r = pod.exec(*cmd, check=False, timeout=120)
    if r.returncode != 0:
        st = pod.state()
        raise SystemExit(f"{' '.join(cmd)} in the pod: exit {r.returncode} {r.stderr.strip()}; "
                         f"pod {st.get('Status')}, OOM killed {st.get('OOMKilled')}; "
                         f"memory {pod.memory() if st.get('Status') == 'running' else '-'}")
    return r.stdout


def measure(loadgen, case, seconds, memory_limit):
    sockets, busy = CASES[case]
    print(f"\n== {case}: {sockets:,} established sockets, {busy:,} busy", flush=True)
    load = Load(loadgen, sockets, busy)
    pod = None
    try:
        objs = render({"resources": {"limits": {"memory": memory_limit}}} if memory_limit else None)
        pod = Pod(objs)
        if not pod.started(timeout=60):
            raise SystemExit(f"the pod did not start:\n{pod.logs()}")
        load.touch()
        time.sleep(3)
        pid = pod.pid()
        c0, t0 = proc_cpu_s(pid), time.monotonic()
        time.sleep(seconds)
        cpu = 100 * (proc_cpu_s(pid) - c0) / (time.monotonic() - t0)
        idle, _ = pod.memory()
        status = json.loads(pod.exec("bloatd", "status", "--json").stdout)
        sockets_ms, out = timed(lambda: exec_ok(pod, "bloatd", "sockets", "--json"))
        metrics_ms, _ = timed(lambda: urllib.request.urlopen(f"http://{pod.listen}/metrics").read())
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            pod.probe(probe)
        now, peak = pod.memory()
        limits = objs["DaemonSet"]["spec"]["template"]["spec"]["containers"][0]["resources"]
        print(f"  sockets tracked {status['sockets']:,} (map {status['health']['map_entries']:,}/{status['health']['map_capacity']:,}), "
              f"listed {len(json.loads(out)):,}")
        print(f"  pod CPU                       {cpu:.2f}% of one core")
        print(f"  pod memory, under the load    {idle / MIB:.1f} MiB")
        print(f"  after sockets/metrics/probes  {now / MIB:.1f} MiB, peak {peak / MIB:.1f} MiB")
        print(f"  bloatd sockets --json (exec)  {sockets_ms:.0f} ms; /metrics {metrics_ms:.1f} ms")
        print(f"  chart resources               {json.dumps(limits)}")
    finally:
        if pod:
            pod.terminate(30)
            pod.remove()
        load.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--case", action="append", choices=sorted(CASES))
    ap.add_argument("--memory-limit", metavar="QUANTITY",
                    help="the pod's memory limit instead of the chart's (e.g. 2Gi, to measure the peak)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("pod.py: run as root (BPF, network namespaces, podman)")
    with scale_lab() as loadgen:
        for case in args.case or ["10k-busy", "100k"]:
            measure(loadgen, case, args.seconds, args.memory_limit)


if __name__ == "__main__":
    main()
