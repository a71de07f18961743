#!/usr/bin/env python3
"""Where tcp_probe's time goes on cold sockets (a benchmark: it reports,
it does not judge).

The same load as share.py's cold phase (10,000 busy sockets, 5,000
connections sending 200 B ten times a second each way, every segment a
socket's first in its tick) measured under builds of tcp_probe that stop
at successive points of its work, made from the tree of 9d67fca (BASE) with
scripts/bench/cold_variants.patch (-DBLOATD_VARIANT=N):

  empty    entry and the event counter, nothing read          (10)
  gate     + the gate: tcp_sock's ACK and data stamps           (1)
  record   + bloatd's record (socket storage), nothing written  (2)
  slot     the gate, then a plain array slot indexed by the
           socket's hash instead of socket storage              (4)
  echo     + the receiver RTT's echo sample, the update stamp   (3)
  fill     + the due sample's reads of tcp_sock                 (6)
  nostats  + floors, queues, accounting, stream; no statistics  (5)
  full     this build                                           (0)
  phase    not a design: a socket's segments looked at only in one
           tick of 25 (its hash's phase), then as `full`: the cost
           if sampling could skip the segments of the other ticks (11)
  second   not a design: the gate, then a socket whose last ACK came
           more than a tick ago sampled only at its first segment of
           each second (the kernel's stamp decides), else as `full` (12)

Each figure is the median over --rounds rounds, variants in alternating
order, under the kernel's BPF statistics (which cost time themselves:
`empty` shows how much). Variants are built once into
target/cold-variants/ (a tree exported with git archive and patched).

Not in `make bench` (see BASE). Usage: scripts/bench/cold_breakdown.py [--rounds N] [--seconds S]
                                  [--variants NAME,...]   (root)
"""
import argparse
import os
import shutil
import subprocess
import time

from scale import REPO, Load, scale_lab, start_daemon
from share import bpf_share, prog_runs, span

VARIANTS = [("empty", 10), ("gate", 1), ("record", 2), ("slot", 4), ("echo", 3),
            ("fill", 6), ("nostats", 5), ("full", 0), ("phase", 11), ("second", 12)]
PATCH = os.path.join(REPO, "scripts", "bench", "cold_variants.patch")
# The tree the patch was written for: the probes before adaptive sampling
# (issue 29), whose every sparse segment was due a sample. Its read is a
# map-element iterator, which some kernels refuse (this project's 6.18 VM
# since 2026-12): there its builds cannot start, and this script says so.
BASE = "9d67fca"


def build_variants(variants):
    """Each variant's binary, built from BASE with the patch applied."""
    top = os.path.join(REPO, "target", "cold-variants")
    src, tgt = os.path.join(top, "src"), os.path.join(top, "target")
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(src)
    archive = subprocess.run(["git", "-C", REPO, "archive", BASE], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", src], input=archive.stdout, check=True)
    # (not git apply: inside this repository's tree it skips, silently, paths it
    # takes to be outside the current directory)
    r = subprocess.run(["patch", "-p1", "--forward", "-i", PATCH], cwd=src, capture_output=True,
                       text=True)
    if r.returncode:
        raise SystemExit("cold_variants.patch no longer applies to bpf/probes.bpf.c:\n"
                         + r.stdout + r.stderr)
    probes = os.path.join(src, "bpf", "probes.bpf.c")
    text = open(probes).read()
    if "#define BLOATD_VARIANT 0" not in text:
        raise SystemExit("cold_variants.patch did not apply: no BLOATD_VARIANT in bpf/probes.bpf.c")
    bins = {}
    for name, n in variants:
        open(probes, "w").write(text.replace("#define BLOATD_VARIANT 0", f"#define BLOATD_VARIANT {n}"))
        print(f"  building {name} (BLOATD_VARIANT {n})", flush=True)
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "bloatd"], cwd=src, check=True,
                       env={**os.environ, "CARGO_TARGET_DIR": tgt})
        # a directory per variant: `bloatd stop` signals only a binary named bloatd
        d = os.path.join(top, name)
        os.makedirs(d, exist_ok=True)
        shutil.copy2(os.path.join(tgt, "release", "bloatd"), os.path.join(d, "bloatd"))
        bins[name] = os.path.join(d, "bloatd")
    shutil.rmtree(src, ignore_errors=True)
    return bins


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8, help="each measurement window")
    ap.add_argument("--variants", metavar="NAME,...",
                    help="only these (default all: " + ",".join(n for n, _ in VARIANTS) + ")")
    args = ap.parse_args()
    variants = VARIANTS
    if args.variants:
        want = args.variants.split(",")
        unknown = set(want) - {n for n, _ in VARIANTS}
        if unknown:
            ap.error(f"unknown variant(s): {', '.join(sorted(unknown))}")
        variants = [v for v in VARIANTS if v[0] in want]
    if os.geteuid():
        raise SystemExit("cold_breakdown.py: run as root (it loads BPF programs)")
    bins = build_variants(variants)
    res = {name: [] for name, _ in variants}
    names = [name for name, _ in variants]
    with scale_lab() as loadgen:
        load = Load(loadgen, 10_000, 10_000)
        try:
            time.sleep(3)
            for r in range(args.rounds):
                for name in (names if r % 2 == 0 else names[::-1]):
                    before = set(prog_runs())
                    d = start_daemon(bins[name], bpf_stats=True)
                    progs = set(prog_runs()) - before
                    try:
                        load.touch()
                        time.sleep(2)
                        p0, t0 = prog_runs(), time.monotonic()
                        time.sleep(args.seconds)
                        p1, t1 = prog_runs(), time.monotonic()
                    finally:
                        d.cleanup()
                    share, ns = bpf_share(progs, p0, p1, t1 - t0)
                    ev = sum(p1[i][2] - p0[i][2] for i in progs
                             if i in p0 and p1[i][0] == "tcp_probe") / (t1 - t0)
                    res[name].append((share, ns, ev))
                    print(f"  round {r + 1}: {name:8} {ns:4.0f} ns/event, all programs "
                          f"{share:.2f}% of a core, {ev:,.0f} events/s", flush=True)
        finally:
            load.close()
    print("\nvariant   tcp_probe ns/event, median (range)   all programs, % of a core")
    for name in names:
        print(f"{name:9} {span([x[1] for x in res[name]]):32} {span([x[0] for x in res[name]])}")


if __name__ == "__main__":
    main()
