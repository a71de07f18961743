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
import http.client
import json
import os
import re
import socket
import subprocess
import threading
import time

# bloatd's API socket; BLOATD_SOCK points elsewhere (a daemon started with
# --run-dir DIR serves DIR/bloatd.sock).
BLOATD_SOCK = os.environ.get("BLOATD_SOCK", "/run/bloatd/bloatd.sock")


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path, timeout=2.0):
        super().__init__("bloatd", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


def bloatd_request(method, path, body=None, sock_path=BLOATD_SOCK):
    """One request to bloatd's API (a JSON body for POST); returns the
    decoded JSON answer, or None for an empty one."""
    conn = _UnixHTTP(sock_path)
    try:
        if body is None:
            conn.request(method, path)
        else:
            conn.request(method, path, body=json.dumps(body),
                         headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise OSError(f"bloatd API {method} {path}: HTTP {resp.status}: {data[:200]!r}")
        return json.loads(data) if data.strip() else None
    finally:
        conn.close()


def bloatd_get(path, sock_path=BLOATD_SOCK):
    """GET path from bloatd's API; returns the decoded JSON."""
    return bloatd_request("GET", path, sock_path=sock_path)


def bloatd_available(sock_path=BLOATD_SOCK):
    try:
        bloatd_get("/v1/sockets", sock_path)
        return True
    except (OSError, ValueError):
        return False


def netns_inode(ns_name):
    return os.stat(f"/run/netns/{ns_name}").st_ino


def read_bloatd(ns_inode, port, sock_path=BLOATD_SOCK):
    now = time.time()
    out = []
    for s in bloatd_get("/v1/sockets?all=1", sock_path):
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


def _ss_field(info, name, conv=int, default=0):
    m = re.search(r"(?:^|\s)" + name + r":([0-9.]+)", info)
    return conv(m.group(1)) if m else default


def split_endpoint(ep):
    """`ss`'s endpoints: '10.9.1.1:5201', '[fd09:1::1]:5201',
    '[::ffff:10.9.1.1]:5201' (a dual-stack listener's IPv4 peer) into
    (address, port), IPv4-mapped addresses as plain IPv4 like bloatd."""
    m = re.match(r"^\[?(.*?)\]?:(\d+)$", ep)
    addr, port = m.group(1).split("%")[0], int(m.group(2))
    if addr.startswith("::ffff:") and "." in addr:
        addr = addr[7:]
    return addr, port


def parse_ss(text, port=None, now=None):
    """`ss -tinH` output into one dict per socket (those on local `port`
    if given), with bloatd's field names: the kernel's own view."""
    now = time.time() if now is None else now
    out = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line or line[0].isspace() or i + 1 >= len(lines) or not lines[i + 1][:1].isspace():
            continue
        f = line.split()
        if len(f) < 5:
            continue
        local, remote = split_endpoint(f[3]), split_endpoint(f[4])
        if port is not None and local[1] != port:
            continue
        info = lines[i + 1]
        rtt = re.search(r"\brtt:([0-9.]+)/", info)
        retr = re.search(r"\bretrans:(\d+)/(\d+)", info)
        first = info.split()[0] if info.split() else ""
        unacked = _ss_field(info, "unacked")
        sacked = _ss_field(info, "sacked")
        lost = _ss_field(info, "lost")
        retrans_out = int(retr.group(1)) if retr else 0
        out.append({
            "t": now, "state": f[0], "local": local, "remote": remote,
            "local_port": local[1], "remote_port": remote[1],
            "cc": first if ":" not in first else "",
            "srtt_us": int(round(float(rtt.group(1)) * 1000)) if rtt else 0,
            "min_rtt_us": int(round(_ss_field(info, "minrtt", float) * 1000)),
            "rcv_rtt_us": int(round(_ss_field(info, "rcv_rtt", float) * 1000)),
            "cwnd": _ss_field(info, "cwnd"),
            # tcp_packets_in_flight(), as bloatd reports it
            "inflight": max(unacked - sacked - lost, 0) + retrans_out,
            "mss": _ss_field(info, "mss"),
            "retrans": int(retr.group(2)) if retr else 0,
            "lost": lost, "bytes_acked": _ss_field(info, "bytes_acked"),
            "bytes_received": _ss_field(info, "bytes_received"),
            # the receive window the socket offers may grow to (a window
            # clamp lowers it) and the window the peer offers us
            "rcv_ssthresh": _ss_field(info, "rcv_ssthresh"),
            "snd_wnd": _ss_field(info, "snd_wnd"),
            # bytes the application wrote that the socket has not sent
            # yet (ss prints notsent only when there are some)
            "notsent_bytes": _ss_field(info, "notsent"),
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
