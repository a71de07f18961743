#!/usr/bin/env python3
"""The runs of Alfredsson et al. (2013) on the lab's emulated cellular links.

    A  long flows alone: one bulk download per congestion control
    B  320 kB short flows alone
    C  one background bulk flow + short flows
    D  five background bulk flows + short flows

for every combination of the background flows' and the short flow's
congestion control among cubic, reno, bloatd_cubic and bloatd_westwood.
bloatd measures every flow (RTT, outstanding window, retransmissions: its
/v1/sockets API); the short flows' response times come from the client, as
wget's did in the paper. Results, table, plots and the findings F1-F4 go to
--out (default lab-results/).

    sudo $(scripts/python.sh) scripts/lab/lab.py --quick     # < 5 min, 3.5g (+ a 3g long flow)
    sudo $(scripts/python.sh) scripts/lab/lab.py             # the full campaign
    $(scripts/python.sh) scripts/lab/lab.py --analyze DIR    # table, plots, findings again
    sudo $(scripts/python.sh) scripts/lab/lab.py --replay DIR  # a bloat episode bloatd recorded
                                                           # (bloatd incident ID --export DIR)

Ctrl-C stops the traffic, removes the lab and keeps what was measured.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

import analysis
import classify  # issue 33: the kind of queue, against the lab's truth
import f5  # issue 10: acting on bloat, finding F5
import replay  # issue 32: a recorded episode, replayed
from bloatdpy import api, instrument, truth  # the API's client; the queue, who shares it, what it counted
from bloatdpy.harness import Lab  # the topology

HERE = os.path.dirname(os.path.abspath(__file__))

PY = sys.executable  # the flows run with the lab's own Python
TOPO = os.path.join(HERE, "topo.sh")
FLOWS = os.path.join(HERE, "flows.py")
PORT = 8000
SERVER_ADDR = "10.9.1.1"
SHORT_BYTES = 320_000  # Alfredsson et al., Sec. III-A: the average web page
CCS = ["cubic", "reno", "bloatd_cubic", "bloatd_westwood"]
BG_FLOWS = {"C": 1, "D": 5}


def log(msg):
    print(msg, flush=True)


# ---------------------------------------------------------------- the plan

# The two link models and the profile that plays each of the papers' links
# in them: "fast" the 3.5G HSPA+ link of Alfredsson et al.'s Fig. 2-7 (F1,
# F2), "slow" the 3G link of Fig. 8-9 (F3, F4), "contrast" the 4G of Fig. 10.
# const: tbf at a constant rate; trace: measured cellular capacity
# (topo.sh's trace profiles: lte has the 3.5G runs' rate, evdo is Jiang et
# al.'s EV-DO "fat pipe").
LINKS = {
    "const": {"fast": "3.5g", "slow": "3g", "contrast": "4g"},
    "trace": {"fast": "lte", "slow": "evdo"},
}


def full_plan(ccs, link="const"):
    """The campaign: every run and combination on the fast link (the paper's
    focus, Fig. 2-7), what F3/F4 need on the slow one (Fig. 8-9: a 3g short
    flow takes 20 s alone and minutes beside five bulk flows), and 4g for
    contrast (Fig. 10) with constant-rate links."""
    ww = [c for c in ("cubic", "bloatd_westwood") if c in ccs]
    roles = LINKS[link]
    plan = {
        roles["fast"]: {"A": {"ccs": ccs, "reps": 3, "seconds": 60},
                        "B": {"ccs": ccs, "shorts": 10},
                        "C": {"bg": ccs, "short": ccs, "shorts": 10},
                        "D": {"bg": ccs, "short": ccs, "shorts": 10}},
        roles["slow"]: {"A": {"ccs": ccs, "reps": 1, "seconds": 60},
                        "B": {"ccs": ww, "shorts": 3},
                        "D": {"bg": ["cubic"], "short": ww, "shorts": 3}},
    }
    if "contrast" in roles:
        plan[roles["contrast"]] = {"A": {"ccs": ccs, "reps": 1, "seconds": 30},
                                   "B": {"ccs": ccs, "shorts": 5},
                                   "C": {"bg": ccs, "short": ["cubic"], "shorts": 5},
                                   "D": {"bg": ccs, "short": ["cubic"], "shorts": 5}}
    return plan


def quick_plan(ccs, link="const"):
    """Under 5 minutes: F1's and F2's core comparisons on the fast link
    (CUBIC against Westwood+, short flows with CUBIC); with constant-rate
    links also one 3g CUBIC long flow for F3 (the trace model's quick mode
    stays on its one fast trace). No run D: short flows beside five bulk
    flows are F1's context, not its core ratio, and took ~36 s of each
    quick run; the full campaign has them."""
    pair = [c for c in ("cubic", "bloatd_westwood") if c in ccs]
    roles = LINKS[link]
    plan = {
        roles["fast"]: {"B": {"ccs": ["cubic"], "shorts": 5},
                        "A": {"ccs": pair, "reps": 1, "seconds": 40},
                        "C": {"bg": pair, "short": ["cubic"], "shorts": 5}},
    }
    if link == "const":
        plan[roles["slow"]] = {"A": {"ccs": ["cubic"], "reps": 1, "seconds": 20}}
    return plan


def base_profile(spec):
    """A profile spec's profile name: 3.5g for 3.5g:aqm=codel:udp=4mbit."""
    return spec.split(":", 1)[0]


def spec_roles(roles, profiles):
    """The link roles (fast, slow, contrast) played by the profile specs of
    this campaign: the findings read 3.5g:aqm=codel's steps as the fast
    link's when that is what ran."""
    return {role: next((p for p in profiles if base_profile(p) == name), name)
            for role, name in roles.items()}


def expand(plan, profiles):
    """The plan as a list of steps, each a dict, in execution order. A
    profile may carry topo.sh's options (3.5g:aqm=fq_codel:ecn=1:udp=4mbit):
    the steps are its profile's, run on that bottleneck with that cross
    traffic."""
    steps = []
    for prof in profiles:
        spec = plan.get(base_profile(prof), {})
        for run in ("B", "A", "C", "D"):
            r = spec.get(run)
            if not r:
                continue
            if run == "A":
                for rep in range(r["reps"]):
                    for cc in r["ccs"]:
                        steps.append({"profile": prof, "run": "A", "cc": cc,
                                      "rep": rep, "seconds": r["seconds"]})
            elif run == "B":
                for cc in r["ccs"]:
                    steps.append({"profile": prof, "run": "B", "short_cc": cc,
                                  "shorts": r["shorts"]})
            else:
                for bg in r["bg"]:
                    for cc in r["short"]:
                        steps.append({"profile": prof, "run": run, "bg_cc": bg,
                                      "short_cc": cc, "shorts": r["shorts"]})
    return steps


# ---------------------------------------------------------------- the lab

class Profile:
    def __init__(self, name):
        r = subprocess.run([TOPO, "profile", name], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"lab: {r.stderr.strip()}")
        kv = dict(f.split("=", 1) for f in r.stdout.split())
        self.name = name
        self.rate = kv["rate"]
        self.rate_bps = truth.rate_bps(kv["rate"])
        self.delay_ms = float(kv["delay_ms"])
        self.buffer_bytes = int(kv["buffer_bytes"])
        self.trace = kv.get("trace")  # a capacity trace's file, or None: constant rate
        # the bottleneck's queue (topo.sh's profile options) and the cross
        # traffic that shares it for the whole profile
        self.aqm = kv["aqm"]
        self.ecn = kv["ecn"] == "1"
        self.target_ms = float(kv["target_ms"])
        self.interval_ms = float(kv["interval_ms"])
        self.cross = {k: kv[k] for k in ("nbr", "udp", "xtcp") if k in kv}

    @property
    def drain_s(self):
        """Time for the bottleneck to empty a full buffer."""
        return self.buffer_bytes * 8 / self.rate_bps

    @property
    def warmup_s(self):
        """Time given to background flows before the first short flow: their
        slow start, the overflow of the buffer and the loss recovery after
        it take a few (bloated) round trips."""
        return max(6.0, 10 * (self.delay_ms / 1000 + self.drain_s))

    def estimate_s(self, step):
        """Rough duration of a step, for the progress line's ETA."""
        alone = SHORT_BYTES * 8 / self.rate_bps + 8 * self.delay_ms / 1000
        if step["run"] == "A":
            return step["seconds"] + 2 + self.drain_s
        if step["run"] == "B":
            return step["shorts"] * (alone + 0.5) + 1
        n_bg = BG_FLOWS[step["run"]]
        beside = (n_bg + 1) * SHORT_BYTES * 8 / self.rate_bps + 8 * (self.delay_ms / 1000 + self.drain_s)
        return self.warmup_s + step["shorts"] * (beside + 1) + self.drain_s + 1

    def as_dict(self):
        d = {"name": self.name, "rate": self.rate, "rate_bps": self.rate_bps,
             "delay_ms": self.delay_ms, "buffer_bytes": self.buffer_bytes,
             "aqm": self.aqm, "ecn": self.ecn}
        if self.aqm != "droptail":
            d.update(target_ms=self.target_ms, interval_ms=self.interval_ms)
        if self.trace:
            d["trace"] = os.path.basename(self.trace)
        if self.cross:
            d["cross"] = self.cross
        return d


class Experiment:
    """The papers' runs on one lab topology (harness.Lab, the tests' one
    class for it): its flow server, the profile's cross traffic and every
    flow started, stopped in order before the namespaces go."""

    def __init__(self, name):
        self.name = name
        self.topo = None
        self.procs = []
        self.server = None
        self.traffic = None
        self.keep = []  # the server and the profile's cross traffic

    def up(self, profile, topo_args=None):
        """The topology of `profile` (topo.sh's), or of `topo_args` (a
        replayed episode's trace, delay and buffer)."""
        self.topo = Lab(self.name, topo_args=topo_args or ["--profile", profile.name])
        self.server = self.spawn("snd", [PY, FLOWS, "serve", "--port", str(PORT)])
        line = self.server.stdout.readline()
        if '"listening"' not in line:
            raise RuntimeError(f"flow server did not start: {line!r}")
        self.traffic = truth.Traffic(self.name, self.spawn, PY)
        self.keep = [self.server] + self.traffic.from_profile()

    def write_truth(self, out_dir, profile):
        """The lab's truth for this profile's steps (truth-PROFILE.json):
        its queue, the cross traffic, what each owner sent, lost and had
        marked."""
        path = os.path.join(out_dir, f"truth-{profile.name.replace(':', '_')}.json")
        try:
            with open(path, "w") as f:
                json.dump(truth.read(self.name, self.traffic.flows), f, indent=1)
        except (OSError, RuntimeError, TimeoutError, subprocess.SubprocessError) as e:
            log(f"lab: could not record the truth of {profile.name}: {e}")

    def spawn(self, side, argv):
        # A session of its own: the terminal's Ctrl-C reaches only us, and
        # we stop the traffic in order before the namespaces go.
        p = self.topo.spawn(side, *argv, stdout=subprocess.PIPE, stderr=None, start_new_session=True)
        self.procs.append(p)
        return p

    def fetch(self, cc, nbytes=SHORT_BYTES, seconds=0, count=1, gap=1.0, label="", persistent=False):
        """A download from the sender's server; `persistent`: the `count`
        transfers on one connection (one path's socket that stays)."""
        return self.spawn("rcv", [PY, FLOWS, "fetch", "--addr", SERVER_ADDR, "--port", str(PORT),
                                  "--bytes", str(nbytes), "--seconds", str(seconds),
                                  "--cc", cc, "--count", str(count), "--gap", str(gap),
                                  "--label", label] + (["--persistent"] if persistent else []))

    def stop(self, p):
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=3)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if p in self.procs:
            self.procs.remove(p)

    def stop_flows(self):
        """Stop every client, keep the server and the cross traffic."""
        for p in list(self.procs):
            if p not in self.keep:
                self.stop(p)

    def backlog_bytes(self):
        out = subprocess.run([TOPO, "backlog", self.name], capture_output=True, text=True)
        return int(out.stdout.strip() or 0) if out.returncode == 0 else 0

    def wait_drained(self, timeout_s):
        """Until the bottleneck queue is empty: the next step must not start
        behind the last one's data. Cross traffic keeps a queue of its
        own: then the time a full buffer takes to drain."""
        if len(self.keep) > 1:
            time.sleep(timeout_s)
            return
        end = time.monotonic() + timeout_s
        while self.backlog_bytes() > 0 and time.monotonic() < end:
            time.sleep(0.1)

    def down(self):
        """Stop every flow, then remove the topology (one an earlier run
        left too)."""
        for p in list(self.procs):
            self.stop(p)
        self.keep = []
        if self.topo:
            self.topo.close()
            self.topo = None
        else:
            subprocess.run([TOPO, "down", self.name], check=False)


def read_event(proc, want):
    """Next JSON line from a flows.py client; raises on its errors."""
    while True:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"flow client exited ({proc.wait()}) before '{want}'")
        ev = json.loads(line)
        if ev["event"] == "error":
            raise RuntimeError(ev["error"])
        if ev["event"] == want:
            return ev


# ---------------------------------------------------------------- the runs

def flow_stats(inst, port, t0, t1):
    """bloatd's view of one flow between t0 and t1 (sender socket)."""
    s = inst.flow(port, t0, t1 + 0.2)
    srtt = [x["srtt_us"] for x in s if x["srtt_us"] > 0]
    return {
        "samples": len(s),
        "srtt_mean_us": sum(srtt) / len(srtt) if srtt else None,
        "srtt_max_us": max(srtt) if srtt else None,
        "retrans": max((x["retrans"] for x in s), default=None),
        "mss": max((x["mss"] for x in s), default=None),
        "cc_seen": s[-1]["cc"] if s else None,
    }


def run_a(lab, inst, prof, step):
    p = lab.fetch(step["cc"], nbytes=0, seconds=step["seconds"], label="A")
    opened = read_event(p, "open")
    done = read_event(p, "done")
    lab.stop(p)
    samples = inst.flow(opened["local_port"], opened["wall"], done["wall"] + done["response_s"])
    series = [{"t": round(x["t"] - opened["wall"], 3), "srtt_us": x["srtt_us"],
               "inflight_bytes": x["inflight"] * x["mss"], "cwnd": x["cwnd"],
               "retrans": x["retrans"], "queue_delay_us": x.get("queue_delay_us"),
               "pipe": x.get("pipe")} for x in samples]
    rec = {"goodput_bps": done["goodput_bps"], "bytes": done["bytes"],
           "seconds": done["response_s"], "series": series}
    rec.update(analysis.long_flow_summary(series))
    rec["cc_seen"] = samples[-1]["cc"] if samples else None
    log(f"    {step['cc']}: {done['goodput_bps'] / 1e6:.2f} Mbit/s, "
        f"RTT {analysis.fmt_ms(rec['srtt_mean_us'])} "
        f"(max {analysis.fmt_ms(rec['srtt_max_us'])}), "
        f"in flight {analysis.fmt_kb(rec['inflight_mean_bytes'])}, retrans {rec['retrans']}")
    return [rec]


def run_shorts(lab, inst, prof, step):
    bg = []
    n_bg = BG_FLOWS.get(step["run"], 0)
    for i in range(n_bg):
        p = lab.fetch(step["bg_cc"], nbytes=0, seconds=3600, label=f"bg{i}")
        read_event(p, "open")
        bg.append(p)
    if bg:
        time.sleep(prof.warmup_s)
    gap = 1.0 if bg else 0.5
    p = lab.fetch(step["short_cc"], count=step["shorts"], gap=gap, label="short")
    recs = []
    for i in range(step["shorts"]):
        opened = read_event(p, "open")
        done = read_event(p, "done")
        st = flow_stats(inst, opened["local_port"], done["wall"], done["wall"] + done["response_s"])
        segs = done["bytes"] / (st["mss"] or 1448)
        rec = {"response_s": done["response_s"], "bytes": done["bytes"], **st,
               "loss_pct": 100 * st["retrans"] / segs if st["retrans"] is not None else None}
        recs.append(rec)
        for bgp in bg:
            if bgp.poll() is not None:
                raise RuntimeError("a background flow ended early: see the server's errors")
        log(f"    short {i + 1}/{step['shorts']}: {done['response_s']:.2f} s, "
            f"RTT {analysis.fmt_ms(st['srtt_mean_us'])}, retrans {st['retrans']}")
    lab.stop(p)
    for bgp in bg:
        lab.stop(bgp)
    return recs


def cc_sorted_list(ccs):
    return [c for c in CCS if c in ccs] + sorted(c for c in ccs if c not in CCS)


def check_ccs(ccs):
    with open("/proc/sys/net/ipv4/tcp_available_congestion_control") as f:
        have = f.read().split()
    missing = [c for c in ccs if c not in have]
    return have, missing


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BLOATD_BIN = os.environ.get("BLOATD_BIN", os.path.join(REPO, "target", "release", "bloatd"))


def bloatd_status(binary=None):
    """`bloatd status`: 0 running, 3 not running, anything else an error."""
    return subprocess.run([binary or BLOATD_BIN, "status"], capture_output=True).returncode


def bloatd_start(binary, extra_args=(), config=None):
    """`bloatd start` with `config` (a file) if given."""
    r = subprocess.run([binary, *(["--config", config] if config else []), "start", *extra_args],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"lab: could not start {binary}: {(r.stderr or r.stdout).strip()}")


def bloatd_stop(binary):
    """Stop the bloatd the lab started, and see it gone: a stop that fails
    (e.g. a binary not named bloatd, which `bloatd stop` refuses to
    signal) would leave it measuring the next build's runs."""
    r = subprocess.run([binary, "stop"], capture_output=True, text=True)
    end = time.monotonic() + 10
    while bloatd_status(binary) != 3:
        if time.monotonic() > end:
            sys.exit(f"lab: `{binary} stop` left bloatd running (exit {r.returncode}: "
                     f"{(r.stderr or r.stdout).strip()}): stop it by hand")
        time.sleep(0.2)


def bloatd_ensure(extra_args=()):
    """Use the bloatd that is running, or start one (as the demo does) so
    that bloatd_cubic and bloatd_westwood are registered and the lab
    measures with it. Returns True when it started one: the caller stops
    only that one. The same rule as bloatd.sh's bloatd_ensure (the demo's):
    `bloatd status` 0 is running, 3 is not, anything else is an error."""
    if api.BLOATD_SOCK != "/run/bloatd/bloatd.sock":
        return False  # someone else's daemon, by choice: do not start another
    if not os.access(BLOATD_BIN, os.X_OK):
        sys.exit(f"lab: no bloatd at {BLOATD_BIN}: run `make build` (or set BLOATD_BIN)")
    st = bloatd_status()
    if st == 0:
        log("lab: bloatd is running: using it")
        return False
    if st != 3:
        sys.exit(f"lab: `{BLOATD_BIN} status` failed (exit {st}): see its output")
    bloatd_start(BLOATD_BIN, extra_args)
    log("lab: started bloatd (stopped again at the end)")
    return True


def bloatd_release(started):
    if started:
        bloatd_stop(BLOATD_BIN)
        log("lab: stopped the bloatd the lab started")


def pick_instrument(choice):
    if choice in ("auto", "bloatd"):
        if api.available():
            return "bloatd"
        if choice == "bloatd":
            sys.exit(f"lab: bloatd is not answering on {api.BLOATD_SOCK}: "
                     "start it (sudo target/release/bloatd start) or use --instrument ss")
        log("lab: bloatd is not running: measuring with ss (the kernel's view) instead")
    return "ss"


def select_steps(args, plan, profiles):
    """The plan's steps on these profiles, cut to --runs, with --shorts and --a-seconds applied."""
    steps = expand(plan, profiles)
    if args.runs:
        steps = [s for s in steps if s["run"] in args.runs.upper().split(",")]
    if args.shorts:
        for s in steps:
            if "shorts" in s:
                s["shorts"] = args.shorts
    if args.a_seconds:
        for s in steps:
            if s["run"] == "A":
                s["seconds"] = args.a_seconds
    return steps


def drop_missing_ccs(args, steps, ccs):
    """Exits on an unregistered congestion control, unless told to skip its steps."""
    used = {s[k] for s in steps for k in ("cc", "bg_cc", "short_cc") if k in s}
    have, missing = check_ccs(cc_sorted_list(used))
    if missing and not args.skip_missing_cc and not args.dry_run:
        sys.exit(f"lab: congestion control(s) {', '.join(missing)} not registered "
                 f"(available: {' '.join(have)}). bloatd_cubic and bloatd_westwood are "
                 "registered by `bloatd start`; or pass --skip-missing-cc")
    if missing and not args.dry_run:
        log(f"lab: skipping {', '.join(missing)} (not registered)")
        steps = [s for s in steps if not any(s.get(k) in missing for k in ("cc", "bg_cc", "short_cc"))]
        ccs = [c for c in ccs if c not in missing]
    return steps, ccs, missing


def write_meta(args, meta, meta_path, raw_path):
    """Writes meta.json, merged into the old one with --append; 2 if that one is another link's."""
    if args.append and os.path.exists(meta_path):
        # A campaign measured in parts (--profiles, --runs): one table
        with open(meta_path) as f:
            old = json.load(f)
        if old.get("link", "const") != args.link:
            print(f"lab: {args.out} holds a {old.get('link', 'const')} campaign, not {args.link}",
                  file=sys.stderr)
            return 2
        meta["profiles"] = {**old.get("profiles", {}), **meta["profiles"]}
        meta["ccs"] = cc_sorted_list(set(old.get("ccs", [])) | set(meta["ccs"]))
        meta["parts"] = old.get("parts", 1) + 1
        meta["failed_steps"] = old.get("failed_steps", [])
        meta["minutes"] = old.get("minutes", 0)
    elif os.path.exists(raw_path):
        os.rename(raw_path, raw_path + ".old")
    with open(meta_path, "w") as f:
        json.dump(meta, f, indent=1)
    return None


def run_step(lab, inst, prof, step, backend, raw, failed):
    """Measures one step into raw.jsonl; a failed step is logged and kept in failed."""
    try:
        recs = run_a(lab, inst, prof, step) if step["run"] == "A" else \
            run_shorts(lab, inst, prof, step)
    except RuntimeError as e:
        # One failed step (a congestion control unregistered
        # meanwhile, a flow that died) must not cost the campaign.
        log(f"    step failed: {e}")
        failed.append({**step, "error": str(e)})
        lab.stop_flows()
        recs = []
    for r in recs:
        r.update({k: v for k, v in step.items() if k not in ("shorts", "seconds")})
        r["instrument"] = backend
        raw.write(json.dumps(r) + "\n")
    raw.flush()
    if inst.errors:
        log(f"    instrument errors: {inst.errors} (last: {inst.last_error})")
        inst.errors = 0
    inst.forget_before(time.time() - 5)
    lab.wait_drained(prof.drain_s + 5)


def measure(args, steps, profs, backend, raw_path, t_start):
    """Runs the steps, one lab per profile in turn; the failed steps, or None if interrupted."""
    total_est = sum(profs[s["profile"]].estimate_s(s) for s in steps)
    lab = Experiment(args.name)
    failed = []
    done_est = 0.0
    cur_prof = None
    inst = None
    try:
        with open(raw_path, "a" if args.append else "w") as raw:
            for i, step in enumerate(steps):
                prof = profs[step["profile"]]
                if prof.name != cur_prof:
                    if inst:
                        inst.stop()
                        lab.write_truth(args.out, profs[cur_prof])
                    lab.down()
                    lab.up(prof)
                    inst = instrument.Instrument(backend, f"{args.name}-snd", PORT,
                                                 0.05 if backend == "bloatd" else 0.1)
                    inst.start()
                    cur_prof = prof.name
                elapsed = time.monotonic() - t_start
                speed = elapsed / done_est if done_est > 0 else 1.0
                eta = (total_est - done_est) * speed
                desc = analysis.step_label(step)
                log(f"[{i + 1:3d}/{len(steps)}] {elapsed / 60:5.1f} min, ETA {eta / 60:4.1f} min | "
                    f"{prof.name} {desc}")
                run_step(lab, inst, prof, step, backend, raw, failed)
                done_est += prof.estimate_s(step)
    except KeyboardInterrupt:
        log("\nlab: interrupted: stopping traffic and removing the lab")
        if inst:
            inst.stop()
        lab.down()
        log(f"lab: partial results kept in {raw_path}")
        return None
    except Exception:
        if inst:
            inst.stop()
        lab.down()
        raise
    if inst:
        inst.stop()
        lab.write_truth(args.out, profs[cur_prof])
    lab.down()
    return failed


def run_campaign(args):
    if os.geteuid() != 0 and not args.dry_run:
        sys.exit("lab: needs root (network namespaces, qdiscs, iptables): run with sudo")
    ccs = args.ccs.split(",")
    plan = quick_plan(ccs, args.link) if args.quick else full_plan(ccs, args.link)
    profiles = args.profiles.split(",") if args.profiles else list(plan)
    unknown = [p for p in profiles if base_profile(p) not in plan]
    if unknown:
        other = [k for k in LINKS if k != args.link][0]
        print(f"lab: profile(s) {', '.join(unknown)} not in the {args.link} link model's plan "
              f"({', '.join(plan)}); --link {other} has {', '.join(LINKS[other].values())}",
              file=sys.stderr)
        return 2
    steps, ccs, missing = drop_missing_ccs(args, select_steps(args, plan, profiles), ccs)
    profs = {p: Profile(p) for p in profiles}
    total_est = sum(profs[s["profile"]].estimate_s(s) for s in steps)
    if args.dry_run:
        for s in steps:
            log(f"{s['profile']:5} {analysis.step_label(s)}  ~{profs[s['profile']].estimate_s(s):.0f} s")
        log(f"lab: {len(steps)} steps, about {total_est / 60:.0f} min")
        return 0
    backend = pick_instrument(args.instrument)
    os.makedirs(args.out, exist_ok=True)
    meta = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "quick": args.quick,
            "link": args.link, "roles": spec_roles(LINKS[args.link], profiles),
            "instrument": backend, "ccs": ccs, "missing_ccs": missing,
            "profiles": {p: profs[p].as_dict() for p in profiles},
            "kernel": os.uname().release}
    meta_path = os.path.join(args.out, "meta.json")
    raw_path = os.path.join(args.out, "raw.jsonl")
    if write_meta(args, meta, meta_path, raw_path) is not None:
        return 2
    log(f"lab: {len(steps)} steps on {', '.join(profiles)}, about {total_est / 60:.0f} min; "
        f"instrument {backend}; results in {args.out}/")

    t_start = time.monotonic()
    failed = measure(args, steps, profs, backend, raw_path, t_start)
    if failed is None:
        return 130
    meta["failed_steps"] = meta.get("failed_steps", []) + failed
    meta["minutes"] = round(meta.get("minutes", 0) + (time.monotonic() - t_start) / 60, 1)
    with open(meta_path, "w") as f:
        json.dump(meta, f, indent=1)
    log(f"lab: measured in {meta['minutes']} min" +
        (f"; {len(failed)} step(s) failed, listed in meta.json" if failed else ""))
    return analysis.report(args.out)


def main():
    ap = argparse.ArgumentParser(description="Alfredsson et al.'s runs A-D on the lab",
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__)
    ap.add_argument("--quick", action="store_true", help="the < 5 min subset (make lab-quick)")
    ap.add_argument("--out", default="lab-results", help="results directory (default lab-results)")
    ap.add_argument("--append", action="store_true",
                    help="add to the results already in --out (a campaign run in parts, "
                         "e.g. one --profiles at a time) instead of starting them over")
    ap.add_argument("--analyze", metavar="DIR", help="only recompute table, plots and findings of DIR")
    ap.add_argument("--link", default="const", choices=sorted(LINKS),
                    help="link model: const (tbf at the papers' rates) or trace (measured "
                         "cellular capacity, ../shared/traces or scripts/lab/traces); default %(default)s")
    ap.add_argument("--profiles", help="comma list of the plan's profiles to run "
                    "(const: 3.5g,3g,4g; trace: lte,evdo; default all), each with topo.sh's "
                    "options if wanted: 3.5g:aqm=fq_codel:ecn=1:udp=4mbit runs 3.5g's steps "
                    "behind FQ-CoDel with ECN beside an external 4 Mbit/s UDP stream "
                    "(aqm, ecn, target_ms, interval_ms; cross traffic nbr=CC, udp=RATE, xtcp=CC)")
    ap.add_argument("--runs", help="comma list among A,B,C,D (default: all)")
    ap.add_argument("--ccs", default=",".join(CCS), help="congestion controls (default: %(default)s)")
    ap.add_argument("--shorts", type=int, help="short flows per configuration (override)")
    ap.add_argument("--a-seconds", type=float, help="run A flow length (override)")
    ap.add_argument("--instrument", default="auto", choices=["auto", "bloatd", "ss"],
                    help="bloatd (default when running) or ss")
    ap.add_argument("--skip-missing-cc", action="store_true",
                    help="drop configurations whose congestion control is not registered")
    ap.add_argument("--name", default="bllab", help="lab topology name (default bllab)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and its estimated time")
    ap.add_argument("--f5", action="store_true",
                    help="finding F5 instead: runs C and D with DRWA on the receiver, with the bulk "
                         "flows to Westwood+ policy on the sender, and with neither (scripts/lab/f5.py)")
    ap.add_argument("--f5-reps", type=int, default=1, help="repetitions of each F5 configuration")
    ap.add_argument("--f5-arms", default=",".join(f5.ARMS),
                    help="comma list of F5 arms to run (default: %(default)s)")
    ap.add_argument("--replay", metavar="DIR",
                    help="replay a bloat episode exported by `bloatd incident ID --export DIR` on "
                         "the trace-driven link and run arms on it (scripts/lab/replay.py)")
    ap.add_argument("--replay-arms", default=",".join(replay.ARMS),
                    help="comma list of replay arms (default: %(default)s)")
    ap.add_argument("--replay-texture", default=replay.TEXTURE, metavar="TRACE",
                    help="the measured trace (a name or a file) whose bursts and dips within a "
                         "second the replayed link takes on, each second keeping the episode's "
                         "capacity; none: evenly spaced, as exported (default %(default)s)")
    ap.add_argument("--classify", action="store_true",
                    help="the bottleneck classifier against the lab's truth instead: a bulk download "
                         "per profile x queue x congestion control, bloatd's class of its path each "
                         "second, a confusion table in --out/classify.md (scripts/lab/classify.py); "
                         "with --quick 3.5g once; --profiles picks profiles (default 3.5g,3g,lte)")
    ap.add_argument("--classify-queues", default=",".join(classify.QUEUES),
                    help="the bottlenecks' queues (default: %(default)s)")
    ap.add_argument("--classify-ccs", default=",".join(classify.CCS),
                    help="the downloads' congestion controls (default: %(default)s)")
    ap.add_argument("--classify-reps", type=int, default=3, help="runs of each cell (default 3)")
    ap.add_argument("--classify-seconds", type=float, default=20,
                    help="seconds each download is watched (default 20)")
    ap.add_argument("--classify-cross", metavar="ARMS", default="",
                    help="also whose traffic fills the queue: each cell runs these cross-traffic arms "
                         "(comma list; default none: the download alone, as without the flag): own "
                         "(the own download alone), nbr (a neighbour namespace's download, then a light "
                         "own flow), udp (an own download, then external UDP just over the link's rate, "
                         "then a light own flow), own+nbr, own+udp (UDP at half the link's rate); "
                         "bloatd's bottleneck.owner each second against the owner of >= 75%% of the "
                         "bytes the bottleneck delivered, an owner table in --out/classify.md")
    ap.add_argument("--f5-first-rep", type=int, default=0,
                    help="number the F5 repetitions from this one (a campaign in parts, with "
                         "--append; with --f5-builds it also decides which build goes first)")
    ap.add_argument("--f5-builds", metavar="NAME=BIN,NAME=BIN",
                    help="F5 of builds side by side, alternating run by run: each BIN a bloatd "
                         "(named bloatd) started in turn, its results in --out/NAME/, the "
                         "comparison (--f5-compare) in --out/f5_compare.txt; no bloatd may run")
    ap.add_argument("--f5-compare", nargs="+", metavar="DIR",
                    help="F5 of builds side by side: each DIR one build's runs (arms none and drwa); "
                         "means, 95%% CIs, DRWA / none and the smallest-windows bound, also written "
                         "to the last DIR's f5_compare.txt")
    args = ap.parse_args()
    if args.f5_compare:
        return f5.compare(args.f5_compare, os.path.join(args.f5_compare[-1], "f5_compare.txt"))
    if args.analyze:
        rc = 0
        if os.path.exists(os.path.join(args.analyze, "raw.jsonl")):
            rc = analysis.report(args.analyze)
        if os.path.exists(os.path.join(args.analyze, "f5.jsonl")):
            rc = rc or f5.report(args.analyze)
        return rc
    if args.replay:
        if os.geteuid() != 0:
            sys.exit("lab: needs root (network namespaces, qdiscs, iptables): run with sudo")
        if not os.path.exists(os.path.join(args.replay, "replay.json")):
            sys.exit(f"lab --replay: no replay.json in {args.replay} "
                     "(write one with `bloatd incident ID --export DIR`)")
        started = bloatd_ensure(replay.BLOATD_ARGS)
        try:
            return replay.run(args, sys.modules[__name__])
        finally:
            bloatd_release(started)
    if args.classify:
        if os.geteuid() != 0:
            sys.exit("lab: needs root (network namespaces, qdiscs, iptables): run with sudo")
        started = bloatd_ensure()
        try:
            return classify.run(args, sys.modules[__name__])
        except KeyboardInterrupt:
            log("\nlab --classify: interrupted")
            return 130
        finally:
            bloatd_release(started)
    if args.f5:
        if os.geteuid() != 0 and not args.dry_run:
            sys.exit("lab: needs root (network namespaces, qdiscs, iptables): run with sudo")
        started = False if args.dry_run or args.f5_builds else bloatd_ensure(f5.BLOATD_ARGS)
        try:
            return f5.run_campaign(args, sys.modules[__name__])
        finally:
            bloatd_release(started)

    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)
    started = False
    if not args.dry_run and os.geteuid() == 0 and (args.instrument != "ss" or any(
            c.startswith("bloatd_") for c in args.ccs.split(","))):
        started = bloatd_ensure()
    try:
        return run_campaign(args)
    finally:
        bloatd_release(started)


if __name__ == "__main__":
    sys.exit(main())
