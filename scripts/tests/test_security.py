#!/usr/bin/env python3
"""Issue 12: no local user can hurt the daemon or use it without leave.

The run directory and its files (modes, owners, symlinks, the API group),
`stop` signalling only the daemon, thousands of idle connections on both
listeners while real requests still answer, process names with terminal
escapes, config errors that quote nothing from a foreign file, the bloat
threshold's range, and SIGHUP restoring the default congestion control.
"""

import ctypes
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from bloatdtest import (BLOATD, CC_DEFAULT, PROBE_PROGS, TestCase, bpf_prog_ids, main, read, run, wait_for,
                        write)

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
GROUP = "bloatdtest"


def mode(path):
    return os.lstat(path).st_mode & 0o7777


class RunDir(TestCase):
    def test_files_are_root_only_and_no_one_else_can_lock_them(self):
        d = self.daemon("--no-cc")
        d.start()
        has_group = run("getent", "group", "bloatd", check=False).returncode == 0
        self.assertEqual(mode(d.run_dir), 0o750 if has_group else 0o700,
                         "group bloatd, if it exists, may look in; no one else")
        self.assertEqual(mode(os.path.join(d.run_dir, "bloatd.pid")), 0o600)
        self.assertEqual(mode(os.path.join(d.run_dir, "bloatd.log")), 0o600)
        self.assertEqual(mode(os.path.join(d.run_dir, "bloatd.sock")), 0o660)
        r = run(*NOBODY, sys.executable, "-c", f"open('{d.run_dir}/bloatd.pid')", check=False)
        self.assertNotEqual(r.returncode, 0, "another user cannot open (and so lock) the pid file")
        self.assertIn("PermissionError", r.stderr)
        r = run(*NOBODY, BLOATD, "--run-dir", d.run_dir, "sockets", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("join group bloatd" if has_group else "only root may use bloatd's API", r.stderr)

    def test_a_run_dir_another_user_owns_or_a_symlink_is_refused(self):
        before = bpf_prog_ids(PROBE_PROGS)
        theirs = tempfile.mkdtemp(prefix="bloatd-theirs-")
        self.addCleanup(shutil.rmtree, theirs, True)
        os.chown(theirs, 65534, 65534)
        r = run(BLOATD, "--run-dir", theirs, "start", "--no-cc", check=False)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("owned by uid 65534", r.stderr)
        link = theirs + ".link"
        os.symlink(tempfile.gettempdir(), link)
        self.addCleanup(os.unlink, link)
        r = run(BLOATD, "--run-dir", link, "start", "--no-cc", check=False)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("symlink", r.stderr)
        self.assertEqual(os.listdir(theirs), [], "nothing written there")
        self.assertEqual(bpf_prog_ids(PROBE_PROGS) - before, set(), "nothing started")

    def test_api_group_lets_its_members_in_and_no_one_else(self):
        run("groupadd", "--system", GROUP, check=False)
        self.addCleanup(run, "groupdel", GROUP, check=False)
        gid = int(run("getent", "group", GROUP).stdout.split(":")[2])
        d = self.daemon("--no-cc")
        cfg = os.path.join(d.run_dir, "bloatd.toml")
        with open(cfg, "w") as f:
            f.write(f'api_group = "{GROUP}"\n')
        r = run(BLOATD, "--config", cfg, "--run-dir", d.run_dir, "start", "--no-cc",
                "--listen", f"127.0.0.1:{d.port}")
        st = os.stat(d.run_dir)
        self.assertEqual((mode(d.run_dir), st.st_gid), (0o750, gid))
        sock = os.stat(os.path.join(d.run_dir, "bloatd.sock"))
        self.assertEqual((sock.st_mode & 0o777, sock.st_gid), (0o660, gid))
        member = ["setpriv", "--reuid=65534", "--regid=65534", f"--groups={gid}", BLOATD,
                  "--run-dir", d.run_dir]
        r = run(*member, "status", check=False)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("running", r.stdout)
        self.assertEqual(run(*member, "sockets", "--json", check=False).returncode, 0)
        r = run(*member, "stop", check=False)
        self.assertNotEqual(r.returncode, 0, "a member may use the API, not stop the daemon")
        r = run(*NOBODY, BLOATD, "--run-dir", d.run_dir, "sockets", check=False)
        self.assertIn(f"join group {GROUP}", r.stderr, "the hint names the real group")
        r = run(BLOATD, "--run-dir", d.run_dir, "start", check=False)
        self.assertNotEqual(r.returncode, 0)
        with open(cfg, "w") as f:
            f.write('api_group = "no-such-group-here"\n')
        r = run(BLOATD, "--config", cfg, "--run-dir", d.run_dir, "status", check=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("groupadd", r.stderr)


class Stop(TestCase):
    def test_stop_signals_only_the_daemon(self):
        d = self.daemon("--no-cc")
        d.start()
        pid = d.pid()
        pid_file = os.path.join(d.run_dir, "bloatd.pid")
        bystander = subprocess.Popen(["sleep", "60"])
        self.addCleanup(bystander.wait)
        self.addCleanup(bystander.kill)
        for forged, why in (("0", "no process can have"), ("4294967295", "no process can have"),
                            ("-1", "holds no pid"), (str(bystander.pid), "not bloatd"),
                            (str(os.getpid()), "not bloatd")):
            with open(pid_file, "w") as f:  # root could; the test plays a corrupted file
                f.write(forged + "\n")
            r = d.stop()
            self.assertNotEqual(r.returncode, 0, f"pid {forged}")
            self.assertIn(why, r.stderr, f"pid {forged}")
            self.assertIsNone(bystander.poll(), "the bystander lives")
            self.assertTrue(os.path.exists(f"/proc/{pid}"), "the daemon lives")
        with open(pid_file, "w") as f:
            f.write(f"{pid}\n")
        self.assertEqual(d.stop().returncode, 0)


class IdleConnections(TestCase):
    N = 3000

    def test_thousands_of_idle_connections_leave_real_requests_answered(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 4 * self.N), max(hard, 4 * self.N)))
        self.addCleanup(resource.setrlimit, resource.RLIMIT_NOFILE, (soft, hard))
        d = self.daemon("--no-cc")
        d.start()
        pid = d.pid()
        fds_before = len(os.listdir(f"/proc/{pid}/fd"))
        idle = []
        self.addCleanup(lambda: [s.close() for s in idle])
        sock_path = os.path.join(d.run_dir, "bloatd.sock")
        t0 = time.time()
        for _ in range(self.N):
            for family, addr in ((socket.AF_INET, ("127.0.0.1", d.port)), (socket.AF_UNIX, sock_path)):
                s = socket.socket(family, socket.SOCK_STREAM)
                s.settimeout(5)
                try:
                    s.connect(addr)
                except OSError:
                    s.close()
                    continue
                idle.append(s)
        opened = len(idle)
        self.assertGreater(opened, self.N, "thousands of idle connections were opened")
        time.sleep(0.5)
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        print(f"    {opened} idle connections in {time.time() - t0:.1f}s; daemon fds {fds_before} -> {fds}",
              flush=True)
        self.assertLess(fds, fds_before + 2 * 256 + 8, "connections are capped per listener")
        # Real requests on both listeners, and a fresh read through a new
        # iterator (a descriptor the daemon must still be able to open).
        t0 = time.time()
        self.assertIn("bloatd_build_info", d.metrics())
        self.assertIsInstance(d.sockets(), list)
        self.assertEqual(d.cli("status", check=False).returncode, 0)
        print(f"    metrics, sockets and status answered in {time.time() - t0:.2f}s", flush=True)

    def test_a_client_that_sends_nothing_is_closed(self):
        d = self.daemon("--no-cc")
        d.start()
        s = socket.create_connection(("127.0.0.1", d.port))
        self.addCleanup(s.close)
        s.settimeout(30)
        t0 = time.time()
        self.assertEqual(s.recv(1), b"", "the daemon closes the connection")
        took = time.time() - t0
        print(f"    idle connection closed after {took:.1f}s", flush=True)
        self.assertLess(took, 20)


class Text(TestCase):
    def test_process_names_with_escapes_reach_no_terminal(self):
        d = self.daemon("--no-cc")
        d.start()
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        self.addCleanup(srv.close)
        port = srv.getsockname()[1]
        evil = b"\x1b]0;pwn\x07\x1b[2J"
        code = ("import ctypes, socket, sys, time\n"
                f"ctypes.CDLL(None).prctl(15, ctypes.c_char_p({evil!r}), 0, 0, 0)\n"
                f"c = socket.create_connection(('127.0.0.1', {port}))\n"
                "c.sendall(b'x'); sys.stdout.write('ok\\n'); sys.stdout.flush(); time.sleep(30)\n")
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        self.addCleanup(child.stdout.close)
        self.addCleanup(child.wait)
        self.addCleanup(child.kill)
        self.assertEqual(child.stdout.readline().strip(), "ok")
        a, _ = srv.accept()
        self.addCleanup(a.close)
        a.recv(1)

        def ours():
            return [s for s in d.sockets() if s["remote_port"] == port and s["pid"] == child.pid]
        s = wait_for(ours, what="the escaping process's socket")[0]
        self.assertEqual(s["comm"], "?]0;pwn??[2J")
        table = d.cli("sockets").stdout
        self.assertIn("?]0;pwn??[2J", table)
        self.assertNotIn("\x1b", table)
        self.assertNotIn("\x07", table)


class Config(TestCase):
    def test_errors_quote_nothing_from_a_foreign_file(self):
        d = self.daemon()
        secret = os.path.join(d.run_dir, "secret")
        with open(secret, "w") as f:
            f.write("root:$y$j9T$s3cr3t-hash:19000:0:99999:7:::\n")
        for text in ("root:$y$j9T$s3cr3t-hash:19000:0:99999:7:::\n",
                     '[database]\npassword = "s3cr3t-hash"\n',
                     'listen = "s3cr3t-hash"\n'):
            with open(secret, "w") as f:
                f.write(text)
            r = run(BLOATD, "--config", secret, "--run-dir", d.run_dir, "start", check=False)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertNotIn("s3cr3t", r.stderr)
            self.assertNotIn("root", r.stderr.replace(d.run_dir, ""))
            self.assertNotIn("password", r.stderr)
        if os.path.exists("/etc/shadow"):
            r = run(BLOATD, "--config", "/etc/shadow", "status", check=False)
            self.assertEqual(r.returncode, 2)
            first = read("/etc/shadow").splitlines()[0]
            self.assertNotIn(first.split(":")[0] + ":", r.stderr)

    def test_bloat_threshold_is_range_checked(self):
        before = bpf_prog_ids(PROBE_PROGS)
        d = self.daemon()
        for bad in ("0", "60001", "4294968"):
            r = d.start("--bloat-threshold", bad, check=False)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("bloat_threshold_ms", r.stderr)
        self.assertEqual(bpf_prog_ids(PROBE_PROGS) - before, set())
        self.assertEqual(d.cli("status", check=False).returncode, 3)


class Hangup(TestCase):
    def test_sighup_stops_cleanly_and_restores_the_default(self):
        before = read(CC_DEFAULT)
        self.addCleanup(write, CC_DEFAULT, before)
        ids = bpf_prog_ids(PROBE_PROGS)
        d = self.daemon()
        d.start()
        ours = bpf_prog_ids(PROBE_PROGS) - ids
        d.cli("cc", "default", "bloatd_westwood")
        self.assertEqual(read(CC_DEFAULT), "bloatd_westwood")
        os.kill(d.pid(), signal.SIGHUP)
        wait_for(lambda: d.cli("status", check=False).returncode == 3, what="daemon gone after SIGHUP")
        self.assertEqual(read(CC_DEFAULT), before)
        wait_for(lambda: not (bpf_prog_ids(PROBE_PROGS) & ours), what="probes unloaded")
        self.assertIn("SIGHUP: stopping", d.log())
        self.assertIn(f"restored default congestion control {before}", d.log())


if __name__ == "__main__":
    main()
