"""Replay a bloat episode bloatd recorded, and ask which fix would have
helped (issue 32).

`bloatd incident ID --export DIR` writes the episode as a bundle: the
bottleneck's capacity as a Mahimahi trace (trace.down, estimated from the
episode's delivery rates: measured where the link was saturated, estimated
elsewhere, capacity.csv says which), the path's floor as base RTT, the buffer
(the most bytes a second's queue held) and the flow mix (replay.json). This reproduces it on
the lab's trace-driven link (topo.sh --trace), each second's capacity as
recorded and shaped within the second like a measured LTE trace
(--replay-texture; the bundle cannot know that shape, see `texture`), the
trace started over for each arm, and runs the bulk flows in arms:

    cubic            CUBIC, as recorded: the reference
    bloatd_westwood  bloatd's Westwood+ (cwnd = BWE x RTTmin after congestion)
    drwa             CUBIC, DRWA on the receiver (Jiang et al., IMC 2012)
    notsent_lowat    CUBIC, the server's own unsent backlog bounded
                     (TCP_NOTSENT_LOWAT 128 KiB, a policy rule)

with the recorded short flows beside them. Per arm: the bulk flows' median and
90th percentile queue (bloatd, the sender's view), their goodput, the short
flows' response times. A fix "would have helped" when its median queue is
below the CUBIC arm's at 90% or more of its goodput.

    sudo $(scripts/python.sh) scripts/lab/lab.py --replay DIR [--arms cubic,drwa]

The arms are switched through bloatd's API (DRWA, the lowat rule): lab.py
starts bloatd with BLOATD_ARGS when none runs; a running bloatd without them
runs the other arms only. Results: DIR/replay-results.json.
"""
import json
import os
import statistics
import subprocess
import time

from bloatdpy import api, instrument

ARMS = ["cubic", "bloatd_westwood", "drwa", "notsent_lowat"]
LOWAT_RULE = "lab-lowat"
SERVER_PORT = 8000
BLOATD_ARGS = ["--drwa=off", "--policy",
               f"name={LOWAT_RULE},sport={SERVER_PORT},notsent_lowat=128Ki,enabled=false"]
# An arm helps when its queue is lower at this share of CUBIC's goodput.
GOODPUT_SHARE = 0.9


def log(msg):
    print(msg, flush=True)


# The sub-second shape a replayed link borrows (see `texture`): a
# measured LTE downlink other than the lab's lte profile's, so the test
# that replays an episode recorded on that profile is not handed its own
# answer. ATT's driving trace and Verizon's LTE both brought the queue to
# within 12% of the original trace's (docs/lab.md); ATT's came closer.
TEXTURE = "ATT-LTE-driving-2016"
# A texture second with fewer opportunities than this says little about a
# second's shape (an outage): those are passed over.
TEXTURE_MIN_OPPS = 50


def seconds_of(times_ms):
    """Opportunities per second of a Mahimahi trace."""
    n = [0] * (max(times_ms) // 1000 + 1 if times_ms else 0)
    for t in times_ms:
        n[t // 1000] += 1
    return n


def texture(bundle_trace, texture_trace, out):
    """The bundle's trace with each second's opportunities placed the way
    a measured trace places its own within a second.

    The bundle knows each second's capacity and nothing finer (bloatd reads
    once a second), so it spaces a second's opportunities evenly. A
    cellular link delivers in bursts, with dips inside a second, and a
    drop-tail buffer overflows in those dips: on the lab's lte link, the
    same trace averaged per second and evenly spaced queued a CUBIC
    download 31% more (median 416 against 317 ms, three runs each). Here
    second s keeps its count n, and its i-th opportunity goes to the
    (i + 0.5)/n quantile of the times within a second of the texture's
    s-th second (of those with at least TEXTURE_MIN_OPPS, cycled). The
    trace's last line (its period) stays where it was. Returns out."""
    with open(bundle_trace) as f:
        mine = [int(x) for x in f if x.strip()]
    with open(texture_trace) as f:
        theirs = [int(x) for x in f if x.strip()]
    by_second = {}
    for t in theirs:
        by_second.setdefault(t // 1000, []).append(t % 1000)
    shapes = [sorted(v) for _, v in sorted(by_second.items()) if len(v) >= TEXTURE_MIN_OPPS]
    if not shapes:
        raise ValueError(f"{texture_trace}: no second with {TEXTURE_MIN_OPPS} opportunities")
    times = []
    for s, n in enumerate(seconds_of(mine)):
        shape = shapes[s % len(shapes)]
        times += [s * 1000 + shape[min(int((i + 0.5) / n * len(shape)), len(shape) - 1)]
                  for i in range(n)]
    times.sort()
    if times:
        times[-1] = max(times[-1], mine[-1])
    with open(out, "w") as f:
        f.write("".join(f"{t}\n" for t in times))
    return out


class ReplayProfile:
    """What lab.Experiment needs of a profile, from the bundle: its trace,
    with a texture's sub-second shape unless `texture_trace` is None."""

    def __init__(self, bundle_dir, meta, texture_trace=None):
        self.name = "replay"
        self.trace = os.path.abspath(os.path.join(bundle_dir, meta["trace"]))
        if texture_trace:
            self.trace = texture(self.trace, texture_trace,
                                 os.path.join(os.path.abspath(bundle_dir), "trace-textured.down"))
        self.delay_ms = max(1.0, meta["base_rtt_ms"])
        self.buffer_bytes = max(3000, int(meta["buffer_bytes"]))
        self.rate_bps = max(1, meta["capacity_mean_bps"])

    def topo_args(self):
        return ["--trace", self.trace, "--delay-ms", f"{self.delay_ms:.1f}",
                "--buffer-bytes", str(self.buffer_bytes)]

    @property
    def drain_s(self):
        return self.buffer_bytes * 8 / self.rate_bps


def arms_available():
    """Which arms the running bloatd can switch, and why not the others."""
    policy = api.get("/v1/policy")
    have = set(ARMS)
    why = []
    if policy["drwa"]["mode"] == "disabled":
        have.discard("drwa")
        why.append("drwa: DRWA is not armed in the running bloatd")
    if LOWAT_RULE not in [r["name"] for r in policy["rules"]]:
        have.discard("notsent_lowat")
        why.append(f"notsent_lowat: the running bloatd has no rule {LOWAT_RULE}")
    cc = open("/proc/sys/net/ipv4/tcp_available_congestion_control").read().split()
    if "bloatd_westwood" not in cc:
        have.discard("bloatd_westwood")
        why.append("bloatd_westwood: not registered")
    return have, why


def set_arm(arm):
    info = api.get("/v1/policy")
    if info["drwa"]["mode"] != "disabled":
        api.request("POST", "/v1/policy/drwa", {"on": arm == "drwa"})
    if LOWAT_RULE in [r["name"] for r in info["rules"]]:
        api.request("POST", f"/v1/policy/rules/{LOWAT_RULE}",
                                  {"enabled": arm == "notsent_lowat"})


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None


def short_schedule(meta, seconds):
    """The short flows of the mix: (start s, bytes) of each whose first
    read the bundle has (the recorded flow opened at most a read before
    it), in order, each within the bulk flows' `seconds`; and how many
    others there are. Spread evenly instead, test_recorder's fetches (at
    about 3 s and 12 s, one of them 11 s long behind the queue) once
    replayed the download's median queue at 473 ms against 323 recorded
    (docs/lab.md)."""
    timed, untimed = [], 0
    for f in meta["flows"]:
        if f["kind"] != "short":
            continue
        if f.get("start_s") is None:
            untimed += 1
        else:
            timed.append((min(f["start_s"], max(0.0, seconds - 1)), max(1000, f["bytes"])))
    return sorted(timed), untimed


def run_arm(labmod, lab, inst, meta, arm):
    """The bulk flows for the episode's span (less its drain) and the short
    flows when the recorded ones opened (short_schedule), from the trace's
    first second; the arm's numbers."""
    set_arm(arm)
    cc = "bloatd_westwood" if arm == "bloatd_westwood" else "cubic"
    seconds = max(5.0, meta["duration_s"] - lab.profile.drain_s)
    # The trace from its start: the link came up seconds before the first
    # arm, and the trace repeats, so without this each arm met another
    # stretch of the episode's capacity (the replay's queue peaked at the
    # slowest second two seconds before the recorded one did).
    subprocess.run([labmod.TOPO, "restart-trace", lab.name], check=True)
    bulk = [lab.fetch(cc, nbytes=0, seconds=seconds, label=f"bulk{i}")
            for i in range(max(1, meta["bulk_flows"]))]
    t0 = time.monotonic()
    opened = [labmod.read_event(p, "open") for p in bulk]
    shorts = []  # (client, fetches it makes)
    timed, untimed = short_schedule(meta, seconds)
    if untimed:
        # No time recorded (an older bundle, or a flow the episode kept no
        # series of): spread over the span.
        shorts.append((lab.fetch("cubic", nbytes=max(1000, meta["short_bytes_median"]),
                                 count=untimed, gap=seconds / (untimed + 1), label="short"), untimed))
    for start_s, nbytes in timed:
        time.sleep(max(0.0, t0 + start_s - time.monotonic()))
        shorts.append((lab.fetch("cubic", nbytes=nbytes, label="short"), 1))
    done = [labmod.read_event(p, "done") for p in bulk]
    response = []
    for p, n in shorts:
        for _ in range(n):
            response.append(labmod.read_event(p, "done")["response_s"])
    shorts = [p for p, _ in shorts]
    for p in bulk + shorts:
        lab.stop(p)
    queues = []
    for o, d in zip(opened, done):
        samples = inst.flow(o["local_port"], o["wall"], d["wall"] + d["response_s"])
        queues += [s["queue_delay_us"] / 1000 for s in samples
                   if s.get("queue_delay_us") is not None and s["srtt_us"] > 0]
    goodput = sum(d["bytes"] * 8 / max(d["response_s"], 1e-9) for d in done)
    set_arm("cubic")
    return {"arm": arm, "cc": cc, "seconds": seconds,
            "queue_p50_ms": statistics.median(queues) if queues else None,
            "queue_p90_ms": percentile(queues, 0.9), "samples": len(queues),
            "goodput_bps": goodput,
            "short_response_s": statistics.median(response) if response else None}


def verdict(results):
    """Which arms would have helped: a lower median queue at GOODPUT_SHARE
    of CUBIC's goodput or more."""
    ref = next((r for r in results if r["arm"] == "cubic"), None)
    if not ref or ref["queue_p50_ms"] is None:
        return "no CUBIC arm to compare with"
    helped = []
    for r in results:
        if r["arm"] == "cubic" or r["queue_p50_ms"] is None:
            continue
        if r["queue_p50_ms"] < ref["queue_p50_ms"] and r["goodput_bps"] >= GOODPUT_SHARE * ref["goodput_bps"]:
            helped.append(f"{r['arm']} ({ref['queue_p50_ms']:.0f} -> {r['queue_p50_ms']:.0f} ms "
                          f"at {r['goodput_bps'] / ref['goodput_bps']:.0%} of CUBIC's goodput)")
    if not helped:
        return "no arm lowered the queue at 90% of CUBIC's goodput or more"
    return "would have helped: " + "; ".join(helped)


def run(args, labmod):
    bundle = args.replay
    with open(os.path.join(bundle, "replay.json")) as f:
        meta = json.load(f)
    arms = [a for a in args.replay_arms.split(",") if a]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        log(f"lab --replay: unknown arm(s) {', '.join(unknown)} (arms: {', '.join(ARMS)})")
        return 2
    tex = None
    if args.replay_texture != "none":
        r = subprocess.run([labmod.TOPO, "trace", args.replay_texture], capture_output=True, text=True)
        if r.returncode:
            log(f"lab --replay: --replay-texture: {r.stderr.strip()}")
            return 2
        tex = r.stdout.strip()
    try:
        prof = ReplayProfile(bundle, meta, tex)
    except (OSError, ValueError) as e:
        log(f"lab --replay: {e}")
        return 2
    have, why = arms_available()
    for w in why:
        if w.split(":")[0] in arms:
            log(f"lab --replay: skipping {w}")
    arms = [a for a in arms if a in have]
    rec = meta["recorded"]
    log(f"lab --replay: episode {meta['episode']} ({meta['subject']}), {meta['duration_s']} s; "
        f"base RTT {prof.delay_ms:.0f} ms, buffer {prof.buffer_bytes / 1000:.0f} kB, capacity "
        f"{meta['capacity_mean_bps'] / 1e6:.2f} Mbit/s mean ({meta['capacity_estimated_share']:.0%} "
        f"of seconds estimated), within each second shaped like "
        f"{os.path.basename(tex) if tex else 'nothing (evenly spaced)'}; recorded: queue p50 {rec['queue_p50_ms']:.0f} ms"
        + (f", bulk flow ({rec['bulk_cc']}) {rec['bulk_queue_p50_ms']:.0f} ms"
           if rec.get("bulk_queue_p50_ms") is not None else ""))
    lab = labmod.Experiment(args.name)
    lab.profile = prof
    results = []
    try:
        lab.down()
        lab.up(prof, topo_args=prof.topo_args())
        inst = instrument.Instrument("bloatd", f"{args.name}-snd", SERVER_PORT, 0.25)
        inst.start()
        try:
            for arm in arms:
                log(f"  arm {arm}")
                r = run_arm(labmod, lab, inst, meta, arm)
                log(f"    queue p50 {r['queue_p50_ms'] or 0:.0f} ms, p90 {r['queue_p90_ms'] or 0:.0f} ms, "
                    f"goodput {r['goodput_bps'] / 1e6:.2f} Mbit/s"
                    + (f", short flows {r['short_response_s']:.2f} s" if r["short_response_s"] else ""))
                results.append(r)
                lab.wait_drained(prof.drain_s + 5)
        finally:
            inst.stop()
    except KeyboardInterrupt:
        log("\nlab --replay: interrupted: removing the lab")
        lab.down()
        return 130
    finally:
        lab.down()
    line = verdict(results)
    log(f"lab --replay: {line}")
    out = {"bundle": os.path.abspath(bundle), "recorded": rec, "base_rtt_ms": prof.delay_ms,
           "texture": tex,
           "buffer_bytes": prof.buffer_bytes, "arms": results, "verdict": line,
           "kernel": os.uname().release, "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    with open(os.path.join(bundle, "replay-results.json"), "w") as f:
        json.dump(out, f, indent=1)
    return 0
