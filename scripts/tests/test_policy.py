#!/usr/bin/env python3
"""Issue 10: congestion control policy, applied by the cgroup sock_ops
program, with `ss -ti` (which names each socket's congestion control) as
the oracle.

- A rule by port chooses bloatd_westwood for a new connection; a connection
  on another port keeps the namespace default (bbr).
- A rule by cgroup chooses it for a server whose process is in the cgroup.
- A bulk rule switches a running CUBIC flow to bloatd_westwood once it has
  sent the rule's bytes, not before.
- stop and kill -9 leave no sock_ops program attached, and the connections
  the policy acted on keep going.
- Bad input (an unknown algorithm, an unknown cgroup, conflicting rules, a
  typo in a [[policy]] table): a message naming the problem, exit 2,
  nothing attached.
"""

import os
import signal
import subprocess
import tempfile
import time

from bloatdtest import (RCV4, SND4, TestCase, cgroup2_root, main, run, sock_ops_attached,
                        wait_for)

BULK_BYTES = 2_000_000


def data_sockets(lab, side, port, remote=False):
    """ESTAB sockets of `side` on local port `port` (remote port with
    `remote`) that carried data: iperf3's data connection, not its control
    one."""
    key = "remote_port" if remote else "local_port"
    return [s for s in lab.ss(side) if s[key] == port and s["state"] == "ESTAB"
            and (s["bytes_acked"] > 100_000 or s["bytes_received"] > 100_000)]


class Policy(TestCase):
    def test_a_port_rule_picks_westwood_for_a_new_connection(self):
        d = self.daemon("--policy", "name=web,sport=5301,cc=bloatd_westwood")
        d.start()
        lab = self.lab("bp1", rate="20mbit", buffer_bytes=200000, delay_ms=10)
        lab.iperf_server("snd", port=5301)
        lab.iperf_server("snd", port=5302)
        # No -C: without the rule both servers' sockets keep bbr, the
        # namespace default.
        lab.spawn("rcv", "iperf3", "-c", SND4, "-p", "5301", "-R", "-t", "6")
        lab.spawn("rcv", "iperf3", "-c", SND4, "-p", "5302", "-R", "-t", "6")
        ruled = wait_for(lambda: data_sockets(lab, "snd", 5301), what="the download on port 5301")
        other = wait_for(lambda: data_sockets(lab, "snd", 5302), what="the download on port 5302")
        self.assertEqual(ruled[0]["cc"], "bloatd_westwood", "ss: the rule chose the sender's cc")
        self.assertEqual(other[0]["cc"], "bbr", "ss: another port keeps the default")
        clients = data_sockets(lab, "rcv", 5301, remote=True)
        self.assertTrue(clients and clients[0]["cc"] == "bbr", "a sport rule leaves the client alone")

        socks = {(s["local_port"], s["remote_port"]): s for s in d.sockets()}
        mine = socks[(5301, ruled[0]["remote_port"])]
        self.assertEqual(mine["cc"], "bloatd_westwood")
        self.assertEqual(mine["policy"]["cc_rule"], "web", "bloatd sockets names the rule")
        self.assertNotIn("policy", socks[(5302, other[0]["remote_port"])])
        listing = d.cli("policy", "list").stdout
        self.assertRegex(listing, r"web\s+enabled\s+sport 5301\s+cc bloatd_westwood\s+[1-9]")
        info = d.api("/v1/policy")
        self.assertGreaterEqual(info["counts"]["cc_set_total"], 2, "data and control connection")
        self.assertIn('bloatd_policy_sockets{action="cc"}', d.metrics())

    def test_a_cgroup_rule_picks_westwood_for_a_server_in_the_cgroup(self):
        root = cgroup2_root()
        cg = tempfile.mkdtemp(prefix="bloatd-test-", dir=root)
        self.addCleanup(os.rmdir, cg)
        name = os.path.basename(cg)
        d = self.daemon("--policy", f"name=cg,cgroup={name},cc=bloatd_westwood")
        d.start()
        lab = self.lab("bp2", rate="20mbit", buffer_bytes=200000, delay_ms=10)
        # The server's process joins the cgroup before it opens its
        # listener; accepted connections take the listener's cgroup.
        p = subprocess.Popen(["ip", "netns", "exec", lab.ns("snd"), "bash", "-c",
                              "read go; exec iperf3 -s -p 5303"],
                             stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        lab.procs.append(p)
        self.addCleanup(self.leave_cgroup, root, cg)
        with open(os.path.join(cg, "cgroup.procs"), "w") as f:
            f.write(str(p.pid))
        p.stdin.write("go\n")
        p.stdin.close()
        lab.iperf_server("snd", port=5304)  # outside the cgroup
        wait_for(lambda: lab.exec("rcv", "bash", "-c", f"exec 3<>/dev/tcp/{SND4}/5303",
                                  check=False).returncode == 0, what="the server in the cgroup")
        lab.spawn("rcv", "iperf3", "-c", SND4, "-p", "5303", "-R", "-t", "5")
        lab.spawn("rcv", "iperf3", "-c", SND4, "-p", "5304", "-R", "-t", "5")
        inside = wait_for(lambda: data_sockets(lab, "snd", 5303), what="the download from the cgroup")
        outside = wait_for(lambda: data_sockets(lab, "snd", 5304), what="the other download")
        self.assertEqual(inside[0]["cc"], "bloatd_westwood", "ss: the cgroup rule chose the cc")
        self.assertEqual(outside[0]["cc"], "bbr", "ss: a server outside the cgroup keeps the default")

    @staticmethod
    def leave_cgroup(root, cg):
        """Move whatever is left in the test's cgroup to the root, so it can
        be removed."""
        try:
            with open(os.path.join(cg, "cgroup.procs")) as f:
                pids = f.read().split()
        except OSError:
            return
        for pid in pids:
            try:
                with open(os.path.join(root, "cgroup.procs"), "w") as f:
                    f.write(pid)
            except OSError:
                pass
        time.sleep(0.2)

    def test_a_bulk_rule_switches_a_running_flow_after_its_bytes(self):
        d = self.daemon("--policy", f"name=bulk,bulk_bytes={BULK_BYTES},cc=bloatd_westwood")
        d.start()
        # 4 Mbit/s: 2 MB take about 4 s, time to see the flow before.
        lab = self.lab("bp3", rate="4mbit", buffer_bytes=300000, delay_ms=40)
        lab.iperf_server("snd", port=5305)
        client = lab.spawn("rcv", "iperf3", "-c", SND4, "-p", "5305", "-R", "-t", "12", "-C", "cubic")
        seen = []

        def observe():
            socks = data_sockets(lab, "snd", 5305)
            if socks:
                seen.append((socks[0]["cc"], socks[0]["bytes_acked"]))
            return seen and seen[-1][0] == "bloatd_westwood"
        wait_for(observe, timeout=20, step=0.2, what="the flow switched to bloatd_westwood")
        before = [b for cc, b in seen if cc == "cubic"]
        after = [b for cc, b in seen if cc == "bloatd_westwood"]
        self.assertTrue(before and min(before) < BULK_BYTES,
                        f"ss saw the flow with CUBIC before its bytes: {seen}")
        self.assertGreaterEqual(after[0], BULK_BYTES, f"switched only after them: {seen}")
        # At the first ACK with an RTT sample past the bytes: in loss
        # recovery that can be a window later (buffer 300 kB + BDP 20 kB).
        self.assertLess(max(before), BULK_BYTES + 400_000, f"and soon after them: {seen}")
        s = [x for x in d.sockets() if x["local_port"] == 5305 and x["cc"] == "bloatd_westwood"]
        self.assertTrue(s and s[0]["policy"]["bulk_rule"] == "bulk" and not s[0]["policy"]["bulk_waiting"],
                        f"bloatd names the bulk rule: {s}")
        # The switched flow goes on and ends normally.
        time.sleep(2)
        later = data_sockets(lab, "snd", 5305)
        self.assertTrue(later and later[0]["bytes_acked"] > after[-1], "the flow keeps sending")
        self.assertEqual(client.wait(timeout=30), 0, client.stderr.read() if client.stderr else "")
        self.assertGreaterEqual(d.api("/v1/policy")["counts"]["bulk_switched_total"], 1)

    def test_stop_and_kill9_leave_no_sock_ops_and_connections_keep_working(self):
        lab = self.lab("bp4", rate="8mbit", buffer_bytes=400000, delay_ms=20)
        lab.iperf_server("snd", port=5306)
        for how in ("stop", "kill -9"):
            before = sock_ops_attached()
            d = self.daemon("--policy", "name=web,sport=5306,cc=bloatd_westwood", "--drwa",
                            "--policy", "name=bulk,bulk_bytes=100M,cc=bloatd_cubic")
            d.start()
            ours = sock_ops_attached() - before
            self.assertEqual(len(ours), 1, f"{how}: bloatd attached one sock_ops program")
            client = lab.spawn("rcv", "iperf3", "-c", SND4, "-p", "5306", "-R", "-t", "15")
            flow = wait_for(lambda: data_sockets(lab, "snd", 5306), what=f"{how}: the download")
            self.assertEqual(flow[0]["cc"], "bloatd_westwood")
            time.sleep(3)  # DRWA clamps the receiver, the bulk rule waits (RTT callbacks)
            if how == "stop":
                self.assertEqual(d.stop().returncode, 0)
            else:
                pid = d.pid()
                os.kill(pid, signal.SIGKILL)
            wait_for(lambda: not (sock_ops_attached() & ours), what=f"{how}: sock_ops detached")
            progs = run("bpftool", "prog", "show").stdout
            for pid in ours:
                self.assertNotIn(f"{pid}: sock_ops", progs, f"{how}: program unloaded")
            # The connection goes on without bloatd.
            b0 = data_sockets(lab, "rcv", 5306, remote=True)[0]["bytes_received"]
            time.sleep(2)
            b1 = data_sockets(lab, "rcv", 5306, remote=True)[0]["bytes_received"]
            self.assertGreater(b1 - b0, 500_000, f"{how}: the download keeps its pace (>2 Mbit/s)")
            self.assertEqual(client.wait(timeout=40), 0, f"{how}: iperf3 ended cleanly")
            d.cleanup()

    def test_bad_input_is_named_exit_2_nothing_attached(self):
        before = sock_ops_attached()
        cases = [
            (["--policy", "sport=80,cc=vegas_nope"], "unknown congestion control 'vegas_nope'"),
            (["--policy", "cgroup=no/such/cgroup/here,cc=cubic"], "no cgroup 'no/such/cgroup/here'"),
            (["--policy", "sport=80,cc=cubic", "--policy", "sport=80,cc=reno"], "conflict"),
            (["--policy", "dport=1-1024,cc=cubic", "--policy", "dport=443,cc=reno"], "can never apply"),
            (["--no-cc", "--policy", "dport=443,cc=bloatd_westwood"], "only when it is in `cc`"),
            (["--policy", "dport=443"], "does nothing"),
            (["--policy", "dprt=443,cc=cubic"], "did you mean `dport`"),
        ]
        for args, want in cases:
            d = self.daemon()
            r = d.start(*args, check=False)
            self.assertEqual(r.returncode, 2, f"{args}: {r.stdout}{r.stderr}")
            self.assertIn(want, r.stderr, f"{args}")
            self.assertEqual(d.cli("status", check=False).returncode, 3, f"{args}: nothing started")
        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
            f.write('[[policy]]\nname = "a"\nsport = 80\ncc = "cubic"\n\n'
                    '[[policy]]\nname = "b"\nsport = 80\ncc = "bloatd_westwood"\n')
        self.addCleanup(os.unlink, f.name)
        d = self.daemon()
        r = d.cli("--config", f.name, "start", "--listen", f"127.0.0.1:{d.port}", check=False)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("policy rules 'a' and 'b' conflict", r.stderr)
        self.assertEqual(sock_ops_attached(), before, "no sock_ops program attached by a refused start")
        # Switching DRWA in a bloatd that did not arm it is refused, named.
        d = self.daemon("--no-cc")
        d.start()
        r = d.cli("policy", "drwa", "on", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("DRWA is disabled", r.stderr)
        r = d.cli("policy", "enable", "nope", check=False)
        self.assertIn("no policy rule named 'nope'", r.stderr)


if __name__ == "__main__":
    main()
