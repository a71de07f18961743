#!/usr/bin/env python3
"""Traffic for the lab: a download server and its clients.

Runs inside the lab's namespaces (`ip netns exec NAME-snd flows.py serve`,
`ip netns exec NAME-rcv flows.py fetch ...`). One request/response protocol
serves both kinds of flow of Alfredsson et al.:

    client -> server   "SEND <bytes> <cc> <seconds>\\n"
    server -> client   "OK\\n" then <bytes> bytes (or, with bytes 0, data for
                       <seconds>), then FIN;  or "ERR <reason>\\n".

The server sets the requested congestion control on its own socket (the data
sender) before it sends a byte: the lab never relies on a namespace's default
(bbr here), and a non-init namespace cannot default to cubic anyway. The
client sets the same congestion control on its socket (it only sends the
request and ACKs, so it makes no difference to the transfer, but no socket
in the lab runs with a congestion control nobody chose).

A web transfer's response time is what the client measures, from before
connect() to the last byte, as wget would report it; the paper's short flow
is one 320 kB transfer on its own connection.

udp-blast and udp-sink measure a link rather than TCP: the blaster sends
1500-byte IP packets (1472-byte UDP payloads carrying a sequence number) at
a fixed packet rate, the sink records when each arrives (CLOCK_MONOTONIC,
the clock every namespace shares) and prints them as one JSON object, or
with --count only how many came (the lab's external cross traffic: an
unresponsive stream bloatd cannot see).

fetch prints one JSON object per line: {"event": "open", ...} as soon as the
connection is up (the local port identifies the flow to the instruments),
{"event": "done", ...} at the end.
"""
import argparse
import json
import socket
import struct
import sys
import threading
import time

CHUNK_BYTES = 256 * 1024
_payload = memoryview(b"\0" * CHUNK_BYTES)


def set_cc(sock, cc):
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
    except OSError as e:
        raise OSError(
            f"congestion control {cc!r} not available ({e.strerror}): "
            "is it registered? bloatd_* need `bloatd start`; "
            "see /proc/sys/net/ipv4/tcp_available_congestion_control") from e


def serve_persistent(conn, rf, line):
    """KEEP requests on one connection until the client closes it."""
    cc = None
    while len(line) == 3 and line[0] == "KEEP":
        nbytes = int(line[1])
        if cc != line[2]:
            cc = line[2]
            set_cc(conn, cc)
        conn.sendall(f"OK {nbytes}\n".encode())
        left = nbytes
        while left > 0:
            n = min(left, CHUNK_BYTES)
            conn.sendall(_payload[:n])
            left -= n
        line = rf.readline(200).decode().split()


def serve_one(conn):
    with conn:
        try:
            rf = conn.makefile("rb")
            line = rf.readline(200).decode().split()
            if line and line[0] == "KEEP":
                serve_persistent(conn, rf, line)
                return
            if len(line) != 4 or line[0] != "SEND":
                conn.sendall(b"ERR bad request\n")
                return
            nbytes, cc, seconds = int(line[1]), line[2], float(line[3])
            try:
                set_cc(conn, cc)
            except OSError as e:
                conn.sendall(f"ERR {e}\n".encode())
                return
            conn.sendall(b"OK\n")
            if nbytes > 0:
                left = nbytes
                while left > 0:
                    n = min(left, CHUNK_BYTES)
                    conn.sendall(_payload[:n])
                    left -= n
            else:
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    conn.sendall(_payload)
            conn.shutdown(socket.SHUT_WR)
            # Wait for the client's FIN so the close does not reset data
            # still queued in the bottleneck.
            conn.settimeout(max(seconds, 0) + 600)
            while conn.recv(65536):
                pass
        except (OSError, ValueError):
            pass


SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)


def serve(args):
    srv = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    srv.bind(("::", args.port))
    srv.listen(64)
    print(json.dumps({"event": "listening", "port": args.port}), flush=True)
    while True:
        conn, _ = srv.accept()
        if args.sndbuf:
            # Forced (root): SO_SNDBUF alone is capped at net.core.wmem_max.
            conn.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, args.sndbuf)
        threading.Thread(target=serve_one, args=(conn,), daemon=True).start()


def fetch_one(addr, port, nbytes, cc, seconds, label, half_close=False):
    """One transfer on its own connection; returns the 'done' record. With
    half_close the client shuts its sending end after the request (as some
    HTTP/1.0 clients do): the server sends the whole response in CLOSE_WAIT."""
    t0 = time.monotonic()
    wall0 = time.time()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    set_cc(sock, cc)
    sock.settimeout(max(seconds, 0) + 900)
    sock.connect((addr, port))
    local_port = sock.getsockname()[1]
    print(json.dumps({"event": "open", "label": label, "cc": cc,
                      "local_port": local_port, "wall": wall0}), flush=True)
    sock.sendall(f"SEND {nbytes} {cc} {seconds}\n".encode())
    if half_close:
        sock.shutdown(socket.SHUT_WR)
    got, header, t_first = 0, b"", None
    buf = bytearray(CHUNK_BYTES)
    while True:
        n = sock.recv_into(buf)
        if n == 0:
            break
        if t_first is None:
            t_first = time.monotonic()
        if b"\n" not in header:
            cut = bytes(buf[:n]).find(b"\n")
            if cut < 0:
                header += bytes(buf[:n])
                continue
            header += bytes(buf[:cut + 1])
            got += n - cut - 1
        else:
            got += n
    t1 = time.monotonic()
    options = tcp_options(sock)
    sock.close()
    if not header.startswith(b"OK"):
        raise OSError(header.decode(errors="replace").strip() or "server closed without answer")
    return {"event": "done", "label": label, "cc": cc, "local_port": local_port,
            "wall": wall0, "bytes": got, "response_s": t1 - t0,
            "goodput_bps": got * 8 / max(t1 - (t_first or t0), 1e-9), "tcp_options": options}


# struct tcp_info's tcpi_options (byte 5) bits, as ss would print them
# (this iproute2's ss prints none of them).
TCPI_OPTS = {"ts": 1, "sack": 2, "wscale": 4, "ecn": 8, "ecn_seen": 16}


def tcp_options(sock):
    """The options the connection negotiated, and whether it saw ECN
    (ECT or CE packets): the receiver's kernel's own view (TCP_INFO)."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
    return [name for name, bit in TCPI_OPTS.items() if info[5] & bit]


def recv_exactly(sock, n, buf):
    got = 0
    while got < n:
        k = sock.recv_into(buf, min(len(buf), n - got))
        if k == 0:
            raise OSError("server closed mid-response")
        got += k
    return got


def fetch_persistent(args):
    """--count responses on one connection, --gap seconds of application
    pause between them; one 'done' record per response, its time from the
    request to the last byte."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    set_cc(sock, args.cc)
    sock.settimeout(900)
    sock.connect((args.addr, args.port))
    local_port = sock.getsockname()[1]
    print(json.dumps({"event": "open", "label": args.label, "cc": args.cc,
                      "local_port": local_port, "wall": time.time()}), flush=True)
    buf = bytearray(CHUNK_BYTES)
    rf = sock.makefile("rb", buffering=0)
    for i in range(args.count):
        if i and args.gap > 0:
            time.sleep(args.gap)
        t0 = time.monotonic()
        sock.sendall(f"KEEP {args.bytes} {args.cc}\n".encode())
        header = rf.readline(200).decode().split()
        if len(header) != 2 or header[0] != "OK":
            raise OSError(" ".join(header) or "server closed without answer")
        got = recv_exactly(sock, int(header[1]), buf)
        t1 = time.monotonic()
        print(json.dumps({"event": "done", "label": args.label, "cc": args.cc,
                          "local_port": local_port, "index": i, "bytes": got,
                          "response_s": t1 - t0}), flush=True)
    sock.close()
    return 0


def fetch(args):
    if args.persistent:
        try:
            return fetch_persistent(args)
        except OSError as e:
            print(json.dumps({"event": "error", "label": args.label,
                              "cc": args.cc, "error": str(e)}), flush=True)
            return 1
    for i in range(args.count):
        if i and args.gap > 0:
            time.sleep(args.gap)
        try:
            rec = fetch_one(args.addr, args.port, args.bytes, args.cc,
                            args.seconds, args.label, args.half_close)
        except OSError as e:
            print(json.dumps({"event": "error", "label": args.label,
                              "cc": args.cc, "error": str(e)}), flush=True)
            return 1
        print(json.dumps(rec), flush=True)
    return 0


UDP_PAYLOAD = 1472  # + 8 UDP + 20 IPv4 = one 1500-byte trace opportunity


def udp_blast(args):
    """Send for --seconds at --pps packets a second, paced every millisecond;
    prints {"event": "done", "sent": N, "start_ns": .., "end_ns": ..}."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    buf = bytearray(UDP_PAYLOAD)
    start = time.monotonic_ns()
    end = start + int(args.seconds * 1e9)
    sent = 0
    while True:
        now = time.monotonic_ns()
        if now >= end:
            break
        due = (now - start) * args.pps // 1_000_000_000
        while sent < due:
            buf[0:8] = sent.to_bytes(8, "little")
            try:
                sock.sendto(buf, (args.addr, args.port))
            except OSError:
                break  # ENOBUFS: the local queue is full, the link is saturated anyway
            sent += 1
        time.sleep(0.001)
    print(json.dumps({"event": "done", "sent": sent, "start_ns": start,
                      "end_ns": time.monotonic_ns()}), flush=True)
    return 0


SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)   # Linux; Python does not name it


def realtime_minus_monotonic_ns():
    """CLOCK_REALTIME - CLOCK_MONOTONIC, from the tightest of a few reads."""
    best = None
    for _ in range(20):
        a = time.monotonic_ns()
        r = time.time_ns()
        b = time.monotonic_ns()
        if best is None or b - a < best[0]:
            best = (b - a, r - (a + b) // 2)
    return best[1]


def udp_sink(args):
    """Record arrivals for --seconds (or until --idle seconds pass without
    one, after the first); prints {"event": "arrivals", "t_ns": [...],
    "seq": [...]}. Each time is the kernel's receive stamp (SO_TIMESTAMPNS),
    moved to CLOCK_MONOTONIC: the sink's own wake-ups (a busy machine can
    hold a normal-priority reader for tens of ms) are not the link's."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.bind(("0.0.0.0", args.port))
    if args.count:
        return udp_count(sock, args)
    offset = realtime_minus_monotonic_ns()
    print(json.dumps({"event": "listening", "port": args.port}), flush=True)
    t, seq = [], []
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        sock.settimeout(args.idle if t else max(0.01, end - time.monotonic()))
        try:
            data, anc, _, _ = sock.recvmsg(2048, 64)
        except socket.timeout:
            if t:
                break
            continue
        stamp = [d for level, kind, d in anc if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS]
        if not stamp:
            print("flows.py udp-sink: the kernel gave no receive stamp (SO_TIMESTAMPNS)",
                  file=sys.stderr)
            return 1
        sec, nsec = struct.unpack("qq", stamp[0][:16])
        t.append(sec * 1_000_000_000 + nsec - offset)
        seq.append(int.from_bytes(data[:8], "little"))
    drift = realtime_minus_monotonic_ns() - offset
    print(json.dumps({"event": "arrivals", "t_ns": t, "seq": seq, "clock_drift_ns": drift}), flush=True)
    return 0


def udp_count(sock, args):
    """udp-sink --count: only how many packets and bytes came, and when the
    first and last did (CLOCK_MONOTONIC of the reading; for a rate over
    seconds, not for per-packet times); prints {"event": "count", ...}."""
    print(json.dumps({"event": "listening", "port": args.port}), flush=True)
    packets = nbytes = 0
    first = last = None
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        sock.settimeout(args.idle if packets else max(0.01, end - time.monotonic()))
        try:
            n = sock.recv_into(_count_buf)
        except socket.timeout:
            if packets:
                break
            continue
        last = time.monotonic_ns()
        first = first or last
        packets += 1
        nbytes += n
    print(json.dumps({"event": "count", "packets": packets, "bytes": nbytes,
                      "first_ns": first, "last_ns": last}), flush=True)
    return 0


_count_buf = bytearray(2048)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="download server (run in the sender namespace)")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--sndbuf", type=int, default=0,
                   help="each connection's send buffer, bytes (0: autotuned): what is left "
                        "to drain when the server shuts its end")
    f = sub.add_parser("fetch", help="download client (run in the receiver namespace)")
    f.add_argument("--addr", default="10.9.1.1")
    f.add_argument("--port", type=int, default=8000)
    f.add_argument("--bytes", type=int, default=320000,
                   help="bytes to fetch; 0 = bulk for --seconds")
    f.add_argument("--seconds", type=float, default=0)
    f.add_argument("--cc", required=True, help="congestion control of the transfer")
    f.add_argument("--count", type=int, default=1, help="sequential transfers")
    f.add_argument("--gap", type=float, default=1.0, help="seconds between transfers")
    f.add_argument("--label", default="")
    f.add_argument("--persistent", action="store_true",
                   help="all --count transfers on one connection, --gap seconds apart "
                        "(an application pause between responses)")
    f.add_argument("--half-close", action="store_true",
                   help="shut the client's sending end after the request: the server "
                        "sends its response in CLOSE_WAIT")
    b = sub.add_parser("udp-blast", help="UDP at a fixed packet rate (link measurements)")
    b.add_argument("--addr", required=True)
    b.add_argument("--port", type=int, default=9000)
    b.add_argument("--pps", type=int, required=True, help="packets per second (1500 B each)")
    b.add_argument("--seconds", type=float, required=True)
    k = sub.add_parser("udp-sink", help="record UDP arrival times (link measurements)")
    k.add_argument("--port", type=int, default=9000)
    k.add_argument("--seconds", type=float, required=True, help="longest time to listen")
    k.add_argument("--idle", type=float, default=2.0,
                   help="stop after this long without a packet, once one came")
    k.add_argument("--count", action="store_true",
                   help="only count packets and bytes (a long stream's rate)")
    args = ap.parse_args()
    run = {"serve": serve, "fetch": fetch, "udp-blast": udp_blast, "udp-sink": udp_sink}
    try:
        return run[args.cmd](args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
