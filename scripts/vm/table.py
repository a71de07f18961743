#!/usr/bin/env python3
"""The feature x kernel table of the kernel matrix (scripts/vm/run.sh), from
each kernel's result.json (kernel_tier.py): markdown on stdout, and with
--readme (`make kernels-table`) the generated part of README's "Supported
kernels" section (between its begin and end markers) replaced by it, when
every kernel of the matrix ran and passed: README shows only a matrix that
passed, and a test run changes nothing tracked."""

import argparse
import json
import os
import re

BEGIN = "<!-- supported-kernels:begin (make kernels-table writes this part) -->"
# What README's section had before `make kernels-table` wrote it.
OLD_BEGIN = "<!-- supported-kernels:begin (scripts/vm/run.sh writes this part) -->"
END = "<!-- supported-kernels:end -->"

# Column order and what each kernel is.
KERNELS = [
    ("5.10", "Debian 11"),
    ("5.14", "Linux 5.14, built: RHEL 9's base"),
    ("5.15", "Ubuntu 22.04"),
    ("6.1", "Debian 12"),
    ("6.12", "Debian 13"),
    ("host", "this host"),
]

# (row label, checks of kernel_tier.py whose passing makes it "yes")
CHECK_ROWS = [
    ("core: probes, `sockets` against `ss`, `top`, `paths`, `/metrics`",
     ["start", "sockets vs ss", "top --once", "paths", "metrics", "stop"]),
    ("`kill -9`, then `start` again", ["kill -9, start"]),
    ("congestion controls: bloatd_westwood, bloatd_cubic carry a flow", ["congestion controls"]),
    ("a bloated flow (seconds of queue) against `ss` and ping", ["bloated flow"]),
    ("policy: a rule by port", ["policy by port"]),
    ("policy: a rule by cgroup", ["policy by cgroup"]),
    ("DRWA on a delay-line link", ["DRWA"]),
]

# (row label, feature name in `bloatd status`, short text of its fallback)
FEATURE_ROWS = [
    ("struct_ops registration (`cc_link`)", "cc_link", "map update; links need 6.4"),
    ("receiver RTT clock (`rcv_rtt_usec`)", "rcv_rtt_usec", "ms timestamps; µs need 6.7"),
    ("congestion state events (`ca_state_events`)", "ca_state_events",
     "read per sample; tracepoint needs 5.19"),
    ("closing senders, policy, DRWA hook (`sock_ops`)", "sock_ops", None),
    ("DRWA's window give-back (`drwa`)", "drwa", None),
]


def load(results):
    out = {}
    for k, _ in KERNELS:
        path = os.path.join(results, k, "result.json")
        if os.path.exists(path):
            with open(path) as f:
                out[k] = json.load(f)
            secs = os.path.join(results, k, "seconds")
            if os.path.exists(secs):
                out[k]["seconds"] = int(open(secs).read().strip() or 0)
    return out


def check_cell(r, names):
    if core_note(r):
        return f"no: {core_note(r)}" if names[0] == "start" else "no (no core)"
    checks = {c["name"]: c for c in r["checks"]}
    got = [checks.get(n) for n in names]
    if any(c is None for c in got):
        return "not run"
    if any(c["status"] == "fail" for c in got):
        bad = next(c for c in got if c["status"] == "fail")
        return f"**FAILED**: {bad['name']}"
    if all(c["status"] == "skip" for c in got):
        return "no: " + got[0]["detail"] if len(got) == 1 else "no"
    return "yes"


def feature_cell(r, name, short):
    f = next((f for f in r.get("features", []) if f["name"] == name), None)
    if f is None:
        return "—"
    if f["state"] == "on":
        return "yes"
    if f["state"] == "fallback":
        return f"yes ({short or f['detail']})"
    return f"no: {f['detail']}"


def core_note(r):
    """What a kernel below the core's minimum lacks ("socket local storage
    in tracing programs (Linux 5.11)"), as `start` said when it refused."""
    start = next((c for c in r["checks"] if c["name"] == "start"), None)
    if not start or not start["detail"].startswith("exit 2"):
        return None
    m = re.search(r"needs (Linux [\d.]+) or newer, and this one lacks (.*?);", start["detail"])
    return f"start exits 2, needs {m.group(1)}: lacks {m.group(2)}" if m else start["detail"]


def table(results):
    rs = load(results)
    cols = [(k, label) for k, label in KERNELS if k in rs]
    head = ["part"] + [f"{rs[k]['kernel'].split('-')[0] if k == 'host' else k} ({label})"
                       for k, label in cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, names in CHECK_ROWS:
        lines.append("| " + " | ".join([label] + [check_cell(rs[k], names) for k, _ in cols]) + " |")
    for label, name, short in FEATURE_ROWS:
        lines.append("| " + " | ".join([label] + [feature_cell(rs[k], name, short) for k, _ in cols])
                     + " |")
    notes = []
    for k, label in cols:
        r = rs[k]
        where = "natively" if k == "host" else "in a VM (qemu TCG, 1 CPU)"
        notes.append(f"- {r['kernel']} ({label}), {where}: {r.get('seconds', '?')} s; "
                     f"`sudo scripts/vm/run.sh {k}`")
    return "\n".join(lines) + "\n\n" + "\n".join(notes) + "\n"


def not_passed(results):
    """Why the results in `results` are not a passing run of the whole
    matrix: a kernel that did not run, or failed."""
    rs = load(results)
    why = []
    for k, _ in KERNELS:
        if k not in rs:
            why.append(f"{k} did not run")
        elif rs[k].get("exit") != 0:
            bad = [c["name"] for c in rs[k]["checks"] if c["status"] == "fail"]
            why.append(f"{k} failed ({', '.join(bad) or 'exit ' + str(rs[k].get('exit'))})")
    return why


def write_readme(readme, t):
    with open(readme) as f:
        text = f.read()
    pat = re.compile("(?:" + re.escape(BEGIN) + "|" + re.escape(OLD_BEGIN) + ")" + r".*?" +
                     re.escape(END), re.S)
    if not pat.search(text):
        raise SystemExit(f"{readme}: no {BEGIN} ... {END} section to fill")
    new = pat.sub(lambda _: BEGIN + "\n" + t + END, text)
    if new != text:
        with open(readme, "w") as f:
            f.write(new)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", required=True)
    ap.add_argument("--readme")
    a = ap.parse_args()
    t = table(a.results)
    if not a.readme:
        print(t, end="")
        return
    why = not_passed(a.results)
    if why:
        raise SystemExit(f"{a.readme} unchanged: the last matrix run in {a.results} did not pass on "
                         f"every kernel ({'; '.join(why)}): `sudo make vm-test` first")
    write_readme(a.readme, t)
    print(f"{a.readme}: the supported-kernels table of the run in {a.results}")


if __name__ == "__main__":
    main()
