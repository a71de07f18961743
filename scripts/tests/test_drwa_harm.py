#!/usr/bin/env python3
"""Issue 18: DRWA never does worse than not acting. Two identical labs side
by side (8 Mbit/s, 1.5 MB buffer, 40 ms base RTT): in `hoff` DRWA leaves
the receiver alone, in `hon` a rule puts DRWA on it; the same traffic runs
in both at once, and each case asks that the connection with DRWA gets at
least 90% of what the one without gets. Throughput (`ss` bytes received,
the response times the client measures) and `ping` (the delay line really
moved the RTT) are the oracles.

1. The path gets longer mid-transfer, same interface and gateway (a phone
   falls back from LTE to 3G): base RTT 40 -> 200 ms at the delay line
   (`topo.sh delay`), goodput over the next 16 s. With the path's floor as
   RTT_min (before issue 18) every round multiplied the window by
   3 x 40 / 200 and the download fell to ~2 segments per RTT.
2. A floor from the peer's prefix: a new peer in the same /24 at 200 ms,
   its prefix's floor still 40 ms.
3. A floor inferred from the bottleneck: a new peer in a new prefix opened
   behind a standing queue that a flow whose floor is 40 ms measures as
   160 ms more than it is.
4. A pause and resume on a persistent connection (HTTP/2's pattern):
   256 kB responses 1.5 s apart on one connection, 40 ms; the round spanning
   the pause closed with almost nothing received and clamped the next
   response to 2 segments. The receivers run with tcp_shrink_window = 1
   (6.5+: the window may shrink to honour a smaller clamp or memory
   limit), where a clamp takes effect at once; with the default the kernel
   never shrinks a window it offered, and the first window after a pause
   hides a clamp that is too small.
5. lambda at its lowest allowed value (2; 1.0 is refused), the path getting
   longer as in 1.
6. A new connection beside a download DRWA holds, opened 0.3 s after the
   path got longer: its first rounds (slow start) take the RTT_min the
   other receivers on the path use, and the download's is still the 40 ms
   one until its next cut is taken back.

All cases are measured before any is judged, so one run prints every
number (the failing run on the old code in the README's table).
"""

import json
import os
import statistics
import subprocess
import tempfile
import time

from bloatdpy.harness import (FLOWS, RCV4, TOPO, TestCase, main, run, stop, wait_for)

BASE_MS, LONG_MS = 40, 200
RATE = "8mbit"
BUFFER = 1_500_000
SECONDS = 16
# Servers: each lab's own ports; DRWA's rule selects the `hon` ones.
OFF_PORTS = {"iperf": 5401, "flows": 5402, "second": 5403}
ON_PORTS = {"iperf": 5501, "flows": 5502, "second": 5503}
BG_PORT = 5301          # the background flow (no DRWA in either lab)
RULE = "name=harm,dport=5500-5599,drwa=true"
PREFIX_PEER = "10.9.1.3"   # same /24 as the lab's sender 10.9.1.1
NEW_PEER = "10.9.3.1"      # a prefix never seen


class Pair:
    """The two labs, `hoff` (no DRWA) and `hon` (DRWA by rule)."""

    def __init__(self, test):
        self.off = test.lab("hoff", rate=RATE, buffer_bytes=BUFFER, delay_ms=BASE_MS)
        self.on = test.lab("hon", rate=RATE, buffer_bytes=BUFFER, delay_ms=BASE_MS)
        for lab in (self.off, self.on):
            # More sender addresses, through the same router and bottleneck.
            run("ip", "-n", lab.ns("snd"), "addr", "add", f"{PREFIX_PEER}/24", "dev", "eth0")
            run("ip", "-n", lab.ns("snd"), "addr", "add", f"{NEW_PEER}/24", "dev", "eth0")
            run("ip", "-n", lab.ns("rtr"), "route", "add", "10.9.3.0/24", "via", "10.9.1.1")
            lab.iperf_server("snd", port=BG_PORT)
        for lab, ports in self.both():
            lab.iperf_server("snd", port=ports["iperf"])
            lab.iperf_server("snd", port=ports["second"])
            lab.spawn("snd", "python3", FLOWS, "serve", "--port", str(ports["flows"]))
            wait_for(lambda lab=lab, p=ports["flows"]: lab.exec(
                "rcv", "bash", "-c", f"exec 3<>/dev/tcp/10.9.1.1/{p}", check=False).returncode == 0,
                what="the flows server")

    def both(self):
        return ((self.off, OFF_PORTS), (self.on, ON_PORTS))

    def set_delay(self, ms):
        for lab in (self.off, self.on):
            run(TOPO, "delay", lab.name, str(ms))

    def download(self, server, seconds, port_key="iperf", beside=False):
        """A CUBIC download in each lab; `beside`: the case's downloads
        so far go on."""
        if not beside:
            self.clients = []
        self.clients += [lab.spawn("rcv", "iperf3", "-c", server, "-p", str(ports[port_key]),
                                   "-R", "-C", "cubic", "-t", str(seconds))
                         for lab, ports in self.both()]

    def end_downloads(self):
        """The case's downloads end (their connections close)."""
        for p in self.clients:
            stop(p)
        self.clients = []
        time.sleep(1)


def received(lab, port):
    """Bytes the receiver's data connection to server `port` got (the
    iperf3 control connection carries almost nothing)."""
    socks = [s for s in lab.ss("rcv") if s["remote_port"] == port]
    return max((s["bytes_received"] for s in socks), default=0)


def goodputs(pair, seconds, port_key="iperf"):
    """Mbit/s of each lab's download over the next `seconds`."""
    b0 = [received(lab, ports[port_key]) for lab, ports in pair.both()]
    t0 = time.time()
    time.sleep(seconds)
    b1 = [received(lab, ports[port_key]) for lab, ports in pair.both()]
    dt = time.time() - t0
    return [(b - a) * 8 / dt / 1e6 for a, b in zip(b0, b1)]


def ping_ms(lab, count=5):
    return lab.ping("snd", RCV4, count=count, interval=0.2)


class DrwaDoesNoHarm(TestCase):
    def setUp(self):
        self.results = []   # (case, off, on, ratio, extra)

    def record(self, case, off, on, extra=""):
        ratio = on / off if off else 0.0
        self.results.append((case, off, on, ratio, extra))
        print(f"    {case}: DRWA off {off:.2f}, on {on:.2f} ({ratio:.2f}x) {extra}", flush=True)

    def drwa_summary(self, d, port=ON_PORTS["iperf"]):
        s = self.drwa_receiver(d, port) or {}
        return ((s.get("policy") or {}).get("drwa")) or {}

    def drwa_receiver(self, d, port, peer=None):
        socks = [s for s in d.sockets() if s["remote_port"] == port and s["local_addr"] == RCV4
                 and s["bytes_received"] > 100_000 and (peer is None or s["remote_addr"] == peer)]
        return max(socks, key=lambda s: s["bytes_received"]) if socks else None

    def test_drwa_takes_no_connection_below_what_it_gets_without(self):
        d = self.daemon("--no-cc", "--drwa=off", "--policy", RULE)
        d.start()
        pair = Pair(self)
        self.path_gets_longer(d, pair, "1 path 40->200 ms mid-transfer")
        self.prefix_floor(d, pair)
        self.inferred_floor(d, pair)
        self.pause_and_resume(d, pair)
        self.beside_a_download_as_the_path_grows(d, pair)
        d.cleanup()
        self.lowest_lambda(pair)
        code, err = self.lambda_one
        self.assertEqual(code, 2, f"drwa_lambda = 1.0 is refused: {err}")
        self.assertIn("drwa_lambda = 1 is out of range (2.0..=16.0", err)
        bad = [r for r in self.results if r[3] < 0.9]
        self.assertFalse(bad, "DRWA took a connection more than 10% below DRWA off: "
                         + "; ".join(f"{c}: {on:.2f} against {off:.2f}" for c, off, on, _, _ in bad))

    def path_gets_longer(self, d, pair, case):
        pair.set_delay(BASE_MS)
        pair.download("10.9.1.1", SECONDS + 12)
        def drwa():
            return (((self.drwa_receiver(d, ON_PORTS["iperf"]) or {}).get("policy") or {})
                    .get("drwa") or {})
        wait_for(lambda: drwa().get("clamp_bytes", 0) > 0, timeout=20, what="DRWA's clamp")
        time.sleep(4)
        s = drwa()
        before = statistics.median(ping_ms(pair.on))
        pair.set_delay(LONG_MS)
        time.sleep(0.5)
        off, on = goodputs(pair, SECONDS)
        after = min(ping_ms(pair.off, 3))
        self.assertGreaterEqual(after, LONG_MS - 5, "ping: the delay line made the path longer")
        self.record(case, off, on, f"(ping with DRWA before the change {before:.0f} ms, "
                    f"clamp {s.get('clamp_bytes')} B; after: {self.drwa_summary(d)})")
        pair.end_downloads()

    def prefix_floor(self, d, pair):
        # The delay is 200 ms; the /24's floor is the 40 ms of case 1.
        pair.download(PREFIX_PEER, SECONDS + 3)
        s = wait_for(lambda: self.drwa_receiver(d, ON_PORTS["iperf"], PREFIX_PEER),
                     what="the new peer's flow")
        self.assertEqual(s["floor_source"], "prefix", f"the floor comes from the prefix: {s}")
        self.assertLess(s["floor_us"], 100_000, "the prefix floor is the old 40 ms path's")
        off, on = goodputs(pair, SECONDS)
        self.record("2 a prefix floor of 40 ms, the path 200 ms", off, on,
                    f"(floor {s['floor_us'] / 1000:.0f} ms, {s['floor_source']}; "
                    f"DRWA {self.drwa_summary(d)})")
        pair.end_downloads()

    def inferred_floor(self, d, pair):
        # A standing queue, measured by a flow whose floor is 40 ms.
        for lab, _ in pair.both():
            lab.spawn("rcv", "iperf3", "-c", "10.9.1.1", "-p", str(BG_PORT), "-R", "-C", "cubic",
                      "-t", "8")
        for lab, _ in pair.both():
            lab.wait_for_queue(LONG_MS, 300)
        pair.download(NEW_PEER, SECONDS + 8)
        s = wait_for(lambda: self.drwa_receiver(d, ON_PORTS["iperf"], NEW_PEER),
                     what="the new prefix's flow")
        self.assertEqual(s["floor_source"], "inferred", f"the floor is inferred: {s}")
        # The background flows end; the new flows go on alone.
        time.sleep(6)
        off, on = goodputs(pair, SECONDS)
        self.record("3 an inferred floor, the path 200 ms", off, on,
                    f"(floor {s['floor_us'] / 1000:.0f} ms, {s['floor_source']}; "
                    f"DRWA {self.drwa_summary(d)})")
        pair.end_downloads()

    def pause_and_resume(self, d, pair):
        # At 40 ms, where the path's floor is right: only the pause acts.
        pair.set_delay(BASE_MS)
        for lab, _ in pair.both():
            lab.exec("rcv", "sysctl", "-qw", "net.ipv4.tcp_shrink_window=1", check=False)
        procs = []
        for lab, ports in pair.both():
            p = subprocess.Popen(["ip", "netns", "exec", lab.ns("rcv"), "python3", FLOWS, "fetch",
                                  "--port", str(ports["flows"]), "--bytes", "262144",
                                  "--cc", "cubic", "--count", "7", "--gap", "1.5",
                                  "--persistent"], stdout=subprocess.PIPE, text=True)
            lab.procs.append(p)
            procs.append(p)
        times = []
        for p in procs:
            out, _ = p.communicate(timeout=120)
            recs = [json.loads(line) for line in out.splitlines() if line.strip()]
            done = [r["response_s"] for r in recs if r.get("event") == "done"]
            self.assertEqual(len(done), 7, out)
            times.append(done)
        for lab, _ in pair.both():
            lab.exec("rcv", "sysctl", "-qw", "net.ipv4.tcp_shrink_window=0", check=False)
        off, on = (statistics.median(t[1:]) for t in times)
        # Throughput is the inverse of the response time.
        self.record("4 256 kB responses 1.5 s apart on one connection (s per response)",
                    1 / off, 1 / on, f"(median response off {off:.2f} s, on {on:.2f} s; "
                    f"off {[round(x, 2) for x in times[0]]}, on {[round(x, 2) for x in times[1]]})")

    def beside_a_download_as_the_path_grows(self, d, pair):
        pair.set_delay(BASE_MS)
        pair.download("10.9.1.1", SECONDS + 12)
        wait_for(lambda: self.drwa_summary(d).get("clamp_bytes", 0) > 0, timeout=20,
                 what="DRWA's clamp on the download")
        time.sleep(2)
        pair.set_delay(LONG_MS)
        time.sleep(0.3)
        pair.download("10.9.1.1", SECONDS + 2, port_key="second", beside=True)
        off, on = goodputs(pair, SECONDS, port_key="second")
        self.record("6 a new connection beside a download, the path 40->200 ms as it opens",
                    off, on, f"(the new one: {self.drwa_summary(d, ON_PORTS['second'])}; "
                    f"the download: {self.drwa_summary(d)})")
        pair.end_downloads()

    def lowest_lambda(self, pair):
        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
            f.write("drwa_lambda = 1.0\n")
        self.addCleanup(os.unlink, f.name)
        d = self.daemon()
        args = ("--no-cc", "--drwa=off", "--policy", RULE)
        r = d.cli("--config", f.name, "start", "--listen", f"127.0.0.1:{d.port}", *args,
                  check=False)
        self.lambda_one = (r.returncode, r.stderr.strip())
        print(f"    lambda 1.0: exit {r.returncode} {r.stderr.strip()}", flush=True)
        if r.returncode == 0:
            d.stop()
        with open(f.name, "w") as g:
            g.write("drwa_lambda = 2.0\n")
        d.cli("--config", f.name, "start", "--listen", f"127.0.0.1:{d.port}", *args)
        self.path_gets_longer(d, pair, "5 lambda 2, path 40->200 ms mid-transfer")


if __name__ == "__main__":
    main()
