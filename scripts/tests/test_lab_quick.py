"""Quick-mode runs of the lab (`lab.py --quick`, what `make lab-quick` runs)
with bloatd as the instrument, on both link models: constant rate (3.5g,
tbf) and a measured cellular trace (lte, the same rate on average). Each
under 5 minutes; F1's core ratio (a 320 kB short flow beside one CUBIC bulk
flow vs beside one Westwood+ bulk flow) must be above 1.3 and F2's RTT
ratio (CUBIC long flow vs Westwood+ long flow) above 1.2; the paper's are
about 2 and 1.5. Also checked: every flow ran with the congestion control
it asked for, as bloatd saw it, and the findings are printed one per line,
F1 to F4, F1 and F2 on the model's fast link.

With no daemon running, lab.py must start bloatd itself (as `sudo make
lab-quick` does on a fresh machine) and stop it again; a daemon that was
already running is used and left running. This is the daemon of the
default run directory (/run/bloatd), the one lab.py uses.
"""
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from bloatdpy.harness import BLOATD, LAB_PY, TOPO, TestCase, main, run

N = "blquick"
MAX_S = 300
SHOWN = re.compile(r"^(\[|F[1-4] |lab:)")  # progress, findings, the lab's own lines


def fmt(v):
    return "n/a" if v is None else f"{v:.2f}"


def status():
    return run(BLOATD, "status", check=False).returncode


class LabQuick(TestCase):
    def setUp(self):
        self.was_running = status() == 0
        self.failed = False
        self.addCleanup(run, TOPO, "down", N, check=False, timeout=120)
        if not self.was_running:
            # What lab.py started and could not stop (killed, interrupted).
            self.addCleanup(lambda: status() == 0 and run(BLOATD, "stop", check=False))

    @contextlib.contextmanager
    def check(self, what):
        """A check that lets the next ones run when it fails (a subtest); a
        failure keeps the lab's results for a look."""
        with self.subTest(what):
            try:
                yield
            except Exception:
                self.failed = True
                raise

    def quick(self, link):
        """lab.py --quick on a link model: its exit, time and findings."""
        out = tempfile.mkdtemp(prefix=f"bloatd-lab-quick-{link}.")
        self.addCleanup(lambda: os.path.isdir(out) and print(f"  {link}: results kept in {out}"))
        print(f"  lab.py --quick --link {link} (bloatd as the instrument)", flush=True)
        t0 = time.monotonic()
        # Its own session: a Ctrl-C ends the test, whose cleanup stops lab.py
        # once (SIGTERM), and lab.py removes its lab and its daemon.
        p = self.process([sys.executable, LAB_PY, "--quick", "--link", link, "--instrument", "bloatd",
                          "--name", N, "--out", out], grace=30, start_new_session=True,
                         stdout=subprocess.PIPE, text=True)
        with open(os.path.join(out, "stdout.txt"), "w") as log:
            for line in p.stdout:
                log.write(line)
                if SHOWN.match(line):
                    print("  " + line, end="", flush=True)
        rc = p.wait()
        secs = time.monotonic() - t0
        print(f"  {link}: lab.py exited {rc} after {secs:.0f} s", flush=True)
        with self.check("lab.py"):
            self.assertEqual(rc, 0, f"{link}: lab.py exited {rc}")
        with self.check("time"):
            self.assertLess(secs, MAX_S, f"{link}: quick mode took {secs:.0f} s")
        with self.check("daemon"):
            self.check_daemon(out)
        with self.check("findings"):
            self.check_findings(out)
        if not self.failed:
            shutil.rmtree(out)  # kept after a failure or an interrupt

    def check_daemon(self, out):
        st = status()
        if self.was_running:
            self.assertEqual(st, 0, "the daemon that was running is no longer running after the lab")
            print("  the daemon that was running is still running")
            return
        with open(os.path.join(out, "stdout.txt")) as f:
            said = [line for line in f if line.startswith("lab: started bloatd")]
        self.assertTrue(said, "with no daemon running, the lab did not say it started bloatd")
        self.assertEqual(st, 3, f"bloatd status {st} after the lab (want 3: the lab stops what it started)")
        print("  with no daemon, the lab started bloatd and stopped it at the end")

    def check_findings(self, out):
        with open(os.path.join(out, "summary.json")) as f:
            summ = json.load(f)
        link = summ["meta"]["link"]
        f = {x["name"]: x for x in summ["findings"]}
        with self.check("instrument"):
            self.assertEqual(summ["meta"]["instrument"], "bloatd", f"{link}: instrument")
        f1, f2 = f["F1"]["value"], f["F2"]["value"]
        print(f"  {link}: F1 core ratio (beside CUBIC / beside Westwood+) {fmt(f1)}, "
              f"F2 RTT ratio (CUBIC / Westwood+ long flow) {fmt(f2)}")
        with self.check("F1"):
            self.assertIsNotNone(f1, f"{link}: F1 has no value")
            self.assertGreater(f1, 1.3, f"{link}: F1 core ratio (beside CUBIC / beside Westwood+)")
        with self.check("F2"):
            self.assertIsNotNone(f2, f"{link}: F2 has no value")
            self.assertGreater(f2, 1.2, f"{link}: F2 RTT ratio (CUBIC / Westwood+ long flow)")
        with open(os.path.join(out, "stdout.txt")) as fh:
            flines = [line.rstrip("\n") for line in fh if line[:3] in ("F1 ", "F2 ", "F3 ", "F4 ")]
        with self.check("finding lines"):
            self.assertEqual([line[:2] for line in flines], ["F1", "F2", "F3", "F4"],
                             f"{link}: four finding lines, F1-F4:\n" + "\n".join(flines))
            for line in flines:
                self.assertTrue(line.endswith("; holds") or line.endswith("; does not hold"),
                                f"{link}: a finding line without its verdict: {line}")
        fast = summ["meta"]["roles"]["fast"]
        with self.check("fast link"):
            self.assertEqual([line.split()[1] for line in flines[:2]], [fast, fast],
                             f"{link}: F1 and F2 on the model's fast link, {fast}")
        wrong, n = [], 0
        with open(os.path.join(out, "raw.jsonl")) as fh:
            for line in fh:
                r = json.loads(line)
                want = r.get("cc") or r.get("short_cc")
                n += 1
                if r.get("cc_seen") != want:
                    wrong.append((r["run"], want, r.get("cc_seen")))
        print(f"  {link}: bloatd saw {n - len(wrong)} of {n} flows with the congestion control they asked for")
        with self.check("congestion controls"):
            self.assertGreater(n, 0, f"{link}: no flow in raw.jsonl")
            self.assertEqual(wrong, [], f"{link}: flows bloatd saw with another congestion control "
                             "(run, asked, seen)")

    def test_1_constant_rate(self):
        self.quick("const")

    def test_2_trace(self):
        """The same on one measured cellular trace (lte: the 3.5g runs' rate)."""
        self.quick("trace")


if __name__ == "__main__":
    main()
