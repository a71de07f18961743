"""`ss -tin` as the kernel's own view: its output into one dict per socket
with bloatd's field names (model/src/view.rs), for the lab's ss backend
(scripts/bloatdpy/instrument.py) and the tests' oracle (harness.Lab.ss)."""
import re
import time


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
