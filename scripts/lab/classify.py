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

Whose traffic fills the queue (`bottleneck.owner`: self, neighbour,
external, mixed, unknown) with --classify-cross ARMS: each cell runs each
arm on a lab with the cross-traffic namespaces (topo.sh --cross), the
cell's congestion control for every TCP flow (on a trace link the trace
starts over at each arm's start, so every arm meets the same stretch):

    own      the own bulk download alone                           (self)
    nbr      a neighbour namespace's download (NAME-nbr, sockets bloatd
             sees), after 3 s a light own flow                     (neighbour)
    udp      an own download for 4 s into the empty queue (bloatd's queue
             is RTT - floor: a path first seen inside a standing queue has
             no floor), then external UDP at 105% of the link's rate (on a
             trace, of its highest one-second rate over the arm) that
             alone keeps the buffer full, filled at first by a second
             stream at 50%; then the light own flow                (external)
    own+nbr  the own and the neighbour's downloads together        (mixed)
    own+udp  the own download, joined after 5 s by UDP at 50% of the
             link                                                  (mixed)

The light own flow: transfers of 5% of a second of the link on one
connection, 0.25 s apart, so that the path carries traffic and has RTT
samples every second while carrying little of the link. The judged
window starts when all of the arm's flows run (a TCP flow from its
handshake) and lasts
--classify-seconds; the truth is the kernel's count of each owner's
bytes out of the bottleneck over it (truth.counters): the owner of >= 75%,
else mixed. The arm's intended owner is kept beside it. Answers (class,
why, owner, why, neighbours, bloatd's queue of the path in ms, the
bottleneck's backlog in bytes) once a second from the arm's start; times
from the window's start (negative before it); the decision is taken over
the window's answers. Where the daemon gives no owner it reads "-".

Results in --out: classify.jsonl (a line per run: the cell, the truth, every
answer with its reason) and classify.md (the confusion table, the share
correct, AQM runs called drop-tail, the seconds to a decision; with
--classify-cross also the owner table per profile and overall, the runs
whose shares disagree with their arm, and every run).
"""
import json
import math
import os
import statistics
import subprocess
import time

from bloatdpy import api, instrument, truth
from bloatdpy.harness import RCV4, SND4, available_cc

QUEUES = {  # name: (topo.sh profile options, the class that is right)
    "droptail": ("", "droptail"),
    "codel": (":aqm=codel", "aqm"),
    "fq_codel": (":aqm=fq_codel", "aqm"),
    "codel-ecn": (":aqm=codel:ecn=1", "ecn-aqm"),
}
CLASSES = ["clear", "droptail", "aqm", "ecn-aqm", "unknown", "-"]
PROFILES = ["3.5g", "3g", "lte"]
CCS = ["cubic", "bloatd_westwood", "bbr"]
# The cross-traffic arms (--classify-cross): name: the owner the arm means
# the queue to be. The truth scored is the kernel's count, not this.
ARMS = {"own": "self", "nbr": "neighbour", "udp": "external", "own+nbr": "mixed",
        "own+udp": "mixed"}
OWNER_CLASSES = ["self", "neighbour", "external", "mixed", "unknown", "-"]
OWNER_SHARE = 0.75  # the owner of >= this share of the bytes out of the bottleneck owns the queue
NBR_LEAD_S = 3.0  # nbr: the neighbour's download alone before the light own flow
FLOOR_S = 4.0  # udp: the own download into the empty queue first
UDP_OVER = 1.05  # udp: the stream's rate over the link's (its mean, on a trace)
UDP_FILL = 0.5  # udp: a second stream at this share of the link, to fill the buffer
OWN_UDP_SHARE = 0.5  # own+udp: the stream's rate over the link's
OWN_LEAD_S = 5.0  # own+udp: the own download alone before the stream joins


def log(msg):
    print(msg, flush=True)


def truth_queue(name):
    """The queue the lab built, named as QUEUES names it."""
    cfg = truth.config(name)
    if cfg["bottleneck"] == "tbf" or cfg["aqm"] == "droptail":
        return "droptail"
    return cfg["aqm"] + ("-ecn" if cfg["ecn"] else "")


def answer(ino, cross=False, rino=None):
    """bloatd's answer for the judged path now (the sender's namespace,
    toward the receiver): [class, why], with `cross` also [owner, its why,
    the path's neighbours, bloatd's queue of the path in ms], with `rino`
    (the receiver's namespace) also [class, why] of the receiver's path
    back to the sender (it only receives); "-" where the path or the
    answer is absent."""
    paths = api.get("/v1/paths")

    def of(netns, peer):
        mine = [p for p in paths if p["netns"] == netns and p["peer"] == peer]
        return mine, (mine[0].get("bottleneck") if mine else None) or {}
    mine, b = of(ino, RCV4)
    out = [b.get("class", "-"), b.get("why", "")]
    if cross:
        o = b.get("owner") or {}
        q = mine[0].get("queue_delay_p50_us") if mine else None
        out += [o.get("class", "-"), o.get("why", ""), o.get("neighbours", []),
                round(q / 1000, 1) if q is not None else None]
    if rino is not None:
        _, rb = of(rino, SND4)
        out += [rb.get("class", "-"), rb.get("why", "")]
    return out


def decided(answers, key):
    """The last answer's `key` (an index into an answer), and the first
    second from which every answer has it (None: no answer)."""
    final = answers[-1][key] if answers else "-"
    return final, next((a[0] for i, a in enumerate(answers)
                        if all(x[key] == final for x in answers[i:])), None)


def queue_did(name):
    """What the queue did: an AQM whose buffer overflows before its
    control law acts is a drop-tail buffer to the traffic."""
    bn = truth.bottleneck(name)
    return {k: int(bn["stats"][k]) for k in ("codel_dropped", "overlimit_dropped", "ce_marked",
                                             "sojourn_us_p50", "sojourn_us_p90")
            if k in bn.get("stats", {})} or {"dropped": bn.get("dropped")}


def one_run(labmod, name, spec, cc, seconds):
    lab = labmod.Experiment(name)
    try:
        lab.down()
        lab.up(labmod.Profile(spec))
        lab.topo.ping("snd", RCV4, count=2, interval=0.2)  # ARP, and the path's floor
        ino = instrument.netns_inode(f"{name}-snd")
        rino = instrument.netns_inode(f"{name}-rcv")
        queue = truth_queue(name)
        t0 = time.monotonic()
        lab.fetch(cc, nbytes=0, seconds=seconds + 5, label="bulk")
        answers = []
        while time.monotonic() - t0 < seconds:
            time.sleep(max(0.0, len(answers) + 1 - (time.monotonic() - t0)))
            answers.append([round(time.monotonic() - t0, 1), *answer(ino, rino=rino)])
        did = queue_did(name)
    finally:
        lab.down()
    final, decided_s = decided(answers, 1)
    rfinal, rdecided_s = decided(answers, 3)
    return {"queue": queue, "class": final, "decided_s": decided_s,
            "receiver_class": rfinal, "receiver_decided_s": rdecided_s, "did": did,
            "answers": answers}




def trace_peak_bps(path, t_from, t_to):
    """The highest one-second rate of a Mahimahi trace (a line per
    1500-byte delivery opportunity, its time in ms; it repeats from its
    start) over seconds [t_from, t_to) from its start."""
    with open(path) as f:
        ms = [int(x) for x in f.read().split()]
    period = max(1, math.ceil(ms[-1] / 1000))
    per_s = [0] * period
    for t in ms:
        per_s[min(period - 1, t // 1000)] += 1
    return max(per_s[s % period] for s in range(int(t_from), math.ceil(t_to))) * 1500 * 8


def cross_run(labmod, name, spec, cc, seconds, arm):
    """One run of a cross-traffic arm (ARMS): the arm's flows started in
    its order, then bloatd's class and owner of the sender's path once a
    second for `seconds` from the moment all of the arm's flows run (the
    judged window; answers before it are kept with negative times). The
    truth: each owner's bytes out of the bottleneck over that window."""
    lab = labmod.Experiment(name)
    prof = labmod.Profile(spec)
    try:
        lab.down()
        lab.up(prof, topo_args=["--profile", spec, "--cross"])
        lab.topo.ping("snd", RCV4, count=2, interval=0.2)  # ARP, and the path's floor
        ino = instrument.netns_inode(f"{name}-snd")
        queue = truth_queue(name)
        rate = prof.rate_bps  # a trace's mean for a trace link (topo.sh profile)
        if prof.trace:
            # every arm meets the same stretch of the trace, from its start
            subprocess.run([labmod.TOPO, "restart-trace", name], check=True)
        t_arm = time.monotonic()
        answers = []

        def watch_until(t_end, t_zero):
            # one answer on each whole second from t_zero, up to t_end
            while True:
                tick = t_zero + math.floor(time.monotonic() - t_zero) + 1
                if tick > t_end + 0.01:
                    return
                time.sleep(max(0.0, tick - time.monotonic()))
                answers.append([round(time.monotonic() - t_zero, 1), *answer(ino, cross=True),
                                lab.backlog_bytes()])

        opened = {}  # label: seconds from the arm's start to the connection's handshake

        def up(p, label):
            # flows.py prints "open" once connect() returned: a flow runs
            # from its handshake on (a lost SYN costs 1 s, 3 s, 7 s)
            labmod.read_event(p, "open")
            opened[label] = round(time.monotonic() - t_arm, 2)

        def light():
            up(lab.fetch(cc, nbytes=truth.light_bytes(rate), count=int((seconds + 30) / truth.LIGHT_GAP_S),
                         gap=truth.LIGHT_GAP_S, label="light", persistent=True), "light")

        run_s = seconds + 30  # every flow outlives the watch; lab.down stops them
        if arm in ("nbr", "own+nbr"):
            # its server first: own+nbr's two downloads then start within
            # a few ms, and neither fills the buffer alone in slow start
            lab.traffic.server("neighbour")
        own = None
        if arm in ("own", "own+nbr", "own+udp"):
            own = lab.fetch(cc, nbytes=0, seconds=run_s, label="bulk")
        if arm in ("nbr", "own+nbr"):
            lab.traffic.bulk("neighbour", cc, run_s)  # returns once connected
            opened["neighbour"] = round(time.monotonic() - t_arm, 2)
        if own:
            up(own, "bulk")
        if arm == "own+udp":
            # The own download alone first, then the stream joins it: the
            # share nobody bloatd sees is measured against what the
            # visible flows carried (daemon/src/bottleneck.rs), and a
            # stream there from the download's first packet reads as the
            # download's own (docs/design.md, "Whose queue": a limit).
            t_udp = time.monotonic() + OWN_LEAD_S
            watch_until(t_udp, t_udp)
            lab.traffic.udp(rate * OWN_UDP_SHARE, run_s)
        if arm == "nbr":
            # the neighbour's download alone first: its queue stands
            # before the own flow's first packet, as a neighbour's would.
            t_light = time.monotonic() + NBR_LEAD_S
            watch_until(t_light, t_light)
            light()
        if arm == "udp":
            # An own download first, into the empty queue: bloatd's queue
            # is RTT - floor, and a path first seen inside a standing
            # queue has no floor to measure from. Then the UDP stream,
            # slightly above the link's rate: alone it keeps the buffer
            # full (drop-tail: it overflows by the excess). A second
            # stream fills the buffer within a few drain times instead of
            # the 20 it would take at 5% excess.
            #
            # On a trace the mean is not enough: TMobile-LTE-short carries
            # 22-32 Mbit/s in its first 10 s (mean 16.7), and a stream at
            # 105% of the mean let the queue drain to 6 kB for 4 s of 15.
            # There the stream runs above the trace's highest second over
            # the arm's time (it overflows by more in the trace's dips).
            up(lab.fetch(cc, nbytes=0, seconds=FLOOR_S, label="floor"), "floor")
            t_udp = time.monotonic() + FLOOR_S
            fill_s = 1.5 * prof.drain_s / (UDP_OVER - 1 + UDP_FILL)
            t_zero = t_udp + fill_s + 1
            over = rate
            if prof.trace:
                over = trace_peak_bps(prof.trace, t_udp - t_arm, t_zero - t_arm + seconds + 1)
            watch_until(t_udp, t_zero)
            lab.traffic.udp(over * UDP_OVER, run_s)
            lab.traffic.udp(rate * UDP_FILL, fill_s, sink=False)
            watch_until(t_zero, t_zero)
            light()
        t0 = time.monotonic()
        before = truth.counters(name)
        watch_until(t0 + seconds, t0)
        after = truth.counters(name)
        did = queue_did(name)
        flows = lab.traffic.flows
    finally:
        lab.down()
    delivered = {o: after.get(o, {}).get("delivered_bytes", 0) - before.get(o, {}).get("delivered_bytes", 0)
                 for o in truth.OWNERS}
    total = sum(delivered.values())
    shares = {o: round(b / total, 3) if total else 0.0 for o, b in delivered.items()}
    top = max(shares, key=shares.get)
    window = [a for a in answers if a[0] > 0.5]
    cls, decided_s = decided(window, 1)
    owner, owner_s = decided(window, 3)
    backlog = sorted(a[7] for a in window)
    return {"queue": queue, "arm": arm, "intended": ARMS[arm],
            "truth": top if shares[top] >= OWNER_SHARE else "mixed",
            "delivered_bytes": delivered, "shares": shares, "rate_bps": rate,
            "class": cls, "decided_s": decided_s, "owner": owner, "owner_decided_s": owner_s,
            "path_queue_s": sum(a[6] is not None for a in window), "watched_s": len(window),
            "backlog_bytes_min": backlog[0] if backlog else None,
            "backlog_bytes_p50": backlog[len(backlog) // 2] if backlog else None,
            "opened_s": opened, "did": did, "udp_flows": [f for f in flows if f["proto"] == "udp"],
            "answers": answers}


def table(rows):
    """classify.md's text from the runs: the judged (sender's) path, then
    the receiver's path of the same runs."""
    out = confusion(rows, "class", "decided_s", lambda r: r["class"] == QUEUES[r["queue"]][1],
                    "classes")
    return "\n".join(out + receiver_table(rows)) + "\n"


def confusion(rows, key, decided_key, right, label):
    """One class confusion table of the runs' `key` against the lab's
    queue, the share `right`, and every cell's answers."""
    out = ["| truth \\ class | " + " | ".join(CLASSES) + " | right |", "|---" * (len(CLASSES) + 2) + "|"]
    right_n = 0
    for q, (_, want) in QUEUES.items():
        rs = [r for r in rows if r["queue"] == q]
        if not rs:
            continue
        n = {c: sum(r[key] == c for r in rs) for c in CLASSES}
        k = sum(right(r) for r in rs)
        right_n += k
        out.append(f"| {q} ({want}), {len(rs)} runs | " + " | ".join(str(n[c]) for c in CLASSES)
                   + f" | {k / len(rs):.0%} |")
    aqm_dt = sum(r[key] == "droptail" for r in rows if QUEUES[r["queue"]][1] != "droptail")
    secs = [r[decided_key] for r in rows if right(r) and r[decided_key] is not None]
    out += ["", f"Right: {right_n} of {len(rows)} runs ({right_n / max(1, len(rows)):.0%}); "
            f"AQM runs called drop-tail: {aqm_dt}; seconds to a right decision: "
            + (f"median {statistics.median(secs):.0f}, max {max(secs):.0f}" if secs else "none"), "",
            f"| profile | queue | cc | {label} (decided after s) |", "|---|---|---|---|"]
    cells = {}
    for r in rows:
        cells.setdefault((r["profile"], r["queue"], r["cc"]), []).append(r)
    for (p, q, cc), rs in cells.items():
        out.append(f"| {p} | {q} | {cc} | " + ", ".join(
            f"{r[key]} ({r[decided_key] if r[decided_key] is not None else '-'})" for r in rs) + " |")
    return out


def receiver_table(rows):
    """The receiver's path of the same runs (it only receives: its
    losses are holes in what arrives; it sees no ECN mark, so behind a
    marking AQM its right answer is `clear` or `unknown`, never
    `ecn-aqm`)."""
    rows = [r for r in rows if "receiver_class" in r]
    if not rows:
        return []

    def right(r):
        want = QUEUES[r["queue"]][1]
        return r["receiver_class"] in (("clear", "unknown") if want == "ecn-aqm" else (want,))
    return ["", "The receiver's path (a download's: it only receives; behind CoDel + ECN it sees "
            "no mark, so there `clear` or `unknown` is right):", ""] + confusion(
        rows, "receiver_class", "receiver_decided_s", right, "receiver's classes")


def owner_confusion(rows, title):
    """One owner confusion table: truth (the shares') rows x bloatd's
    owner, the share right and the seconds to a right decision."""
    out = [f"{title}:", "", "| truth \\ owner | " + " | ".join(OWNER_CLASSES)
           + " | right | s to a right decision |", "|---" * (len(OWNER_CLASSES) + 3) + "|"]
    for want in OWNER_CLASSES[:4]:
        rs = [r for r in rows if r["truth"] == want]
        if not rs:
            continue
        n = {c: sum(r["owner"] == c for r in rs) for c in OWNER_CLASSES}
        right = [r["owner_decided_s"] for r in rs if r["owner"] == want and r["owner_decided_s"] is not None]
        out.append(f"| {want}, {len(rs)} runs | " + " | ".join(str(n[c]) for c in OWNER_CLASSES)
                   + f" | {n[want] / len(rs):.0%} | "
                   + (f"median {statistics.median(right):.0f}, max {max(right):.0f}" if right else "-")
                   + " |")
    n_right = sum(r["owner"] == r["truth"] for r in rows)
    out += ["", f"Right: {n_right} of {len(rows)} runs ({n_right / max(1, len(rows)):.0%}).", ""]
    return out


def owner_table(rows):
    """classify.md's owner part: the confusion per profile and overall,
    the runs whose shares disagree with their arm, and every run."""
    out = ["## Whose traffic fills the queue (`bottleneck.owner`)", "",
           f"Truth: the owner of >= {OWNER_SHARE:.0%} of the bytes out of the bottleneck over the "
           "judged window (the kernel's counters), else mixed.", ""]
    profiles = list(dict.fromkeys(r["profile"] for r in rows))
    if len(profiles) > 1:
        for p in profiles:
            out += owner_confusion([r for r in rows if r["profile"] == p], p)
    out += owner_confusion(rows, "All profiles")
    odd = [r for r in rows if r["truth"] != r["intended"]]
    out += ["Runs whose shares say another owner than their arm: "
            + ("; ".join(f"{r['profile']} {r['queue']} {r['cc']} {r['arm']} (rep {r['rep'] + 1}): "
                         f"{r['truth']}, not {r['intended']}" for r in odd) if odd else "none") + ".", "",
            "| profile | queue | cc | arm | truth | shares self/nbr/ext | owner (decided after s) | class "
            "| path with a queue | backlog p50 (min) |", "|---" * 10 + "|"]
    for r in rows:
        sh = r["shares"]
        bl = (f"{r['backlog_bytes_p50'] / 1000:.0f} kB ({r['backlog_bytes_min'] / 1000:.0f})"
              if r["backlog_bytes_p50"] is not None else "-")
        out.append(f"| {r['profile']} | {r['queue']} | {r['cc']} | {r['arm']} | {r['truth']} | "
                   f"{sh['self']:.0%}/{sh['neighbour']:.0%}/{sh['external']:.0%} | "
                   f"{r['owner']} ({r['owner_decided_s'] if r['owner_decided_s'] is not None else '-'}) | "
                   f"{r['class']} | {r['path_queue_s']}/{r['watched_s']} s | {bl} |")
    return "\n".join(out) + "\n"


def run(args, labmod):
    profiles = args.profiles.split(",") if args.profiles else (["3.5g"] if args.quick else PROFILES)
    queues = args.classify_queues.split(",")
    ccs = args.classify_ccs.split(",")
    arms = [a for a in (args.classify_cross or "").split(",") if a and a != "none"]
    reps = 1 if args.quick else args.classify_reps
    bad = [q for q in queues if q not in QUEUES]
    if bad:
        log(f"lab --classify: unknown queue(s) {', '.join(bad)} (queues: {', '.join(QUEUES)})")
        return 2
    bad = [a for a in arms if a not in ARMS]
    if bad:
        log(f"lab --classify-cross: unknown arm(s) {', '.join(bad)} (arms: {', '.join(ARMS)})")
        return 2
    missing = [c for c in ccs if c not in available_cc()]
    if missing:
        log(f"lab --classify: congestion control(s) not available: {', '.join(missing)}")
        return 2
    cells = [(p, q, cc, arm, rep) for rep in range(reps) for p in profiles for q in queues
             for cc in ccs for arm in (arms or [None])]
    os.makedirs(args.out, exist_ok=True)
    raw = os.path.join(args.out, "classify.jsonl")
    each_s = args.classify_seconds + (12 if arms else 5)
    log(f"lab --classify: {len(cells)} runs ({len(profiles)} profiles x {len(queues)} queues x "
        f"{len(ccs)} congestion controls" + (f" x {len(arms)} cross-traffic arms" if arms else "")
        + f" x {reps}), about {len(cells) * each_s / 60:.0f} min; results in {args.out}/")
    rows, t_start = [], time.monotonic()
    with open(raw, "w") as f:
        for i, (p, q, cc, arm, rep) in enumerate(cells):
            spent = time.monotonic() - t_start
            eta = spent / i * (len(cells) - i) if i else len(cells) * each_s
            log(f"  [{i + 1:3}/{len(cells)}] {spent / 60:5.1f} min, ETA {eta / 60:4.1f} min | "
                f"{p} {q} {cc}" + (f" {arm}" if arm else "") + f" (rep {rep + 1})")
            if arm:
                r = cross_run(labmod, args.name, p + QUEUES[q][0], cc, args.classify_seconds, arm)
            else:
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
            if "receiver_class" in r:
                last = r["answers"][-1][4] if r["answers"] else ""
                log(f"        receiver's path {r['receiver_class']} (decided after "
                    f"{r['receiver_decided_s']} s): {last}")
            if arm:
                last = r["answers"][-1][4] if r["answers"] else ""
                log(f"        owner {r['owner']} (decided after {r['owner_decided_s']} s): {last}; "
                    f"truth {r['truth']} (arm: {r['intended']}), delivered "
                    + " ".join(f"{o} {v:.0%}" for o, v in r["shares"].items())
                    + f"; backlog p50 {r['backlog_bytes_p50']} B, min {r['backlog_bytes_min']} B; "
                    f"path with a queue {r['path_queue_s']} of {r['watched_s']} s")
    text = table(rows) + ("\n" + owner_table(rows) if arms else "")
    with open(os.path.join(args.out, "classify.md"), "w") as f:
        f.write(text)
    log(text)
    return 0
