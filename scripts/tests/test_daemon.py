#!/usr/bin/env python3
"""Issue 2: the daemon's lifecycle, bad input and faults, a full map.

The kernel is the judge: which BPF programs are loaded (bpftool), which
congestion controls are available (/proc), whether the daemon process is
alive.
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from bloatdpy.harness import (BLOATD, CC_DEFAULT, PROBE_PROGS, TestCase, api_schema, available_cc, bpf_prog_ids, main,
                        proc_status, read, run, wait_for, write)

def loopback_pairs(test, n, reply=False):
    """`n` loopback connections to a listener of the test's, each carrying
    100 bytes (and 100 back with `reply`), closed after the test: the
    listener's port and both ends of each."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(512)
    test.addCleanup(srv.close)
    port = srv.getsockname()[1]
    conns = []
    test.addCleanup(lambda: [c.close() for c in conns])
    for _ in range(n):
        c = socket.create_connection(("127.0.0.1", port))
        a, _ = srv.accept()
        conns += [c, a]
        c.sendall(b"x" * 100)
        a.recv(100)
        if reply:
            a.sendall(b"y" * 100)
            c.recv(100)
    return port, conns


class Lifecycle(TestCase):
    def test_start_status_stop(self):
        before = bpf_prog_ids(PROBE_PROGS)
        d = self.daemon()
        t0 = time.time()
        r = d.start()
        took = time.time() - t0
        self.assertLess(took, 10, f"start took {took:.1f}s")
        self.assertIn("bloatd started", r.stdout)
        ours = bpf_prog_ids(PROBE_PROGS) - before
        self.assertEqual(len(ours), 4, "the four tracepoint programs are loaded")
        self.assertIn("bloatd_westwood", available_cc())
        self.assertIn("bloatd_cubic", available_cc())
        st = d.cli("status", check=False)
        self.assertEqual(st.returncode, 0, st.stdout + st.stderr)
        self.assertIn("tp_btf/tcp_probe", st.stdout)
        self.assertTrue(os.path.exists(os.path.join(d.run_dir, "bloatd.sock")))
        mode = os.stat(os.path.join(d.run_dir, "bloatd.sock")).st_mode & 0o777
        self.assertEqual(mode, 0o660)

        r = d.stop()
        self.assertEqual(r.returncode, 0, r.stderr)
        wait_for(lambda: not (bpf_prog_ids(PROBE_PROGS) & ours), what="probes unloaded")
        self.assertNotIn("bloatd_westwood", available_cc())
        self.assertNotIn("bloatd_cubic", available_cc())
        st = d.cli("status", check=False)
        self.assertEqual(st.returncode, 3, st.stdout)
        self.assertEqual(d.cli("stop", check=False).returncode, 3)

    def test_double_start_says_already_running(self):
        d = self.daemon("--no-cc")
        d.start()
        pid = d.pid()
        r = d.start(check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("already running", r.stderr)
        self.assertIn(str(pid), r.stderr)
        self.assertEqual(d.pid(), pid, "the running daemon is untouched")

    def test_a_sigterm_while_starting_still_stops_cleanly(self):
        """Issue 18: the signal handlers are in place before anything is
        attached. SIGTERM as soon as the pid file exists (the lock is taken
        before the probes load) ends in the same clean stop as later. The
        daemon says whether it came during the start; tried until one did
        (at most five times), each stop checked."""
        before = bpf_prog_ids(PROBE_PROGS)
        during = 0
        for attempt in range(5):
            d = self.daemon()
            p = self.process([BLOATD, "--run-dir", d.run_dir, "start", "--foreground", "--listen",
                              f"127.0.0.1:{d.port}"], stderr=subprocess.PIPE, text=True)
            self.addCleanup(p.stderr.close)
            wait_for(lambda: d.pid() == p.pid, step=0.001, what="the pid file")
            os.kill(p.pid, signal.SIGTERM)
            rc = p.wait(timeout=60)
            err = p.stderr.read()
            print(f"    SIGTERM at the pid file: exit {rc}; "
                  f"{'during the start' if 'during start' in err else 'after the start'}", flush=True)
            self.assertEqual(rc, 0, f"killed half started instead of stopping: {err}")
            self.assertIn("bloatd stopped", err)
            for f in ("bloatd.sock", "bloatd.pid"):
                self.assertFalse(os.path.exists(os.path.join(d.run_dir, f)), f"{f} removed")
            wait_for(lambda: not (bpf_prog_ids(PROBE_PROGS) - before), what="probes unloaded")
            self.assertNotIn("bloatd_westwood", available_cc())
            if "SIGTERM during start: stopping" in err:
                during += 1
                break
        self.assertEqual(during, 1, "a SIGTERM came while bloatd started")

    def test_kill9_leaves_nothing_attached_and_start_works(self):
        before = bpf_prog_ids(PROBE_PROGS)
        d = self.daemon()
        d.start()
        ours = bpf_prog_ids(PROBE_PROGS) - before
        self.assertEqual(len(ours), 4)
        pid = d.pid()
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not os.path.exists(f"/proc/{pid}"), what="daemon gone")
        # Links are owned by file descriptors: the kernel detached them.
        wait_for(lambda: not (bpf_prog_ids(PROBE_PROGS) & ours), what="probes unloaded")
        wait_for(lambda: "bloatd_cubic" not in available_cc(), what="bloatd_cubic unregistered")
        st = d.cli("status", check=False)
        self.assertEqual(st.returncode, 3)
        self.assertIn("stale", st.stdout)
        r = d.start()
        self.assertIn("bloatd started", r.stdout)
        self.assertEqual(d.cli("status", check=False).returncode, 0)


class Schema(TestCase):
    def test_every_route_answers_as_docs_api_schema_says(self):
        """Issue 31: docs/api.schema.json is made from the model's types
        (`make api-schema`; a unit test fails while they differ). Every
        GET route of a running daemon, with loopback sockets to show,
        answers what the schema says (Daemon.api checks each answer; the
        other tests check every answer they read the same way); a socket
        without its cookie is refused by the same check."""
        d = self.daemon("--no-cc")
        d.start()
        port, _ = loopback_pairs(self, 3, reply=True)
        socks = wait_for(lambda: [s for s in d.api("/v1/sockets") if port in (s["local_port"], s["remote_port"])],
                         what="the loopback sockets listed")
        routes = ["/v1/status", "/v1/sockets?all=1", "/v1/snapshot", "/v1/snapshot?limit=5",
                  f"/v1/series/{socks[0]['cookie']}", "/v1/paths", "/v1/paths?prefix=1", "/v1/floors",
                  "/v1/services", "/v1/cc", "/v1/policy", "/v1/incidents", "/v1/history"]
        for r in routes:
            answer = d.api(r)
            print(f"    {r}: {type(answer).__name__} of {len(answer)}", flush=True)
        asked = {route for r in routes for pattern, route, _ in api_schema().routes
                 if pattern.match(r.split("?")[0])}
        self.assertEqual({route for _, route, _ in api_schema().routes} - asked,
                         {"/v1/cc/default", "/v1/policy/drwa", "/v1/policy/rules/{name}", "/v1/incidents/{id}"},
                         "every GET route asked (the POSTs: test_policy, test_security; an episode: test_recorder)")
        wrong = dict(socks[0])
        del wrong["cookie"]
        with self.assertRaisesRegex(AssertionError, "cookie"):
            api_schema().check("/v1/sockets", [wrong])


class CongestionControlDefault(TestCase):
    def default(self):
        return read(CC_DEFAULT)

    def test_cc_default_applies_and_stop_restores(self):
        before = self.default()
        self.addCleanup(write, CC_DEFAULT, before)
        d = self.daemon()
        d.start()
        listing = d.cli("cc", "list").stdout
        self.assertRegex(listing, r"bloatd_westwood\s+registered by this bloatd")
        self.assertRegex(listing, r"bloatd_cubic\s+registered by this bloatd")

        r = d.cli("cc", "default", "bloatd_westwood")
        self.assertIn(f"was {before}", r.stdout)
        self.assertEqual(self.default(), "bloatd_westwood")
        # A new socket that sets nothing gets it: `ss` shows the name.
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        c = socket.create_connection(srv.getsockname())
        a, _ = srv.accept()
        ss = run("ss", "-tinH", "sport", "=", str(c.getsockname()[1])).stdout
        self.assertIn("bloatd_westwood", ss)
        for x in (c, a, srv):
            x.close()

        r = d.cli("cc", "default", "vegas", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("not available", r.stderr)

        d.stop()
        self.assertEqual(self.default(), before, "stop restores the previous default")
        r = run(BLOATD, "--run-dir", d.run_dir, "cc", "default", "bloatd_cubic", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("bloatd start", r.stderr)


    def test_a_default_a_crash_left_is_put_back_at_the_next_start_or_stop(self):
        """Issue 30: `cc default` then a panic (the hook exits before the
        default is restored) or `kill -9`: the next `start --no-cc`, or
        `stop` with no daemon, puts back the host's default; before, it
        stayed bloatd_westwood (`start --no-cc` never adopts it)."""
        before = self.default()
        self.addCleanup(write, CC_DEFAULT, before)
        tmp = tempfile.mkdtemp(prefix="bloatd-panic-")
        self.addCleanup(shutil.rmtree, tmp, True)
        panic_file = os.path.join(tmp, "panic")
        for how, then in (("panic", "start --no-cc"), ("kill -9", "stop")):
            d = self.daemon()
            os.environ["BLOATD_TEST_PANIC_FILE"] = panic_file
            try:
                d.start()
            finally:
                del os.environ["BLOATD_TEST_PANIC_FILE"]
            d.cli("cc", "default", "bloatd_westwood")
            self.assertEqual(self.default(), "bloatd_westwood")
            if how == "panic":
                open(panic_file, "w").close()
            else:
                os.kill(d.pid(), signal.SIGKILL)
            wait_for(lambda: d.cli("status", check=False).returncode == 3, timeout=15,
                     what=f"the daemon gone after the {how}")
            if how == "panic":
                os.unlink(panic_file)
            left = self.default()
            print(f"    after the {how}: default {left}", flush=True)
            if then == "stop":
                r = d.cli("stop", check=False)
                self.assertEqual(r.returncode, 3)
                self.assertIn(f"restored the default congestion control {before}", r.stdout)
            else:
                d.start("--no-cc")
                self.assertIn(f"restored the default congestion control {before}", d.log())
            self.assertEqual(self.default(), before, f"{how}, then {then}: the host's default again")
            self.assertIn(self.default(), available_cc())
            if then != "stop":
                d.stop()
                self.assertEqual(self.default(), before)


class BadInput(TestCase):
    def assert_nothing_started(self, d, before):
        self.assertEqual(d.cli("status", check=False).returncode, 3)
        self.assertEqual(bpf_prog_ids(PROBE_PROGS) - before, set())

    def test_unknown_flag_exits_2(self):
        before = bpf_prog_ids(PROBE_PROGS)
        d = self.daemon()
        r = d.start("--intervall", "50", check=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--intervall", r.stderr)
        self.assert_nothing_started(d, before)

    def test_unknown_config_key_exits_2(self):
        before = bpf_prog_ids(PROBE_PROGS)
        d = self.daemon()
        cfg = os.path.join(d.run_dir, "bad.toml")
        with open(cfg, "w") as f:
            f.write("interval_ms = 50\nbloat_treshold_ms = 10\n")
        r = run(BLOATD, "--config", cfg, "--run-dir", d.run_dir, "start", check=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("bloat_treshold_ms", r.stderr)
        self.assert_nothing_started(d, before)

    def test_bad_value_exits_2(self):
        d = self.daemon()
        r = d.start("--interval", "1", check=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("interval_ms", r.stderr)

    def test_port_in_use_is_named(self):
        before = bpf_prog_ids(PROBE_PROGS)
        d = self.daemon("--no-cc")
        with socket.socket() as s:
            s.bind(("127.0.0.1", d.port))
            s.listen()
            r = d.start(check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("port in use", r.stderr)
        self.assertIn(str(d.port), r.stderr)
        self.assert_nothing_started(d, before)

    def test_without_root_names_the_privilege(self):
        d = self.daemon()
        os.chmod(d.run_dir, 0o755)  # an unprivileged user may look in it
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", BLOATD,
                  "--run-dir", d.run_dir]
        r = run(*nobody, "start", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("needs root", r.stderr)
        self.assertIn("sudo", r.stderr)
        r = run(*nobody, "top", "--once", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("embedded mode", r.stderr)
        self.assertEqual(d.cli("status", check=False).returncode, 3)

    def test_clients_without_daemon_say_so(self):
        d = self.daemon()
        r = d.cli("sockets", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("not running", r.stderr)


class ThreadsRefused(TestCase):
    def test_whole_answers_when_the_system_refuses_the_daemon_threads(self):
        """Answers with every socket are made by two threads the daemon
        starts at the first such answer. With its cgroup's pids.max at the
        threads it has (as a full TasksMax= would leave it), the answer is
        made on its main thread instead: whole, and the daemon lives on.
        Logged once, not at every answer. Once threads are allowed again,
        the next answer starts them."""
        d = self.daemon("--no-cc", sandbox=False)
        d.start()
        port, conns = loopback_pairs(self, 300)
        ports = {c.getsockname()[1] for c in conns} | {port}
        time.sleep(0.2)  # answers come from a read at most 100 ms old
        pid = d.pid()
        cg = self.pids_cgroup(pid)
        threads = len(proc_status(pid))
        write(os.path.join(cg, "pids.max"), str(threads))

        def ours(socks):
            return {s["local_port"] for s in socks if s["local_port"] in ports}
        socks = d.sockets()
        self.assertEqual(ours(socks), ports, "every socket listed, made on the main thread")
        self.assertEqual(len(proc_status(pid)), threads, "no thread was started")
        self.assertEqual(ours(d.sockets()), ports, "and again, still refused")
        self.assertEqual(d.log().count("no thread for making answers"), 1,
                         "the refusal logged once, not at every answer")
        self.assertGreater(int(read(os.path.join(cg, "pids.events")).split()[1]), 0,
                           "the kernel refused the daemon a thread")
        self.assertEqual(d.cli("status", check=False).returncode, 0, "daemon still alive")

        write(os.path.join(cg, "pids.max"), "max")
        self.assertEqual(ours(d.sockets()), ports)
        self.assertGreater(len(proc_status(pid)), threads, "the makers started")
        self.assertIn("threads for making answers started again", d.log())


    def pids_cgroup(self, pid):
        """A cgroup of the pids controller (cgroup v2's, or v1's on a hybrid
        host like ours) holding `pid`, removed after the test."""
        root = None
        with open("/proc/self/mounts") as f:
            for line in f:
                _, path, fstype, opts = line.split()[:4]
                if fstype == "cgroup" and "pids" in opts.split(","):
                    root = path
                elif fstype == "cgroup2" and "pids" in read(os.path.join(path, "cgroup.subtree_control")).split():
                    root = root or path
        if root is None:
            self.skipTest("no pids controller")
        cg = tempfile.mkdtemp(prefix="bloatd-test-threads-", dir=root)

        def remove():
            try:
                write(os.path.join(root, "cgroup.procs"), str(pid))
            except OSError:
                pass  # gone already
            for _ in range(50):
                try:
                    os.rmdir(cg)
                    return
                except OSError:
                    time.sleep(0.1)
        self.addCleanup(remove)
        write(os.path.join(cg, "cgroup.procs"), str(pid))
        return cg


class FullMap(TestCase):
    def test_full_map_is_counted_not_fatal(self):
        d = self.daemon("--no-cc", "--map-capacity", "64")
        d.start()
        # 100 loopback connections, each carrying data, in a map of 64.
        _, conns = loopback_pairs(self, 100, reply=True)

        def metric(prefix):
            for line in d.metrics().splitlines():
                if line.startswith(prefix):
                    return float(line.split()[-1])
            return 0.0

        def dropped():
            return metric('bloatd_probe_dropped_total{reason="map_full"}')

        wait_for(dropped, what="map_full drops counted")
        self.assertEqual(d.cli("status", check=False).returncode, 0, "daemon still alive")
        socks = d.sockets()
        self.assertLessEqual(len(socks), 64)
        self.assertEqual(metric("bloatd_probe_map_entries "), 64, "the map is full, not beyond")
        first = dropped()
        # Every refused socket sends and receives more: still counted once.
        for _ in range(5):
            for c in conns:
                c.sendall(b"z" * 100)
            for c in conns:
                c.recv(100)
        time.sleep(0.5)
        second = dropped()
        print(f"    map_full after the first round {first:.0f}, after five more {second:.0f} "
              f"({len(conns)} sockets, 64 tracked)")
        # Only the scrapes' own HTTP connections are new sockets (2 each)
        self.assertLessEqual(second - first, 4, "each refused socket counted once, not per segment")
        self.assertLessEqual(first, len(conns) - 64 + 16,
                             "no more refusals than sockets beyond the bound (and a few of the host's)")


if __name__ == "__main__":
    main()
