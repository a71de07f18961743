#!/usr/bin/env python3
"""Issue 2: bloatd's per-socket numbers against the kernel's own view.

A download with CUBIC crosses a 10 Mbit/s tbf bottleneck with a 1.5 MB
buffer on the lab's router. While the buffer fills, bloatd's record of the
exact socket (matched by addresses and ports) is compared with `ss -tin`
taken at the same moment: cwnd, srtt and min RTT on the sender, rcv_rtt on
the receiver, within 10% or 1 segment / 1 ms.
"""

import time

from bloatdpy.harness import RCV6, SND6, TestCase, close_enough, find, main, wait_for


class KernelOracle(TestCase):
    def compare(self, d, lab, rounds=5):
        """Compare `rounds` times; returns the queueing delays bloatd saw."""
        qdelays = []
        for i in range(rounds):
            ours = d.sockets()
            snd = lab.data_socket("snd", "cubic")
            rcv = lab.data_socket("rcv", "cubic")
            ours_again = d.sockets()
            self.assertIsNotNone(snd, "sender's data socket in ss")
            self.assertIsNotNone(rcv, "receiver's data socket in ss")
            b_snd = find(ours, snd["local"], snd["remote"])
            b_rcv = find(ours, rcv["local"], rcv["remote"])
            self.assertIsNotNone(b_snd, f"bloatd lists the sender {snd['local']} -> {snd['remote']}")
            self.assertIsNotNone(b_rcv, f"bloatd lists the receiver {rcv['local']} -> {rcv['remote']}")
            a_snd = find(ours_again, snd["local"], snd["remote"])
            a_rcv = find(ours_again, rcv["local"], rcv["remote"])
            self.assertEqual(b_snd["cc"], "cubic")
            self.assertEqual(b_snd["role"], "sender")
            self.assertEqual(b_rcv["role"], "receiver")

            def check(field, ss_val, before, after, absolute):
                # ss ran between our two reads: the kernel's value must be
                # close to at least one of them.
                ok = close_enough(before[field], ss_val, absolute=absolute) or \
                    close_enough(after[field], ss_val, absolute=absolute)
                self.assertTrue(ok, f"round {i}: {field}: bloatd {before[field]}/{after[field]} vs ss {ss_val}")

            check("cwnd", snd["cwnd"], b_snd, a_snd, 1)
            check("srtt_us", snd["srtt_us"], b_snd, a_snd, 1000)
            check("min_rtt_us", snd["min_rtt_us"], b_snd, a_snd, 1000)
            check("rcv_rtt_us", rcv["rcv_rtt_us"], b_rcv, a_rcv, 1000)
            self.assertEqual(b_snd["queue_delay_us"], max(0, b_snd["srtt_us"] - b_snd["floor_us"]))
            qdelays.append(b_snd["queue_delay_us"])
            print(f"    round {i}: cwnd {b_snd['cwnd']}/ss {snd['cwnd']}, "
                  f"srtt {b_snd['srtt_us']}/ss {snd['srtt_us']} us, "
                  f"min_rtt {b_snd['min_rtt_us']}/ss {snd['min_rtt_us']} us, "
                  f"rcv_rtt {b_rcv['rcv_rtt_us']}/ss {rcv['rcv_rtt_us']} us, "
                  f"queue {b_snd['queue_delay_us'] / 1000:.0f} ms, "
                  f"rcv queue {b_rcv['rcv_queue_delay_us'] / 1000:.0f} ms", flush=True)
            time.sleep(1)
        return qdelays

    def test_cubic_download_matches_ss_and_queue_builds(self):
        d = self.daemon("--no-cc")
        d.start()
        lab = self.lab("bo1", rate="10mbit", buffer_bytes=1500000)
        lab.bulk_download("cubic", 14)
        # Let slow start end and the buffer fill.
        time.sleep(4)
        qdelays = self.compare(d, lab)
        self.assertGreater(max(qdelays), 100_000, f"queueing delay climbs above 100 ms: {qdelays}")

    def test_queue_stays_near_zero_without_bottleneck(self):
        d = self.daemon("--no-cc")
        d.start()
        # A 1 Gbit/s link carrying a 20 Mbit/s flow: nothing queues.
        lab = self.lab("bo2", rate="1gbit", buffer_bytes=1500000)
        lab.bulk_download("cubic", 8, extra=("-b", "20M"))
        time.sleep(3)
        worst = 0
        for _ in range(5):
            snd = lab.data_socket("snd", "cubic")
            s = find(d.sockets(), snd["local"], snd["remote"])
            self.assertIsNotNone(s)
            worst = max(worst, s["queue_delay_us"])
            time.sleep(0.5)
        self.assertLess(worst, 5_000, f"queueing delay stays near zero (worst {worst} us)")

    def test_ipv6_flow_has_its_addresses_and_goes_away_after_close(self):
        d = self.daemon("--no-cc")
        d.start()
        lab = self.lab("bo3", rate="10mbit", buffer_bytes=300000)
        lab.iperf_server("snd")
        flow = lab.download("cubic", 4, server=SND6)
        time.sleep(2)
        snd = lab.data_socket("snd", "cubic")
        self.assertEqual(snd["local"][0], SND6)
        s = find(d.sockets(), (SND6, 5201), snd["remote"])
        self.assertIsNotNone(s, "bloatd lists the IPv6 sender")
        self.assertEqual(s["remote_addr"], RCV6)
        self.assertGreater(s["srtt_us"], 0)
        cookie = s["cookie"]
        flow.wait(timeout=30)
        wait_for(lambda: all(x["cookie"] != cookie for x in d.sockets(all=True)),
                 timeout=5, what="closed socket removed from bloatd sockets")
        self.assertEqual(flow.returncode, 0, flow.stderr.read() if flow.stderr else "")


if __name__ == "__main__":
    main()
