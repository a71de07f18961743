#!/usr/bin/env python3
"""The kernel tier: what every kernel of the matrix runs (scripts/vm/run.sh),
in a VM booted on a Debian kernel or on the host's own kernel.

One daemon, one lab topology (sender - router - receiver, 10 Mbit/s, 500 kB
buffer, 40 ms from the NFQUEUE delay line), the kernel's own view (`ss`,
bpftool, the congestion control sysctls) as the oracle:

  start            bloatd start with a policy rule by port and DRWA armed
  kill -9          the daemon killed: nothing attached is left, and the next
                   start works (a registration left by map update, before
                   Linux 6.4, is removed: the log says so)
  sockets          a CUBIC download's sender against `ss -ti` (cwnd, srtt)
  cc               bloatd_westwood and bloatd_cubic each carry a download
  policy           a connection to the rule's port gets bloatd_westwood
  drwa             DRWA switched on clamps the download's receive window
                   (`ss`'s rcv_ssthresh under the clamp bloatd reports)
  metrics, top, paths   /metrics, `top --once` and `paths` show the flow
  stop             nothing attached is left, the algorithms unregistered

A kernel below the core's minimum must refuse `start` with exit 2, a
message naming the minimum and what is missing, and nothing attached; the
rest is then declined ("skip"). From Linux 6.1 on every part must run: a
part the daemon declines there is a failure.

Writes OUT/result.json: the kernel, the features `bloatd status` reports,
and every check (pass, fail or skip, with a detail and its seconds). Exit 1
if a check failed.
"""

import argparse
import json
import os
import re
import signal
import sys
import time
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts", "tests"))
from bloatdtest import (  # noqa: E402
    PROBE_PROGS, RCV4, SND4, Daemon, Lab, available_cc, bpf_prog_ids, close_enough, run,
    sock_ops_attached, wait_for)

# Every part must run from this kernel on (issue 16: Debian 12's 6.1).
FULL_FROM = (6, 1)
ALGOS = ("bloatd_westwood", "bloatd_cubic")
RULE_PORT = 5301
LAB = "kt"


class Skip(Exception):
    """A check that does not apply on this kernel (the part was declined)."""


class Tier:
    def __init__(self, out):
        self.out = out
        self.checks = []
        self.features = []
        self.start_output = ""
        self.release = os.uname().release
        m = re.match(r"(\d+)\.(\d+)", self.release)
        self.version = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
        self.declined = None  # why the core was refused, if it was

    def check(self, name, fn, *args):
        t0 = time.time()
        try:
            if self.declined:
                raise Skip(self.declined)
            detail = fn(*args) or ""
            status = "pass"
        except Skip as e:
            status, detail = "skip", str(e)
        except Exception as e:  # noqa: BLE001  a failed check must not stop the tier
            status = "fail"
            detail = f"{type(e).__name__}: {e}".strip()
            traceback.print_exc()
        secs = round(time.time() - t0, 1)
        self.checks.append({"name": name, "status": status, "detail": detail, "seconds": secs})
        print(f"{status.upper():4} {name} ({secs} s): {detail}", flush=True)

    def write(self):
        failed = any(c["status"] == "fail" for c in self.checks)
        with open(os.path.join(self.out, "result.json"), "w") as f:
            json.dump({"kernel": self.release, "features": self.features,
                       "start": self.start_output, "checks": self.checks,
                       "exit": int(failed)}, f, indent=1)
        return 1 if failed else 0


def nothing_attached(d):
    """What a stopped or killed daemon must not leave: its probes, its
    sock_ops program."""
    progs = wait_for(lambda: not bpf_prog_ids(PROBE_PROGS) and not sock_ops_attached(),
                     timeout=10, what="the probes and the sock_ops program to go")
    return progs


def daemon_gone(d):
    wait_for(lambda: d.cli("status", "--json", check=False).returncode == 3, timeout=15,
             what="the daemon to be gone (its pid file's lock released)")


class Run:
    """The checks, in order, sharing one daemon and one lab."""

    def __init__(self, tier):
        self.t = tier
        self.d = Daemon("--drwa=off", "--policy", f"name=port,sport={RULE_PORT},cc=bloatd_westwood",
                        sandbox=False)
        self.lab = None

    def start(self):
        r = self.d.start(check=False)
        self.t.start_output = (r.stdout + r.stderr).strip()
        if r.returncode == 2:
            msg = r.stderr.strip()
            if self.t.version >= FULL_FROM:
                raise AssertionError(f"refused a kernel it must run on: {msg}")
            assert "needs Linux" in msg and "lacks" in msg, f"exit 2 without naming the minimum: {msg}"
            assert not bpf_prog_ids(PROBE_PROGS) and not sock_ops_attached(), "refused, yet attached"
            assert not any(a in available_cc() for a in ALGOS), "refused, yet registered"
            self.t.declined = "declined with the core: " + msg.removeprefix("bloatd: ")
            return "exit 2, nothing attached: " + msg.removeprefix("bloatd: ")
        assert r.returncode == 0, f"start exited {r.returncode}: {self.t.start_output}"
        self.status()
        return self.t.start_output.splitlines()[0]

    def status(self):
        s = json.loads(self.d.cli("status", "--json").stdout)
        self.t.features = s["health"].get("features", [])
        off = [f"{f['name']}: {f['detail']}" for f in self.t.features if f["state"] == "off"]
        if off and self.t.version >= FULL_FROM:
            raise AssertionError("declined on a kernel where every part must run: " + "; ".join(off))
        missing = [a for a in ALGOS if a not in s["cc_registered"]]
        assert not missing, f"not registered: {missing}"
        return s

    def kill9(self):
        pid = self.d.pid()
        assert pid, "no pid file"
        os.kill(pid, signal.SIGKILL)
        daemon_gone(self.d)
        nothing_attached(self.d)
        by_map = any(f["name"] == "cc_link" and f["state"] == "fallback" for f in self.t.features)
        left = [a for a in ALGOS if a in available_cc()]
        if not by_map:
            assert not left, f"links closed with the process, yet still registered: {left}"
        r = self.d.start(check=False)
        assert r.returncode == 0, f"the start after kill -9 failed: {(r.stdout + r.stderr).strip()}"
        self.status()
        if by_map:
            assert left == list(ALGOS), f"map-update registrations should outlive the kill: {left}"
            log = self.d.log()
            removed = [a for a in ALGOS if f"{a}: removed the registration a killed bloatd left" in log]
            assert removed == list(ALGOS), f"stale registrations not reported removed: {log[-800:]}"
            return "stale map-update registrations of both algorithms removed, start ok"
        return "nothing left attached, start ok"

    def lab_up(self):
        run(os.path.join(REPO, "scripts", "lab", "topo.sh"), "down", LAB, check=False)
        self.lab = Lab(LAB, rate="10mbit", buffer_bytes=500000, delay_ms=40)
        idle = self.lab.ping("snd", RCV4, count=3)
        assert idle and min(idle) >= 39, f"the delay line does not delay: ping {idle}"
        for port in (5201, 5202, 5203, RULE_PORT):
            self.lab.iperf_server("snd", port=port)
        # Long enough for every check; the lab's close ends it.
        self.lab.download("cubic", 600, port=5201)
        wait_for(lambda: self.sender(5201), timeout=60, what="the cubic download")
        return f"idle RTT {min(idle):.1f} ms"

    def sender(self, port, cc="cubic"):
        """The data connection of a download from the sender's `port`, as
        `ss` sees it: iperf3's control connection beside it moves no data
        (and has the namespace's default congestion control, which is
        cubic on Debian's kernels too)."""
        socks = [s for s in self.lab.ss("snd") if s["local_port"] == port and s["state"] == "ESTAB"
                 and s["cc"] == cc and s["bytes_acked"] > 50_000]
        return max(socks, key=lambda s: s["bytes_acked"]) if socks else None

    def sockets(self):
        self.lab.wait_for_queue(40, 100, timeout=60)
        last = None
        for _ in range(8):
            theirs = self.sender(5201)
            ours = [s for s in self.d.sockets() if s["cc"] == "cubic" and s["role"] == "sender"
                    and s["remote_addr"] == RCV4 and s["local_port"] == 5201]
            if theirs and len(ours) == 1:
                o = ours[0]
                last = (f"cwnd {o['cwnd']}/{theirs['cwnd']}, srtt {o['srtt_us'] / 1000:.1f}/"
                        f"{theirs['srtt_us'] / 1000:.1f} ms, qdelay {o['queue_delay_us'] / 1000:.0f} ms")
                if (close_enough(o["cwnd"], theirs["cwnd"]) and
                        close_enough(o["srtt_us"] / 1000, theirs["srtt_us"] / 1000, absolute=1) and
                        o["queue_delay_us"] > 50_000):
                    return last + " (bloatd/ss)"
            time.sleep(1)
        raise AssertionError(f"bloatd and ss disagree: {last}")

    def cc(self):
        self.lab.download("bloatd_westwood", 8, port=5202)
        self.lab.download("bloatd_cubic", 8, port=5203)
        got = {}

        def both():
            for s in self.lab.ss("snd"):
                if s.get("cc") in ALGOS and s.get("bytes_acked", 0) > 100_000:
                    got[s["cc"]] = s["bytes_acked"]
            return len(got) == 2
        wait_for(both, timeout=30, step=1, what=f"both algorithms carrying data (so far {got})")
        states = {s["cc"]: s.get("cc_state") for s in self.d.sockets() if s["cc"] in ALGOS}
        assert all(states.get(a) for a in ALGOS), f"no exported state: {states}"
        return ", ".join(f"{a} {n // 1000} kB" for a, n in sorted(got.items()))

    def policy(self):
        self.lab.spawn("rcv", "iperf3", "-c", SND4, "-p", str(RULE_PORT), "-t", "4", "-R")
        sock = wait_for(lambda: [s for s in self.lab.ss("snd") if s.get("local_port") == RULE_PORT
                                 and s["state"] == "ESTAB" and s.get("bytes_acked", 0) > 10_000],
                        timeout=30, what="the rule's connection carrying data")
        ccs = {s.get("cc") for s in sock}
        assert "bloatd_westwood" in ccs, f"the rule's port got {ccs}"
        ours = [s for s in self.d.sockets() if s["local_port"] == RULE_PORT
                and (s.get("policy") or {}).get("cc_rule") == "port"]
        assert ours, "bloatd does not name the rule on the connection"
        assert self.sender(5201), "the rule touched another port's download"
        return f"port {RULE_PORT}: bloatd_westwood (ss), rule named by bloatd"

    def drwa(self):
        self.d.cli("policy", "drwa", "on")

        def clamped():
            for s in self.d.sockets():
                dr = (s.get("policy") or {}).get("drwa")
                if s["role"] == "receiver" and s["local_addr"] == RCV4 and dr and dr.get("clamp_bytes"):
                    return s, dr
            return None
        s, dr = wait_for(clamped, timeout=30, step=1, what="DRWA clamping the download's receiver")
        clamp = dr["clamp_bytes"]

        def under():
            for x in self.lab.ss("rcv"):
                if x["local_port"] == s["local_port"] and x["rcv_ssthresh"] > 0:
                    return x["rcv_ssthresh"] <= clamp + 2 * x.get("mss", 1448) and x
            return None
        x = wait_for(under, timeout=15, step=1, what=f"ss's rcv_ssthresh under the clamp {clamp}")
        self.d.cli("policy", "drwa", "off")
        return f"clamp {clamp} B, ss rcv_ssthresh {x['rcv_ssthresh']} B"

    def metrics(self):
        text = self.d.metrics()
        need = ["bloatd_tcp_sockets{", "bloatd_feature_enabled{", 'bloatd_tcp_queueing_delay_seconds_count{cc="cubic",role="sender",']
        missing = [n for n in need if n not in text]
        assert not missing, f"missing from /metrics: {missing}"
        fe = re.findall(r'bloatd_feature_enabled\{feature="([^"]+)"\} (\d)', text)
        return "features " + " ".join(f"{n}={v}" for n, v in fe)

    def top(self):
        out = self.d.cli("top", "--once", "--width", "160").stdout
        assert RCV4 in out or SND4 in out, f"the flow is not in top --once:\n{out}"
        return out.splitlines()[0].strip()

    def paths(self):
        paths = json.loads(self.d.cli("paths", "--json").stdout)
        peers = [p for p in paths if RCV4 in json.dumps(p)]
        assert peers, f"no path to {RCV4}: {paths}"
        return f"{len(paths)} paths"

    def stop(self):
        r = self.d.stop()
        assert r.returncode == 0, f"stop exited {r.returncode}: {r.stdout}{r.stderr}"
        daemon_gone(self.d)
        nothing_attached(self.d)
        left = [a for a in ALGOS if a in available_cc()]
        assert not left, f"still registered after stop: {left}"
        return "nothing left attached"

    def close(self):
        if self.lab:
            self.lab.close()
        self.d.cleanup()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    tier = Tier(args.out)
    print(f"kernel tier on {tier.release}", flush=True)
    r = Run(tier)
    try:
        tier.check("start", r.start)
        tier.check("kill -9, start", r.kill9)
        tier.check("lab", r.lab_up)
        tier.check("sockets vs ss", r.sockets)
        tier.check("top --once", r.top)
        tier.check("paths", r.paths)
        tier.check("metrics", r.metrics)
        tier.check("DRWA", r.drwa)
        tier.check("congestion controls", r.cc)
        tier.check("policy by port", r.policy)
        tier.check("stop", r.stop)
    finally:
        r.close()
    return tier.write()


if __name__ == "__main__":
    sys.exit(main())
