"""Helpers for bloatd's integration tests, the one Python library of them:
the daemon, the lab topology (scripts/lab/topo.sh), traffic, the kernel's
own view (`ss -tin`, sysctls, bpftool) as the oracle, a terminal (tmux)
for the dashboard, and waiting for things to happen.

Tests run as root on the real kernel. Everything a test makes (network
namespaces, daemons, servers, terminals) is removed when the test ends,
pass, fail or Ctrl-C (SIGINT or SIGTERM: TestCase.run, main).
"""

import atexit
import glob
import json
import os
import re
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

from . import api, truth
from .api import REPO, api_schema
from .ss import parse_ss
BLOATD = os.environ.get("BLOATD_BIN", os.path.join(REPO, "target", "release", "bloatd"))
TOPO = os.path.join(REPO, "scripts", "lab", "topo.sh")
FLOWS = os.path.join(REPO, "scripts", "lab", "flows.py")
LAB_PY = os.path.join(REPO, "scripts", "lab", "lab.py")
LAB_RUN = "/run/bloatd-lab"  # topo.sh's pid files and logs of the emulators

# BLOATD_UNIT_SANDBOX=1 (test_service.py sets it): every daemon a test
# starts runs under the systemd unit's capability bounding set and
# system-call filter (unit_sandbox.py), as the service would.
UNIT_SANDBOX = os.environ.get("BLOATD_UNIT_SANDBOX") == "1"
SANDBOX = [sys.executable, os.path.join(REPO, "scripts", "tests", "unit_sandbox.py")]


def private_state_dir():
    """Every bloatd this process starts keeps its flight recorder's journal
    in a directory of its own (Daemon gives each its own), never in the
    host's /var/lib/bloatd; removed when the process ends. For the tests
    (main) and the kernel matrix, not for the lab, whose daemon is the
    user's."""
    if "BLOATD_STATE_DIR" not in os.environ:
        os.environ["BLOATD_STATE_DIR"] = tempfile.mkdtemp(prefix="bloatd-test-state-")
        atexit.register(shutil.rmtree, os.environ["BLOATD_STATE_DIR"], True)

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
    SIGKILL (at once with grace 0); reaped either way, and the pipes to it
    closed only then (it may still write while it ends)."""
    if p.poll() is None:
        if grace > 0:
            p.terminate()
            try:
                p.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        if p.poll() is None:
            p.kill()
    p.wait()
    for f in (p.stdin, p.stdout, p.stderr):
        if f:
            f.close()


def interruptible(cmd, **kw):
    """Start `cmd` for a test that interrupts it with SIGINT, as Ctrl-C
    would: in a session of its own, as a shell's job control would put it
    (the terminal's Ctrl-C meant for the test does not reach it too), and
    with SIGINT's default action. A suite started from a background shell
    (`make test &`, CI) inherits SIGINT ignored, an ignored signal stays
    ignored across exec, and bash can then neither trap nor receive it."""
    return subprocess.Popen(cmd, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **kw)


def stolen_s():
    """CPU seconds the hypervisor has taken from this machine (all CPUs,
    /proc/stat's steal): a stretch of it makes every timer late, which
    the timing checks of the lab's emulators print when they fail."""
    with open("/proc/stat") as f:
        return int(f.readline().split()[8]) / os.sysconf("SC_CLK_TCK")


def wait_for(pred, timeout=10.0, step=0.1, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Daemon:
    """A bloatd daemon with its own run directory and metrics port: the
    tests', the benchmarks' (scripts/bench/scale.py's start_daemon) and
    the kernel matrix's."""

    def __init__(self, *extra, sandbox=UNIT_SANDBOX, state_dir=None, binary=BLOATD, port=None):
        self.binary = binary
        self.run_dir = tempfile.mkdtemp(prefix="bloatd-test-")
        # The flight recorder's journal: the test's own, not the host's
        # /var/lib/bloatd (removed with the run directory).
        self.state_dir = state_dir or os.path.join(self.run_dir, "state")
        self.port = port or free_port()
        self.extra = list(extra)
        self.sandbox = sandbox

    def dirs(self):
        return ["--run-dir", self.run_dir, "--state-dir", self.state_dir]

    def cli(self, *args, check=True, timeout=60):
        return run(self.binary, *self.dirs(), *args, check=check, timeout=timeout)

    def start(self, *args, check=True):
        args = ("start", "--listen", f"127.0.0.1:{self.port}", *self.extra, *args)
        if not self.sandbox:
            return self.cli(*args, check=check)
        return run(*SANDBOX, self.binary, *self.dirs(), *args, check=check)

    def stop(self):
        return self.cli("stop", check=False)

    def pid(self):
        try:
            with open(os.path.join(self.run_dir, "bloatd.pid")) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def api(self, target, body=None, timeout=60, check=True):
        """GET an API route on the daemon's Unix socket (POST `body`); the
        JSON answer, a GET's checked against the route's schema
        (api.ApiSchema) unless `check` is False (a benchmark timing it)."""
        return api.request("GET" if body is None else "POST", target, body,
                           sock_path=os.path.join(self.run_dir, "bloatd.sock"), timeout=timeout, check=check)

    def cli_json(self, route, *args):
        """A command's `--json` answer (`args` include it), checked against
        the schema of the API route it prints."""
        answer = json.loads(self.cli(*args).stdout)
        api_schema().check(route, answer)
        return answer

    def sockets(self, all=False):
        return self.cli_json("/v1/sockets", "sockets", "--json", *(["--all"] if all else []))

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


def topo_profile(name):
    """One of topo.sh's profiles: {rate, delay_ms, buffer_bytes[, trace]}."""
    return dict(f.split("=", 1) for f in run(TOPO, "profile", name).stdout.split())


def netns_list():
    return [line.split()[0] for line in run("ip", "netns", "list").stdout.splitlines() if line.strip()]


def lab_leftovers(name):
    """Everything the lab topology `name` can leave behind, one line per
    item, [] when nothing is: its namespaces, its emulators (their command
    line names their pid file) and run files, and what the lab must never
    touch in the root namespace: links named like the router's, their
    qdiscs, NFQUEUE rules."""
    left = [f"namespace {ns}" for ns in netns_list() if ns.startswith(f"{name}-")]
    procs = run("pgrep", "-af", rf"bloatd-lab/{name}\.(delay|link)", check=False).stdout
    left += [f"process {line}" for line in procs.splitlines()]
    left += [f"run file {f}" for f in sorted(glob.glob(f"{LAB_RUN}/{name}.*"))]
    for line in run("ip", "-br", "link").stdout.splitlines():
        if re.match(r"(snd0|rcv0|far0|nbr0|ext0)(@|\s)", line):
            left.append(f"root link {line}")
    left += [f"root qdisc {line}" for line in run("tc", "qdisc", "show").stdout.splitlines()
             if re.search(r"dev (snd0|rcv0|far0|nbr0|ext0) ", line)]
    for tool in ("iptables", "ip6tables"):
        for table in ("raw", "mangle"):
            rules = run(tool, "-t", table, "-S", check=False).stdout
            left += [f"root rule {line}" for line in rules.splitlines() if "nfqueue" in line.lower()]
    return left


class Lab:
    """The sender-router-receiver topology of scripts/lab/topo.sh."""

    def __init__(self, name, rate="10mbit", buffer_bytes=1500000, delay_ms=0, profile=None,
                 aqm=None, ecn=False, cross=False, trace=None, topo_args=None):
        """A constant-rate link, with `trace` a trace-driven one (a
        Mahimahi file; its .up beside it, if any, drives the uplink), or
        with `profile` one of topo.sh's profiles (3.5g, lte, ..., with
        options: "3.5g:aqm=codel:ecn=1:udp=4mbit"); `aqm` (codel,
        fq_codel), `ecn` and `cross` (the cross-traffic namespaces) on top
        of any; or `topo_args`, topo.sh up's own arguments (the lab's
        replayed episodes)."""
        self.name = name
        args = ["--profile", profile] if profile else [
            *(["--trace", trace] if trace else ["--rate", rate]),
            "--buffer-bytes", str(buffer_bytes), "--delay-ms", str(delay_ms)]
        args += (["--aqm", aqm] if aqm else []) + (["--ecn"] if ecn else []) + \
            (["--cross"] if cross else [])
        args = topo_args or args
        self.procs = []
        self._traffic = None
        run(TOPO, "up", name, *args, timeout=120)

    def ns(self, side):
        return f"{self.name}-{side}"

    def exec(self, side, *cmd, **kw):
        return run("ip", "netns", "exec", self.ns(side), *cmd, **kw)

    def spawn(self, side, *cmd, cgroup=None, **kw):
        """A process in a namespace, ended by `close`; its output dropped,
        its errors kept, unless `kw` (Popen's) says otherwise. In `cgroup`
        (a Cgroup) if given: it joins the cgroup before `ip netns exec`,
        whose fresh /sys has no cgroup mounts."""
        kw = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE, "text": True, **kw}
        argv = ["ip", "netns", "exec", self.ns(side), *cmd]
        if cgroup:
            argv = cgroup.wrap(*argv)
        p = subprocess.Popen(argv, **kw)
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

    def delay_line_pid(self, role="delay"):
        """The pid of this topology's delay line, or of its link emulator
        (trace or AQM link) with role "link" (topo.sh's pid file)."""
        return int(read(f"{LAB_RUN}/{self.name}.{role}.pid"))

    def emulator_reset(self, role="delay"):
        """Start the emulator's statistics afresh (SIGUSR2)."""
        truth.emulator_reset(self.name, role)

    def emulator_stats(self, role="delay"):
        """The emulator's statistics since its last reset: the fields of the
        `delayline stats:` line it prints on SIGUSR1 to its log."""
        return truth.emulator_stats(self.name, role)[0]

    @property
    def traffic(self):
        """Flows with a known owner (self, neighbour, external) through this
        lab, recorded for `truth` (scripts/bloatdpy/truth.py's Traffic); they
        end with the lab."""
        if self._traffic is None:
            self._traffic = truth.Traffic(
                self.name, lambda side, argv: self.spawn(side, *argv, stdout=subprocess.PIPE))
        return self._traffic

    def truth(self):
        """What this lab's bottleneck is, who shares it and what it counted
        for each (scripts/bloatdpy/truth.py's read), the flows started through
        `traffic` included."""
        return truth.read(self.name, self.traffic.flows)

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
        self.procs = []
        run(TOPO, "down", self.name, check=False, timeout=120)


class Loadgen:
    """scripts/bench/loadgen.c built into a directory of the test's: many
    connections from one epoll loop (Python cannot hold tens of thousands)."""

    def __init__(self, tmp):
        self.bin = os.path.join(tmp, "loadgen")
        run("gcc", "-O2", "-o", self.bin, os.path.join(REPO, "scripts", "bench", "loadgen.c"))

    def pair(self, spawn_srv, spawn_cli, addr, port, conns, busy=None):
        """`conns` connections from a client to a server, each started with
        its `spawn` (a Lab's, in a namespace, or a test's own process),
        `busy` of them (all by default) sending 200 B ten times a second."""
        pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
        srv = spawn_srv(self.bin, "serve", addr, str(port), "4", str(conns), **pipes)
        line = srv.stdout.readline().strip()
        assert line == "listening", f"loadgen serve: {line!r} {srv.stderr.read() if srv.stderr else ''}"
        cli = spawn_cli(self.bin, "connect", addr, str(port), "4", str(conns),
                        str(conns if busy is None else busy), **pipes)
        for p in (cli, srv):
            line = p.stdout.readline().strip()
            assert line.startswith("ready"), line
        return srv, cli


RULES = os.path.join(REPO, "daemon", "dist", "prometheus", "bloatd.rules.yml")


def rules_with_short_for(path, out_dir):
    """A copy of the rule file `path` in `out_dir` where every `for:` of N
    minutes waits N seconds; nothing else changes (expressions, windows,
    labels, annotations). Returns the copy's path."""
    with open(path) as f:
        text = f.read()
    short, n = re.subn(r"^(\s*for:\s*)(\d+)m\s*$", r"\g<1>\2s", text, flags=re.M)
    if n != text.count("for:"):
        raise AssertionError(f"{path}: a `for:` not in whole minutes")
    out = os.path.join(out_dir, os.path.basename(path))
    with open(out, "w") as f:
        f.write(short)
    return out


class Prometheus:
    """A real Prometheus server (Debian's package) scraping bloatd daemons
    every second and evaluating `rules` (rule files) every second; its HTTP
    API is the oracle of what an operator's server sees."""

    def __init__(self, target_ports, rules=()):
        self.tmp = tempfile.mkdtemp(prefix="bloatd-prom-")
        cfg = os.path.join(self.tmp, "prometheus.yml")
        targets = ", ".join(f"'127.0.0.1:{p}'" for p in target_ports)
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n")
            if rules:
                f.write("rule_files:\n" + "".join(f"  - {os.path.abspath(r)}\n" for r in rules))
            f.write("scrape_configs:\n  - job_name: bloatd\n    static_configs:\n"
                    f"      - targets: [{targets}]\n")
        self.port = free_port()
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={self.tmp}/data",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: self.query("up") is not None, timeout=30, what="prometheus up")

    def api(self, path, params=None):
        """GET an HTTP API path (with `params`); its `data`, or None (not
        up yet, error)."""
        url = f"http://127.0.0.1:{self.port}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                body = json.load(r)
        except OSError:
            return None
        return body.get("data") if body.get("status") == "success" else None

    def query(self, promql):
        """The instant vector of `promql` now: [{"metric": {...}, "value": [t, "v"]}], or None."""
        data = self.api("/api/v1/query", {"query": promql})
        return None if data is None else data["result"]

    def alerts(self):
        """Active alerts (pending and firing): [{"labels": {...}, "state": ...}]."""
        data = self.api("/api/v1/alerts")
        return [] if data is None else data["alerts"]

    def close(self):
        stop(self.proc, grace=10)
        shutil.rmtree(self.tmp, ignore_errors=True)


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
    for failure diagnostics; none when there is no such map."""
    out = json.loads(run("bpftool", "-j", "map", "dump", "name", name, check=False).stdout.strip() or "[]")
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


# The fleet kit (issue 21): the chart rendered by its strict checker, and its
# DaemonSet's pod run by podman the way a kubelet runs it.
FLEET_CHECK = os.path.join(REPO, "daemon", "dist", "kubernetes", "check")
POD_NAME = "bloatd-fleet-pod"


def render(values=None):
    """The chart's objects with `values` over its defaults and a free
    metrics port, strictly decoded: {kind: obj}."""
    # The journal in the pod's own directory (an emptyDir on disk), not in
    # the host's /var/lib/bloatd.
    values = {"metrics": {"port": free_port()}, "journal": {"hostPath": ""}, **(values or {})}
    out = run("go", "run", "./cmd/render", input=json.dumps(values), cwd=FLEET_CHECK, timeout=600).stdout
    return {o["kind"]: o for o in json.loads(out)}


def memory_bytes(quantity):
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi)?", quantity)
    return int(m[1]) * {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}[m[2]]


class Pod:
    """The DaemonSet's pod, run by podman as the kubelet would run it: the
    pod's namespaces, capabilities, no_new_privs, read-only root, seccomp
    profile, memory limit, volumes (the ConfigMap's files, in-memory
    emptyDirs, host paths), environment and arguments ($(VAR) expanded),
    and its exec probes run as the kubelet runs them.

    Under runc: Debian 12's podman defaults to crun, which refuses hybrid
    cgroup hosts like this one ("cgroups in hybrid mode not supported").
    RLIMIT_NOFILE and RLIMIT_NPROC are set: podman's rootful default raises
    them, which needs CAP_SYS_RESOURCE, and this sandbox has none (4096:
    bloatd holds about 600 descriptors at most, README "Limits on clients").
    """

    def __init__(self, objs, host_ip="127.0.0.1", seccomp=None, drop_caps=()):
        self.dir = tempfile.mkdtemp(prefix="bloatd-pod-")
        pod = objs["DaemonSet"]["spec"]["template"]["spec"]
        self.container = c = pod["containers"][0]
        sc = c["securityContext"]
        args = ["podman", "run", "-d", "--name", POD_NAME, "--runtime", "runc",
                "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]
        if pod.get("hostNetwork"):
            args.append("--network=host")
        if pod.get("hostPID"):
            args.append("--pid=host")
        if "ALL" in sc["capabilities"]["drop"]:
            args.append("--cap-drop=all")
        self.caps = [x for x in sc["capabilities"]["add"] if x not in drop_caps]
        args += [f"--cap-add=CAP_{x}" for x in self.caps]
        if sc.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        if sc.get("readOnlyRootFilesystem"):
            args.append("--read-only")
        profile = seccomp or pod["securityContext"]["seccompProfile"]["type"]
        if profile == "Unconfined":
            args += ["--security-opt", "seccomp=unconfined"]
        args += ["--user", f"{sc['runAsUser']}:{sc['runAsGroup']}"]
        if "limits" in c["resources"]:
            args += ["--memory", str(memory_bytes(c["resources"]["limits"]["memory"]))]
        volumes = {v["name"]: v for v in pod["volumes"]}
        for m in c["volumeMounts"]:
            args += self.mount(volumes[m["name"]], m, objs)
        env = {}
        for e in c.get("env", []):
            ref = e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
            env[e["name"]] = host_ip if ref == "status.hostIP" else e.get("value", "")
            args += ["--env", f"{e['name']}={env[e['name']]}"]
        # the kubelet expands $(VAR) in args from the container's env
        argv = [re.sub(r"\$\((\w+)\)", lambda x: env.get(x[1], x[0]), a) for a in c["args"]]
        args += [c["image"], *argv]
        self.listen = argv[argv.index("--listen") + 1]
        run("podman", "rm", "-f", POD_NAME, check=False)
        run(*args)

    def mount(self, vol, m, objs):
        ro = ":ro" if m.get("readOnly") else ""
        if "hostPath" in vol:
            if vol["hostPath"].get("type") == "DirectoryOrCreate":
                os.makedirs(vol["hostPath"]["path"], mode=0o755, exist_ok=True)
            return ["-v", f"{vol['hostPath']['path']}:{m['mountPath']}{ro}"]
        if "emptyDir" in vol and vol["emptyDir"].get("medium") == "Memory":
            return ["--tmpfs", f"{m['mountPath']}:rw,mode=755,size={memory_bytes(vol['emptyDir']['sizeLimit'])}"]
        if "emptyDir" in vol:
            # On the node's disk, the pod's own: a directory of the test's.
            d = os.path.join(self.dir, vol["name"])
            os.makedirs(d, mode=0o755, exist_ok=True)
            return ["-v", f"{d}:{m['mountPath']}"]
        if "configMap" in vol:
            d = os.path.join(self.dir, vol["name"])
            os.makedirs(d, exist_ok=True)
            for k, v in objs["ConfigMap"]["data"].items():
                with open(os.path.join(d, k), "w") as f:
                    f.write(v)
            src = os.path.join(d, m["subPath"]) if m.get("subPath") else d
            return ["-v", f"{src}:{m['mountPath']}{ro}"]
        raise AssertionError(f"a volume the test does not run: {vol}")

    def probe(self, name):
        """Run the container's `name` probe (an exec probe) once: passed?"""
        cmd = self.container[name]["exec"]["command"]
        return run("podman", "exec", POD_NAME, *cmd, check=False, timeout=30).returncode == 0

    def exec(self, *cmd, **kw):
        return run("podman", "exec", POD_NAME, *cmd, **kw)

    def state(self):
        out = run("podman", "inspect", POD_NAME, "--format", "{{json .State}}", check=False).stdout
        return json.loads(out) if out.strip() else {}

    def logs(self):
        r = run("podman", "logs", POD_NAME, check=False)
        return r.stdout + r.stderr

    def started(self, timeout):
        """Until the startup probe passes (True) or the container exits (False)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.probe("startupProbe"):
                return True
            if self.state().get("Status") == "exited":
                return False
            time.sleep(self.container["startupProbe"].get("periodSeconds", 1))
        raise AssertionError(f"not started in {timeout}s:\n{self.logs()}")

    def pid(self):
        """The container's main process, as the host sees it."""
        return self.state()["Pid"]

    def memory(self):
        """(now, peak) bytes charged to the container's memory cgroup: its
        processes (probes and `kubectl exec` clients included) and the
        kernel memory they allocate, BPF maps included."""
        for line in read(f"/proc/{self.pid()}/cgroup").splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers == "memory":
                d = f"/sys/fs/cgroup/memory{path}"
                return int(read(f"{d}/memory.usage_in_bytes")), int(read(f"{d}/memory.max_usage_in_bytes"))
            if controllers == "" and os.path.exists(f"/sys/fs/cgroup{path}/memory.peak"):
                d = f"/sys/fs/cgroup{path}"
                return int(read(f"{d}/memory.current")), int(read(f"{d}/memory.peak"))
        raise AssertionError("the pod has no memory cgroup")

    def terminate(self, grace):
        """What the kubelet does to end a pod: SIGTERM, SIGKILL after the
        grace period. The exit code."""
        run("podman", "stop", "-t", str(grace), POD_NAME, timeout=grace + 30)
        return self.state()["ExitCode"]

    def remove(self):
        run("podman", "rm", "-f", POD_NAME, check=False)
        run("rm", "-rf", self.dir, check=False)


class TestCase(unittest.TestCase):
    """Registers cleanups so daemons and labs go away on failure and on
    Ctrl-C too."""

    def run(self, result=None):
        # unittest skips a test's cleanups when KeyboardInterrupt (Ctrl-C,
        # or SIGTERM: see main) ends it: run them, then go on ending.
        try:
            return super().run(result)
        except KeyboardInterrupt:
            print(f"\n{self.id()}: interrupted, removing what it made", file=sys.stderr, flush=True)
            self.doCleanups()
            raise

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

    def prometheus(self, *target_ports, rules=()):
        """A Prometheus server scraping these bloatd ports, stopped when
        the test ends."""
        p = Prometheus(target_ports, rules)
        self.addCleanup(p.close)
        return p

    def process(self, cmd, grace=3.0, sigint=False, **kw):
        """A child process, stopped (see `stop`) when the test ends; with
        `sigint`, one the test interrupts (see `interruptible`)."""
        p = interruptible(cmd, **kw) if sigint else subprocess.Popen(cmd, **kw)
        self.addCleanup(stop, p, grace)
        return p


def main():
    if os.geteuid() != 0:
        raise SystemExit("integration tests need root (BPF, network namespaces)")
    private_state_dir()
    if not os.path.exists(BLOATD):
        raise SystemExit(f"{BLOATD} not found: run `make build` first")
    received = [signal.SIGINT]

    def on_term(signum, frame):
        received[0] = signum
        raise KeyboardInterrupt
    # SIGTERM (a CI timeout, `kill`) ends a test as Ctrl-C does: its
    # cleanups run (TestCase.run).
    signal.signal(signal.SIGTERM, on_term)
    try:
        unittest.main(verbosity=2)
    except KeyboardInterrupt:
        # End by the signal, so that a shell running the suite (run.sh)
        # sees it and stops too.
        signal.signal(received[0], signal.SIG_DFL)
        os.kill(os.getpid(), received[0])
