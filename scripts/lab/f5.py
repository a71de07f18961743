"""F5: acting on bloat in the lab (issue 10).

Runs C and D of Alfredsson et al. (one or five CUBIC bulk downloads, 320 kB
web transfers beside them) in three arms:

    none      as the papers ran them
    drwa      bloatd's DRWA on the receiver (Jiang et al., IMC 2012), switched
              on live through bloatd's API
    westwood  bloatd's "bulk flows to Westwood+" policy on the sender: a rule
              on the server's port that switches a connection to
              bloatd_westwood once it has sent BULK_BYTES (more than a web
              page, so the 320 kB transfers stay CUBIC)

on the 3g and 3.5g profiles. Per web transfer: its response time, and over
its duration the receiver's RTT by ping (ICMP from the server through the
same bottleneck queue, no TCP, no bloatd), the receiver's queueing delay as
bloatd sees it on the bulk flows' sockets, and the bulk flows' goodput
(bytes their receivers got). Means with 95% CIs over the web transfers, every
transfer counted (mean_ci: no outlier rule). The finding line F5 compares DRWA with neither, as
Jiang et al. did (RTT -25..49%, throughput up to +51%).

    sudo $(scripts/python.sh) scripts/lab/lab.py --f5           # 3g + 3.5g, ~35 min
    sudo $(scripts/python.sh) scripts/lab/lab.py --f5 --quick   # 3.5g run C, ~3 min
    $(scripts/python.sh) scripts/lab/lab.py --analyze DIR       # F5 again from DIR/f5.jsonl

The arms are switched through the running bloatd's API, so it needs DRWA
armed and the rule: lab.py starts bloatd with BLOATD_ARGS when none runs.
"""
import json
import os
import re
import statistics
import subprocess
import threading
import time

import analysis
from bloatdpy import api, instrument

ARMS = ["none", "drwa", "westwood"]
ARM_LABEL = {"none": "neither", "drwa": "DRWA (receiver)", "westwood": "bulk→Westwood+ (sender)"}
ARM_COLOR = {"none": "#d62728", "drwa": "#1f77b4", "westwood": "#2ca02c"}
BULK_RULE = "lab-bulk"
# A 320 kB web page is 320,003 bytes with the server's "OK\n": never switched.
BULK_BYTES = 330_000
SERVER_PORT = 8000
BLOATD_ARGS = ["--drwa=off", "--policy",
               f"name={BULK_RULE},sport={SERVER_PORT},bulk_bytes={BULK_BYTES},cc=bloatd_westwood,enabled=false"]
RCV_ADDR = "10.9.2.2"
# A full segment on the wire, as the bottleneck's tbf counts it: MSS 1448,
# TCP with timestamps 32, IP 20, Ethernet 14.
WIRE_SEGMENT = 1514
# The smallest window DRWA sets (policy_ops.h, drwa_round_close: 2 x MSS).
MIN_WINDOW_SEGMENTS = 2
# Paper numbers for the finding line (Jiang et al., IMC 2012, abstract).
PAPER = "paper: RTT -25…49%, throughput up to +51%"


def mean_ci(xs):
    """(n, mean, 95% CI) over every web transfer: F5 rejects no outlier. The
    lab's rule (analysis.reject_outliers, the paper's for its runs) dropped
    a transfer DRWA did not act on from beside a tight group of those it
    did (3.5g C, 514 ms among 249-254 ms), and one it did from among those
    it did not (3g C, 858 ms among 1373-1413 ms): each a result. Where the
    transfers fall in groups the mean says less than the values:
    compare() prints them too."""
    return analysis.mean_ci(xs, reject=False)


def plan(quick):
    """Web transfers per configuration. 3g is slow: a 320 kB transfer takes
    about 19 s alone, two to six times that beside one or five bulk flows,
    so it gets 3 (C) and 2 (D) per arm: a 95% CI from few samples is wide,
    but the campaign stays near half an hour."""
    if quick:
        return {"3.5g": {"C": 4}}
    return {"3.5g": {"C": 10, "D": 8}, "3g": {"C": 3, "D": 2}}


def steps_of(p, profiles, reps=1, first_rep=0):
    """Every (profile, run, arm), arms next to each other so drift between
    them is as small as it can be; repetitions numbered from first_rep (a
    campaign in parts)."""
    out = []
    for prof in profiles:
        for run, shorts in p.get(prof, {}).items():
            for rep in range(first_rep, first_rep + reps):
                for arm in ARMS:
                    out.append({"profile": prof, "run": run, "arm": arm, "rep": rep,
                                "shorts": shorts, "bg_cc": "cubic", "short_cc": "cubic"})
    return out


def step_label(s):
    return f"F5 {analysis.step_label(s)}, {ARM_LABEL[s['arm']]}"


# ------------------------------------------------------------ the daemon

def check_daemon():
    """The running bloatd can switch the arms: DRWA armed, the bulk rule."""
    info = api.get("/v1/policy")
    if info["drwa"]["mode"] == "disabled" or BULK_RULE not in [r["name"] for r in info["rules"]]:
        raise SystemExit(
            "lab --f5: the running bloatd cannot switch the arms: it needs DRWA armed and the rule "
            f"{BULK_RULE}. Stop it (the lab then starts one), or start it with: bloatd start "
            + " ".join(a if " " not in a else repr(a) for a in BLOATD_ARGS))


def set_arm(arm):
    api.request("POST", "/v1/policy/drwa", {"on": arm == "drwa"})
    api.request("POST", f"/v1/policy/rules/{BULK_RULE}", {"enabled": arm == "westwood"})


# ------------------------------------------------------------ measuring

class Monitor:
    """During a step: ping from the server to the receiver (timestamped, -D)
    and bloatd's receiver sockets of the bulk flows, every half second."""

    def __init__(self, lab_name, bg_ports, backlog=None):
        self.bg_ports = set(bg_ports)
        self.rcv_ino = instrument.netns_inode(f"{lab_name}-rcv")
        self.snd_ino = instrument.netns_inode(f"{lab_name}-snd")
        self.samples = []   # (t, {port: (bytes_received, rcv_queue_delay_us, clamp)}, {port: cc})
        self.pings = []     # (t, rtt_ms)
        # The last DRWA state bloatd showed of each receiver of the server
        # (bulk and web): its clamp, RTT_min and where that came from.
        self.drwa_last = {}
        # Every reading of the server's connections, both ends (the
        # timeline: f5_timeline.jsonl), and the bottleneck's queue.
        self.timeline = []
        self.backlog = backlog
        self._stop = threading.Event()
        self.ping = subprocess.Popen(["ip", "netns", "exec", f"{lab_name}-snd", "ping", "-D", "-n",
                                      "-i", "0.2", RCV_ADDR], stdout=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self._threads = [threading.Thread(target=self._poll, daemon=True),
                         threading.Thread(target=self._read_ping, daemon=True)]
        for t in self._threads:
            t.start()

    def _read_ping(self):
        pat = re.compile(r"^\[([0-9.]+)\].*time=([0-9.]+) ms")
        for line in self.ping.stdout:
            m = pat.match(line)
            if m:
                self.pings.append((float(m.group(1)), float(m.group(2))))

    def read(self, keep=False):
        rcv, ccs = {}, {}
        line = {"t": time.time(), "rcv": {}, "snd": {}}
        for s in api.get("/v1/sockets?all=1"):
            if s.get("netns") == self.rcv_ino and s["remote_port"] == SERVER_PORT:
                drwa = ((s.get("policy") or {}).get("drwa")) or {}
                if drwa.get("rounds"):
                    self.drwa_last[s["local_port"]] = drwa
                line["rcv"][s["local_port"]] = {
                    "bytes": s["bytes_received"], "rtt_us": s.get("rcv_ts_rtt_us") or s["rcv_rtt_us"],
                    "drwa": {k: drwa.get(k) for k in TIMELINE_DRWA} if drwa else None}
            if s.get("netns") == self.snd_ino and s["local_port"] == SERVER_PORT:
                line["snd"][s["remote_port"]] = {k: s.get(k) for k in TIMELINE_SENDER}
            if s.get("netns") == self.rcv_ino and s["local_port"] in self.bg_ports:
                clamp = (((s.get("policy") or {}).get("drwa")) or {}).get("clamp_bytes", 0)
                rcv[s["local_port"]] = (s["bytes_received"], s["rcv_queue_delay_us"], clamp)
            if s.get("netns") == self.snd_ino and s["remote_port"] in self.bg_ports:
                ccs[s["remote_port"]] = s["cc"]
        if keep:
            if self.backlog:
                line["backlog"] = self.backlog()
            self.timeline.append(line)
        return rcv, ccs

    def _poll(self):
        while not self._stop.is_set():
            try:
                rcv, ccs = self.read(keep=True)
                self.samples.append((time.time(), rcv, ccs))
            except (OSError, ValueError):
                pass
            self._stop.wait(0.5)

    def stop(self):
        self._stop.set()
        self.ping.terminate()
        try:
            self.ping.wait(timeout=3)
        except subprocess.TimeoutExpired:
            self.ping.kill()
            self.ping.wait()
        for t in self._threads:
            t.join(timeout=3)

    def window(self, t0, t1):
        """What happened between t0 and t1: mean ping RTT, median bloatd
        receiver queue of the bulk flows, their goodput together, DRWA's
        median clamp, the bulk flows' congestion controls."""
        pings = [r for t, r in self.pings if t0 <= t <= t1]
        # bloatd is read every 0.5 s: a web transfer on 3.5g can be shorter,
        # so the readings just around it count too.
        inside = [(t, rcv, ccs) for t, rcv, ccs in self.samples if t0 - 0.6 <= t <= t1 + 0.6]
        out = {"ping_rtt_ms": sum(pings) / len(pings) if pings else None, "pings": len(pings)}
        if len(inside) >= 2:
            (ta, ra, _), (tb, rb, ccs) = inside[0], inside[-1]
            got = sum(rb[p][0] - ra[p][0] for p in rb if p in ra)
            out["bulk_goodput_bps"] = got * 8 / (tb - ta) if tb > ta else None
            queues = sorted(q for _, r, _ in inside for (_, q, _) in r.values())
            clamps = sorted(c for _, r, _ in inside for (_, _, c) in r.values())
            out["rcv_queue_ms"] = queues[len(queues) // 2] / 1000 if queues else None
            out["clamp_bytes"] = clamps[len(clamps) // 2] if clamps else None
            out["bulk_cc"] = sorted(set(ccs.values()))
        return out


# What the timeline keeps of each receiver's DRWA state and each sender.
TIMELINE_DRWA = ("clamp_bytes", "rcvd_per_rtt_bytes", "rtt_us", "min_rtt_us", "min_rtt_source",
                 "held_rounds_left", "rounds", "held")
TIMELINE_SENDER = ("cc", "cwnd", "ssthresh", "inflight", "srtt_us", "retrans", "lost", "ca_state")


def drwa_line(who, d):
    """A receiver's DRWA state for the progress line: clamp, RTT_min and its
    source, cuts taken back."""
    if not d:
        return ""
    src = d.get("min_rtt_source") or ("held" if d.get("held_rounds_left") else "-")
    return (f"; {who} DRWA clamp {d.get('clamp_bytes', 0) / 1000:.1f} kB, RTT_min "
            f"{d.get('min_rtt_us', 0) / 1000:.0f} ms ({src}), {d.get('held', 0)} taken back")


def wait_acted(mon, arm, n_bg, timeout_s):
    """Until the arm's mechanism acts on every bulk flow: DRWA clamps its
    receiver, the bulk rule switched its sender. Returns the seconds it
    took, None if it did not within timeout_s."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        try:
            rcv, ccs = mon.read()
        except (OSError, ValueError):
            rcv, ccs = {}, {}
        if arm == "drwa" and len(rcv) == n_bg and all(c > 0 for _, _, c in rcv.values()):
            return time.monotonic() - t0
        if arm == "westwood" and len(ccs) == n_bg and all(c == "bloatd_westwood" for c in ccs.values()):
            return time.monotonic() - t0
        time.sleep(0.5)
    return None


def run_step(lab, prof, step, read_event, bg_flows, timeline=None):
    """One step; its readings go to `timeline` (a list) with the web
    transfers' times and ports."""
    set_arm(step["arm"])
    n_bg = bg_flows[step["run"]]
    bg, ports = [], []
    for i in range(n_bg):
        p = lab.fetch(step["bg_cc"], nbytes=0, seconds=3600, label=f"bg{i}")
        ports.append(read_event(p, "open")["local_port"])
        bg.append(p)
    mon = Monitor(lab.name, ports, lab.backlog_bytes)
    recs = []
    try:
        time.sleep(prof.warmup_s)
        acted_s = None
        if step["arm"] != "none":
            # A bulk flow on 3g with four others beside it sends 330 kB in
            # about 90 s; DRWA starts after drwa_min_bytes received.
            acted_s = wait_acted(mon, step["arm"], n_bg, 240)
            if acted_s is None:
                raise RuntimeError(f"{step['arm']}: the policy did not act on the bulk flows in 240 s")
            # A few rounds for the queue to drain to where the arm keeps it.
            time.sleep(max(5.0, 3 * (prof.delay_ms / 1000 + prof.drain_s)))
        p = lab.fetch(step["short_cc"], count=step["shorts"], gap=1.0, label="short")
        for i in range(step["shorts"]):
            opened = read_event(p, "open")
            done = read_event(p, "done")
            w = mon.window(done["wall"], done["wall"] + done["response_s"])
            rec = {"kind": "short", "response_s": done["response_s"], "bytes": done["bytes"],
                   "t0": done["wall"],
                   "acted_s": acted_s, "local_port": opened["local_port"], **w,
                   "web_drwa": mon.drwa_last.get(opened["local_port"]),
                   "bulk_drwa": [mon.drwa_last.get(port) for port in ports]}
            recs.append(rec)
            for b in bg:
                if b.poll() is not None:
                    raise RuntimeError("a background flow ended early: see the server's errors")
            analysis_line = (f"    short {i + 1}/{step['shorts']}: {done['response_s']:.2f} s, "
                             f"ping RTT {w['ping_rtt_ms'] or 0:.0f} ms, bloatd rcv queue "
                             f"{w.get('rcv_queue_ms') or 0:.0f} ms, bulk "
                             f"{(w.get('bulk_goodput_bps') or 0) / 1e6:.2f} Mbit/s, "
                             f"clamp {(w.get('clamp_bytes') or 0) / 1000:.0f} kB, bulk cc {w.get('bulk_cc')}"
                             + drwa_line("web", rec["web_drwa"]) + drwa_line("bulk", rec["bulk_drwa"][0]))
            print(analysis_line, flush=True)
        lab.stop(p)
        return recs
    finally:
        mon.stop()
        if timeline is not None:
            timeline.append({"bulk_ports": ports, "web": [
                {"port": r["local_port"], "t0": r["t0"], "t1": r["t0"] + r["response_s"]}
                for r in recs], "lines": mon.timeline})
        for b in bg:
            lab.stop(b)
        set_arm("none")


def run_campaign(args, labmod):
    """The F5 campaign: results in args.out/f5.jsonl, then the report. With
    --f5-builds, each build's into args.out/NAME/, builds alternating run by
    run (run_builds)."""
    p = plan(args.quick)
    profiles = args.profiles.split(",") if args.profiles else list(p)
    steps = steps_of(p, profiles, args.f5_reps, args.f5_first_rep)
    if args.runs:
        steps = [s for s in steps if s["run"] in args.runs.upper().split(",")]
    arms = args.f5_arms.split(",")
    steps = [s for s in steps if s["arm"] in arms]
    for s in steps:
        s["shorts"] = args.shorts or s["shorts"]
    profs = {name: labmod.Profile(name) for name in profiles}
    builds = parse_builds(args.f5_builds) if args.f5_builds else None
    if args.dry_run:
        for s in steps:
            print(f"{s['profile']:5} {step_label(s)}")
        print(f"lab: {len(steps)} F5 steps" + (f", each of {len(builds)} builds" if builds else ""))
        return 0
    if builds:
        return run_builds(args, labmod, steps, profs, builds)
    check_daemon()
    rc = measure(args.out, steps, profs, args.append, args.name, labmod)
    return rc or report(args.out)


def parse_builds(spec):
    """--f5-builds NAME=BINARY[:CONFIG],...: each binary must be named bloatd
    (`bloatd stop` signals only a process whose executable is), each name
    once; CONFIG, a config file the build starts with (`bloatd --config`:
    one binary, two settings side by side)."""
    builds = []
    for part in spec.split(","):
        name, sep, path = part.partition("=")
        path, _, config = path.partition(":")
        if not sep or not name or not path:
            raise SystemExit(f"lab --f5-builds: '{part}' is not NAME=PATH/bloatd[:CONFIG]")
        if os.path.basename(path) != "bloatd" or not os.access(path, os.X_OK):
            raise SystemExit(f"lab --f5-builds: {path} is not an executable named bloatd: copy each "
                             "build to a directory of its own as .../bloatd (`bloatd stop` refuses "
                             "to signal a process of another name)")
        if config and not os.path.isfile(config):
            raise SystemExit(f"lab --f5-builds: the config file {config} of {name} does not exist")
        if name in [b[0] for b in builds]:
            raise SystemExit(f"lab --f5-builds: the name {name} is given twice")
        builds.append((name, os.path.abspath(path), os.path.abspath(config) if config else None))
    if len(builds) < 2:
        raise SystemExit("lab --f5-builds: give two builds or more, NAME=PATH,NAME=PATH")
    return builds


def run_builds(args, labmod, steps, profs, builds):
    """Builds side by side, alternating run by run: for each repetition,
    each build in turn (its bloatd started, then stopped), the first build
    of a repetition running every arm, the others every arm but none (with
    DRWA off no build touches a receiver: the none arm is one, pooled by
    compare()). The order alternates from one repetition to the next, so
    the first build of one is the last of the next. Each build's results
    go to args.out/NAME/ (appended), the comparison to
    args.out/f5_compare.txt."""
    if labmod.bloatd_status(builds[0][1]) == 0:
        raise SystemExit("lab --f5-builds: a bloatd is running: stop it (each build's is started "
                         "and stopped in turn)")
    dirs = [os.path.join(args.out, b[0]) for b in builds]
    begun = set()   # builds with results of this campaign in their directory
    for rep in sorted({s["rep"] for s in steps}):
        order = builds if rep % 2 == 0 else builds[::-1]
        for i, (name, binary, config) in enumerate(order):
            mine = [s for s in steps if s["rep"] == rep and (i == 0 or s["arm"] != "none")]
            if not mine:
                continue
            print(f"lab: repetition {rep}, build {name} ({binary}"
                  f"{', ' + config if config else ''})", flush=True)
            labmod.bloatd_start(binary, BLOATD_ARGS, config)
            try:
                check_daemon()
                rc = measure(os.path.join(args.out, name), mine, profs,
                             args.append or name in begun, args.name, labmod, build=binary,
                             config=config)
                begun.add(name)
            finally:
                labmod.bloatd_stop(binary)
            if rc:
                return rc
    for d in dirs:
        report(d)
    return compare(dirs, os.path.join(args.out, "f5_compare.txt"))


def measure(out_dir, steps, profs, append, lab_name, labmod, build=None, config=None):
    """Run `steps`: their web transfers into out_dir/f5.jsonl, the readings
    into f5_timeline.jsonl, what ran into f5_meta.json (appended to, with
    `append`, as an earlier part's). Returns 130 if interrupted, else 0."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "f5.jsonl")
    timeline_path = os.path.join(out_dir, "f5_timeline.jsonl")
    for f in (path, timeline_path):
        if os.path.exists(f) and not append:
            os.rename(f, f + ".old")
    profiles = sorted({s["profile"] for s in steps})
    meta = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "reps": sorted({s["rep"] for s in steps}),
            "profiles": {n: profs[n].as_dict() for n in profiles}, "bulk_bytes": BULK_BYTES,
            "policy": api.get("/v1/policy")["drwa"], "kernel": os.uname().release,
            "build": build or labmod.BLOATD_BIN, "load": os.getloadavg(),
            "config": open(config).read() if config else None}
    lab = labmod.Experiment(lab_name)
    cur = None
    t_start = time.monotonic()
    failed = []
    try:
        with open(path, "a" if append else "w") as out:
            for i, step in enumerate(steps):
                prof = profs[step["profile"]]
                if prof.name != cur:
                    lab.down()
                    lab.up(prof)
                    cur = prof.name
                print(f"[{i + 1:3d}/{len(steps)}] {(time.monotonic() - t_start) / 60:5.1f} min | "
                      f"{prof.name} {step_label(step)}", flush=True)
                timeline = []
                try:
                    recs = run_step(lab, prof, step, labmod.read_event, labmod.BG_FLOWS, timeline)
                except RuntimeError as e:
                    print(f"    step failed: {e}", flush=True)
                    failed.append({**step, "error": str(e)})
                    lab.stop_flows()
                    recs = []
                for r in recs:
                    r.update({k: v for k, v in step.items() if k != "shorts"})
                    out.write(json.dumps(r) + "\n")
                out.flush()
                with open(timeline_path, "a") as tl:
                    for t in timeline:
                        tl.write(json.dumps({**{k: v for k, v in step.items() if k != "shorts"},
                                             **t}) + "\n")
                lab.wait_drained(prof.drain_s + 5)
    except KeyboardInterrupt:
        print("\nlab: interrupted: stopping traffic and removing the lab", flush=True)
        lab.down()
        return 130
    except Exception:
        lab.down()
        raise
    lab.down()
    meta["minutes"] = round((time.monotonic() - t_start) / 60, 1)
    meta["failed_steps"] = failed
    meta_path = os.path.join(out_dir, "f5_meta.json")
    if append and os.path.exists(meta_path):
        meta = {"earlier": json.load(open(meta_path)), **meta}
    with open(meta_path, "w") as f:
        json.dump(meta, f, indent=1)
    print(f"lab: F5 measured in {meta['minutes']} min", flush=True)
    return 0


# ------------------------------------------------------------ analysis

def smallest_windows_bound_ms(prof, receivers):
    """The receiver's ping RTT with every receiver on the link at once held
    at DRWA's smallest window (MIN_WINDOW_SEGMENTS full segments in flight
    each): what they have in flight beyond the bandwidth-delay product
    queues at the bottleneck. Run C has two receivers at once (the bulk
    flow and one web transfer: the six transfers follow each other), run D
    six. No window-based receiver can hold the RTT lower with that many
    flows; the web transfer's first drwa_min_bytes are not clamped at all,
    so the bound is not reached either."""
    rate = prof["rate_bps"] / 8
    inflight = receivers * MIN_WINDOW_SEGMENTS * WIRE_SEGMENT
    bdp = rate * prof["delay_ms"] / 1000
    return prof["delay_ms"] + max(0.0, inflight - bdp) / rate * 1000


COMPARE = [("ping_rtt_ms", "receiver RTT by ping (ms)", 1, 0),
           ("response_s", "web response (s)", 1, 2),
           ("bulk_goodput_bps", "bulk goodput (kbit/s)", 1e-3, 1),
           ("link_bps", "link goodput (kbit/s)", 1e-3, 1)]


def compare(dirs, out=None):
    """Builds side by side: for each directory (one build's F5 runs, its
    name the label), each profile and run, the means and 95% CIs of COMPARE
    per arm over every web transfer, DRWA / none, the receiver's ping RTT
    of each transfer sorted (groups show there, not in a mean), and the RTT
    bound of the smallest windows. With DRWA off no build touches a
    receiver, so the none arm is one: pooled over every directory. Written
    to `out` too."""
    rows = {}
    profs = {}
    lam = 3.0
    for d in dirs:
        meta = json.load(open(os.path.join(d, "f5_meta.json")))
        lam = (meta.get("policy") or {}).get("lambda", lam)
        while meta:  # a campaign in parts (--append) nests the earlier parts' meta
            for name, pr in meta.get("profiles", {}).items():
                profs.setdefault(name, pr)
            meta = meta.get("earlier")
        for r in with_shares(load(d)):
            rows.setdefault((r["profile"], r["run"], os.path.basename(d.rstrip("/")), r["arm"]),
                            []).append(r)
    lines = []
    for prof, run in sorted({(p, r) for p, r, _, _ in rows}):
        n_rcv = {"C": 2, "D": 6}[run]
        bound = smallest_windows_bound_ms(profs[prof], n_rcv)
        lines.append(f"{prof} run {run}: {n_rcv} receivers at once; smallest-windows bound "
                     f"{bound:.0f} ms, DRWA's target lambda x base RTT "
                     f"{lam * profs[prof]['delay_ms']:.0f} ms")
        lines.append(f"  {'build':14} {'arm':5} {'n':>3} " +
                     " ".join(f"{lab:>28}" for _, lab, _, _ in COMPARE))
        none = [r for (p, rn, _, a), rs in rows.items() for r in rs if (p, rn, a) == (prof, run, "none")]
        groups = [("none", "none", none)] + [
            (os.path.basename(d.rstrip("/")), "drwa",
             rows.get((prof, run, os.path.basename(d.rstrip("/")), "drwa"), [])) for d in dirs]
        st = {}
        for b, arm, xs in groups:
            st[b] = {m: mean_ci([r.get(m) for r in xs]) for m, *_ in COMPARE}
            if xs:
                lines.append(f"  {b:14} {arm:5} {len(xs):>3} " + " ".join(
                    f"{analysis.fmt_stat(st[b][m], sc, dg):>28}" for m, _, sc, dg in COMPARE))
        for b, arm, xs in groups[1:]:
            if not xs:
                continue
            ratios = []
            for m, lab, _, _ in COMPARE:
                r, ci = analysis.ratio_ci(st[b][m], st["none"][m])
                cell = "-" if r is None else f"{r:.2f}" + ("" if ci is None else f" ± {ci:.2f}")
                ratios.append(f"{cell:>28}")
            lines.append(f"  {b:14} {'D/n':5} {'':>3} " + " ".join(ratios))
        rtt_none = st["none"]["ping_rtt_ms"][1]
        for b, arm, xs in groups:
            rtts = sorted(r["ping_rtt_ms"] for r in xs if r.get("ping_rtt_ms") is not None)
            if not rtts:
                continue
            med = statistics.median(rtts)
            tail = (f"; bound / none {bound / rtt_none:.2f}, DRWA / bound {st[b]['ping_rtt_ms'][1] / bound:.2f}"
                    if arm == "drwa" and rtt_none else "")
            rel = f" ({med / rtt_none:.2f} of none's mean)" if rtt_none else ""
            lines.append(f"  {b:14} ping RTT median {med:.0f} ms{rel}"
                         f"{tail}; each: " + " ".join(f"{x:.0f}" for x in rtts))
    text = "\n".join(lines)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


def load(d):
    recs = []
    with open(os.path.join(d, "f5.jsonl")) as f:
        for line in f:
            if line.strip():
                recs.append(json.loads(line))
    return recs


METRICS = [("response_s", "web response (s)", 1, 2),
           ("ping_rtt_ms", "receiver RTT by ping (ms)", 1, 0),
           ("rcv_queue_ms", "receiver queue, bloatd (ms)", 1, 0),
           ("bulk_goodput_bps", "bulk goodput (Mbit/s)", 1e-6, 2)]


def with_shares(recs):
    """Each web transfer's own goodput (its bytes over its response time) and
    the link's total over the transfer: what the bulk flows got plus it."""
    out = []
    for r in recs:
        r = dict(r)
        if r.get("response_s") and r.get("bytes"):
            r["web_goodput_bps"] = r["bytes"] * 8 / r["response_s"]
            if r.get("bulk_goodput_bps") is not None:
                r["link_bps"] = r["bulk_goodput_bps"] + r["web_goodput_bps"]
        out.append(r)
    return out


SHARES = [("bulk_goodput_bps", "bulk flows"), ("web_goodput_bps", "web transfer"),
          ("link_bps", "link total")]


def share_table(recs):
    """Who gets the link with DRWA against neither (issue 18, item 7): the
    bulk flows, the web transfer, their total over each web transfer, kbit/s
    means with 95% CIs, and DRWA - neither with its 95% CI (Welch). A
    difference whose interval excludes zero is marked *."""
    recs = with_shares(recs)
    confs = sorted({(r["profile"], r["run"]) for r in recs if r["arm"] == "drwa"})
    lines = [f"{'profile':7} {'run':3} {'kbit/s':13} {'neither':>22} {'DRWA':>22} "
             f"{'DRWA - neither':>24}  n"]
    for prof, run in confs:
        rows = {a: [r for r in recs if (r["profile"], r["run"], r["arm"]) == (prof, run, a)]
                for a in ("none", "drwa")}
        for m, label in SHARES:
            xs = {a: [r.get(m) for r in rows[a]] for a in rows}
            cells = [analysis.fmt_stat(mean_ci(xs[a]), 1e-3, 1) for a in ("none", "drwa")]
            d, ci = analysis.diff_ci(xs["drwa"], xs["none"], reject=False)
            diff = "-" if d is None else f"{d / 1e3:+.1f}" + (f" ± {ci / 1e3:.1f}" if ci is not None else "")
            mark = "*" if d is not None and ci is not None and abs(d) > ci else " "
            n = "/".join(str(mean_ci(xs[a])[0]) for a in ("none", "drwa"))
            lines.append(f"{prof:7} {run:3} {label:13} {cells[0]:>22} {cells[1]:>22} "
                         f"{diff:>22}{mark}  {n}")
    return "\n".join(lines)


def stats(recs):
    """{(profile, run, arm): {metric: (n, mean, ci)}}."""
    groups = {}
    for r in recs:
        groups.setdefault((r["profile"], r["run"], r["arm"]), []).append(r)
    return {k: {m: mean_ci([r.get(m) for r in rows]) for m, *_ in METRICS}
            for k, rows in groups.items()}


def table(st):
    lines = [f"{'profile':7} {'run':3} {'arm':24} " + " ".join(f"{lab:>28}" for _, lab, _, _ in METRICS)]
    for (prof, run, arm) in sorted(st, key=lambda k: (k[0], k[1], ARMS.index(k[2]))):
        row = st[(prof, run, arm)]
        cells = [analysis.fmt_stat(row[m], scale, digits) for m, _, scale, digits in METRICS]
        lines.append(f"{prof:7} {run:3} {ARM_LABEL[arm]:24} " + " ".join(f"{c:>28}" for c in cells))
    return "\n".join(lines)


def change(st, prof, run, arm, metric):
    """Percent change of `metric` in `arm` against neither."""
    a, b = st.get((prof, run, arm), {}).get(metric), st.get((prof, run, "none"), {}).get(metric)
    r = analysis.ratio(a[1] if a else None, b[1] if b else None)
    return None if r is None else 100 * (r - 1)


def fmt_pct(x):
    return "n/a" if x is None else f"{x:+.0f}%"


def finding_f5(st):
    confs = sorted({(p, r) for p, r, a in st if a == "drwa" and (p, r, "none") in st})
    if not confs:
        return analysis.finding("F5", "DRWA: not measured (lab.py --f5)")
    rtt = {c: change(st, *c, "drwa", "ping_rtt_ms") for c in confs}
    gp = {c: change(st, *c, "drwa", "bulk_goodput_bps") for c in confs}
    web = {c: change(st, *c, "drwa", "response_s") for c in confs}
    ww_rtt = {c: change(st, *c, "westwood", "ping_rtt_ms") for c in confs}
    ww_web = {c: change(st, *c, "westwood", "response_s") for c in confs}
    each = lambda d: ", ".join(f"{p} {r} {fmt_pct(d[(p, r)])}" for p, r in confs)  # noqa: E731
    rtts = [v for v in rtt.values() if v is not None]
    gps = [v for v in gp.values() if v is not None]
    holds = bool(rtts) and all(v <= -25 for v in rtts) and bool(gps) and all(v >= -10 for v in gps)
    text = (f"DRWA: RTT {min(rtts):+.0f}…{max(rtts):+.0f}% ({each(rtt)}), "
            f"goodput {min(gps):+.0f}…{max(gps):+.0f}% ({each(gp)}), web response {each(web)}; "
            f"bulk→Westwood+ policy: RTT {each(ww_rtt)}, web response {each(ww_web)}; {PAPER}")
    return analysis.finding("F5", text, value={"rtt_pct": rtt, "goodput_pct": gp}, holds=holds)


def plot(st, prof, path):
    plt = analysis._plt()
    runs = sorted({r for p, r, a in st if p == prof})
    if not runs:
        return False
    fig, axes = plt.subplots(1, len(METRICS), figsize=(15, 3.8))
    for ax, (m, label, scale, _) in zip(axes, METRICS):
        x = 0
        ticks = []
        for run in runs:
            start = x
            for arm in ARMS:
                n, mean, ci = st.get((prof, run, arm), {}).get(m, (0, None, None))
                if mean is not None:
                    ax.bar(x, mean * scale, color=ARM_COLOR[arm], yerr=(ci or 0) * scale, capsize=3,
                           label=ARM_LABEL[arm] if run == runs[0] else None)
                x += 1
            ticks.append(((start + x - 1) / 2, f"run {run}"))
            x += 0.6
        ax.set_xticks([t for t, _ in ticks])
        ax.set_xticklabels([lab for _, lab in ticks])
        ax.set_ylim(bottom=0)
        ax.set_title(label, fontsize=9)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{prof}: acting on bloat (F5), mean and 95% CI over the web transfers")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def report(d):
    recs = load(d)
    st = stats(recs)
    tab = table(st)
    f5 = finding_f5(st)
    shares = share_table(recs)
    with open(os.path.join(d, "f5_table.txt"), "w") as f:
        f.write(tab + "\n")
    with open(os.path.join(d, "f5_shares.txt"), "w") as f:
        f.write(shares + "\n")
    with open(os.path.join(d, "f5_finding.txt"), "w") as f:
        f.write(f5["line"] + "\n")
    made = []
    try:
        for prof in sorted({p for p, _, _ in st}):
            name = f"f5_{prof.replace('.', '_')}.png"
            if plot(st, prof, os.path.join(d, name)):
                made.append(name)
    except ImportError as e:
        print(f"lab: no F5 plots ({e})")
    print(tab)
    print(shares)
    print(f5["line"])
    print(f"lab: F5 table, finding and {len(made)} plots in {d}/")
    return 0
