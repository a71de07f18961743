#!/usr/bin/env python3
"""Issue 30: one binary that runs anywhere.

`make deb` runs `make release`: the static binary target/release-dist/bloatd,
its tarball and SHA256SUMS, then the Debian package made from that binary.

- static: no program interpreter and no needed library (readelf), `file`
  and `ldd` say so; the linked binary defines none of the lookups a static
  glibc serves through NSS (getgrnam_r, getaddrinfo, ...); SHA256SUMS
  match; the tarball holds the same binary, the unit, config, man pages,
  completions, rules and dashboard.
- Debian 11: a Debian 11 root (scripts/debian11-root.sh: debootstrap from
  Debian's archive, made once and cached), glibc 2.31 and no libelf, where
  the dynamic build does not even load. Chrooted in a mount namespace of
  the test's own over an overlay of that root (the cache is never written;
  what is mounted ends with the namespace): `--version`; `start` with the
  congestion controls registered and an API group that only the root's
  /etc/group names; `sockets` lists a TCP connection the test makes, as
  `ss` sees it; `top --once` shows it; `stop` leaves no program, no
  sock_ops attachment, no registered algorithm, no process.
- the .deb there: dpkg installs it (Debian 11's adduser makes the group
  bloatd), its bloatd starts with the installed config and gives the run
  directory that group, stops; dpkg purges it.
"""

import hashlib
import json
import os
import shutil
import socket
import subprocess
import tarfile
import tempfile
import threading

from bloatdpy.harness import (CC_AVAILABLE, PROBE_PROGS, REPO, TestCase, bpf_prog_ids, close_enough, find,
                        free_port, main, parse_ss, read, run, sock_ops_attached, wait_for)
from test_top import table_rows

DIST = os.path.join(REPO, "target", "release-dist")
STATIC = os.path.join(DIST, "bloatd")
ALGOS = ("bloatd_westwood", "bloatd_cubic")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The lookups a static glibc serves through NSS modules it would dlopen.
NSS = ("getgrnam_r", "getgrgid_r", "getgrnam", "getgrgid", "getpwnam_r", "getpwuid_r", "getpwnam",
       "getpwuid", "getgrouplist", "initgroups", "getaddrinfo", "getnameinfo", "gethostbyname",
       "gethostbyname_r", "getservbyname")


def assert_static(tc, path):
    """The binary at `path` asks nothing of the dynamic loader: no program
    interpreter, no needed library (readelf); `file` and `ldd` agree."""
    elf = run("readelf", "-lWd", path).stdout
    tc.assertNotIn("INTERP", elf)
    tc.assertNotIn("(NEEDED)", elf)
    tc.assertRegex(run("file", "-b", path).stdout, r"static(-pie)? linked")
    ldd = run("ldd", path, check=False)
    tc.assertRegex(ldd.stdout + ldd.stderr, r"not a dynamic executable|statically linked")


class Root:
    """The Debian 11 root, chrooted in a mount namespace of its own: an
    overlay over the cached root (what the test writes lands in a directory
    of its own), a fresh /proc, the host's /sys (cgroup v2 below it) and
    /dev, an empty /run. A holder (sh) keeps the namespace while the test
    runs: the mounts, private to it, go when it and what runs in it end,
    and it ends itself when the test's end of its stdin closes."""

    def __init__(self, lower):
        self.tmp = tempfile.mkdtemp(prefix="bloatd-d11-")
        self.root = os.path.join(self.tmp, "root")
        for d in ("upper", "work", "root"):
            os.mkdir(os.path.join(self.tmp, d))
        script = f"""set -e
mount -t overlay overlay -o lowerdir={lower},upperdir={self.tmp}/upper,workdir={self.tmp}/work {self.root}
mount -t proc proc {self.root}/proc
mount --rbind /sys {self.root}/sys
mount --rbind /dev {self.root}/dev
mount -t tmpfs -o mode=755 tmpfs {self.root}/run
echo ready
read _
"""
        self.holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.holder.stdout.readline().strip()
        assert line == "ready", f"mounting the Debian 11 root failed ({line!r})"
        self.ns = os.readlink(f"/proc/{self.holder.pid}/ns/mnt")

    def path(self, p):
        """A path inside the root, from the host (through the holder)."""
        return f"/proc/{self.holder.pid}/root{self.root}{p}"

    def run(self, *cmd, check=True, timeout=60):
        return run("nsenter", "-t", str(self.holder.pid), "-m", "chroot", self.root,
                   "/usr/bin/env", "-i", f"PATH={PATH}", "LANG=C", *cmd, check=check, timeout=timeout)

    def processes(self):
        """Processes in the namespace, the holder aside."""
        found = []
        for p in os.listdir("/proc"):
            if p.isdigit() and int(p) != self.holder.pid:
                try:
                    if os.readlink(f"/proc/{p}/ns/mnt") == self.ns:
                        found.append(int(p))
                except OSError:
                    pass  # gone, or a zombie
        return found

    def close(self):
        for p in self.processes():
            try:
                os.kill(p, 9)
            except ProcessLookupError:
                pass
        self.holder.stdin.close()
        self.holder.wait(timeout=10)
        self.holder.stdout.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


class Flow:
    """A TCP connection on the loopback the test makes, which carries
    `size` bytes one way, then stays open and idle: its cwnd and srtt stay
    what they were at the last ACK, for bloatd and `ss` alike."""

    def __init__(self, size=4 << 20):
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.cli = socket.create_connection(self.srv.getsockname())
        self.conn, _ = self.srv.accept()
        self.local, self.remote = self.cli.getsockname(), self.cli.getpeername()
        self.size, self.got = size, 0
        self.reader = threading.Thread(target=self.receive, daemon=True)
        self.reader.start()
        self.cli.sendall(b"x" * size)

    def receive(self):
        while self.got < self.size:
            try:
                data = self.conn.recv(1 << 16)
            except OSError:
                return
            if not data:
                return
            self.got += len(data)

    def delivered(self):
        return self.got >= self.size

    def close(self):
        for s in (self.cli, self.conn, self.srv):
            s.close()
        self.reader.join(timeout=5)


class Release(TestCase):
    @classmethod
    def setUpClass(cls):
        r = run("make", "--no-print-directory", "-C", REPO, "deb", timeout=1800)
        cls.deb = os.path.join(REPO, r.stdout.strip().splitlines()[-1])
        assert cls.deb.endswith(".deb") and os.path.exists(cls.deb), r.stdout
        cls.lower = run(os.path.join(REPO, "scripts", "debian11-root.sh"), timeout=900).stdout.strip()

    def debian11(self):
        root = Root(self.lower)
        self.addCleanup(root.close)
        return root

    def test_static_and_tarball(self):
        assert_static(self, STATIC)
        # The static build as linked, before release.sh strips it: make
        # release leaves it where make build puts the dynamic one.
        linked = os.path.join(REPO, "target", "release", "bloatd")
        assert_static(self, linked)
        defined = {line.split()[2] for line in run("nm", linked).stdout.splitlines()
                   if len(line.split()) == 3 and line.split()[1] in "TtWw"}
        self.assertEqual(sorted(defined & set(NSS)), [], "NSS lookups linked into the static binary")

        sums = dict(reversed(line.split()) for line in read(os.path.join(DIST, "SHA256SUMS")).splitlines())
        for name, digest in sums.items():
            with open(os.path.join(DIST, name), "rb") as f:
                self.assertEqual(hashlib.sha256(f.read()).hexdigest(), digest, name)
        tarball = next(n for n in sums if n.endswith(".tar.gz"))
        self.assertIn("bloatd", sums)
        with tarfile.open(os.path.join(DIST, tarball)) as t:
            names = {m.name.split("/", 1)[1] for m in t.getmembers() if "/" in m.name}
            top = {m.name.split("/", 1)[0] for m in t.getmembers()}
            self.assertEqual(top, {tarball.removesuffix(".tar.gz")})
            with open(STATIC, "rb") as f:
                self.assertEqual(t.extractfile(f"{tarball.removesuffix('.tar.gz')}/bloatd").read(), f.read())
        for want in ("bloatd", "bloatd.service", "bloatd.toml", "man/bloatd.1", "man/bloatd-start.1",
                     "completions/bloatd.bash", "completions/_bloatd", "completions/bloatd.fish",
                     "prometheus/bloatd.rules.yml", "grafana/bloatd.json", "README.md", "COPYRIGHT"):
            self.assertIn(want, names)

    def test_runs_on_debian_11(self):
        root = self.debian11()
        libc = root.run("/lib/x86_64-linux-gnu/libc.so.6").stdout.splitlines()[0]
        self.assertIn("2.31", libc)
        self.assertFalse(os.path.exists(root.path("/usr/lib/x86_64-linux-gnu/libelf.so.1")))
        shutil.copy(STATIC, root.path("/usr/local/bin/bloatd"))
        self.assertRegex(root.run("bloatd", "--version").stdout, r"^bloatd \d+\.\d+\.\d+")

        # An API group the host does not have: only the root's /etc/group
        # can name it.
        group, gid = "bloatd-d11", 64000 + os.getpid() % 1000
        self.assertNotEqual(run("getent", "group", group, check=False).returncode, 0)
        with open(root.path("/etc/group"), "a") as f:
            f.write(f"{group}:x:{gid}:\n")
        os.makedirs(root.path("/etc/bloatd"))
        with open(os.path.join(REPO, "daemon", "dist", "bloatd.toml")) as f:
            config = f'api_group = "{group}"\n' + f.read()
        with open(root.path("/etc/bloatd/bloatd.toml"), "w") as f:
            f.write(config)

        self.assertEqual([a for a in ALGOS if a in read(CC_AVAILABLE).split()], [],
                         "another bloatd registered them")
        before = (bpf_prog_ids(PROBE_PROGS), sock_ops_attached())
        port = free_port()
        self.addCleanup(root.run, "bloatd", "stop", check=False)
        r = root.run("bloatd", "start", "--listen", f"127.0.0.1:{port}", check=False, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for a in ALGOS:
            self.assertIn(a, read(CC_AVAILABLE).split(), "registered from the Debian 11 root")
        self.assertNotEqual(bpf_prog_ids(PROBE_PROGS), before[0], "probes loaded")
        for name in ("", "/bloatd.sock"):
            self.assertEqual(os.stat(root.path(f"/run/bloatd{name}")).st_gid, gid, f"/run/bloatd{name}")
        status = json.loads(root.run("bloatd", "status", "--json").stdout)
        self.assertIn(status["pid"], root.processes())

        flow = Flow()
        self.addCleanup(flow.close)
        local, remote = flow.local, flow.remote
        wait_for(flow.delivered, timeout=10, what="4 MiB over the loopback")

        def listed():
            ours = json.loads(root.run("bloatd", "sockets", "--json").stdout)
            return find(ours, local, remote)

        def sender():
            found = [s for s in parse_ss(run("ss", "-tinH", "src", f"127.0.0.1:{local[1]}").stdout)
                     if s["remote"] == remote]
            return found[0] if len(found) == 1 else None
        ours = wait_for(listed, timeout=10, what="the test's connection in `bloatd sockets`")
        ss = sender()
        self.assertIsNotNone(ss, "ss sees the connection")
        self.assertEqual((ours["cc"], ours["role"]), (ss["cc"], "sender"))
        for field, tolerance in (("cwnd", 1), ("srtt_us", 1000), ("min_rtt_us", 1000)):
            self.assertTrue(close_enough(ours[field], ss[field], absolute=tolerance),
                            f"{field}: bloatd {ours[field]}, ss {ss[field]}")
        print(f"    {local[1]} -> {remote[1]} {ours['cc']}: cwnd {ours['cwnd']}/ss {ss['cwnd']}, "
              f"srtt {ours['srtt_us']}/ss {ss['srtt_us']} us, "
              f"min_rtt {ours['min_rtt_us']}/ss {ss['min_rtt_us']} us", flush=True)

        once = root.run("bloatd", "top", "--once", "--width", "160").stdout
        row = next((x for x in table_rows(once) if x["REMOTE"] == f"{remote[0]}:{remote[1]}"), None)
        self.assertIsNotNone(row, once)
        print(f"    top --once: {row}", flush=True)

        r = root.run("bloatd", "stop", check=False)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(root.run("bloatd", "status", check=False).returncode, 3)
        wait_for(lambda: not root.processes(), timeout=10, what="no process left in the root")
        self.assertEqual((bpf_prog_ids(PROBE_PROGS), sock_ops_attached()), before,
                         "probes or sock_ops programs left after stop")
        self.assertEqual([a for a in ALGOS if a in read(CC_AVAILABLE).split()], [])
        self.assertFalse(os.path.exists(root.path("/run/bloatd/bloatd.sock")))

    def test_deb_installs_on_debian_11(self):
        root = self.debian11()
        shutil.copy(self.deb, root.path("/tmp/bloatd.deb"))
        r = root.run("dpkg", "-i", "/tmp/bloatd.deb", check=False, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRegex(root.run("bloatd", "--version").stdout, r"^bloatd \d+\.\d+\.\d+")
        entry = root.run("getent", "group", "bloatd").stdout.split(":")
        gid = int(entry[2])
        self.addCleanup(root.run, "bloatd", "stop", check=False)
        r = root.run("bloatd", "start", "--no-cc", "--listen", f"127.0.0.1:{free_port()}",
                     check=False, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(os.stat(root.path("/run/bloatd")).st_gid, gid, "the package's group")
        self.assertEqual(root.run("bloatd", "status", check=False).returncode, 0)
        r = root.run("bloatd", "stop", check=False)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        wait_for(lambda: not root.processes(), timeout=10, what="no process left in the root")
        r = root.run("dpkg", "--purge", "bloatd", check=False, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertFalse(os.path.exists(root.path("/usr/bin/bloatd")))
        self.assertNotEqual(root.run("getent", "group", "bloatd", check=False).returncode, 0)


if __name__ == "__main__":
    main()
