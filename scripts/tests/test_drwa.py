#!/usr/bin/env python3
"""Issue 10: the receiver's Dynamic Receive Window Adjustment (DRWA, Jiang
et al., IMC 2012) on a bloated link, with `ping` through the bottleneck and
`ss -ti` as the oracles.

The lab's 3.5g profile (16 Mbit/s, 80 ms base RTT, 1 MB buffer) carries a
CUBIC download. The same flow is measured with DRWA off, switched on live,
and off again:
- on: the receiver's queueing delay falls by at least 25% against off, by
  ping (ICMP through the same queue, no TCP, no bloatd) and by bloatd's own
  receiver view, while the goodput stays within 10%;
- on: the receiver's offered window (ss rcv_ssthresh) is clamped to what
  bloatd says DRWA set;
- off again: the window is given back (rcv_ssthresh grows past the clamp)
  and the queue comes back.
"""

import json
import statistics
import subprocess
import time

from bloatdpy.harness import BLOATD, FLOWS, RCV4, SND4, TestCase, main, wait_for

# An application that sets its own TCP_WINDOW_CLAMP (32 kB) while DRWA
# clamps its window, its buffer left to autotuning (no SO_RCVBUF): once it
# has 150 kB, right after a read in which autotuning grew the buffer
# (tcp_rcv_space_adjust runs in recvmsg), so the buffer grew in the DRWA
# round in which the application set its clamp. Autotuning may move the
# clamp again as it grows the buffer, as the kernel does without DRWA: the
# application then sets its clamp again. A clamp above 32 kB read with the
# buffer as it was at the read before is not autotuning's: it is DRWA's.
AUTOTUNED_CLAMP_CLIENT = r"""
import json, socket, sys, time
addr, port, seconds, conns = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
OWN = 32768
out = []
for k in range(conns):
    s = socket.socket()
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"cubic")
    s.connect((addr, port))
    s.sendall(f"SEND 0 cubic {seconds}\n".encode())
    s.setblocking(False)
    clamp = lambda: s.getsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP)
    rcvbuf = lambda: s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    got, own, raised, again, t0 = 0, None, [], 0, time.time()
    last_b, first_b = rcvbuf(), rcvbuf()
    while time.time() - t0 < seconds - 0.5:
        try:
            n = len(s.recv(1 << 20))
            if not n:
                break
            got += n
        except BlockingIOError:
            time.sleep(0.001)
        b = rcvbuf()
        if own is None:
            if got > 150_000 and b != last_b:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP, OWN)
                own = {"got": got, "rcvbuf": b, "t": round(time.time() - t0, 3)}
        else:
            c = clamp()
            if c > OWN:
                if b != last_b:
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP, OWN)
                    again += 1
                else:
                    raised.append(c)
        last_b = b
    out.append({"own": own, "raised": len(raised), "raised_to": sorted(set(raised))[-3:],
                "set_again": again, "rcvbuf": [first_b, rcvbuf()], "got": got,
                "local_port": s.getsockname()[1]})
    s.close()
    time.sleep(0.5)
print(json.dumps(out), flush=True)
"""

# A server that reads a request bigger than drwa_min_bytes (an upload, a
# form) and then sends a download into a standing queue: `seconds` of
# data after `req` bytes read. Its own RTT is its download's queue.
BIG_REQUEST_SERVER = r"""
import socket, sys, time
port, req, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", port))
srv.listen(1)
c, _ = srv.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"cubic")
got = 0
while got < req:
    got += len(c.recv(65536))
end, buf = time.time() + seconds, b"\0" * 65536
while time.time() < end:
    c.sendall(buf)
c.close()
"""
BIG_REQUEST_CLIENT = r"""
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
s.sendall(b"\0" * int(sys.argv[3]))
while s.recv(1 << 20):
    pass
"""

RATE_BPS = 16_000_000
BASE_RTT_MS = 80


class Drwa(TestCase):
    def receiver(self, lab):
        """The download's socket on the receiver, as ss sees it."""
        socks = [s for s in lab.ss("rcv") if s["remote_port"] == 5201 and s["state"] == "ESTAB"
                 and s["bytes_received"] > 1_000_000]
        return socks[0] if len(socks) == 1 else None

    def bloatd_receiver(self, d):
        socks = [s for s in d.sockets() if s["remote_port"] == 5201 and s["local_addr"] == RCV4
                 and s["bytes_received"] > 1_000_000]
        return socks[0] if len(socks) == 1 else None

    def phase(self, d, lab, seconds):
        """Queueing delay by ping and by bloatd, and goodput, over `seconds`."""
        pinger = lab.ping_background("snd", RCV4, seconds=seconds, interval=0.2)
        b0, t0 = self.receiver(lab)["bytes_received"], time.time()
        queues, clamps = [], []
        end = time.time() + seconds
        while time.time() < end:
            s = self.bloatd_receiver(d)
            if s:
                queues.append(s["rcv_queue_delay_us"] / 1000)
                drwa = (s.get("policy") or {}).get("drwa") or {}
                clamps.append(drwa.get("clamp_bytes", 0))
            time.sleep(0.5)
        b1, t1 = self.receiver(lab)["bytes_received"], time.time()
        pings = pinger.result()
        return {
            "ping_queue_ms": statistics.median(pings) - self.idle_ms,
            "bloatd_queue_ms": statistics.median(queues),
            "goodput_bps": (b1 - b0) * 8 / (t1 - t0),
            "clamp_bytes": statistics.median(clamps) if clamps else 0,
        }

    def test_drwa_cuts_the_receivers_queue_and_keeps_the_rate(self):
        d = self.daemon("--drwa=off")
        d.start()
        lab = self.lab("bd1", rate="16mbit", buffer_bytes=1_000_000, delay_ms=BASE_RTT_MS)
        self.idle_ms = statistics.median(lab.ping("snd", RCV4, count=10))
        self.assertLess(self.idle_ms, BASE_RTT_MS + 10, "idle ping is the base RTT")
        lab.iperf_server("snd")
        lab.download("cubic", 75)
        wait_for(lambda: self.receiver(lab), what="the download")
        # CUBIC fills the buffer: a standing queue.
        wait_for(lambda: statistics.median(lab.ping("snd", RCV4, count=3)) > self.idle_ms + 150,
                 timeout=30, step=1, what="a standing queue over 150 ms")
        time.sleep(6)

        off = self.phase(d, lab, 12)
        self.assertEqual(d.cli("policy", "drwa", "on").returncode, 0)
        time.sleep(6)  # a few rounds: the window shrinks, the queue drains
        on = self.phase(d, lab, 12)
        clamped = self.receiver(lab)
        print(f"    off: {off}\n    on:  {on}", flush=True)

        self.assertLessEqual(on["ping_queue_ms"], 0.75 * off["ping_queue_ms"],
                             "ping: DRWA cuts the queue by at least 25%")
        self.assertLessEqual(on["bloatd_queue_ms"], 0.75 * off["bloatd_queue_ms"],
                             "bloatd's receiver view: the queue is cut by at least 25%")
        self.assertGreaterEqual(on["goodput_bps"], 0.90 * off["goodput_bps"],
                                "goodput within 10%")
        self.assertGreater(off["goodput_bps"], 0.8 * RATE_BPS, "the link was full with DRWA off")
        # The window the receiver offers is DRWA's: about lambda (3) x the
        # bandwidth-delay product, far below the megabytes CUBIC had.
        bdp = RATE_BPS / 8 * BASE_RTT_MS / 1000
        self.assertGreater(on["clamp_bytes"], bdp, "the clamp keeps the pipe full")
        self.assertLess(on["clamp_bytes"], 6 * bdp, "the clamp is near lambda x BDP")
        self.assertLessEqual(clamped["rcv_ssthresh"], on["clamp_bytes"] * 1.1,
                             f"ss: the offered window is clamped ({clamped['rcv_ssthresh']} B)")
        # Issue 34: `bloatd policy list` shows the connection, its clamp, the
        # RTT_min it uses and where that came from.
        conns = [c for c in d.api("/v1/policy")["drwa_connections"]
                 if c["remote"].endswith(":5201") and c["drwa"]["clamp_bytes"] > 0]
        self.assertEqual(len(conns), 1, d.api("/v1/policy")["drwa_connections"])
        c = conns[0]["drwa"]
        self.assertIn(c["min_rtt_source"], ("socket", "peer"), c)
        self.assertLess(c["min_rtt_us"], (BASE_RTT_MS + 15) * 1000, f"RTT_min is the path's: {c}")
        listing = d.cli("policy", "list").stdout
        print(listing, flush=True)
        row = [line for line in listing.splitlines() if ":5201" in line]
        self.assertTrue(row and ("own minimum" in row[0] or "path floor" in row[0]), listing)

        self.assertEqual(d.cli("policy", "drwa", "off").returncode, 0)
        # Off again: the window is given back at the next ACK and the
        # sender fills the buffer again.
        wait_for(lambda: self.receiver(lab)["rcv_ssthresh"] > 2 * on["clamp_bytes"], timeout=15,
                 what="ss: the offered window grows past DRWA's clamp again")
        s = wait_for(lambda: self.bloatd_receiver(d), what="the receiver in bloatd")
        self.assertEqual(((s.get("policy") or {}).get("drwa") or {}).get("clamp_bytes", 0), 0,
                         "bloatd: no clamp")
        self.assertGreaterEqual(d.api("/v1/policy")["counts"]["drwa_restored_total"], 1)
        wait_for(lambda: statistics.median(lab.ping("snd", RCV4, count=3)) - self.idle_ms
                 > 1.25 * on["ping_queue_ms"], timeout=20, step=0.5,
                 what="the queue grows back without DRWA")
        self.assertIn('bloatd_policy_actions_total{action="drwa_restore"}', d.metrics())


    def test_an_applications_clamp_holds_when_its_buffer_autotunes(self):
        """Issue 30, item 9: an application's TCP_WINDOW_CLAMP set while DRWA
        clamps its window, in a round in which autotuning grew its buffer,
        was taken for autotuning's: DRWA raised it. Three connections, each
        setting its clamp right after a read that grew its buffer."""
        d = self.daemon("--no-cc", "--drwa=on")
        d.start()
        lab = self.lab("bd3", rate="50mbit", buffer_bytes=2_000_000, delay_ms=40)
        lab.spawn("snd", "python3", FLOWS, "serve", "--port", "5308")
        wait_for(lambda: lab.exec("rcv", "bash", "-c", f"exec 3<>/dev/tcp/{SND4}/5308",
                                  check=False).returncode == 0, what="the flows server")

        def clients(n):
            client = subprocess.Popen(["ip", "netns", "exec", lab.ns("rcv"), "python3", "-c",
                                       AUTOTUNED_CLAMP_CLIENT, SND4, "5308", "5", str(n)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            lab.procs.append(client)
            out, err = client.communicate(timeout=60)
            self.assertTrue(out.strip(), err)
            conns = json.loads(out.strip().splitlines()[-1])
            for c in conns:
                print(f"    DRWA {d.api('/v1/policy')['drwa']['mode']}: {c}", flush=True)
            return conns

        # The oracle without DRWA: the kernel alone never raises the
        # application's clamp but with the buffer it grows.
        self.assertEqual(d.cli("policy", "drwa", "off").returncode, 0)
        control = clients(1)
        self.assertFalse([c for c in control if c["raised"]],
                         f"without DRWA the clamp moved only with the buffer: {control}")
        self.assertEqual(d.cli("policy", "drwa", "on").returncode, 0)
        conns = clients(3)
        rounds = d.api("/v1/policy")["counts"]["drwa_rounds_total"]
        self.assertGreater(rounds, 0, "DRWA acted")
        self.assertTrue(all(c["own"] for c in conns),
                        f"each connection set its clamp after its buffer grew: {conns}")
        self.assertTrue(all(c["rcvbuf"][1] > c["rcvbuf"][0] for c in conns),
                        f"the buffers autotuned: {conns}")
        raised = [c for c in conns if c["raised"]]
        self.assertFalse(raised, f"DRWA raised the application's 32768 clamp: {raised}")

    def test_a_server_that_read_a_big_request_keeps_its_window(self):
        """Issue 34: a server that read a request above drwa_min_bytes was a
        receiver to DRWA; answering it into a standing queue, its samples
        (its own download's RTT) shut its window to 2 segments, and an
        upload after on the same connection would crawl. A socket that
        sent more than it received is not clamped (lab: 100 kB request, a
        CUBIC answer into 1 MB at 16 Mbit/s, 80 ms; ~20 s)."""
        d = self.daemon("--no-cc", "--drwa=on")
        d.start()
        lab = self.lab("bd4", rate="16mbit", buffer_bytes=1_000_000, delay_ms=BASE_RTT_MS)
        self.idle_ms = statistics.median(lab.ping("snd", RCV4, count=5))
        lab.spawn("snd", "python3", "-c", BIG_REQUEST_SERVER, "5309", "100000", "14")
        wait_for(lambda: lab.exec("snd", "ss", "-tlnH", "sport = :5309").stdout.strip(),
                 what="the server listening")
        lab.spawn("rcv", "python3", "-c", BIG_REQUEST_CLIENT, SND4, "5309", "100000")
        lab.wait_for_queue(self.idle_ms, 200)
        time.sleep(4)  # rounds of the server's samples over the queue

        def server():
            socks = [s for s in lab.ss("snd") if s["local_port"] == 5309 and s["state"] == "ESTAB"]
            return socks[0] if socks else None
        srv = wait_for(server, what="the server's connection")
        queue_ms = statistics.median(lab.ping("snd", RCV4, count=5)) - self.idle_ms
        clamped = [c for c in d.api("/v1/policy")["drwa_connections"]
                   if c["local"].endswith(":5309") and c["drwa"]["clamp_bytes"] > 0]
        print(f"    queue {queue_ms:.0f} ms; server: rcv_ssthresh {srv['rcv_ssthresh']} B, "
              f"bytes_received {srv.get('bytes_received')}; DRWA: {clamped}", flush=True)
        self.assertGreater(queue_ms, 150, "the server's download holds a standing queue")
        self.assertGreater(srv["rcv_ssthresh"], 20 * 1448,
                           "ss: the server's window is not shut by its own download's queue")
        self.assertFalse(clamped, "bloatd: DRWA clamps no server connection")

    def test_the_d_key_of_bloatd_top_switches_drwa(self):
        d = self.daemon("--no-cc", "--drwa=off")
        d.start()
        term = self.tmux("bloatd-test-drwa")
        term.new("top", f"{BLOATD} --run-dir {d.run_dir} top")
        wait_for(lambda: "DRWA off" in term.screen("top"), what="the header's DRWA off")
        # D asks first; anything but y leaves DRWA as it was.
        term.keys("top", "D")
        wait_for(lambda: "Switch DRWA on" in term.screen("top"), what="D asks to confirm")
        term.keys("top", "n")
        wait_for(lambda: "DRWA left as it was" in term.screen("top"), what="n: left as it was")
        self.assertEqual(d.api("/v1/policy")["drwa"]["mode"], "off")
        term.keys("top", "D")
        wait_for(lambda: "Switch DRWA on" in term.screen("top"), what="D asks again")
        term.keys("top", "y")
        wait_for(lambda: d.api("/v1/policy")["drwa"]["mode"] == "on", what="D, y: DRWA on in the daemon")
        wait_for(lambda: "DRWA switched on" in term.screen("top"), what="the answer in the footer")
        wait_for(lambda: "DRWA on" in term.screen("top"), what="the header's DRWA on")
        term.keys("top", "D")
        wait_for(lambda: "Switch DRWA off" in term.screen("top"), what="D asks to confirm off")
        term.keys("top", "y")
        wait_for(lambda: d.api("/v1/policy")["drwa"]["mode"] == "off", what="D, y again: DRWA off")
        term.keys("top", "q")


if __name__ == "__main__":
    main()
