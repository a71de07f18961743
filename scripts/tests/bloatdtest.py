"""Helpers for bloatd's integration tests, the one Python library of them:
the daemon, the lab topology (scripts/lab/topo.sh), traffic, the kernel's
own view (`ss -tin`, sysctls, bpftool) as the oracle, a terminal (tmux)
for the dashboard, and waiting for things to happen.

Tests run as root on the real kernel. Everything a test makes (network
namespaces, daemons, servers, terminals) is removed when the test ends,
pass or fail.
"""

import json
import os
import sys
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts", "lab"))
from instrument import parse_ss  # noqa: E402  one `ss` parser for the lab and the tests
BLOATD = os.environ.get("BLOATD_BIN", os.path.join(REPO, "target", "release", "bloatd"))
TOPO = os.path.join(REPO, "scripts", "lab", "topo.sh")
FLOWS = os.path.join(REPO, "scripts", "lab", "flows.py")

# BLOATD_UNIT_SANDBOX=1 (test_service.py sets it): every daemon a test
# starts runs under the systemd unit's capability bounding set and
# system-call filter (unit_sandbox.py), as the service would.
UNIT_SANDBOX = os.environ.get("BLOATD_UNIT_SANDBOX") == "1"
SANDBOX = [sys.executable, os.path.join(REPO, "scripts", "tests", "unit_sandbox.py")]

SND4, RCV4 = "10.9.1.1", "10.9.2.2"
SND6, RCV6 = "fd09:1::1", "fd09:2::2"

# The congestion control sysctls (of the caller's network namespace).
CC_DEFAULT = "/proc/sys/net/ipv4/tcp_congestion_control"
CC_AVAILABLE = "/proc/sys/net/ipv4/tcp_available_congestion_control"
CC_ALLOWED = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"


def run(*cmd, check=True, timeout=60, **kw):
    return subprocess.run(cmd, check=check, timeout=timeout, capture_output=True, text=True, **kw)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read(path):
    """A file's (a sysctl's) text, stripped."""
    with open(path) as f:
        return f.read().strip()


def write(path, value):
    with open(path, "w") as f:
        f.write(value)


def available_cc():
    return read(CC_AVAILABLE).split()


def stop(p, grace=3.0):
    """End a child process: SIGTERM, up to `grace` seconds to go, then
    SIGKILL (at once with grace 0); reaped either way."""
    if p.poll() is None:
        if grace > 0:
            p.terminate()
            try:
                p.wait(timeout=grace)
                return
            except subprocess.TimeoutExpired:
                pass
        p.kill()
    p.wait()


def wait_for(pred, timeout=10.0, step=0.1, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Daemon:
    """A bloatd daemon with its own run directory and metrics port."""

    def __init__(self, *extra, sandbox=UNIT_SANDBOX):
        self.run_dir = tempfile.mkdtemp(prefix="bloatd-test-")
        self.port = free_port()
        self.extra = list(extra)
        self.sandbox = sandbox

    def cli(self, *args, check=True, timeout=60):
        return run(BLOATD, "--run-dir", self.run_dir, *args, check=check, timeout=timeout)

    def start(self, *args, check=True):
        args = ("start", "--listen", f"127.0.0.1:{self.port}", *self.extra, *args)
        if not self.sandbox:
            return self.cli(*args, check=check)
        return run(*SANDBOX, BLOATD, "--run-dir", self.run_dir, *args, check=check)

    def stop(self):
        return self.cli("stop", check=False)

    def pid(self):
        try:
            with open(os.path.join(self.run_dir, "bloatd.pid")) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def api(self, target):
        """GET an API route on the daemon's Unix socket; the JSON answer."""
        out = run("curl", "-sf", "--unix-socket", os.path.join(self.run_dir, "bloatd.sock"),
                  f"http://bloatd{target}")
        return json.loads(out.stdout)

    def sockets(self, all=False):
        args = ["sockets", "--json"] + (["--all"] if all else [])
        return json.loads(self.cli(*args).stdout)

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
            return r.read().decode()

    def log(self):
        try:
            with open(os.path.join(self.run_dir, "bloatd.log")) as f:
                return f.read()
        except OSError:
            return ""

    def cleanup(self):
        self.stop()
        pid = self.pid()
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.run_dir, ignore_errors=True)


class Lab:
    """The sender-router-receiver topology of scripts/lab/topo.sh."""

    def __init__(self, name, rate="10mbit", buffer_bytes=1500000, delay_ms=0, profile=None):
        """A constant-rate link, or with `profile` one of topo.sh's profiles
        as it is (3.5g, lte, ...)."""
        self.name = name
        args = ["--profile", profile] if profile else [
            "--rate", rate, "--buffer-bytes", str(buffer_bytes), "--delay-ms", str(delay_ms)]
        run(TOPO, "up", name, *args, timeout=120)
        self.procs = []

    def ns(self, side):
        return f"{self.name}-{side}"

    def exec(self, side, *cmd, **kw):
        return run("ip", "netns", "exec", self.ns(side), *cmd, **kw)

    def spawn(self, side, *cmd, cgroup=None):
        """`cmd` in the namespace of `side`, in `cgroup` (a Cgroup) if given:
        it joins the cgroup before `ip netns exec`, whose fresh /sys has no
        cgroup mounts."""
        argv = ["ip", "netns", "exec", self.ns(side), *cmd]
        if cgroup:
            argv = cgroup.wrap(*argv)
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        return p

    def iperf_server(self, side="snd", port=5201):
        p = self.spawn(side, "iperf3", "-s", "-p", str(port))
        addr = SND4 if side == "snd" else RCV4
        # The server is up when a TCP connect succeeds.
        wait_for(lambda: self.exec("rcv" if side == "snd" else "snd", "bash", "-c",
                                   f"exec 3<>/dev/tcp/{addr}/{port}", check=False).returncode == 0,
                 what=f"iperf3 server on {addr}:{port}")
        return p

    def download(self, cc, seconds, server=SND4, port=5201, extra=()):
        """The receiver downloads from the sender's iperf3 server (-R), so
        the data crosses the router's bottleneck toward the receiver."""
        return self.spawn("rcv", "iperf3", "-c", server, "-p", str(port), "-C", cc,
                          "-t", str(seconds), "-R", *extra)

    def ss(self, side):
        return parse_ss(self.exec(side, "ss", "-tinH").stdout)

    def ping(self, side, addr, count=10, interval=0.2):
        """RTTs in ms of `count` pings from `side` to `addr`: the kernel's
        ICMP, through the same bottleneck as the flows."""
        out = self.exec(side, "ping", "-n", "-c", str(count), "-i", str(interval), addr,
                        check=False, timeout=count * interval + 30).stdout
        return [float(x.split("=")[1]) for x in out.split() if x.startswith("time=")]

    def ping_background(self, side, addr, seconds, interval=0.2):
        """Start pinging for `seconds`; `.result()` of the returned object
        waits and gives the RTTs in ms."""
        count = int(seconds / interval)
        p = subprocess.Popen(["ip", "netns", "exec", self.ns(side), "ping", "-n", "-c", str(count),
                              "-i", str(interval), addr], stdout=subprocess.PIPE, text=True)
        self.procs.append(p)

        class Pinger:
            def result(self_inner):
                out, _ = p.communicate(timeout=seconds + 30)
                return [float(x.split("=")[1]) for x in out.split() if x.startswith("time=")]
        return Pinger()

    def add_receiver_address(self, cidr):
        """A second address on the receiver, in another prefix, reached
        through the same router and bottleneck."""
        addr, bits = cidr.split("/")
        net = ".".join(addr.split(".")[:3]) + ".0/" + bits
        run("ip", "-n", self.ns("rcv"), "addr", "add", cidr, "dev", "eth0")
        run("ip", "-n", self.ns("rtr"), "route", "add", net, "via", RCV4)

    def data_socket(self, side, cc):
        """The iperf3 data connection on `side`, as `ss` sees it: the one
        using `cc` (iperf3's control connection keeps the namespace
        default, bbr). None unless exactly one."""
        found = [s for s in self.ss(side) if s.get("cc") == cc and s["state"] == "ESTAB"]
        return found[0] if len(found) == 1 else None

    def bulk_download(self, cc, seconds, **kw):
        """Start an iperf3 server on the sender and a download with `cc`;
        returns the sender's data socket once it exists."""
        self.iperf_server("snd")
        self.download(cc, seconds, **kw)
        return wait_for(lambda: self.data_socket("snd", cc), what=f"the {cc} download's socket")

    def wait_for_queue(self, idle_ms, queue_ms, timeout=30):
        """Until ping from the sender through the bottleneck takes
        `queue_ms` more than `idle_ms` (the median of three): the flows
        hold a standing queue."""
        wait_for(lambda: statistics.median(self.ping("snd", RCV4, count=3)) > idle_ms + queue_ms,
                 timeout=timeout, step=1, what=f"a standing queue of more than {queue_ms} ms")

    def close(self):
        for p in self.procs:
            stop(p, grace=0)
            for f in (p.stdout, p.stderr):
                if f:
                    f.close()
        self.procs = []
        run(TOPO, "down", self.name, check=False, timeout=120)


class Checks:
    """Checks that go on after a failure, one "ok:" or "FAIL:" line each (the
    shell tests' inline Python); `done()` exits 1 if any failed."""

    def __init__(self):
        self.failed = 0

    def __call__(self, ok, msg):
        print(("  ok: " if ok else "  FAIL: ") + msg)
        self.failed += not ok

    def done(self):
        sys.exit(1 if self.failed else 0)


def proc_status(pid):
    """/proc/PID/status of every thread of `pid`: {tid: {field: value}}."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            out[int(tid)] = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    return out


def find(socks, local, remote):
    """The socket with these (addr, port) endpoints in bloatd's JSON."""
    for s in socks:
        if (s["local_addr"], s["local_port"]) == local and (s["remote_addr"], s["remote_port"]) == remote:
            return s
    return None


def close_enough(ours, theirs, rel=0.10, absolute=1):
    return abs(ours - theirs) <= max(absolute, rel * abs(theirs))


def bpf_prog_ids(names):
    """IDs of loaded BPF programs with one of these names (bpftool prints
    the full name from BTF, or the kernel's first 15 characters)."""
    known = set(names) | {n[:15] for n in names}
    progs = json.loads(run("bpftool", "-j", "prog", "show").stdout or "[]")
    return {p["id"] for p in progs if p.get("name") in known}


def bpf_map_dump(name):
    """The entries (formatted key, value) of the BPF maps called `name`,
    for failure diagnostics."""
    out = json.loads(run("bpftool", "-j", "map", "dump", "name", name, check=False).stdout or "[]")
    if out and isinstance(out[0], list):
        out = [e for m in out for e in m]
    return [(e["formatted"]["key"], e["formatted"].get("value", e["formatted"].get("values")))
            for e in out if "formatted" in e]


PROBE_PROGS = {"tcp_probe", "inet_sock_set_state", "tcp_retransmit_skb", "tcp_cong_state_set"}


def cgroup2_root():
    """Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or
    /sys/fs/cgroup/unified on a hybrid host like this one)."""
    with open("/proc/self/mounts") as f:
        for line in f:
            dev, path, fstype = line.split()[:3]
            if fstype == "cgroup2":
                return path
    raise unittest.SkipTest("no cgroup v2 hierarchy mounted")


class Cgroup:
    """A cgroup v2 of the test's own, below the hierarchy's root: a
    "service" whose processes it runs (`wrap`). bloatd names it by its path
    (`service`)."""

    def __init__(self, name, parent=None):
        self.root = cgroup2_root()
        self.path = tempfile.mkdtemp(prefix=f"bloatd-test-{name}-", dir=parent or self.root)
        self.service = self.path[len(self.root):]

    def wrap(self, *cmd):
        """`cmd` run inside the cgroup: the shell joins it, then becomes
        `cmd` (same pid), so every socket it opens is the cgroup's."""
        return ["bash", "-c", f'echo $$ > {self.path}/cgroup.procs && exec "$@"', "bash", *cmd]

    def remove(self):
        """Move what is left in it (and below) to the root, then remove it
        bottom up."""
        for dirpath, _, _ in sorted(os.walk(self.path), key=lambda w: -len(w[0])):
            try:
                with open(os.path.join(dirpath, "cgroup.procs")) as f:
                    pids = f.read().split()
            except OSError:
                pids = []
            for pid in pids:
                try:
                    write(os.path.join(self.root, "cgroup.procs"), pid)
                except OSError:
                    pass
            for _ in range(50):
                try:
                    os.rmdir(dirpath)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)  # a process still leaving


def sock_ops_attached():
    """IDs of the sock_ops programs attached anywhere in the cgroup v2
    tree, as the kernel lists them (`bpftool cgroup tree`)."""
    out = json.loads(run("bpftool", "-j", "cgroup", "tree", check=False).stdout or "[]")
    ids = set()
    for cg in out:
        for p in cg.get("programs", []):
            if p.get("attach_type") in ("cgroup_sock_ops", "sock_ops"):
                ids.add(p["id"])
    return ids


class Prometheus:
    """A real Prometheus server (Debian's) scraping one bloatd every second,
    optionally with rule files, for the test's life; PromQL through its
    HTTP API."""

    def __init__(self, test, target_port, rule_files=()):
        tmp = tempfile.mkdtemp(prefix="bloatd-prom-")
        test.addCleanup(shutil.rmtree, tmp, True)
        cfg = os.path.join(tmp, "prometheus.yml")
        rules = "".join(f"  - {os.path.abspath(r)}\n" for r in rule_files)
        with open(cfg, "w") as f:
            f.write(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                + (f"rule_files:\n{rules}" if rules else "")
                + "scrape_configs:\n  - job_name: bloatd\n    static_configs:\n"
                f"      - targets: ['127.0.0.1:{target_port}']\n"
            )
        self.port = free_port()
        test.process(["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={tmp}/data",
                      f"--web.listen-address=127.0.0.1:{self.port}"],
                     grace=10, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: self.query("up"), timeout=30, what="prometheus up and scraping")

    def api(self, path):
        """GET an HTTP API path; its `data`, or None (not up yet, error)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                body = json.load(r)
        except OSError:
            return None
        return body["data"] if body.get("status") == "success" else None

    def query(self, promql):
        """An instant query's result (a list of series), or None."""
        data = self.api("/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        return data["result"] if data else None


class Tmux:
    """A private tmux server (its own socket, `-L NAME`) for driving the
    dashboard in a real terminal: sessions, keys, what the screen shows."""

    def __init__(self, name):
        self.base = ["tmux", "-L", name, "-f", "/dev/null"]

    def __call__(self, *args, check=True):
        return run(*self.base, *args, check=check)

    def new(self, session, command, width=160, height=45):
        self("new-session", "-d", "-s", session, "-x", str(width), "-y", str(height), command)

    def keys(self, session, *keys):
        self("send-keys", "-t", session, *keys)

    def screen(self, session):
        return self("capture-pane", "-p", "-t", session).stdout

    def alive(self, session):
        return self("has-session", "-t", session, check=False).returncode == 0

    def kill(self):
        self("kill-server", check=False)


class TestCase(unittest.TestCase):
    """Registers cleanups so daemons and labs go away on failure too."""

    def daemon(self, *extra, **kw):
        d = Daemon(*extra, **kw)
        self.addCleanup(d.cleanup)
        return d

    def lab(self, name, **kw):
        run(TOPO, "down", name, check=False)
        lab = Lab(name, **kw)
        self.addCleanup(lab.close)
        return lab

    def cgroup(self, name, parent=None):
        """A cgroup v2 of the test's own, removed when the test ends."""
        cg = Cgroup(name, parent)
        self.addCleanup(cg.remove)
        return cg

    def tmux(self, name):
        """A tmux server of its own, killed when the test ends."""
        t = Tmux(name)
        t.kill()
        self.addCleanup(t.kill)
        return t

    def process(self, cmd, grace=3.0, **kw):
        """A child process, stopped (see `stop`) when the test ends."""
        p = subprocess.Popen(cmd, **kw)
        self.addCleanup(stop, p, grace)
        return p


def main():
    if os.geteuid() != 0:
        raise SystemExit("integration tests need root (BPF, network namespaces)")
    if not os.path.exists(BLOATD):
        raise SystemExit(f"{BLOATD} not found: run `make build` first")
    unittest.main(verbosity=2)
