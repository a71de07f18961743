#!/usr/bin/env python3
"""Issue 4, end to end: `bloatd top` in tmux during a bloated CUBIC
download on the lab, its --once frame against `bloatd sockets`, and the
dashboard surviving a daemon restart."""

import re
import time

from bloatdpy.harness import BLOATD, TestCase, find, main, run, wait_for

def parse_ms(v):
    m = re.match(r"^(\d+(?:\.\d+)?)(ms|s)$", v)
    if not m:
        return None
    return float(m.group(1)) * (1000 if m.group(2) == "s" else 1)


def table_rows(text):
    """Rows of the socket table as dicts keyed by the header's column names."""
    lines = text.splitlines()
    head_i = next((i for i, l in enumerate(lines) if "QDELAY" in l and "REMOTE" in l), None)
    if head_i is None:
        return []
    names = [n.strip("▲▼") for n in lines[head_i].split()]
    rows = []
    for line in lines[head_i + 1:]:
        if not line.strip() or line.lstrip().startswith("Esc"):
            continue
        marker = line.startswith("!")
        toks = (line[1:] if marker else line).split()
        if len(toks) != len(names):
            continue
        row = dict(zip(names, toks))
        row["bloated"] = marker
        rows.append(row)
    return rows


class Top(TestCase):
    def setUp(self):
        self.term = self.tmux("bloatd-test-top")

    def pane(self):
        return self.term.screen("top")

    def test_dashboard_shows_bloat_detail_and_survives_restart(self):
        d = self.daemon("--no-cc")
        d.start()
        lab = self.lab("bt1", rate="10mbit", buffer_bytes=1500000)
        snd = lab.bulk_download("cubic", 40)
        remote = f"{snd['remote'][0]}:{snd['remote'][1]}"
        port = snd["remote"][1]

        self.term.new("top", f"{BLOATD} --run-dir {d.run_dir} top")

        def bloated_row():
            for r in table_rows(self.pane()):
                if r.get("REMOTE") == remote and (parse_ms(r.get("QDELAY", "")) or 0) > 100:
                    return r
            return None
        row = wait_for(bloated_row, timeout=30, step=0.5, what=f"row of {remote} with queue > 100 ms")
        print(f"    top row: {row}")
        self.assertTrue(row["bloated"], "the row is marked bloated")
        self.assertEqual(row["CC"], "cubic")

        # Filter to this flow (its two ends), open its detail: the charts.
        self.term.keys("top", "f")
        self.term.keys("top", f"port:{port}", "Enter")
        wait_for(lambda: len(table_rows(self.pane())) == 2, timeout=5, what="filter to the flow's two sockets")
        self.term.keys("top", "Enter")
        detail = wait_for(lambda: (lambda p: p if "queueing delay" in p and "RTT (gap = queue)" in p else None)(self.pane()),
                          timeout=5, what="detail charts")
        self.assertIn("window, segments", detail)
        self.assertIn("throughput", detail)
        self.assertIn(remote, detail)
        self.term.keys("top", "Escape")

        # v: the paths view: the queue toward the receiver in one sentence,
        # its row graded by that queue.
        self.term.keys("top", "v")
        peer = snd["remote"][0]
        paths = wait_for(lambda: (lambda p: p if f"the link to {peer}" in p and "GRADE" in p else None)(self.pane()),
                         timeout=10, what=f"the paths view naming {peer}")
        row = next(l for l in paths.splitlines() if l.strip().startswith(peer))
        toks = row.split()
        print(f"    paths view: {row.strip()}")
        grade = next(t for t in toks if t in ("A+", "A", "B", "C", "D", "F"))
        self.assertIn(grade, ("C", "D", "F"), f"a bloated path is graded C or worse: {row}")
        self.assertIn("behind it: grade", paths)
        self.term.keys("top", "v")
        wait_for(lambda: table_rows(self.pane()), timeout=5, what="back to the socket table")

        # The --once frame agrees with `bloatd sockets` for the same flow.
        once = d.cli("top", "--once", "--width", "160").stdout
        ours = find(d.sockets(), snd["local"], snd["remote"])
        r = next(r for r in table_rows(once) if r["REMOTE"] == remote)
        q_once = parse_ms(r["QDELAY"])
        q_json = ours["queue_delay_us"] / 1000
        print(f"    --once: queue {q_once} ms cwnd {r['CWND']}; sockets: queue {q_json:.0f} ms cwnd {ours['cwnd']}")
        self.assertLessEqual(abs(q_once - q_json), max(0.1 * q_json, 5), "queueing delay agrees")
        self.assertLessEqual(abs(int(r["CWND"]) - ours["cwnd"]), max(0.1 * ours["cwnd"], 1), "cwnd agrees")

        # The daemon goes away: the screen says so; it comes back: so does the table.
        d.stop()
        wait_for(lambda: "not reachable" in self.pane(), timeout=10, what="'not reachable' on screen")
        self.assertIn("DISCONNECTED", self.pane())
        d.start()
        wait_for(lambda: "DISCONNECTED" not in self.pane() and bloated_row(), timeout=15,
                 what="dashboard reconnected")

        # q quits and gives the shell its terminal back.
        self.term.keys("top", "q")
        wait_for(lambda: not self.term.alive("top"), timeout=5, what="top exits on q")

        # A terminal that goes away takes the dashboard with it.
        self.term.new("top2", f"{BLOATD} --run-dir {d.run_dir} top", width=100, height=30)
        pid = wait_for(lambda: run("pgrep", "-f", f"^{BLOATD} --run-dir {d.run_dir} top$",
                                   check=False).stdout.strip(), what="second top running")
        self.term.kill()
        wait_for(lambda: run("kill", "-0", pid, check=False).returncode != 0, timeout=5,
                 what="top exits when its terminal hangs up")

    def test_embedded_mode_without_daemon(self):
        lab = self.lab("bt2", rate="10mbit", buffer_bytes=1500000)
        snd = lab.bulk_download("cubic", 15)
        remote = f"{snd['remote'][0]}:{snd['remote'][1]}"
        time.sleep(3)
        # No daemon answers in this run directory: top runs the probes itself.
        empty = self.daemon()
        r = run(BLOATD, "--run-dir", empty.run_dir, "top", "--once", "--width", "160")
        self.assertIn("embedded", r.stdout)
        row = next((x for x in table_rows(r.stdout) if x["REMOTE"] == remote), None)
        self.assertIsNotNone(row, r.stdout)
        self.assertGreater(parse_ms(row["QDELAY"]), 100, row)
        print(f"    embedded --once: {row['REMOTE']} queue {row['QDELAY']}")


if __name__ == "__main__":
    main()
