"""Per-flow measurements for the lab: bloatd is the instrument, ss the oracle.

Every sample is a dict with the same keys whichever backend produced it,
named as in bloatd's API (model/src/view.rs):
    t (unix seconds), local_port, remote_port, state, cc, srtt_us,
    min_rtt_us, cwnd, inflight, mss, retrans, lost, bytes_acked
(bloatd adds queue_delay_us, and pipe: Westwood+'s BWE x RTTmin / MSS)

- backend "bloatd": GET /v1/sockets on bloatd's Unix socket. The daemon's
  tracepoints see every network namespace, so one daemon in the root
  namespace reads the lab's sockets; we keep those of the sender namespace
  (matched by namespace inode) on the server's port. These are the numbers
  the lab reports.
- backend "ss": `ss -tin` run in the sender namespace. The kernel's own
  view: used to cross-check bloatd (scripts/tests/test_lab_instrument.py)
  and to develop the lab without a daemon.

The sender side is where the papers measure: the RTT the server's TCP sees,
and its outstanding window (packets in flight), both swollen by the
bottleneck's queue.
"""
import os
import subprocess
import threading
import time

from . import api
from .api import BLOATD_SOCK
from .ss import parse_ss

def netns_inode(ns_name):
    return os.stat(f"/run/netns/{ns_name}").st_ino


# Sampling runs every 50 ms beside the lab's emulators: the first answer
# is checked against the API's schema, the rest are not (a check of a few
# dozen sockets is milliseconds of this process's CPU).
_CHECKED = []


def read_bloatd(ns_inode, port, sock_path=BLOATD_SOCK):
    now = time.time()
    out = []
    check = not _CHECKED
    if check:
        _CHECKED.append(True)
    for s in api.request("GET", "/v1/sockets?all=1", sock_path=sock_path, check=check):
        if s.get("netns") != ns_inode or s.get("local_port") != port:
            continue
        out.append({
            "t": now, "local_port": s["local_port"], "remote_port": s["remote_port"],
            "state": s["state"], "cc": s["cc"], "srtt_us": s["srtt_us"],
            "min_rtt_us": s["min_rtt_us"], "cwnd": s["cwnd"],
            "inflight": s["inflight"], "mss": s["mss"], "retrans": s["retrans"],
            "lost": s.get("lost", 0), "bytes_acked": s["bytes_acked"],
            "queue_delay_us": s.get("queue_delay_us"),
            # Westwood+'s BWE x RTTmin / MSS, the cwnd it sets at congestion
            "pipe": (s.get("cc_state") or {}).get("pipe_segments"),
        })
    return out


def read_ss(ns_name, port):
    text = subprocess.run(
        ["nsenter", f"--net=/run/netns/{ns_name}", "ss", "-tinH", "state", "connected",
         f"( sport = :{port} )"],
        capture_output=True, text=True, check=True).stdout
    return parse_ss(text, port)


class Instrument:
    """Samples the sender namespace's sockets on `port` every `interval_s`.

    samples[remote_port] is the list of samples of the flow(s) that used that
    client port, oldest first; flow() cuts one flow out by time.
    """

    def __init__(self, backend, sender_ns, port, interval_s):
        self.backend = backend
        self.sender_ns = sender_ns
        self.port = port
        self.interval_s = interval_s
        self.samples = {}
        self.errors = 0
        self.last_error = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = None
        if backend == "bloatd":
            ino = netns_inode(sender_ns)
            self._read = lambda: read_bloatd(ino, port)
        elif backend == "ss":
            self._read = lambda: read_ss(sender_ns, port)
        else:
            raise ValueError(f"unknown instrument {backend!r} (bloatd or ss)")

    def start(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)

    def _run(self):
        next_t = time.monotonic()
        while not self._stop.is_set():
            try:
                batch = self._read()
            except (OSError, ValueError, subprocess.CalledProcessError) as e:
                self.errors += 1
                self.last_error = str(e)
                batch = []
            with self._lock:
                for s in batch:
                    self.samples.setdefault(s["remote_port"], []).append(s)
            next_t += self.interval_s
            delay = next_t - time.monotonic()
            if delay < 0:
                next_t = time.monotonic()
                delay = 0
            self._stop.wait(delay)

    def flow(self, remote_port, t_from, t_to):
        """Samples of the flow on client port `remote_port` within [t_from, t_to]."""
        with self._lock:
            return [s for s in self.samples.get(remote_port, [])
                    if t_from <= s["t"] <= t_to]

    def forget_before(self, t):
        """Drop samples older than t (keeps memory flat over a long campaign)."""
        with self._lock:
            for k in list(self.samples):
                kept = [s for s in self.samples[k] if s["t"] >= t]
                if kept:
                    self.samples[k] = kept
                else:
                    del self.samples[k]
