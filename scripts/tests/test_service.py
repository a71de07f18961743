#!/usr/bin/env python3
"""Issue 12: the systemd unit and the capabilities bloatd keeps.

The unit's capability bounding set and system-call filter are enough: the
kernel-oracle test (test_sockets.py) passes with every daemon it starts
under exactly those (unit_sandbox.py), as systemd would run it. After start the daemon holds CAP_SYS_ADMIN
and CAP_SYS_PTRACE only, permitted and not effective, in every thread, with
no_new_privs; `cc default` and the stop's restore still work, including
moving a network namespace that only a process holds off bloatd's
algorithm. systemd-analyze rates the unit 4.0 or better; the daemon tells
systemd when it is ready (Type=notify).
"""

import os
import re
import signal
import socket
import subprocess
import sys

from bloatdpy.harness import (BLOATD, CC_ALLOWED, CC_DEFAULT, REPO, TestCase, bpf_prog_ids, free_port, main,
                        proc_status, read, run, wait_for, write)

UNIT = os.path.join(REPO, "daemon", "dist", "bloatd.service")
HERE = os.path.dirname(os.path.abspath(__file__))
CAP_SYS_PTRACE, CAP_SYS_ADMIN = 19, 21


class Unit(TestCase):
    def test_exposure_rating_is_ok(self):
        r = run("systemd-analyze", "security", "--offline=yes", UNIT, check=False)
        m = re.search(r"Overall exposure level for bloatd\.service: ([0-9.]+)", r.stdout)
        self.assertIsNotNone(m, r.stdout[-500:] + r.stderr)
        print(f"    systemd-analyze exposure {m.group(1)}", flush=True)
        self.assertLessEqual(float(m.group(1)), 4.0)

    def test_tells_systemd_when_ready(self):
        """Type=notify: READY=1 on $NOTIFY_SOCKET once the API answers."""
        d = self.daemon("--no-cc")
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.addCleanup(notify.close)
        path = os.path.join(d.run_dir, "notify")
        notify.bind(path)
        notify.settimeout(30)
        proc = subprocess.Popen([BLOATD, "--run-dir", d.run_dir, "start", "--foreground", "--no-cc",
                                 "--listen", f"127.0.0.1:{free_port()}"],
                                env=dict(os.environ, NOTIFY_SOCKET=path),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(proc.wait)
        self.addCleanup(proc.kill)
        self.assertEqual(notify.recv(256), b"READY=1\n")
        self.assertEqual(d.cli("status", check=False).returncode, 0, "up when it says so")
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(proc.wait(timeout=15), 0)

    def test_kernel_oracle_passes_in_the_unit_sandbox(self):
        env = dict(os.environ, BLOATD_UNIT_SANDBOX="1")
        r = subprocess.run([sys.executable, "test_sockets.py"], cwd=HERE, env=env,
                           capture_output=True, text=True, timeout=600)
        tail = r.stdout[-2000:] + r.stderr[-3000:]
        self.assertEqual(r.returncode, 0, tail)
        ran = re.search(r"Ran (\d+) tests?", r.stderr)
        self.assertTrue(ran and int(ran.group(1)) >= 3, tail)
        print(f"    test_sockets.py with daemons in the unit's sandbox: {ran.group(0)}, OK", flush=True)


class Capabilities(TestCase):
    def test_only_the_stop_capabilities_stay_and_stop_restores(self):
        before = read(CC_DEFAULT)
        self.addCleanup(write, CC_DEFAULT, before)
        sock_ops_before = bpf_prog_ids({"sock_ops"})
        d = self.daemon(sandbox=True)
        d.start()
        self.assertTrue(bpf_prog_ids({"sock_ops"}) - sock_ops_before,
                        "the cgroup sock_ops program attached in the sandbox")
        self.assertNotIn("not sampled", d.log())
        threads = proc_status(d.pid())
        for tid, st in threads.items():
            self.assertEqual(int(st["CapEff"], 16), 0, f"thread {tid}: nothing effective")
            self.assertEqual(int(st["CapPrm"], 16), (1 << CAP_SYS_ADMIN) | (1 << CAP_SYS_PTRACE),
                             f"thread {tid}: permitted only CAP_SYS_ADMIN and CAP_SYS_PTRACE")
            self.assertEqual(int(st["CapInh"], 16), 0)
            self.assertEqual(int(st["CapAmb"], 16), 0)
            self.assertEqual(st["NoNewPrivs"], "1")
            self.assertEqual(st["Seccomp"], "2", "the unit's system-call filter applies")

        # A namespace only a privileged process holds (not in /run/netns),
        # defaulting to bloatd_westwood: finding it at stop takes
        # CAP_SYS_PTRACE, entering it CAP_SYS_ADMIN.
        holder = subprocess.Popen(["unshare", "--net", "sleep", "120"])
        self.addCleanup(holder.wait)
        self.addCleanup(holder.kill)
        own = os.readlink("/proc/self/ns/net")
        wait_for(lambda: os.readlink(f"/proc/{holder.pid}/ns/net") != own, what="the holder's netns")
        allowed = read(CC_ALLOWED)
        write(CC_ALLOWED, allowed + " bloatd_westwood")  # a child netns may only pick an allowed one
        try:
            run("nsenter", "-t", str(holder.pid), "-n", "sh", "-c", f"echo bloatd_westwood > {CC_DEFAULT}")
        finally:
            write(CC_ALLOWED, allowed)
        ns_default = lambda: run("nsenter", "-t", str(holder.pid), "-n", "cat", CC_DEFAULT).stdout.strip()
        self.assertEqual(ns_default(), "bloatd_westwood")

        # The host default, through the daemon, after the drop.
        r = d.cli("cc", "default", "bloatd_westwood")
        self.assertIn(f"was {before}", r.stdout)
        self.assertEqual(read(CC_DEFAULT), "bloatd_westwood")
        self.assertIsInstance(d.sockets(all=True), list)  # iterators still created and read

        r = d.stop()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(read(CC_DEFAULT), before, "stop restores the host default")
        self.assertIn(ns_default(), ("cubic", "reno"), "the holder's namespace was moved off")
        self.assertNotIn("bloatd_westwood", read("/proc/sys/net/ipv4/tcp_available_congestion_control"))


if __name__ == "__main__":
    main()
