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

import statistics
import time

from bloatdtest import BLOATD, RCV4, TestCase, main, wait_for

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
