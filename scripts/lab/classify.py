"""The bottleneck classifier against the lab's truth (issue 33): what kind
of queue bloatd says a path waits in, over a matrix of links, queues and
congestion controls, as a confusion table.

    sudo $(scripts/python.sh) scripts/lab/lab.py --classify [--quick]    (make lab-classify)

A run: a fresh lab of one profile (3.5g, 3g: constant rate; lte: a
measured trace) behind one queue (the profile's drop-tail buffer, the lab's
CoDel, FQ-CoDel, or CoDel marking ECN), one bulk download with one
congestion control (cubic, bloatd_westwood, bbr) for --classify-seconds.
Once a second, bloatd's class of the sender's path (`/v1/paths`, which
also makes the reads the classifier observes: it makes none of its own).
The run's class is its last answer; it was decided at the first second from
which every answer is that one. The truth is the queue the lab built (its
truth file: tbf or the delay line, and the delay line's AQM and ECN): a
drop-tail buffer should read `droptail`, CoDel and FQ-CoDel `aqm`, CoDel
with ECN `ecn-aqm`.

Results in --out: classify.jsonl (a line per run: the cell, the truth, every
answer with its reason) and classify.md (the confusion table, the share
correct, AQM runs called drop-tail, the seconds to a decision). Whose
traffic fills the queue (self, neighbour, external) is not classified yet.
"""
import json
import os
import statistics
import time

from bloatdpy import api, instrument, truth
from bloatdpy.harness import RCV4, available_cc

QUEUES = {  # name: (topo.sh profile options, the class that is right)
    "droptail": ("", "droptail"),
    "codel": (":aqm=codel", "aqm"),
    "fq_codel": (":aqm=fq_codel", "aqm"),
    "codel-ecn": (":aqm=codel:ecn=1", "ecn-aqm"),
}
CLASSES = ["clear", "droptail", "aqm", "ecn-aqm", "unknown", "-"]
PROFILES = ["3.5g", "3g", "lte"]
CCS = ["cubic", "bloatd_westwood", "bbr"]


def log(msg):
    print(msg, flush=True)


def truth_queue(name):
    """The queue the lab built, named as QUEUES names it."""
    cfg = truth.config(name)
    if cfg["bottleneck"] == "tbf" or cfg["aqm"] == "droptail":
        return "droptail"
    return cfg["aqm"] + ("-ecn" if cfg["ecn"] else "")


def one_run(labmod, name, spec, cc, seconds):
    lab = labmod.Experiment(name)
    try:
        lab.down()
        lab.up(labmod.Profile(spec))
        lab.topo.ping("snd", RCV4, count=2, interval=0.2)  # ARP, and the path's floor
        ino = instrument.netns_inode(f"{name}-snd")
        queue = truth_queue(name)
        t0 = time.monotonic()
        lab.fetch(cc, nbytes=0, seconds=seconds + 5, label="bulk")
        answers = []
        while time.monotonic() - t0 < seconds:
            time.sleep(max(0.0, len(answers) + 1 - (time.monotonic() - t0)))
            mine = [p for p in api.get("/v1/paths") if p["netns"] == ino and p["peer"] == RCV4]
            b = mine[0].get("bottleneck") if mine else None
            answers.append((round(time.monotonic() - t0, 1), b["class"] if b else "-",
                            b["why"] if b else ""))
        # What the queue did: an AQM whose buffer overflows before its
        # control law acts is a drop-tail buffer to the traffic.
        bn = truth.bottleneck(name)
        did = {k: int(bn["stats"][k]) for k in ("codel_dropped", "overlimit_dropped", "ce_marked",
                                                 "sojourn_us_p50", "sojourn_us_p90")
               if k in bn.get("stats", {})} or {"dropped": bn.get("dropped")}
    finally:
        lab.down()
    final = answers[-1][1] if answers else "-"
    decided = next((a[0] for i, a in enumerate(answers)
                    if all(x[1] == final for x in answers[i:])), None)
    return {"queue": queue, "class": final, "decided_s": decided, "did": did,
            "answers": [list(a) for a in answers]}


def table(rows):
    """classify.md's text from the runs."""
    out = ["| truth \\ class | " + " | ".join(CLASSES) + " | right |", "|---" * (len(CLASSES) + 2) + "|"]
    right_n = 0
    for q, (_, want) in QUEUES.items():
        rs = [r for r in rows if r["queue"] == q]
        if not rs:
            continue
        n = {c: sum(r["class"] == c for r in rs) for c in CLASSES}
        right_n += n[want]
        out.append(f"| {q} ({want}), {len(rs)} runs | " + " | ".join(str(n[c]) for c in CLASSES)
                   + f" | {n[want] / len(rs):.0%} |")
    aqm_dt = sum(r["class"] == "droptail" for r in rows if QUEUES[r["queue"]][1] != "droptail")
    right = [r["decided_s"] for r in rows if r["class"] == QUEUES[r["queue"]][1] and r["decided_s"] is not None]
    out += ["", f"Right: {right_n} of {len(rows)} runs ({right_n / max(1, len(rows)):.0%}); "
            f"AQM runs called drop-tail: {aqm_dt}; seconds to a right decision: "
            + (f"median {statistics.median(right):.0f}, max {max(right):.0f}" if right else "none"), "",
            "| profile | queue | cc | classes (decided after s) |", "|---|---|---|---|"]
    cells = {}
    for r in rows:
        cells.setdefault((r["profile"], r["queue"], r["cc"]), []).append(r)
    for (p, q, cc), rs in cells.items():
        out.append(f"| {p} | {q} | {cc} | " + ", ".join(
            f"{r['class']} ({r['decided_s'] if r['decided_s'] is not None else '-'})" for r in rs) + " |")
    return "\n".join(out) + "\n"


def run(args, labmod):
    profiles = args.profiles.split(",") if args.profiles else (["3.5g"] if args.quick else PROFILES)
    queues = args.classify_queues.split(",")
    ccs = args.classify_ccs.split(",")
    reps = 1 if args.quick else args.classify_reps
    bad = [q for q in queues if q not in QUEUES]
    if bad:
        log(f"lab --classify: unknown queue(s) {', '.join(bad)} (queues: {', '.join(QUEUES)})")
        return 2
    missing = [c for c in ccs if c not in available_cc()]
    if missing:
        log(f"lab --classify: congestion control(s) not available: {', '.join(missing)}")
        return 2
    cells = [(p, q, cc, rep) for rep in range(reps) for p in profiles for q in queues for cc in ccs]
    os.makedirs(args.out, exist_ok=True)
    raw = os.path.join(args.out, "classify.jsonl")
    each_s = args.classify_seconds + 5
    log(f"lab --classify: {len(cells)} runs ({len(profiles)} profiles x {len(queues)} queues x "
        f"{len(ccs)} congestion controls x {reps}), about {len(cells) * each_s / 60:.0f} min; "
        f"results in {args.out}/")
    rows, t_start = [], time.monotonic()
    with open(raw, "w") as f:
        for i, (p, q, cc, rep) in enumerate(cells):
            spent = time.monotonic() - t_start
            eta = spent / i * (len(cells) - i) if i else len(cells) * each_s
            log(f"  [{i + 1:3}/{len(cells)}] {spent / 60:5.1f} min, ETA {eta / 60:4.1f} min | "
                f"{p} {q} {cc} (rep {rep + 1})")
            r = one_run(labmod, args.name, p + QUEUES[q][0], cc, args.classify_seconds)
            if r["queue"] != q:
                raise RuntimeError(f"{p}{QUEUES[q][0]}: the lab's truth says {r['queue']}, not {q}")
            r.update(profile=p, cc=cc, rep=rep)
            rows.append(r)
            f.write(json.dumps(r) + "\n")
            f.flush()
            last = r["answers"][-1][2] if r["answers"] else ""
            log(f"        {r['class']} (decided after {r['decided_s']} s): {last}; the queue: "
                + " ".join(f"{k}={v}" for k, v in r["did"].items()))
    text = table(rows)
    with open(os.path.join(args.out, "classify.md"), "w") as f:
        f.write(text)
    log(text)
    return 0
