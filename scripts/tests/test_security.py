#!/usr/bin/env python3
"""Issues 12 and 18: no local user can hurt the daemon or use it without leave.

The run directory and its files (modes, owners, symlinks, the API group),
`stop` signalling only the daemon, thousands of idle connections on both
listeners while real requests still answer, process names with terminal
escapes, config errors that quote nothing from a foreign file, the bloat
threshold's range, and SIGHUP restoring the default congestion control.
Issue 18: the API group watches, only root and the admin group act (tried
as throwaway users of each group); API clients cannot exhaust the daemon.
"""

import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from bloatdpy.harness import (BLOATD, CC_DEFAULT, PROBE_PROGS, Loadgen, TestCase, bpf_map_dump, bpf_prog_ids, free_port, main,
                        read, run, wait_for, write)

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
        # A second start in the same run directory, with a port of its own
        # and nothing to register: the running daemon is the only reason it
        # could fail, and it must leave that daemon exactly as it was.
        pid, sock_path = d.pid(), os.path.join(d.run_dir, "bloatd.sock")
        sock_ino, progs = os.stat(sock_path).st_ino, bpf_prog_ids(PROBE_PROGS)
        r = run(BLOATD, "--config", cfg, "--run-dir", d.run_dir, "start", "--no-cc",
                "--listen", f"127.0.0.1:{free_port()}", check=False)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn(f"bloatd is already running (pid {pid})", r.stderr)
        self.assertEqual(bpf_prog_ids(PROBE_PROGS), progs, "no second set of probes")
        self.assertEqual(d.pid(), pid, "the pid file still names the running daemon")
        self.assertEqual(os.stat(sock_path).st_ino, sock_ino, "the API socket is still the running daemon's")
        self.assertEqual(d.api("/v1/status")["pid"], pid, "and it answers there")
        self.assertEqual(run(*member, "status", check=False).returncode, 0, "members still get in")
        with open(cfg, "w") as f:
            f.write('api_group = "no-such-group-here"\n')
        r = run(BLOATD, "--config", cfg, "--run-dir", d.run_dir, "status", check=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("groupadd", r.stderr)


class Authority(TestCase):
    """Watching is not acting: the API group reads, root and the admin group
    change the kernel. Real users, made for the test and removed after; the
    CLI and curl run as them (runuser takes their groups from the database,
    setpriv sets exactly the groups given)."""
    API, ADMIN = "bloatdt-api", "bloatdt-admin"
    WATCHER, ACTOR = "bloatdt-watch", "bloatdt-act"

    def make_users(self):
        for g in (self.API, self.ADMIN):
            run("groupadd", "--system", g, check=False)
            self.addCleanup(run, "groupdel", g, check=False)
        for user, groups in ((self.WATCHER, self.API), (self.ACTOR, f"{self.API},{self.ADMIN}")):
            run("userdel", user, check=False)
            run("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "-G", groups, user)
            self.addCleanup(run, "userdel", user, check=False)
        return {g: int(run("getent", "group", g).stdout.split(":")[2]) for g in (self.API, self.ADMIN)}

    def post(self, d, who, route, body):
        """POST as `who` (argv prefix) with curl: (HTTP status, body)."""
        r = run(*who, "curl", "-s", "-w", "\n%{http_code}", "--unix-socket",
                os.path.join(d.run_dir, "bloatd.sock"), "-X", "POST", "-H", "Content-Type: application/json",
                "-d", json.dumps(body), f"http://bloatd{route}", check=False)
        text, _, code = r.stdout.rpartition("\n")
        return int(code or 0), text

    def test_the_api_group_watches_and_only_root_or_the_admin_group_acts(self):
        gids = self.make_users()
        before_cc = read(CC_DEFAULT)
        self.addCleanup(write, CC_DEFAULT, before_cc)
        other_cc = "reno" if before_cc != "reno" else "cubic"
        d = self.daemon("--no-cc", "--drwa=off", "--policy", "name=web,sport=5999,cc=cubic")
        cfg = os.path.join(d.run_dir, "auth.toml")
        with open(cfg, "w") as f:
            f.write(f'api_group = "{self.API}"\nadmin_group = "{self.ADMIN}"\n')
        d.extra += ["--config", cfg]
        d.start()
        watcher = ["runuser", "-u", self.WATCHER, "--"]
        actor = ["runuser", "-u", self.ACTOR, "--"]
        # The actor's own process with its admin group dropped: the kernel's
        # credentials of the connection count, not the group database.
        actor_without_admin = ["setpriv", f"--reuid={self.ACTOR}", f"--regid={gids[self.API]}",
                               f"--groups={gids[self.API]}"]

        def mode():
            return d.api("/v1/policy")["drwa"]["mode"]

        def rule_enabled():
            return d.api("/v1/policy")["rules"][0]["enabled"]

        # Watching works for the API group.
        for cmd in (("status",), ("sockets", "--json"), ("policy", "list"), ("paths",)):
            r = run(*watcher, BLOATD, "--run-dir", d.run_dir, *cmd, check=False)
            self.assertEqual(r.returncode, 0, f"{cmd}: {r.stderr}")
        snap = json.loads(run(*watcher, "curl", "-sf", "--unix-socket", os.path.join(d.run_dir, "bloatd.sock"),
                              "http://bloatd/v1/snapshot").stdout)
        self.assertIn("may watch but not switch DRWA", snap["policy"]["refused"],
                      "the dashboard learns why its D key cannot act")
        # Acting does not, through curl or the CLI; nothing changes.
        for who, name in ((watcher, "API group member"), (actor_without_admin, "admin group dropped")):
            for route, body in (("/v1/policy/drwa", {"on": True}), ("/v1/cc/default", {"name": other_cc}),
                                ("/v1/policy/rules/web", {"enabled": False})):
                code, text = self.post(d, who, route, body)
                print(f"    {name}: POST {route} -> {code} {text}", flush=True)
                self.assertEqual(code, 403, f"{name}: POST {route}: {text}")
                self.assertIn(f"needs root or group {self.ADMIN}", text)
        for args in (("policy", "drwa", "on"), ("cc", "default", other_cc), ("policy", "disable", "web")):
            r = run(*watcher, BLOATD, "--run-dir", d.run_dir, *args, check=False)
            self.assertEqual(r.returncode, 1, f"{args}: {r.stdout}{r.stderr}")
            self.assertIn("may watch but not", r.stderr, args)
            self.assertIn(f"uid {run('id', '-u', self.WATCHER).stdout.strip()}", r.stderr)
        self.assertEqual((mode(), read(CC_DEFAULT), rule_enabled()), ("off", before_cc, True),
                         "no refused request changed anything")
        # The admin group acts; so does root.
        self.assertEqual(self.post(d, actor, "/v1/policy/drwa", {"on": True})[0], 200)
        self.assertEqual(mode(), "on")
        r = run(*actor, BLOATD, "--run-dir", d.run_dir, "cc", "default", other_cc, check=False)
        self.assertEqual((r.returncode, read(CC_DEFAULT)), (0, other_cc), r.stderr)
        r = run(*actor, BLOATD, "--run-dir", d.run_dir, "policy", "disable", "web", check=False)
        self.assertEqual((r.returncode, rule_enabled()), (0, False), r.stderr)
        self.assertEqual(self.post(d, [], "/v1/policy/drwa", {"on": False})[0], 200, "root acts")
        self.assertEqual(mode(), "off")
        self.assertIn("DRWA switched on (asked by uid", d.log())

    def test_the_d_key_asks_first_and_tells_a_watcher_why_it_cannot(self):
        self.make_users()
        d = self.daemon("--no-cc", "--drwa=off")
        cfg = os.path.join(d.run_dir, "auth.toml")
        with open(cfg, "w") as f:
            f.write(f'api_group = "{self.API}"\nadmin_group = "{self.ADMIN}"\n')
        d.extra += ["--config", cfg]
        d.start()
        term = self.tmux("bloatd-test-auth")
        for user in (self.WATCHER, self.ACTOR):
            term.new(user, f"runuser -u {user} -- {BLOATD} --run-dir {d.run_dir} top", width=220)
            wait_for(lambda: "DRWA off" in term.screen(user), what=f"{user}'s dashboard")
        term.keys(self.WATCHER, "D")
        wait_for(lambda: "may watch but not switch DRWA" in term.screen(self.WATCHER),
                 what="the watcher told why D does nothing")
        self.assertNotIn("Switch DRWA on", term.screen(self.WATCHER), "no question it could not act on")
        term.keys(self.ACTOR, "D")
        wait_for(lambda: "Switch DRWA on for every receiver of every namespace?" in term.screen(self.ACTOR),
                 what="the question")
        term.keys(self.ACTOR, "n")
        wait_for(lambda: "DRWA left as it was" in term.screen(self.ACTOR), what="no: nothing done")
        self.assertEqual(d.api("/v1/policy")["drwa"]["mode"], "off")
        term.keys(self.ACTOR, "D")
        wait_for(lambda: "Switch DRWA on" in term.screen(self.ACTOR), what="the question again")
        term.keys(self.ACTOR, "y")
        wait_for(lambda: d.api("/v1/policy")["drwa"]["mode"] == "on", what="yes: DRWA on")
        for user in (self.WATCHER, self.ACTOR):
            term.keys(user, "q")


class Clients(TestCase):
    """API clients cannot exhaust the daemon: no watch for a socket that
    does not exist, a bounded share of the watch list for API series, a
    dashboard's detail kept whatever they do, a bounded log."""

    def client(self, d):
        """One keep-alive HTTP connection to the API socket: request(method,
        target, body) -> (status, text)."""
        import http.client

        class Conn(http.client.HTTPConnection):
            def connect(self_):
                self_.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self_.sock.connect(os.path.join(d.run_dir, "bloatd.sock"))
        conn = Conn("bloatd", timeout=10)
        self.addCleanup(conn.close)

        def request(method, target, body=None):
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, target, body=None if body is None else json.dumps(body), headers=headers)
            r = conn.getresponse()
            return r.status, r.read().decode()
        return request

    def loopback(self, idle):
        """A busy loopback connection and `idle` idle ones to a listener of
        a process of the test's: (the busy one's port, the listener's)."""
        code = ("import socket, threading, time\n"
                "srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen(1024)\n"
                "port = srv.getsockname()[1]\n"
                "def drain(c):\n"
                "    while c.recv(65536): pass\n"
                "def accept():\n"
                "    while True:\n"
                "        c, _ = srv.accept(); threading.Thread(target=drain, args=(c,), daemon=True).start()\n"
                "threading.Thread(target=accept, daemon=True).start()\n"
                "busy = socket.create_connection(('127.0.0.1', port))\n"
                f"idle = [socket.create_connection(('127.0.0.1', port)) for _ in range({idle})]\n"
                "print(busy.getsockname()[1], port, flush=True)\n"
                "while True:\n"
                "    busy.sendall(b'x' * 1000); time.sleep(0.01)\n")
        p = self.process([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, grace=0)
        self.addCleanup(p.stdout.close)
        busy_port, port = (int(x) for x in p.stdout.readline().split())
        return busy_port, port

    def test_series_requests_cannot_take_a_dashboards_detail(self):
        d = self.daemon("--no-cc")
        d.start()
        # A busy loopback connection (what a dashboard looks at) and 100
        # idle ones: 202 sockets that exist.
        busy_port, port = self.loopback(100)
        socks = wait_for(lambda: (s := d.sockets()) and len([x for x in s if port in (x["local_port"], x["remote_port"])]) >= 202 and s,
                         what="the 202 loopback sockets")
        busy = next(x["cookie"] for x in socks if x["local_port"] == busy_port)
        idle = [x["cookie"] for x in socks if port in (x["local_port"], x["remote_port"]) and x["cookie"] != busy
                and busy_port not in (x["local_port"], x["remote_port"])]
        request = self.client(d)
        fake = [10**15 + i for i in range(300)]
        codes = [request("GET", f"/v1/series/{c}")[0] for c in fake]
        self.assertEqual(set(codes), {404}, "no socket, no series")
        answers = [request("GET", f"/v1/series/{c}") for c in idle]
        served = sum(1 for code, _ in answers if code == 200)
        full = [text for code, text in answers if code == 503]
        print(f"    300 made-up cookies: {codes.count(404)} x 404; {len(idle)} real idle sockets: {served} served, "
              f"{len(full)} x 503", flush=True)
        self.assertEqual(served, 64, "API series get a bounded share of the watch list")
        self.assertEqual(len(full), len(idle) - 64)
        self.assertIn("already keeps the series of 64 sockets", full[0])
        watched = {k for k, _ in bpf_map_dump("watch")}
        self.assertFalse(watched & set(fake), "the kernel watches no socket that does not exist")
        self.assertLessEqual(len(watched), 64 + 1 + 32)
        # A dashboard opens the busy socket's detail: its samples come.
        first = json.loads(request("GET", f"/v1/snapshot?series={busy}&limit=5")[1])
        time.sleep(1.5)
        snap = json.loads(request("GET", f"/v1/snapshot?series={busy}&limit=5")[1])
        samples = [x for s in snap["series"] if s["cookie"] == busy for x in s["samples"]]
        print(f"    the dashboard's detail: {len(samples)} samples in 1.5 s (first answer "
              f"{sum(len(s['samples']) for s in first['series'])})", flush=True)
        self.assertGreaterEqual(len(samples), 5, "the dashboard's detail series keeps coming")
        self.assertIn(busy, {k for k, _ in bpf_map_dump("watch")})

    def test_concurrent_full_reads_share_one_kernel_read_per_interval(self):
        """/v1/sockets, /v1/paths, /v1/policy and a fresh /v1/snapshot each
        read every socket the kernel keeps (~0.7 s at 100k sockets on the
        daemon's one thread). Three clients asking in a loop get the read of
        the current sampling interval (100 ms), not one each. The kernel counts the reads: the
        dump_socks iterator runs once per socket it walks plus once at the
        end of each read (BPF stats, --bpf-stats)."""
        d = self.daemon("--no-cc", "--drwa=off", "--bpf-stats")
        d.start()
        dump = bpf_prog_ids({"dump_socks"})
        self.assertEqual(len(dump), 1, "one dump_socks program")

        def runs():
            progs = json.loads(run("bpftool", "-j", "prog", "show").stdout)
            return next(p.get("run_cnt", 0) for p in progs if p["id"] in dump)
        self.loopback(500)

        def entries():
            return int(float(next(l.split()[1] for l in d.metrics().splitlines()
                                  if l.startswith("bloatd_probe_map_entries "))))
        n = wait_for(lambda: (e := entries()) >= 1002 and e, what="1,002 loopback sockets in the socket map")
        routes = ("/v1/sockets", "/v1/paths", "/v1/policy", "/v1/snapshot?fresh=1")
        counts, errors = [0, 0, 0], []
        stop = time.time() + 3

        def client(i):
            request = self.client(d)
            while time.time() < stop:
                code, text = request("GET", routes[(counts[i] + i) % len(routes)])
                if code != 200:
                    errors.append(text)
                counts[i] += 1
        r0, t0 = runs(), time.time()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # A walk runs the program once per socket it passes, plus once at
        # its end: the socket map's records in one walk of the map, or, on
        # a kernel that refuses map iterators (this VM), every TCP socket
        # of the daemon's namespace in a TCP iterator's walk.
        walked = max(n, len(run("ss", "-taH").stdout.splitlines()))
        elapsed, reads = time.time() - t0, (runs() - r0) / (walked + 1)
        self.assertLess(abs(entries() - n), 10, "the map held as many sockets throughout")
        bound = elapsed / 0.1 + 2
        self.assertEqual(errors, [])
        print(f"    {sum(counts)} requests from 3 clients in {elapsed:.1f} s: {reads:.0f} kernel reads of "
              f"{n} sockets (bound {bound:.0f}: one per 100 ms interval)", flush=True)
        self.assertGreater(sum(counts), 3 * bound, "enough requests to tell")
        self.assertLessEqual(reads, 1.2 * bound, "one full read per interval, shared")

    def test_the_log_is_bounded_whatever_requests_make_it_say(self):
        d = self.daemon("--no-cc", "--drwa=off")
        d.start()
        request = self.client(d)
        log = os.path.join(d.run_dir, "bloatd.log")
        t0 = time.time()
        n = 20000
        for i in range(n):
            code, text = request("POST", "/v1/policy/drwa", {"on": i % 2 == 0})
            self.assertEqual(code, 200, text)
        sizes = [os.path.getsize(f) if os.path.exists(f) else None for f in (log, log + ".1")]
        print(f"    {n} POSTs in {time.time() - t0:.1f}s: bloatd.log {sizes[0]} bytes, bloatd.log.1 {sizes[1]}",
              flush=True)
        self.assertLessEqual(sizes[0], 1 << 20, "the log stays under its cap")
        self.assertIsNotNone(sizes[1], "and rotated into bloatd.log.1")
        self.assertLessEqual(sizes[1], (1 << 20) + 512)
        self.assertEqual(mode(log + ".1"), 0o600)
        self.assertEqual(mode(log), 0o600)
        self.assertIn("DRWA switched off", read(log).splitlines()[-1], "the newest line is kept")


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


class StalledClients(TestCase):
    def test_clients_that_ask_and_never_read_hold_little(self):
        """Issue 30: 200 connections to the API socket, 150 ms apart, each
        asking for every one of 20,000 sockets and never reading. Each
        answer holds a whole read until read (before: RSS 31 -> 999 MB at
        10,000 sockets); now at most 4 per user wait (the oldest shed), and
        one that reads nothing for 5 s ends. RSS grows < 200 MB and /metrics
        keeps answering."""
        tmp = tempfile.mkdtemp(prefix="bloatd-stall-")
        self.addCleanup(shutil.rmtree, tmp, True)
        gen = Loadgen(tmp)
        spawn = lambda *cmd, **kw: self.process(list(cmd), grace=0, **kw)
        gen.pair(spawn, spawn, "127.0.0.1", 7600, 10_000, busy=0)
        d = self.daemon("--no-cc")
        d.start()
        wait_for(lambda: len(d.sockets()) >= 20_000, timeout=30, what="20,000 sockets listed")
        pid = d.pid()

        def rss_mb():
            with open(f"/proc/{pid}/status") as st:
                return int(next(l.split()[1] for l in st if l.startswith("VmRSS:"))) / 1024
        rss0, peak, slowest = rss_mb(), 0.0, 0.0
        stalled = []
        self.addCleanup(lambda: [s.close() for s in stalled])
        sock_path = os.path.join(d.run_dir, "bloatd.sock")
        for i in range(200):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(sock_path)
            s.sendall(b"GET /v1/sockets HTTP/1.1\r\nHost: bloatd\r\n\r\n")
            stalled.append(s)
            time.sleep(0.15)
            peak = max(peak, rss_mb())
            if i % 10 == 0:
                t0 = time.time()
                self.assertIn("bloatd_build_info", d.metrics())
                slowest = max(slowest, time.time() - t0)
        print(f"    200 stalled requests over 20,000 sockets: RSS {rss0:.0f} MB -> peak {peak:.0f} MB; "
              f"slowest /metrics {slowest * 1000:.0f} ms", flush=True)
        self.assertLess(peak - rss0, 200, "what unread answers hold is bounded")
        self.assertLess(slowest, 2.0, "/metrics answers in time")
        self.assertIn("shed an answer with every socket", d.log())
        # Real clients still get whole answers.
        self.assertGreaterEqual(len(d.sockets()), 20_000)


class LoopingReader(TestCase):
    def test_one_client_asking_in_a_loop_takes_a_bounded_share(self):
        """Issue 30: at 100,000 sockets a read takes 0.3-0.7 s and the JSON
        of every socket ~160 ms of a core; a read was made as soon as the
        last was 100 ms old, and each answer made at once, so one client
        asking for /v1/sockets in a loop kept the daemon busy. Reads for API
        clients are now shared for nine times their cost, and a user's next
        whole answer waits six times what its last took: for 10 s of such
        a loop the daemon stays under 30% of a core, and /metrics answers
        (median under 50 ms)."""
        tmp = tempfile.mkdtemp(prefix="bloatd-loop-")
        self.addCleanup(shutil.rmtree, tmp, True)
        lab = self.lab("blp", rate="1gbit", buffer_bytes=1000000)
        # Servers' ports below the ephemeral range, or a later server finds
        # its port taken by an earlier client.
        lab.exec("rcv", "sysctl", "-qw", "net.ipv4.ip_local_port_range=10000 65535",
                 "net.core.somaxconn=65535", "net.ipv4.tcp_max_syn_backlog=65535")
        gen = Loadgen(tmp)
        spawn = lambda *cmd, **kw: lab.spawn("rcv", *cmd, **kw)
        for i in range(4):
            gen.pair(spawn, spawn, "127.0.0.1", 7700 + 10 * i, 12_500, busy=250)
        d = self.daemon("--no-cc", "--map-capacity", "131072")
        d.start()
        wait_for(lambda: len(d.sockets()) >= 100_000, timeout=60, step=1, what="100,000 sockets listed")
        pid = d.pid()

        def cpu_s():
            with open(f"/proc/{pid}/stat") as st:
                f = st.read().rsplit(")", 1)[1].split()
            return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        stop_at = time.time() + 10
        took = []  # each answer's wall time, as the client saw it

        def loop():
            while time.time() < stop_at:
                a = time.time()
                run("curl", "-sf", "-o", "/dev/null", "--unix-socket", os.path.join(d.run_dir, "bloatd.sock"),
                    "http://bloatd/v1/sockets", timeout=30)
                took.append(time.time() - a)
        c0, t0 = cpu_s(), time.time()
        th = threading.Thread(target=loop)
        th.start()
        scrapes = []
        while time.time() < stop_at:
            a = time.time()
            self.assertIn("bloatd_build_info", d.metrics())
            scrapes.append((time.time() - a) * 1000)
            time.sleep(0.3)
        th.join()
        share = 100 * (cpu_s() - c0) / (time.time() - t0)
        scrapes.sort()
        print(f"    {len(took)} answers of 100,000 sockets in 10 s, each after "
              f"{', '.join(f'{x:.2f}' for x in took)} s: daemon {share:.1f}% of a core; "
              f"/metrics median {scrapes[len(scrapes) // 2]:.0f} ms, max {scrapes[-1]:.0f} ms", flush=True)
        # The client is paced, not shut out: an answer waits six times what
        # the last took to make, then is made. Making one takes at most the
        # first, unpaced answer's time twice over (machine noise), so each
        # comes within 7 such makings and a second of slack. How many that
        # is depends on the machine (a read of 0.3-0.7 s: 2 to 5 answers in
        # 10 s), so the count alone is no check.
        self.assertGreaterEqual(len(took), 2, "the client got its answers")
        making = 2 * took[0]
        for prev, this in zip(took, took[1:]):
            self.assertLessEqual(this, 6 * min(prev, making) + making + 1,
                                 f"an answer waited {this:.2f} s after one of {prev:.2f} s")
        self.assertLess(share, 30, "one looping client takes a bounded share")
        self.assertLess(scrapes[len(scrapes) // 2], 50, "/metrics answers meanwhile")


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
