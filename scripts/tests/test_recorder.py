#!/usr/bin/env python3
"""Issue 32, the bloat flight recorder, end to end.

test_an_episode_is_recorded_kept_shown_and_replayed (the lab's lte link:
T-Mobile's LTE trace, the rate of the papers' 3.5G runs, 80 ms base RTT, a
1 MB buffer, without the profile's uplink trace, which no replay can know;
about 3 minutes):
- A CUBIC bulk download (flows.py, 20 s) and three 1 MB web fetches beside
  it. The oracle of the episode's span is ping through the same bottleneck
  (every 0.1 s from the sender: from the first to the last ping sent into
  100 ms of queue or more), of its path `ip route` in the sender's
  namespace, of its flows what the flows themselves report (ports, bytes)
  and what bloatd listed for their sockets while they ran (process,
  service).
- The episode is recorded with that path, those flows and that span (within
  2 s); the JSON log line, /metrics and `bloatd incident ID` show it; `top`'s
  history view (H) lists it and Enter opens it (tmux).
- `bloatd history` (no daemon, then the daemon): the episode's minutes
  hold its peak, its queue and its bytes. `bloatd stop` and `start`, and a
  reboot (the run directory wiped): still listed. `kill -9` during a second
  episode: at the next start it is listed, cut, ending at most a second and
  a half before the kill (one read a second).
- `--export`: the trace's capacity each second against the original trace
  over the saturated seconds (correlation >= 0.9, mean within 10%), and
  `lab.py --replay` of it: the replayed CUBIC flow's median queue within 25%
  of the recorded one (REPLAY_QUEUE).

test_bad_journals_keep_the_daemon_running (about a minute): a corrupt
journal, a symlink, a read-only state directory, a journal another bloatd
holds, and a full file system
(a small tmpfs, then a constant-rate lab's episode): a line that says so, the
daemon runs, and nothing that was on disk is lost.
"""
import datetime
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from bloatdpy.harness import (BLOATD, FLOWS, LAB_PY, RCV4, SND4, TOPO, TestCase, main, run,
                        topo_profile, wait_for)
from test_lab_trace import Trace, emulator_start

PORT = 8000
LAB = "blrec"
PROFILE = "lte"
# The longest a fetch's last read may come before its end: the recorder's
# reads are a second apart (checked each 100 ms tick), a record's bytes as
# of its last sample (one interval).
READ_GAP_S = 1.5
# How far an episode's start and end may be from ping's (the issue's
# bound; see the check).
SPAN_S = 2.0
# A queue ping counts: this many echoes in a row (0.1 s apart) at or over
# the threshold, a standing queue for 0.3 s, not one echo's spike. A full
# run (2026-12-06) ended +2.05 s from ping's span when that counted only
# seconds whose median echo waited: 1.5-2 s after the last such second,
# echoes waited 314-321 ms again for under half a second (a fetch's burst
# behind the drained download), and the recorder, reading the sockets'
# smoothed RTT, rightly kept the episode to it.
RUN_ECHOES = 3
# A queue that comes back for less than this after a quiet second or more
# (a fetch's burst behind the drained download) may or may not be in the
# episode: the recorder reads a second apart, and the fetch that made it
# may open and close between two reads. A full run (2026-12-07) saw the
# queue drain, stay at 4-5 ms for 2.5 s and come back for about a second
# (105-289 ms); the recorder, having not seen it, ended at the drain: -3.66
# s from ping's span, 0.0 s from its end before the burst. The end is
# held to SPAN_S from either.
BRIEF_S = 1.5
# The replayed CUBIC flow's median queue against the recorded one: the
# issue's 25%. Six runs with the replay's trace started over per arm and
# shaped within each second like a measured LTE trace (docs/lab.md):
# -11%, 0%, -4%, +14%, -12%, +2%. Evenly spaced, as exported, the replay
# ran +11% to +42% over (a drop-tail buffer overflows in a cellular
# link's dips within a second, which once-a-second reads cannot see).
# 2026-12-07: three runs exported the buffer at 1.06-1.24 MB (the highest
# second) and replayed +2%, +32%, +66% over; two of those bundles
# replayed again on the highest second but one (0.95 and 0.89 MB): +0%
# and -4%; a run with that export (1.02 MB): +22%; one (0.87 MB): -33%,
# twice -26% and -33% again, and on the mean of its two highest seconds
# (1.00 MB, the export since): -15%.
REPLAY_QUEUE = 0.25


class Pinger:
    """ping from the sender through the bottleneck every 0.1 s: each echo's
    send time (unix) and the queue it waited in (its RTT less the base)."""

    def __init__(self, lab, base_ms):
        self.base_ms, self.samples = base_ms, []
        self.p = subprocess.Popen(["ip", "netns", "exec", f"{lab}-snd", "ping", "-D", "-n", "-i", "0.1",
                                   RCV4], stdout=subprocess.PIPE, text=True)
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self):
        pat = re.compile(r"^\[([0-9.]+)\].*time=([0-9.]+) ms")
        for line in self.p.stdout:
            m = pat.match(line)
            if m:
                rtt = float(m.group(2))
                self.samples.append((float(m.group(1)) - rtt / 1000, rtt - self.base_ms))

    def span(self, queue_ms):
        """The send times of the first and the last echo that waited
        `queue_ms` or more in a standing queue: a second (of send times,
        from the first echo) whose median echo waited that long, or a run
        of RUN_ECHOES echoes in a row that did. One echo's spike is not
        counted; a queue that comes back for half a second is."""
        samples = sorted(self.samples)
        if not samples:
            return None
        t0 = samples[0][0]
        secs = {}
        for t, q in samples:
            secs.setdefault(int(t - t0), []).append(q)
        over = {i for i, (t, q) in enumerate(samples)
                if q >= queue_ms and statistics.median(secs[int(t - t0)]) >= queue_ms}
        for i in range(len(samples) - RUN_ECHOES + 1):
            if all(q >= queue_ms for _, q in samples[i:i + RUN_ECHOES]):
                over.update(range(i, i + RUN_ECHOES))
        if not over:
            return None
        return samples[min(over)][0], samples[max(over)][0]

    def end_before_burst(self, queue_ms):
        """The end of ping's span without a last brief return (BRIEF_S,
        after a quiet second or more), or None where it ends in none."""
        span = self.span(queue_ms)
        if span is None:
            return None
        over = [t for t, q in sorted(self.samples) if span[0] <= t <= span[1] and q >= queue_ms]
        i = len(over) - 1
        while i > 0 and over[i] - over[i - 1] < 1.0:
            i -= 1
        if i == 0 or span[1] - over[i] >= BRIEF_S:
            return None
        return over[i - 1]

    def stop(self):
        self.p.terminate()
        self.p.wait(timeout=5)
        self._t.join(timeout=5)


def client_events(proc):
    """The JSON events of a flows.py client as it prints them, until it
    ends; an `error` event raises."""
    for line in proc.stdout:
        ev = json.loads(line)
        if ev["event"] == "error":
            raise AssertionError(ev)
        yield ev


def events(proc, n, want="done"):
    """The next `n` JSON events `want` of a flows.py client (the others
    skipped)."""
    out = []
    for ev in client_events(proc):
        if ev["event"] == want:
            out.append(ev)
            if len(out) == n:
                break
    assert len(out) == n, f"{len(out)} of {n} '{want}' events"
    return out


def fetches(proc, n):
    """The open and done events of `n` fetches, in pairs."""
    opens, dones = [], []
    for ev in client_events(proc):
        {"open": opens, "done": dones}.get(ev["event"], []).append(ev)
        if len(dones) == n:
            break
    assert len(opens) == len(dones) == n, f"{len(opens)} opened, {len(dones)} done of {n}"
    return opens, dones


def corr(xs, ys):
    mx, my = statistics.mean(xs), statistics.mean(ys)
    sx = math.sqrt(sum((x - mx) ** 2 for x in xs))
    sy = math.sqrt(sum((y - my) ** 2 for y in ys))
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / (sx * sy) if sx and sy else 0.0


class Recorder(TestCase):
    def incidents(self, d, *args):
        return d.cli_json("/v1/incidents", "incidents", "--json", *args)

    def sender_episode(self, d, snd_ino, open_ok=False):
        """The path episode of the sender's namespace toward the receiver."""
        for e in self.incidents(d, "--since", "1h"):
            p = e.get("path") or {}
            if p.get("netns") == snd_ino and p.get("peer") == "10.9.2.0" and (open_ok or not e["open"]):
                return e
        return None

    def history(self, d, snd_ino, e):
        """`bloatd history`'s rows of the sender's path over episode `e`'s
        minutes (to its close, a few seconds after its end), checked
        against what the episode recorded: its peak among the minutes'
        maxima, its queue in their 90th percentiles, its bytes in their
        rates; the text lists the path."""
        rows = d.cli_json("/v1/history", "history", "--since", "1h", "--path", "10.9.2.0/24", "--json")
        mine = [r for r in rows if r["netns"] == snd_ino and r["peer"] == "10.9.2.0"
                and e["start_ms"] // 60_000 * 60_000 <= r["t_ms"] <= e["end_ms"] + 10_000]
        self.assertTrue(mine, f"the episode's minutes among {rows}")
        bytes_ = sum(r["rate_bps"] * 60 / 8 for r in mine)
        print(f"    history: {len(mine)} minutes, max {max(r['queue_max_us'] for r in mine) / 1000:.0f} ms, "
              f"p90 {max(r['queue_p90_us'] for r in mine) / 1000:.0f} ms, {bytes_ / 1e6:.1f} MB "
              f"(the episode: peak {e['queue_peak_us'] / 1000:.0f} ms, {e['bytes'] / 1e6:.1f} MB)", flush=True)
        self.assertGreaterEqual(max(r["queue_max_us"] for r in mine), e["queue_peak_us"])
        self.assertGreaterEqual(max(r["queue_p90_us"] for r in mine), e["threshold_us"])
        self.assertGreaterEqual(bytes_, 0.98 * e["bytes"])
        self.assertTrue(all(r["sockets"] >= 1 for r in mine), mine)
        text = d.cli("history", "--since", "1h").stdout
        self.assertIn("10.9.2.0/24", text)
        return mine

    def start_flows(self, lab, seconds, webs):
        bulk = lab.spawn("rcv", sys.executable, FLOWS, "fetch", "--addr", SND4, "--port", str(PORT),
                         "--bytes", "0", "--seconds", str(seconds), "--cc", "cubic", "--label", "bulk",
                         stdout=subprocess.PIPE)
        opened = events(bulk, 1, "open")[0]
        web = None
        if webs:
            time.sleep(3)
            web = lab.spawn("rcv", sys.executable, FLOWS, "fetch", "--addr", SND4, "--port", str(PORT),
                            "--bytes", "1000000", "--cc", "cubic", "--count", str(webs), "--gap", "3",
                            "--label", "web", stdout=subprocess.PIPE)
        return bulk, opened, web

    def test_an_episode_is_recorded_kept_shown_and_replayed(self):
        # The journal outside the run directory, as /var/lib/bloatd is
        # outside /run: a reboot wipes the one, not the other.
        state = tempfile.mkdtemp(prefix="bloatd-test-state-")
        self.addCleanup(shutil.rmtree, state, True)
        d = self.daemon("--no-cc", state_dir=os.path.join(state, "bloatd"))
        # The recorder's reads in its log (debug), shown with the start.
        os.environ["BLOATD_LOG"] = "info,bloatd::recorder=debug"
        try:
            d.start()
        finally:
            del os.environ["BLOATD_LOG"]
        # The lte profile's downlink (trace, base RTT, buffer) and not its
        # uplink trace: bloatd sees the downlink only, and so does what it
        # exports; with the uplink's trace pacing the ACKs the same
        # download queues less (268 against 313 and 305 ms median, ping's,
        # two 20 s CUBIC downloads each), which no replay could show.
        prof = topo_profile(PROFILE)
        traces = tempfile.mkdtemp(prefix="bloatd-test-trace-")
        self.addCleanup(shutil.rmtree, traces, True)
        trace_path = shutil.copy(prof["trace"], traces)
        lab = self.lab(LAB, trace=trace_path, delay_ms=prof["delay_ms"],
                       buffer_bytes=prof["buffer_bytes"])
        snd_ino = os.stat(f"/run/netns/{LAB}-snd").st_ino
        server = lab.spawn("snd", sys.executable, FLOWS, "serve", "--port", str(PORT), stdout=subprocess.PIPE)
        self.assertIn("listening", server.stdout.readline())
        pinger = Pinger(LAB, float(prof["delay_ms"]))
        self.addCleanup(pinger.stop)

        # The episode: a CUBIC download and web fetches beside it.
        bulk, opened, web = self.start_flows(lab, 20, 3)
        seen = {}

        def listed():
            for s in d.sockets():
                if s["netns"] == snd_ino and s["local_port"] == PORT:
                    seen[s["remote_port"]] = s
            return opened["local_port"] in seen
        wait_for(listed, timeout=10, what="the bulk flow's server socket in bloatd sockets")
        web_opened, web_done = fetches(web, 3)
        bulk_done = events(bulk, 1, "done")[0]
        e = wait_for(lambda: self.sender_episode(d, snd_ino), timeout=90, step=1,
                     what="the sender's path episode to close")
        pinger.stop()
        truth = pinger.span(100)
        self.assertIsNotNone(truth, "ping never waited 100 ms in the bottleneck")
        print(f"    episode {e['id']}: {e['start_ms'] / 1000 - truth[0]:+.2f} s / "
              f"{e['end_ms'] / 1000 - truth[1]:+.2f} s from ping's span "
              f"({truth[1] - truth[0]:.1f} s); peak {e['queue_peak_us'] / 1000:.0f} ms, "
              f"p50 {e['queue_p50_us'] / 1000:.0f} ms, {e['flows']} flows", flush=True)
        # What ping saw from its first 100 ms to the episode's start, and
        # from its last to the episode's end (0.5 s bins from ping's, the
        # largest queue in each): a failure shows why.
        for what, ping_t, ep_t in (("start", truth[0], e["start_ms"] / 1000), ("end", truth[1], e["end_ms"] / 1000)):
            bins = {}
            for t, q in pinger.samples:
                if min(ping_t, ep_t) - 1 <= t <= max(ping_t, ep_t) + 1:
                    k = math.floor((t - ping_t) * 2)
                    bins[k] = max(bins.get(k, 0), q)
            print(f"    ping's queue around the {what}: " + " ".join(f"{k / 2:+.1f}s:{q:.0f}" for k, q in sorted(bins.items())),
                  flush=True)
        # The start is the first read that sees the path's median at or
        # above the threshold: when the kernel starts counting bloated
        # sockets the recorder reads at once (a second after its last read
        # at least; the engine looks once a second), then a second apart.
        # The end is the path's last sample over the threshold, as of the
        # last read that found it above (reads a second apart), not the
        # read that saw the drop. The bound: 2 s at both ends.
        # Around the start, the reads the recorder asked for (and why)
        # and the episode's first points, in seconds from ping's.
        reads = []
        for line in d.log().splitlines():
            m = re.match(r"^(\S+Z)\s+DEBUG .*a read for the flight recorder: ([^;]+)", line)
            if m:
                t = datetime.datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp()
                if -3 <= t - truth[0] <= 5:
                    reads.append(f"{t - truth[0]:+.1f}s ({m.group(2)})")
        print("    recorder's reads around the start: " + (", ".join(reads) or "none logged"), flush=True)
        det = d.cli_json("/v1/incidents/{id}", "incident", str(e["id"]), "--json")
        print("    its first points: " + " ".join(
            f"{p['t_ms'] / 1000 - truth[0]:+.1f}s:{p['queue_us'] / 1000:.0f}" for p in det["series"][:5]), flush=True)
        burst = pinger.end_before_burst(100)
        if burst is not None:
            print(f"    ping's span ends in a brief return; before it: {e['end_ms'] / 1000 - burst:+.2f} s "
                  "from the episode's end", flush=True)
        for what, got, want, bound in (("start", e["start_ms"], [truth[0]], SPAN_S),
                                       ("end", e["end_ms"], [truth[1]] + ([burst] if burst else []), SPAN_S)):
            off = min((got / 1000 - w for w in want), key=abs)
            self.assertLessEqual(abs(off), bound, f"{what} {off:+.2f} s from ping's")

        # Its path, as the sender's namespace routes it.
        p = e["path"]
        route = run("ip", "-n", f"{LAB}-snd", "route", "get", RCV4).stdout
        gw = re.search(r"via (\S+)", route).group(1)
        self.assertEqual((p["prefix_len"], p["interface"], p.get("gateway")), (24, "eth0", gw))
        self.assertEqual(e["kind"], "path")
        self.assertIn("python3", e["processes"])

        # Its flows: the bulk one and the web fetches, with their bytes.
        det = d.cli_json("/v1/incidents/{id}", "incident", str(e["id"]), "--json")
        flows = {f["remote"].rsplit(":", 1)[1]: f for f in det["flows"]}
        b = flows[str(opened["local_port"])]
        ours = seen[opened["local_port"]]
        self.assertEqual((b["process"], b["service"], b["cc"], b["role"]),
                         (ours["comm"], ours["service"], "cubic", "sender"))
        # Its bytes are those delivered in the episode's span (from the read
        # before its first): what the flow delivered before that read and
        # after the episode's last is not the episode's, at most the seconds
        # outside its span plus READ_GAP_S at the flow's mean rate.
        t_open, t_done = opened["wall"], bulk_done["wall"] + bulk_done["response_s"]
        outside_s = max(0.0, e["start_ms"] / 1000 - t_open) + max(0.0, t_done - e["end_ms"] / 1000)
        least = bulk_done["bytes"] * (1 - (outside_s + READ_GAP_S) / (t_done - t_open))
        print(f"    bulk flow: {b['bytes']} of {bulk_done['bytes']} bytes (at least {least:.0f}: "
              f"{outside_s:.1f} s outside the episode)", flush=True)
        self.assertTrue(least <= b["bytes"] <= 1.02 * bulk_done["bytes"],
                        f"the bulk flow's bytes {b['bytes']} against {bulk_done['bytes']}")
        # A fetch's bytes are counted read to read (one a second): what it
        # delivered after the last read that saw it open is not counted, at
        # most READ_GAP_S at the most the path delivered in a second of the
        # episode (a fetch alone on the link at the end runs far above its
        # mean: one of 9.7 s kept 814 of 1,000 kB).
        # A fetch shorter than that, or one that ended after the episode
        # (the third may start once the download is over), may be missed;
        # the others must be among its flows.
        peak_Bps = max(p["rate_bps"] for p in det["series"]) / 8
        kept = 0
        for o, dn in zip(web_opened, web_done):
            f = flows.get(str(o["local_port"]))
            t_end = o["wall"] + dn["response_s"]
            if f is None and (dn["response_s"] < READ_GAP_S or t_end > e["end_ms"] / 1000):
                print(f"    web fetch {o['local_port']}: not among the flows, {dn['response_s']:.1f} s, "
                      f"ended {t_end - e['end_ms'] / 1000:+.1f} s from the episode's end", flush=True)
                continue
            self.assertIsNotNone(f, f"web fetch {o['local_port']} among the flows: {list(flows)}")
            kept += 1
            least = dn["bytes"] - peak_Bps * READ_GAP_S
            print(f"    web fetch {o['local_port']}: {f['bytes']} of {dn['bytes']} bytes "
                  f"(at least {max(least, 0):.0f}), {dn['response_s']:.1f} s", flush=True)
            self.assertTrue(0 < f["bytes"] <= 1.02 * dn["bytes"] and f["bytes"] >= least, f)
        self.assertGreaterEqual(kept, 1, "a web fetch among the episode's flows")
        self.assertGreaterEqual(len(det["series"]), (e["end_ms"] - e["start_ms"]) / 1000 * 0.8,
                                "about a point a second")
        text = d.cli("incident", str(e["id"]), "--width", "140").stdout
        self.assertIn(f"episode {e['id']} · path to 10.9.2.0/24 (eth0)", text)
        self.assertIn("queue (median, max)", text)

        # The fleet's views: one JSON line in the log, the counters.
        lines = [json.loads(x) for x in d.log().splitlines() if x.startswith("{")]
        self.assertTrue(any(x.get("event") == "bloatd_episode" and x.get("id") == e["id"] for x in lines),
                        d.log()[-2000:])
        m = d.metrics()
        self.assertRegex(m, r'bloatd_episodes_total\{kind="path"\} [1-9]')
        self.assertRegex(m, r'bloatd_episode_open\{kind="path"\} \d')

        # top's history view lists it, Enter opens it.
        term = self.tmux("bloatd-test-rec")
        term.new("top", f"{BLOATD} --run-dir {d.run_dir} --state-dir {d.state_dir} top", width=160, height=45)
        wait_for(lambda: "QDELAY" in term.screen("top"), timeout=15, what="top's table")
        term.keys("top", "H")
        wait_for(lambda: "10.9.2.0/24" in term.screen("top") and "timeline" in term.screen("top"),
                 timeout=15, what="the history view with the episode")
        order = [x["id"] for x in d.cli_json("/v1/incidents", "incidents", "--json", "--since", "6h")]
        for _ in range(order.index(e["id"])):
            term.keys("top", "Down")
        term.keys("top", "Enter")
        wait_for(lambda: f"episode {e['id']} · path to 10.9.2.0/24" in term.screen("top")
                 and "largest flows' cwnd" in term.screen("top"), timeout=15, what="the episode's view")
        term.keys("top", "q")

        # Export: the trace against the one the lab played.
        bundle = tempfile.mkdtemp(prefix="bloatd-test-export-")
        self.addCleanup(shutil.rmtree, bundle, True)
        d.cli("incident", str(e["id"]), "--export", bundle)
        with open(os.path.join(bundle, "replay.json")) as f:
            exported = json.load(f)
        print(f"    export: buffer {exported['buffer_bytes'] / 1000:.0f} kB (the lab's "
              f"{int(prof['buffer_bytes']) / 1000:.0f} kB), base RTT {exported['base_rtt_ms']:.0f} ms "
              f"(the lab's {float(prof['delay_ms']):.0f})", flush=True)
        self.check_trace(bundle, det, trace_path, emulator_start(LAB, "link"))

        # Kept across a stop and a start.
        d.stop()
        # `bloatd history` on its own, from the journal (no daemon): the
        # minutes of the episode's path show it.
        hist = self.history(d, snd_ino, e)
        d.start()
        again = self.sender_episode(d, snd_ino)
        self.assertEqual((again["id"], again["start_ms"], again["end_ms"]), (e["id"], e["start_ms"], e["end_ms"]))
        # The same rows from the daemon (a minute's row may be split at the
        # stop: those on disk are among them).
        api = self.history(d, snd_ino, e)
        self.assertTrue(all(r in api for r in hist), (hist, api))
        # A reboot: the daemon stopped, the run directory wiped (as /run
        # is), started again: still listed.
        d.stop()
        wait_for(lambda: d.cli("status", check=False).returncode == 3, timeout=10, what="the daemon gone")
        shutil.rmtree(d.run_dir)
        d.start()
        again = self.sender_episode(d, snd_ino)
        self.assertEqual((again["id"], again["start_ms"], again["end_ms"]), (e["id"], e["start_ms"], e["end_ms"]))

        # kill -9 during an episode loses at most its last second.
        bulk2, _, _ = self.start_flows(lab, 15, 0)
        wait_for(lambda: (lambda x: x and x["open"] and x["id"] != e["id"])(
            self.sender_episode(d, snd_ino, open_ok=True)), timeout=30, what="a second episode open")
        time.sleep(3)
        pid = d.pid()
        t_kill = time.time()
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: d.cli("status", check=False).returncode == 3, timeout=10, what="the daemon gone")
        d.start()
        cut = wait_for(lambda: [x for x in self.incidents(d, "--since", "1h")
                                if x["id"] > e["id"] and x.get("path", {}).get("netns") == snd_ino
                                and x.get("cut") == "interrupted"], timeout=10, what="the cut episode")[0]
        lost = t_kill - cut["end_ms"] / 1000
        print(f"    kill -9: the cut episode ends {lost:.2f} s before the kill", flush=True)
        self.assertLessEqual(lost, 1.5, "at most the last second (one read a second) is lost")
        bulk2.wait(timeout=60)
        server.terminate()
        lab.close()

        # Replay: the CUBIC arm on the exported link.
        env = {**os.environ, "BLOATD_SOCK": os.path.join(d.run_dir, "bloatd.sock")}
        r = subprocess.run([sys.executable, LAB_PY, "--replay", bundle, "--replay-arms", "cubic",
                            "--name", "blrep"], env=env, capture_output=True, text=True, timeout=300)
        self.addCleanup(run, TOPO, "down", "blrep", check=False)
        print("    " + "\n    ".join(r.stdout.strip().splitlines()), flush=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(bundle, "replay-results.json")) as f:
            res = json.load(f)
        arm = res["arms"][0]
        recorded = res["recorded"]["bulk_queue_p50_ms"]
        print(f"    replay: CUBIC median queue {arm['queue_p50_ms']:.0f} ms, recorded {recorded:.0f} ms",
              flush=True)
        off = arm["queue_p50_ms"] / recorded - 1
        if abs(off) > REPLAY_QUEUE:
            # The bundle outlives the test: `lab.py --replay DIR` again.
            kept = tempfile.mkdtemp(prefix="bloatd-test-replay-")
            shutil.copytree(bundle, kept, dirs_exist_ok=True)
            print(f"    replay: the bundle is kept in {kept}", flush=True)
        self.assertLessEqual(abs(off), REPLAY_QUEUE)

    def check_trace(self, bundle, det, trace_path, start_ns):
        """The exported capacity of the measured seconds against the trace
        the lab played, at the lag (within 1 s: the ACKs' base RTT, the
        reads' times) that fits best."""
        with open(os.path.join(bundle, "capacity.csv")) as f:
            rows = [r.split(",") for r in f.read().split("\n")[1:] if r]
        t0 = det["series"][0]["t_ms"] / 1000
        trace = Trace(trace_path, start_ns)
        mono_minus_wall = time.monotonic() - time.time()
        measured = [(int(r[0]), int(r[2])) for r in rows if r[3] == "measured"]
        self.assertGreaterEqual(len(measured), 10, f"measured seconds: {rows}")
        best = None
        for lag_ms in range(-1000, 1001, 50):
            orig = []
            for k, _ in measured:
                a = int((t0 + k + mono_minus_wall - lag_ms / 1000) * 1e9)
                # An opportunity carries one full-size segment: 1448 B
                # of payload, what the delivery rates count.
                orig.append(trace.count(a, a + 1_000_000_000) * 1448 * 8)
            c = corr([c for _, c in measured], orig)
            if best is None or c > best[0]:
                best = (c, lag_ms, orig)
        c, lag_ms, orig = best
        seconds = "each second, exported against the trace (Mbit/s):\n" + "\n".join(
            f"  s{k:3d} {cap / 1e6:6.2f} {o / 1e6:6.2f}" for (k, cap), o in zip(measured, orig))
        mean_ratio = statistics.mean(c for _, c in measured) / statistics.mean(orig)
        print(f"    export: {len(measured)} of {len(rows)} seconds measured; against the trace: "
              f"correlation {c:.3f} at lag {lag_ms} ms, mean ratio {mean_ratio:.3f}", flush=True)
        self.assertGreaterEqual(c, 0.9, seconds)
        self.assertLessEqual(abs(mean_ratio - 1), 0.10, seconds)
        with open(os.path.join(bundle, "trace.down")) as f:
            lines = f.read().split()
        self.assertEqual(int(lines[-1]), len(rows) * 1000, "the trace's period is the episode's")

    def test_bad_journals_keep_the_daemon_running(self):
        def journal_feature(d):
            st = d.cli_json("/v1/status", "status", "--json")
            return next(f for f in st["health"]["features"] if f["name"] == "journal")

        # A corrupt journal and a symlink: moved aside with a line, kept.
        for what in ("corrupt", "symlink"):
            d = self.daemon("--no-cc")
            os.makedirs(d.state_dir, mode=0o700)
            path = os.path.join(d.state_dir, "journal.sqlite")
            target = os.path.join(d.run_dir, "target")
            garbage = os.urandom(65536)
            with open(path if what == "corrupt" else target, "wb") as f:
                f.write(garbage)
            if what == "symlink":
                os.symlink(target, path)
            d.start()
            wait_for(lambda: "moved aside" in d.log(), timeout=10, what=f"{what}: the line")
            line = next(x for x in d.log().splitlines() if "moved aside" in x)
            print(f"    {what}: {line[line.index('journal'):]}", flush=True)
            aside = [f for f in os.listdir(d.state_dir) if re.match(r"journal\.sqlite\.\w+-\d+$", f)]
            self.assertEqual(len(aside), 1, os.listdir(d.state_dir))
            kept = os.path.join(d.state_dir, aside[0])
            if what == "symlink":
                self.assertTrue(os.path.islink(kept))
            with open(kept if what == "corrupt" else target, "rb") as f:
                self.assertEqual(f.read(), garbage)
            wait_for(lambda: journal_feature(d)["state"] == "on", timeout=10, what="a new journal")
            st = os.stat(path)
            sock = os.stat(os.path.join(d.run_dir, "bloatd.sock"))
            self.assertEqual((st.st_mode & 0o777, st.st_uid, st.st_gid), (0o640, 0, sock.st_gid),
                             "the journal's mode and owner follow the API socket's")
            d.stop()

        # A read-only state directory: a line that says so, the daemon
        # runs and records in memory.
        d = self.daemon("--no-cc")
        os.makedirs(d.state_dir, mode=0o700)
        run("mount", "-t", "tmpfs", "-o", "ro,size=1m,mode=0700", "tmpfs", d.state_dir)
        self.addCleanup(run, "umount", "-l", d.state_dir, check=False)
        d.start()
        wait_for(lambda: "read-only" in d.log().lower(), timeout=10, what="the read-only line")
        line = next(x for x in d.log().splitlines() if "read-only" in x.lower())
        print(f"    read-only: {line[line.index('journal'):]}", flush=True)
        self.assertEqual(journal_feature(d)["state"], "fallback")
        self.assertEqual(d.cli("status", check=False).returncode, 0, "the daemon runs")
        d.stop()
        run("umount", d.state_dir)

        # Another bloatd holds it: this one records in memory, and says so.
        first = self.daemon("--no-cc")
        first.start()
        second = self.daemon("--no-cc", state_dir=first.state_dir)
        second.start()
        wait_for(lambda: "in use by another bloatd" in second.log(), timeout=10, what="the lock's line")
        f = journal_feature(second)
        self.assertEqual(f["state"], "fallback", f)
        self.assertEqual(second.cli("status", check=False).returncode, 0)
        self.assertEqual(journal_feature(first)["state"], "on")
        second.stop()
        first.stop()

        # A full file system: episodes held in memory, written once there is room.
        d = self.daemon()
        os.makedirs(d.state_dir, mode=0o700)
        run("mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", d.state_dir)
        self.addCleanup(run, "umount", "-l", d.state_dir, check=False)
        cfg = os.path.join(d.run_dir, "small.toml")
        with open(cfg, "w") as f:
            f.write("journal_max_mb = 2\ncc = []\n")
        d.cli("--config", cfg, "start", "--listen", f"127.0.0.1:{d.port}")
        lab = self.lab("blfull", rate="10mbit", buffer_bytes=1_500_000)
        snd_ino = os.stat("/run/netns/blfull-snd").st_ino
        lab.iperf_server("snd")

        def episode(seconds, before=()):
            lab.download("cubic", seconds)
            return wait_for(lambda: [e for e in self.incidents(d, "--since", "1h")
                                     if not e["open"] and e["id"] not in before
                                     and (e.get("path") or {}).get("netns") == snd_ino],
                            timeout=seconds + 40, step=1, what="an episode closed")[0]
        first_ep = episode(6)
        filler = os.path.join(d.state_dir, "filler")
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=4k"], capture_output=True)
        second_ep = episode(15, before={first_ep["id"]})
        wait_for(lambda: "full" in d.log(), timeout=30, what="the full disk's line")
        line = next(x for x in d.log().splitlines() if "full" in x)
        print(f"    full: {line[line.index('journal'):]}", flush=True)
        self.assertEqual(journal_feature(d)["state"], "fallback")
        self.assertEqual(d.cli("status", check=False).returncode, 0, "the daemon runs")
        ids = {e["id"] for e in self.incidents(d, "--since", "1h")}
        self.assertLessEqual({first_ep["id"], second_ep["id"]}, ids, "both listed (one from memory)")
        os.unlink(filler)
        wait_for(lambda: "writable again" in d.log(), timeout=40, step=1, what="the journal written again")
        d.stop()
        # With no daemon, `incidents` reads the journal itself: both are on disk.
        on_disk = {e["id"] for e in self.incidents(d, "--since", "1h")}
        self.assertLessEqual({first_ep["id"], second_ep["id"]}, on_disk)


if __name__ == "__main__":
    main()
