"""bloatd's numbers for a lab flow against the kernel's own (`ss -ti`): the
lab reports bloatd's RTT, window and retransmissions (scripts/lab/
instrument.py), so they must agree with the oracle. One CUBIC bulk download
on the 3.5g profile; bloatd's API and ss are read back to back, 20 times,
once the queue has built.
"""
import subprocess
import sys
import time

from bloatdpy.harness import FLOWS, SND4, TestCase, main
from bloatdpy import instrument

N = "blinst"
PORT = 8000


def rel(a, b):
    return abs(a - b) / max(b, 1)


def median(xs):
    """The upper median, as the lab's analysis takes it."""
    return sorted(xs)[len(xs) // 2]


class LabInstrument(TestCase):
    def test_bloatd_against_ss(self):
        d = self.daemon()
        d.start()
        sock = f"{d.run_dir}/bloatd.sock"
        lab = self.lab(N, profile="3.5g")
        server = lab.spawn("snd", sys.executable, FLOWS, "serve", "--port", str(PORT),
                           stdout=subprocess.PIPE)
        self.assertIn("listening", server.stdout.readline())
        lab.spawn("rcv", sys.executable, FLOWS, "fetch", "--addr", SND4, "--port", str(PORT),
                  "--bytes", "0", "--seconds", "14", "--cc", "cubic")
        time.sleep(4)

        ns = lab.ns("snd")
        ino = instrument.netns_inode(ns)
        pairs = []
        for _ in range(20):
            b = {s["remote_port"]: s for s in instrument.read_bloatd(ino, PORT, sock)}
            o = {s["remote_port"]: s for s in instrument.read_ss(ns, PORT)}
            for port in b.keys() & o.keys():
                if b[port]["state"] == "ESTAB" and o[port]["state"] == "ESTAB":
                    pairs.append((b[port], o[port]))
            time.sleep(0.4)
        print(f"  {len(pairs)} paired readings of the download's socket")
        with self.subTest("paired readings"):
            self.assertGreaterEqual(len(pairs), 15, "paired readings of bloatd and ss")
        if not pairs:
            self.fail("no paired reading of bloatd and ss")

        srtt = median([rel(b["srtt_us"], o["srtt_us"]) for b, o in pairs])
        cwnd = median([rel(b["cwnd"], o["cwnd"]) for b, o in pairs])
        minrtt = median([abs(b["min_rtt_us"] - o["min_rtt_us"]) for b, o in pairs])
        infl = median([rel(b["inflight"] * b["mss"], o["inflight"] * o["mss"]) for b, o in pairs])
        lb, lo = pairs[-1]
        print(f"  last pair: bloatd srtt {lb['srtt_us']} us cwnd {lb['cwnd']} inflight {lb['inflight']} "
              f"retrans {lb['retrans']} cc {lb['cc']}; ss srtt {lo['srtt_us']} us cwnd {lo['cwnd']} "
              f"inflight {lo['inflight']} retrans {lo['retrans']} cc {lo['cc']}")
        print(f"  median differences: srtt {srtt:.1%}, cwnd {cwnd:.1%}, in flight {infl:.1%}, "
              f"min RTT {minrtt} us")
        with self.subTest("srtt"):
            self.assertLessEqual(srtt, 0.10, f"srtt: median difference {srtt:.1%} (<= 10%)")
        with self.subTest("cwnd"):
            self.assertLessEqual(cwnd, 0.10, f"cwnd: median difference {cwnd:.1%} (<= 10%)")
        with self.subTest("in flight"):
            self.assertLessEqual(infl, 0.10, f"in flight: median difference {infl:.1%} (<= 10%)")
        with self.subTest("min RTT"):
            self.assertLessEqual(minrtt, 2000, f"min RTT: median difference {minrtt} us (<= 2 ms)")
        # bloatd is read first: its counters may trail ss's, never lead them.
        for field in ("retrans", "bytes_acked"):
            with self.subTest(field):
                ahead = [(b[field], o[field]) for b, o in pairs if b[field] > o[field]]
                self.assertEqual(ahead, [], f"{field}: bloatd above ss (bloatd, ss)")
        with self.subTest("cc"):
            seen = sorted({(b["cc"], o["cc"]) for b, o in pairs})
            self.assertEqual(seen, [("cubic", "cubic")], "congestion control (bloatd, ss)")


if __name__ == "__main__":
    main()
