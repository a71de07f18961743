"""The lab topology (scripts/lab/topo.sh) comes up as specified and goes
away completely: no namespace, qdisc, iptables rule, emulator process or
run file is left (harness.lab_leftovers), also when `up` is interrupted
(SIGINT) at any point of its work, when lab.py is interrupted in the middle
of an experiment, and when `up` fails.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from bloatdpy.harness import FLOWS, LAB_PY, LAB_RUN, RCV4, TOPO, TestCase, lab_leftovers, main, netns_list, run

N = "bltopo"


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except (ProcessLookupError, TypeError):
        return False


def pid_file(role):
    """The pid in the lab's run file of its `role` emulator (delay, link),
    None without one."""
    try:
        with open(f"{LAB_RUN}/{N}.{role}.pid") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def log_of(role):
    try:
        with open(f"{LAB_RUN}/{N}.{role}.log") as f:
            return f.read()
    except OSError:
        return ""


def topo(*args, timeout=120):
    """topo.sh's exit status (its output is not the test's)."""
    return subprocess.run([TOPO, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          timeout=timeout).returncode


def qdisc():
    return run("ip", "netns", "exec", f"{N}-rtr", "tc", "qdisc", "show", "dev", "rcv0").stdout.strip()


def count_rules(tool, table, chain, pattern):
    out = run("ip", "netns", "exec", f"{N}-rtr", tool, "-t", table, "-S", chain).stdout
    return sum(1 for line in out.splitlines() if pattern in line)


def reaches_receiver():
    return run("ip", "netns", "exec", f"{N}-snd", "ping", "-c", "2", "-i", "0.2", "-W", "2", RCV4,
               check=False).returncode == 0


def interrupted(rc):
    """Ended by the SIGINT: its trap's exit 130, or killed by it before the
    trap was set (nothing made yet)."""
    return rc in (130, -signal.SIGINT)


class LabTopo(TestCase):
    def setUp(self):
        topo("down", N)
        self.addCleanup(topo, "down", N)
        self.assertClean("before the test")

    def assertClean(self, when):
        left = lab_leftovers(N)
        self.assertEqual(left, [], f"{when}: left behind:\n    " + "\n    ".join(left))
        print(f"  {when}: nothing left behind", flush=True)

    def test_constant_link(self):
        self.assertEqual(topo("up", N, "--profile", "3.5g", "--buffer-bytes", "200000"), 0, "up failed")
        self.assertEqual(topo("status", N), 0, "status after up")
        nss = [ns for ns in netns_list() if re.fullmatch(f"{N}-(snd|rtr|rcv)", ns)]
        self.assertEqual(len(nss), 3, f"namespaces: {nss}")
        q = qdisc()
        print(f"  tbf on the router: {q}")
        self.assertRegex(q, r"tbf.*rate 16Mbit", "the 3.5g profile's rate on the router's rcv0")
        # tc shows the buffer as the latency it adds: (limit - burst) / rate
        # = (200000 - 8000) B / 2 MB/s = 96 ms.
        self.assertIn("lat 96ms", q, "--buffer-bytes 200000 overrides the profile's buffer")
        v4 = count_rules("iptables", "raw", "PREROUTING", "NFQUEUE")
        v6 = count_rules("ip6tables", "raw", "PREROUTING", "NFQUEUE")
        self.assertEqual((v4, v6), (1, 1), "NFQUEUE rules in the router's raw PREROUTING (v4, v6)")
        dpid = pid_file("delay")
        self.assertTrue(alive(dpid), f"no delay line running (pid file: {dpid})")
        self.assertTrue(reaches_receiver(), "the sender does not reach the receiver")

        self.assertEqual(topo("up", N, "--profile", "3g"), 0, "second up (re-create) failed")
        self.assertFalse(alive(dpid), f"the old delay line (pid {dpid}) survived the re-create")
        lines = run("pgrep", "-af", rf"bloatd-lab/{N}\.delay", check=False).stdout.splitlines()
        self.assertEqual(len(lines), 1, f"one delay line after re-create: {lines}")
        q = qdisc()
        self.assertIn("rate 150Kbit", q, "re-create applied the 3g profile")

        self.assertEqual(topo("down", N), 0, "down failed")
        self.assertClean("down")
        self.assertNotEqual(topo("status", N), 0, "status says up after down")
        self.assertEqual(topo("down", N), 0, "down of an absent lab fails")

    def test_trace_link(self):
        """The downlink through the link emulator (FORWARD, queue 1), the
        uplink's trace and base delay through the delay line."""
        self.assertEqual(topo("up", N, "--profile", "lte"), 0, "up --profile lte failed")
        q = qdisc()
        self.assertNotIn("tbf", q, "a trace link has no tbf on the router")
        for tool in ("iptables", "ip6tables"):
            rules = count_rules(tool, "mangle", "FORWARD", "NFQUEUE --queue-num 1")
            self.assertEqual(rules, 1, f"{tool}: the trace link's FORWARD NFQUEUE rules")
        lpid, dpid = pid_file("link"), pid_file("delay")
        self.assertTrue(alive(lpid), f"no link emulator running (pid file: {lpid})")
        self.assertIn("TMobile-LTE-short.down", log_of("link"), "the link emulator's trace")
        self.assertTrue(alive(dpid), f"no uplink emulator running (pid file: {dpid})")
        self.assertIn("TMobile-LTE-short.up", log_of("delay"), "the uplink emulator's trace")
        print(f"  link emulator (pid {lpid}) on the .down trace, uplink (pid {dpid}) on the .up "
              "trace with the base delay")
        self.assertTrue(reaches_receiver(), "the sender does not reach the receiver")
        b = run(TOPO, "backlog", N, check=False).stdout.strip()
        self.assertRegex(b, r"^[0-9]+$", "topo.sh backlog of the trace link")
        print(f"  backlog of the trace link: {b} B")
        self.assertEqual(topo("up", N, "--trace", "/nonexistent/trace.down"), 2,
                         "a missing trace file: exit 2")
        self.assertEqual(topo("down", N), 0, "down failed")
        self.assertClean("down of a trace link")

    def test_interrupted_up(self):
        """SIGINT at increasing points of `up`'s work (a Ctrl-C), for a
        constant-rate and a trace link: `up` removes what it made."""
        points = [("3.5g", at) for at in (0.01, 0.03, 0.05, 0.08, 0.12, 0.2)] + \
                 [("lte", at) for at in (0.05, 0.1, 0.15, 0.2, 0.3, 0.45)]
        n = 0
        for profile, at in points:
            with self.subTest(profile=profile, sigint_after=at):
                p = self.process([TOPO, "up", N, "--profile", profile], sigint=True,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(at)
                p.send_signal(signal.SIGINT)
                rc = p.wait(timeout=60)
                try:
                    if interrupted(rc):
                        n += 1
                        self.assertClean(f"{profile}: SIGINT after {at}s (up exited {rc})")
                    else:
                        print(f"  note: up --profile {profile} finished (rc {rc}) before SIGINT at {at}s")
                        topo("down", N)
                        self.assertClean("down after an up that finished")
                finally:
                    topo("down", N)  # the next point starts clean whatever this one left
        print(f"  {n} of {len(points)} runs of up interrupted")
        self.assertGreaterEqual(n, 4, f"only {n} runs of up were interrupted")

    def test_interrupted_lab(self):
        """Ctrl-C in the middle of an experiment (lab.py, run C's background
        flow running): traffic stopped, lab removed, exit 130."""
        out = tempfile.mkdtemp(prefix="bloatd-lab-topo.")
        self.addCleanup(shutil.rmtree, out, ignore_errors=True)
        log_path = os.path.join(out, "log")
        log = open(log_path, "w")
        self.addCleanup(log.close)
        p = self.process([sys.executable, LAB_PY, "--name", N, "--instrument", "ss", "--profiles", "3.5g",
                          "--runs", "C", "--ccs", "cubic", "--shorts", "3", "--out", out],
                         grace=30, sigint=True, stdout=log, stderr=subprocess.STDOUT)

        def text():
            with open(log_path) as f:
                return f.read()
        deadline = time.time() + 30
        while "run C" not in text() and p.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        self.assertIn("run C", text(), "lab.py did not reach run C")
        time.sleep(2)
        flows = run("pgrep", "-f", FLOWS, check=False).stdout.split()
        self.assertGreater(len(flows), 0, f"no traffic running when interrupted:\n{text()}")
        p.send_signal(signal.SIGINT)
        rc = p.wait(timeout=60)
        tail = "\n".join(text().splitlines()[-3:])
        self.assertEqual(rc, 130, f"lab.py after SIGINT exited {rc}:\n{tail}")
        print(f"  lab.py interrupted with {len(flows)} traffic processes running: exit 130")
        self.assertClean("interrupted lab.py")
        left = run("pgrep", "-af", FLOWS, check=False).stdout.strip()
        self.assertEqual(left, "", "traffic processes left")

    def test_failed_up(self):
        """A failing up (a value tc refuses) removes what it made."""
        self.assertNotEqual(topo("up", N, "--rate", "16mbit", "--buffer-bytes", "99999999999999"), 0,
                            "an absurd buffer accepted")
        self.assertClean("failed up")


if __name__ == "__main__":
    main()
