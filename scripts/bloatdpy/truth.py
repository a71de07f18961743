"""The lab's truth: what the bottleneck is, who shares it, what it did.

A classifier of bottlenecks ("what kind of queue, and whose") is tested
against runs whose answer is known. This module knows it, for any lab
topology.sh brought up:

- what the bottleneck is: the link (constant rate or a trace), its buffer,
  its queue (drop-tail, CoDel, FQ-CoDel, with or without ECN marking), from
  the configuration `topo.sh up` wrote ($LAB_RUN/NAME.json);
- who shares it: every flow started through `Traffic` is recorded with
  its owner (`self`: the path NAME-snd -> NAME-rcv; `neighbour`: a pod
  beside the receiver, NAME-nbr, whose sockets bloatd sees; `external`:
  NAME-far -> NAME-ext, traffic bloatd cannot see (UDP) or must be told to
  ignore (TCP)), its protocol, congestion control, namespaces and ports;
- what it did to each owner: packets and bytes the kernel counted going
  into the bottleneck and coming out of it (iptables counters topo.sh
  set: the oracle for every link, tbf included), and, where the link
  emulator holds the queue, its own count of each owner's CoDel drops,
  overflow drops and CE marks, and of the time packets waited (sojourn).

    t = Traffic(name, spawn)          # spawn(side, argv) -> Popen, stdout piped
    t.bulk("self", "cubic", 20)       # a download; .udp(4e6, 20) an external stream
    read(name, t.flows)               # the truth, a dict (json.dumps-able)
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

from .api import REPO
FLOWS = os.path.join(REPO, "scripts", "lab", "flows.py")
LAB_RUN = "/run/bloatd-lab"
OWNERS = ("self", "neighbour", "external")


def rate_bps(rate):
    """tc's rate syntax ("10mbit", "150kbit", "1gbit") in bit/s: the one
    parser (the lab's profiles too)."""
    m = re.fullmatch(r"([0-9.]+)([kmg]?)(bit|bps)?", rate.lower())
    if not m:
        raise ValueError(f"bad rate {rate!r}")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]
# Each owner's TCP server (on its far side) and the external UDP stream's port.
TCP_PORT = {"self": 8000, "neighbour": 8001, "external": 8002}
UDP_PORT = 9000


# A light flow (Traffic.bulk's light_bps): a transfer every LIGHT_GAP_S.
LIGHT_GAP_S = 0.25


def light_bytes(rate_bps):
    """One transfer of a light flow: 5% of a second of the link, at least
    two packets. With LIGHT_GAP_S between transfers and a round trip (plus
    any standing queue) each, it carries well under a quarter of the link
    and keeps its socket busy within every second, with an RTT sample each
    round trip."""
    return max(2 * 1448, int(rate_bps / 8 * 0.05))


def config(name):
    """What `topo.sh up NAME` made (its $LAB_RUN/NAME.json)."""
    with open(os.path.join(LAB_RUN, f"{name}.json")) as f:
        return json.load(f)


def _kv(line):
    return dict(f.split("=", 1) for f in line.split()[2:] if "=" in f)


def emulator_stats(name, role="delay", timeout=5.0):
    """The emulator's statistics since its last reset (SIGUSR1 makes it
    print them to its log): (stats, paths), the fields of its
    `delayline stats:` line, and with an AQM one dict per
    `delayline path:` line (source, destination, protocol) printed just
    before it."""
    log = os.path.join(LAB_RUN, f"{name}.{role}.log")
    with open(os.path.join(LAB_RUN, f"{name}.{role}.pid")) as f:
        pid = int(f.read().strip())

    def lines():
        with open(log) as f:
            return f.read().splitlines()
    before = sum(1 for x in lines() if x.startswith("delayline stats:"))
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + timeout
    while True:
        got = lines()
        idx = [i for i, x in enumerate(got) if x.startswith("delayline stats:")]
        if len(idx) > before:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"the {role} emulator (pid {pid}) printed no statistics in {timeout} s")
        time.sleep(0.02)
    last = idx[-1]
    paths = []
    for x in reversed(got[:last]):
        if not x.startswith("delayline path:"):
            break
        paths.append(_kv(x))
    return _kv(got[last]), paths[::-1]


def emulator_reset(name, role="delay"):
    """Start the emulator's statistics afresh (SIGUSR2)."""
    with open(os.path.join(LAB_RUN, f"{name}.{role}.pid")) as f:
        os.kill(int(f.read().strip()), signal.SIGUSR2)


def _nsx(ns, *cmd):
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True,
                          check=True, timeout=30).stdout


def counters(name):
    """The kernel's count per owner: {owner: {offered_packets, offered_bytes,
    delivered_packets, delivered_bytes}} (IPv4 and IPv6 together), from
    the rules topo.sh set without a target: the router's before the
    bottleneck, the receiver's after it."""
    out = {}
    pat = re.compile(r"^\s*(\d+)\s+(\d+)\s.*/\* lab (offered|delivered) (\w+) \*/")
    for tool in ("iptables", "ip6tables"):
        for ns, args in ((f"{name}-rtr", ["-t", "mangle", "-L", "FORWARD"]),
                         (f"{name}-rcv", ["-L", "INPUT"]), (f"{name}-rcv", ["-L", "FORWARD"])):
            for line in _nsx(ns, tool, "-w", *args, "-v", "-x", "-n").splitlines():
                m = pat.match(line)
                if m:
                    o = out.setdefault(m[4], {"offered_packets": 0, "offered_bytes": 0,
                                              "delivered_packets": 0, "delivered_bytes": 0})
                    o[f"{m[3]}_packets"] += int(m[1])
                    o[f"{m[3]}_bytes"] += int(m[2])
    return out


def tbf_stats(name):
    """tbf's own counters on the router's rcv0: sent, dropped, backlog."""
    out = _nsx(f"{name}-rtr", "tc", "-s", "qdisc", "show", "dev", "rcv0")
    m = re.search(r"Sent (\d+) bytes (\d+) pkt \(dropped (\d+), overlimits (\d+)", out)
    b = re.search(r"backlog (\d+)b (\d+)p", out)
    if not m:
        raise RuntimeError(f"no tbf statistics on {name}-rtr rcv0:\n{out}")
    return {"sent_bytes": int(m[1]), "sent_packets": int(m[2]), "dropped": int(m[3]),
            "backlog_bytes": int(b[1]) if b else 0}


def owner_of(cfg, addr):
    """The owner whose near host has this address (None: not a lab host's)."""
    for owner, ends in cfg["owners"].items():
        h = cfg["hosts"][ends["near"]]
        if addr in (h.get("addr"), h.get("addr6")):
            return owner
    return None


def bottleneck(name, cfg=None):
    """The queue's own account: tbf's counters, or the link emulator's
    statistics with (AQM) its per-owner drops, marks and deliveries."""
    cfg = cfg or config(name)
    if cfg["bottleneck"] == "tbf":
        return {"kind": "tbf", "aqm": "droptail", **tbf_stats(name)}
    stats, paths = emulator_stats(name, "link")
    out = {"kind": "delayline", "aqm": stats.get("aqm", "droptail"), "stats": stats}
    if paths:
        per = {}
        keys = ("packets", "bytes", "ect", "delivered_packets", "delivered_bytes",
                "codel_dropped", "overlimit_dropped", "ce_marked")
        for p in paths:
            owner = owner_of(cfg, p["dst"]) or "unknown"
            o = per.setdefault(owner, dict.fromkeys(keys, 0))
            for k in keys:
                o[k] += int(p[k])
        out["owners"] = per
        out["paths"] = paths
    return out


def read(name, flows=()):
    """The truth of the run so far: configuration, every recorded flow, and
    per owner what the kernel counted into and out of the bottleneck and
    (with an AQM) what the queue dropped or marked."""
    cfg = config(name)
    return {"time": time.time(), "config": cfg, "flows": list(flows),
            "owners": counters(name), "bottleneck": bottleneck(name, cfg)}


class Traffic:
    """Flows with a known owner. `spawn(side, argv)` starts argv in
    NAME-side with its stdout piped (a Lab's own spawn, so that the Lab
    stops them); every flow started is recorded in `flows`."""

    def __init__(self, name, spawn, python=sys.executable):
        self.name = name
        self.spawn = spawn
        self.py = python
        self.cfg = config(name)
        self.flows = []
        self.servers = {}

    def ends(self, owner):
        try:
            return self.cfg["owners"][owner]
        except KeyError:
            raise ValueError(f"lab {self.name} has no {owner} traffic: up it with --cross "
                             "(or a profile naming cross traffic)") from None

    def server(self, owner):
        """The owner's TCP server (flows.py serve) on its far side."""
        if owner not in self.servers:
            far = self.ends(owner)["far"]
            p = self.spawn(far, [self.py, FLOWS, "serve", "--port", str(TCP_PORT[owner])])
            line = p.stdout.readline()
            if '"listening"' not in line:
                raise RuntimeError(f"{owner}'s server did not start: {line!r}")
            self.servers[owner] = p
        return self.servers[owner]

    def bulk(self, owner, cc, seconds=3600, label=None, nbytes=0, light_bps=0):
        """A download by `owner` (nbytes 0: bulk for `seconds`) with
        congestion control `cc`; returns the client's Popen once its
        connection is up. Its JSON lines follow on its stdout. With
        `light_bps` (a link's rate) a light flow instead: transfers of
        `light_bytes` on one connection, LIGHT_GAP_S apart, for
        `seconds`."""
        ends = self.ends(owner)
        self.server(owner)
        addr = self.cfg["hosts"][ends["far"]]["addr"]
        label = label or f"{owner}-{cc}"
        size = ["--bytes", str(nbytes), "--seconds", str(seconds)]
        if light_bps:
            size = ["--bytes", str(light_bytes(light_bps)), "--persistent",
                    "--count", str(int(seconds / LIGHT_GAP_S)), "--gap", str(LIGHT_GAP_S)]
        p = self.spawn(ends["near"], [self.py, FLOWS, "fetch", "--addr", addr,
                                      "--port", str(TCP_PORT[owner]), *size,
                                      "--cc", cc, "--label", label])
        line = p.stdout.readline()
        try:
            ev = json.loads(line)
        except ValueError:
            raise RuntimeError(f"{owner}'s download did not start: {line!r}") from None
        if ev.get("event") != "open":
            raise RuntimeError(f"{owner}'s download: {ev}")
        self.flows.append({"owner": owner, "proto": "tcp", "cc": cc, "label": label,
                           "sender_ns": f"{self.name}-{ends['far']}",
                           "receiver_ns": f"{self.name}-{ends['near']}",
                           "server": f"{addr}:{TCP_PORT[owner]}",
                           "client": f"{self.cfg['hosts'][ends['near']]['addr']}:{ev['local_port']}",
                           "client_port": ev["local_port"], "seconds": seconds,
                           "bytes": nbytes, "started": ev["wall"]})
        return p

    def udp(self, rate_bps, seconds, owner="external", sink=True):
        """An unresponsive UDP stream of 1500-byte packets at `rate_bps`
        from the owner's far side to a counting sink on its near side;
        returns (sink, blaster). bloatd sees no UDP: traffic it cannot
        see. `sink` False: one more stream into the sink an earlier call
        started (sink None)."""
        ends = self.ends(owner)
        near = self.cfg["hosts"][ends["near"]]["addr"]
        pps = max(1, round(rate_bps / (1500 * 8)))
        if sink:
            sink = self.spawn(ends["near"], [self.py, FLOWS, "udp-sink", "--count", "--port",
                                             str(UDP_PORT), "--seconds", str(seconds + 30)])
            if '"listening"' not in sink.stdout.readline():
                raise RuntimeError(f"{owner}'s UDP sink did not start")
        else:
            sink = None
        blast = self.spawn(ends["far"], [self.py, FLOWS, "udp-blast", "--addr", near, "--port",
                                         str(UDP_PORT), "--pps", str(pps), "--seconds", str(seconds)])
        self.flows.append({"owner": owner, "proto": "udp", "rate_bps": pps * 1500 * 8,
                           "pps": pps, "sender_ns": f"{self.name}-{ends['far']}",
                           "receiver_ns": f"{self.name}-{ends['near']}",
                           "server": f"{near}:{UDP_PORT}", "seconds": seconds,
                           "started": time.time()})
        return sink, blast

    def from_profile(self, seconds=3600):
        """The cross traffic the lab's profile names (nbr=CC, udp=RATE,
        xtcp=CC), started; the list of processes."""
        t = self.cfg.get("traffic", {})
        procs = []
        if "nbr" in t:
            procs.append(self.bulk("neighbour", t["nbr"], seconds))
        if "xtcp" in t:
            procs.append(self.bulk("external", t["xtcp"], seconds))
        if "udp" in t:
            procs.extend(self.udp(rate_bps(t["udp"]), seconds))
        return procs

