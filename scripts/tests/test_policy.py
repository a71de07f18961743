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

import json
import os
import re
import shutil
import signal
import subprocess
import sysconfig
import tempfile
import time

from bloatdpy.harness import (FLOWS, RCV4, SND4, TOPO, TestCase, bpf_map_dump, cgroup2_root, main,
                        run, sock_ops_attached, stop, wait_for)

BULK_BYTES = 2_000_000


def drwa_pin(d):
    """Where the running daemon pins what DRWA must give back, as it says
    (/v1/policy; the name's hash: probes/policy.rs, saved_pin); "" if none."""
    return d.api("/v1/policy")["drwa"]["saved_pin"] or ""


class ForeignSockOps:
    """scripts/tests/foreign_sockops.bpf.c attached to cgroup `cg` with
    bpftool, as another tool would; `seen()` counts its RTT and
    header-option callbacks."""

    def __init__(self, cg):
        here = os.path.dirname(os.path.abspath(__file__))
        self.dir = tempfile.mkdtemp(prefix="bloatd-foreign-")
        self.obj = os.path.join(self.dir, "foreign.o")
        arch = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"
        run(os.environ.get("BLOATD_CLANG", "clang-19"), "-O2", "-g", "-target", "bpf",
            f"-I/usr/include/{arch}", "-c", os.path.join(here, "foreign_sockops.bpf.c"),
            "-o", self.obj)
        if run("stat", "-f", "-c", "%T", "/sys/fs/bpf", check=False).stdout.strip() != "bpf_fs":
            run("mount", "-t", "bpf", "bpf", "/sys/fs/bpf")
        self.pin = f"/sys/fs/bpf/bloatd-test-foreign-{os.getpid()}"
        run("bpftool", "prog", "load", self.obj, self.pin, "type", "sockops")
        self.cg = cg
        run("bpftool", "cgroup", "attach", cg, "sock_ops", "pinned", self.pin, "multi")

    def seen(self):
        vals = dict(bpf_map_dump("foreign_seen"))
        return vals.get(0, 0), vals.get(1, 0)

    def close(self):
        run("bpftool", "cgroup", "detach", self.cg, "sock_ops", "pinned", self.pin, check=False)
        try:
            os.unlink(self.pin)
        except OSError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


# An application that sets its own window clamp: SO_RCVBUF 256 kB (no
# autotuning), then reads a download from a flows.py server for argv[3]
# seconds; after 1 s (DRWA clamps it by then) it sets TCP_WINDOW_CLAMP 32 kB
# and reads its clamp back (getsockopt) every 0.2 s. Set before the
# connection, the clamp would not last on this kernel: when the socket's
# scaling ratio settles at its first data (6.9+) the kernel sets the clamp
# from the buffer, overriding the application's, with or without DRWA.
# Prints {"during": [...], "after": N} at the end.
APP_CLAMP_CLIENT = r"""
import json, socket, sys, time
addr, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 262144)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"cubic")
s.connect((addr, port))
s.sendall(f"SEND 0 cubic {seconds}\n".encode())
s.setblocking(False)
clamp = lambda: s.getsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP)
during, t0, next_t, own = [], time.time(), 1.0, False
while time.time() - t0 < seconds - 1:
    try:
        if not s.recv(1 << 20):
            break
    except BlockingIOError:
        time.sleep(0.005)
    if time.time() - t0 >= next_t:
        if not own:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP, 32768)
            own = True
        during.append(clamp())
        next_t += 0.2
print(json.dumps({"during": during, "after": clamp()}), flush=True)
"""


def data_sockets(lab, side, port, remote=False):
    """ESTAB sockets of `side` on local port `port` (remote port with
    `remote`) that carried data: iperf3's data connection, not its control
    one."""
    key = "remote_port" if remote else "local_port"
    return [s for s in lab.ss(side) if s[key] == port and s["state"] == "ESTAB"
            and (s["bytes_acked"] > 100_000 or s["bytes_received"] > 100_000)]



def received_mbps(lab, port, seconds=10):
    """The download's rate at the receiver over `seconds`, from the kernel's
    bytes_received of the connection to remote port `port`."""
    b0, t0 = data_sockets(lab, "rcv", port, remote=True)[0]["bytes_received"], time.time()
    time.sleep(seconds)
    b1, t1 = data_sockets(lab, "rcv", port, remote=True)[0]["bytes_received"], time.time()
    return (b1 - b0) * 8 / (t1 - t0) / 1e6


def process_ended(pid, timeout=10):
    """Whether process `pid` is gone within `timeout` seconds."""
    try:
        wait_for(lambda: not os.path.exists(f"/proc/{pid}"), timeout=timeout)
        return True
    except AssertionError:
        return False

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
        self.serve_in_cgroup(lab, root, cg, "iperf3 -s -p 5303")
        lab.iperf_server("snd", port=5304)  # outside the cgroup
        wait_for(lambda: lab.exec("rcv", "bash", "-c", f"exec 3<>/dev/tcp/{SND4}/5303",
                                  check=False).returncode == 0, what="the server in the cgroup")
        lab.spawn("rcv", "iperf3", "-c", SND4, "-p", "5303", "-R", "-t", "5")
        lab.spawn("rcv", "iperf3", "-c", SND4, "-p", "5304", "-R", "-t", "5")
        inside = wait_for(lambda: data_sockets(lab, "snd", 5303), what="the download from the cgroup")
        outside = wait_for(lambda: data_sockets(lab, "snd", 5304), what="the other download")
        self.assertEqual(inside[0]["cc"], "bloatd_westwood", "ss: the cgroup rule chose the cc")
        self.assertEqual(outside[0]["cc"], "bbr", "ss: a server outside the cgroup keeps the default")

    def serve_in_cgroup(self, lab, root, cg, command):
        """Starts `command` in the sender's namespace, in cgroup `cg`
        before it runs (so the sockets it opens are created there)."""
        p = subprocess.Popen(["ip", "netns", "exec", lab.ns("snd"), "bash", "-c",
                              "read go; exec " + command],
                             stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        lab.procs.append(p)
        self.addCleanup(self.leave_cgroup, root, cg)
        with open(os.path.join(cg, "cgroup.procs"), "w") as f:
            f.write(str(p.pid))
        p.stdin.write("go\n")
        p.stdin.close()

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

    def clamped_receiver(self, d, lab, port):
        """bloatd's record of the download's receiver once DRWA clamps it,
        and `ss` agreeing that the window it offers is under the clamp."""
        def clamped():
            socks = [x for x in d.sockets() if x["remote_port"] == port and x["local_addr"] == RCV4
                     and x["bytes_received"] > 1_000_000]
            drwa = ((socks[0].get("policy") or {}).get("drwa") or {}) if socks else {}
            if not drwa.get("clamp_bytes"):
                return None
            kernel = data_sockets(lab, "rcv", port, remote=True)
            if kernel and kernel[0]["rcv_ssthresh"] <= drwa["clamp_bytes"] * 1.1:
                return drwa["clamp_bytes"], kernel[0]["rcv_ssthresh"]
            return None
        return wait_for(clamped, timeout=20, step=0.5, what="DRWA's clamp, in bloatd and in ss")

    # Long (93 lines): one scenario, run for each way the daemon can end.
    def test_stop_kill9_and_panic_give_every_window_back(self):
        """Whatever ends the daemon, the windows DRWA clamped are given back:
        by the daemon itself (stop, a panic), by the next `bloatd start` or
        `bloatd stop` (kill -9, the OOM killer, systemd's stop timeout). The
        oracle is the connection: after the end, its path gets longer (40 ->
        200 ms at the delay line), and a window still clamped at lambda x
        the old bandwidth-delay product (3 x 40 kB) would hold the download
        to ~4.8 Mbit/s; given back, it fills the 8 Mbit/s link again."""
        lab = self.lab("bp4", rate="8mbit", buffer_bytes=1_500_000, delay_ms=40)
        lab.iperf_server("snd", port=5306)
        panic_file = os.path.join(tempfile.mkdtemp(prefix="bloatd-panic-"), "now")
        self.addCleanup(shutil.rmtree, os.path.dirname(panic_file), True)
        results, problems = [], []

        def check(ok, what):
            if not ok:
                problems.append(what)

        for how in ("stop", "panic", "kill -9, then start", "kill -9, then stop"):
            run(TOPO, "delay", "bp4", "40")
            before = sock_ops_attached()
            d = self.daemon("--policy", "name=web,sport=5306,cc=bloatd_westwood", "--drwa",
                            "--policy", "name=bulk,bulk_bytes=100M,cc=bloatd_cubic")
            os.environ["BLOATD_TEST_PANIC_FILE"] = panic_file
            try:
                d.start()
            finally:
                del os.environ["BLOATD_TEST_PANIC_FILE"]
            pin = drwa_pin(d)
            check(os.path.exists(pin), f"{how}: DRWA's state is not pinned at {pin}")
            ours = sock_ops_attached() - before
            self.assertEqual(len(ours), 1, f"{how}: bloatd attached one sock_ops program")
            # CUBIC (iperf3 -C after the handshake overrides the rule): the
            # sender's own algorithm must not limit the flow at 200 ms.
            client = lab.spawn("rcv", "iperf3", "-c", SND4, "-p", "5306", "-R", "-t", "30",
                               "-C", "cubic")
            flow = wait_for(lambda: data_sockets(lab, "snd", 5306), what=f"{how}: the download")
            self.assertEqual(flow[0]["cc"], "cubic")
            clamp, offered = self.clamped_receiver(d, lab, 5306)
            pid = d.pid()
            if how == "stop":
                self.assertEqual(d.stop().returncode, 0)
            elif how == "panic":
                open(panic_file, "w").close()
                if not process_ended(pid):
                    problems.append(f"{how}: the daemon did not panic (no {panic_file} hook)")
                    os.kill(pid, signal.SIGKILL)
                os.unlink(panic_file)
                # The panic hook, or the program at the flow's next ACK once
                # the hook set `stopping`: either gives the window back.
                check(re.search(r"after the panic, gave back \d+ receive windows", d.log()),
                      f"{how}: no give-back in the log")
            else:
                os.kill(pid, signal.SIGKILL)
                self.assertTrue(process_ended(pid), "kill -9 ends the daemon")
                check(os.path.exists(pin), f"{how}: what to give back did not outlive the daemon")
                if how.endswith("start"):
                    t0 = time.time()
                    # Started again without DRWA, as a restarted service
                    # with another config would be.
                    d.cli("start", "--listen", f"127.0.0.1:{d.port}")
                    started = time.time() - t0
                    got = d.api("/v1/policy")["counts"].get("drwa_recovered_total")
                    check(got == 1, f"{how}: the new daemon gave back {got} windows, not 1")
                    check("gave back 1 receive windows a bloatd that did not stop" in d.log(),
                          f"{how}: not in the new daemon's log")
                    check(started < 5, f"{how}: not within the start ({started:.1f} s)")
                else:
                    r = d.stop()
                    self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
                    check("gave back 1 receive windows DRWA had clamped" in r.stdout,
                          f"{how}: stop said {r.stdout!r}")
            check(not os.path.exists(pin), f"{how}: {pin} left behind")
            wait_for(lambda: not (sock_ops_attached() & ours), what=f"{how}: sock_ops detached")
            progs = run("bpftool", "prog", "show").stdout
            for prog in ours:
                self.assertNotIn(f"{prog}: sock_ops", progs, f"{how}: program unloaded")
            # The path gets longer: only a window given back keeps the pace.
            run(TOPO, "delay", "bp4", "200")
            time.sleep(1)
            mbps = received_mbps(lab, 5306)
            results.append((how, clamp, offered, mbps))
            print(f"    {how}: clamp {clamp} B (ss rcv_ssthresh {offered}), then at 200 ms "
                  f"{mbps:.2f} Mbit/s", flush=True)
            stop(client)
            d.cleanup()
            check(not os.path.exists(pin), f"{how}: the cleanup's stop left {pin}")
        slow = [f"{how}: {mbps:.2f} Mbit/s" for how, _, _, mbps in results if mbps < 0.85 * 8]
        if slow:
            problems.append("windows left clamped after the daemon ended (8 Mbit/s link, 200 ms): "
                            + ", ".join(slow))
        self.assertFalse(problems, "; ".join(problems))

    def test_a_stop_beside_a_starting_daemon_leaves_its_crash_state(self):
        """Issue 30: `stop` with no daemon gives back what a killed one left
        (DRWA's pin, the host's default) and so took a starting daemon's
        crash state away. It now holds the pid file's lock meanwhile (a
        start then fails or waits its turn); with the lock held by another
        (a start under way) it refuses and leaves the pin; once free, it
        gives back and removes it."""
        import fcntl
        d = self.daemon("--drwa=off", "--no-cc")
        d.start()
        pin = drwa_pin(d)
        self.assertTrue(pin and os.path.exists(pin), "DRWA's state pinned")
        os.kill(d.pid(), signal.SIGKILL)
        wait_for(lambda: d.cli("status", check=False).returncode == 3, timeout=15, what="the daemon gone")
        self.assertTrue(os.path.exists(pin), "kill -9 leaves the pin for the next start or stop")
        with open(os.path.join(d.run_dir, "bloatd.pid")) as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a start holds it
            r = d.cli("stop", check=False)
            print(f"    stop beside a held lock: exit {r.returncode}: {r.stderr.strip()}", flush=True)
            self.assertNotEqual(r.returncode, 0)
            self.assertTrue(os.path.exists(pin), "the pin stays while another holds the lock")
        r = d.cli("stop", check=False)
        self.assertEqual(r.returncode, 3)
        self.assertFalse(os.path.exists(pin), "given back once the lock is free")

    def test_other_programs_callbacks_and_an_applications_clamp_are_left_alone(self):
        """Another tool's sock_ops program in a child cgroup turned on the
        RTT and header-option callbacks for its sockets: bloatd, which turns
        off what it asked for once a flow needs it no more (a bulk rule
        switched, DRWA's callback on a bulk sender), must not turn theirs
        off. And an application's own TCP_WINDOW_CLAMP (32 kB, set while
        DRWA clamps it at ~115 kB, its buffer fixed with SO_RCVBUF) is
        never raised by DRWA, and is what the socket has again when DRWA
        lets go."""
        root = cgroup2_root()
        cg = tempfile.mkdtemp(prefix="bloatd-test-", dir=root)
        self.addCleanup(os.rmdir, cg)
        foreign = ForeignSockOps(cg)
        self.addCleanup(foreign.close)
        d = self.daemon("--drwa=off", "--policy", "name=bulk,bulk_bytes=1M,cc=bloatd_cubic")
        d.start()
        lab = self.lab("bp5", rate="8mbit", buffer_bytes=400_000, delay_ms=40)
        self.serve_in_cgroup(lab, root, cg, "python3 " + FLOWS + " serve --port 5307")
        wait_for(lambda: lab.exec("rcv", "bash", "-c", f"exec 3<>/dev/tcp/{SND4}/5307",
                                  check=False).returncode == 0, what="the server in the cgroup")
        self.assertEqual(d.cli("policy", "drwa", "on").returncode, 0)
        client = subprocess.Popen(["ip", "netns", "exec", lab.ns("rcv"), "python3", "-c",
                                   APP_CLAMP_CLIENT, SND4, "5307", "14"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lab.procs.append(client)
        # The sender passes 1 MB (the bulk rule switches it) and 64 kB
        # (DRWA's callback on a sender is given back): after that, the
        # foreign program's callbacks on the sender must go on.
        try:
            wait_for(lambda: [x for x in data_sockets(lab, "snd", 5307)
                              if x["cc"] == "bloatd_cubic" and x["bytes_acked"] > 1_500_000],
                     timeout=20, what="the bulk rule's switch")
        except AssertionError:
            client.kill()
            _, err = client.communicate()
            raise AssertionError(f"no switch: sender {lab.ss('snd')}, client {err}") from None
        rtt0, hdr0 = foreign.seen()
        time.sleep(3)
        rtt1, hdr1 = foreign.seen()
        print(f"    foreign callbacks over 3 s after the switch: RTT_CB {rtt1 - rtt0}, "
              f"HDR_OPT_LEN_CB {hdr1 - hdr0}", flush=True)
        drwa = [x for x in d.sockets() if x["remote_port"] == 5307 and x["local_addr"] == RCV4
                and (x.get("policy") or {}).get("drwa")]
        # DRWA lets go: the application's clamp must be back as it set it.
        self.assertEqual(d.cli("policy", "drwa", "off").returncode, 0)
        out, err = client.communicate(timeout=60)
        self.assertTrue(out.strip(), err)
        clamps = json.loads(out.strip().splitlines()[-1])
        print(f"    the application's clamp: {clamps}", flush=True)
        # RTT_CB comes only with an ACK that carries a fresh RTT sample.
        self.assertGreater(rtt1 - rtt0, 10, "the foreign program still gets its RTT callbacks")
        self.assertGreater(hdr1 - hdr0, 100, "and its header-option callbacks")
        self.assertTrue(drwa and drwa[0]["policy"]["drwa"]["rounds"] > 0,
                        f"DRWA acted on the application's socket: {drwa}")
        self.assertLessEqual(max(clamps["during"]), 32768, "DRWA never raised the application's clamp")
        self.assertEqual(clamps["after"], 32768, "the clamp is exactly the application's again")

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
