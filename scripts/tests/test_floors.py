#!/usr/bin/env python3
"""Issue 8: every flow's queueing delay is true, with `ping` as the oracle.

A CUBIC download fills an 8 Mbit/s link with a 1.5 MB buffer and 40 ms of
base RTT (the delay line on the router). `ping` through the same bottleneck,
idle and under load, measures the standing queue without bloatd and without
TCP. Then two slow flows start behind that queue: one to the same host (its
floor comes from the bulk flow's history, "peer"), one to a second address of
the receiver in another prefix that no flow used before (its floor is
inferred from the queue the bulk flow measures on the same route). Both see
the whole queue, as the bulk flow does, on both sides of the transfer.
"""

import statistics
import time

from bloatdtest import RCV4, TestCase, bpf_map_dump, main, wait_for

NEW_ADDR = "10.9.4.2"


def pick(socks, **want):
    """The one socket of bloatd's JSON with these field values."""
    found = [s for s in socks if all(s.get(k) == v for k, v in want.items())]
    return found[0] if len(found) == 1 else None


class Floors(TestCase):
    def test_flows_behind_a_standing_queue_see_all_of_it(self):
        d = self.daemon("--no-cc")
        d.start()
        lab = self.lab("bf1", rate="8mbit", buffer_bytes=1500000, delay_ms=40)
        lab.add_receiver_address(NEW_ADDR + "/24")
        idle = statistics.median(lab.ping("snd", RCV4, count=10))
        self.assertLess(idle, 50, f"idle ping {idle} ms: the base RTT is 40 ms")

        lab.iperf_server("snd", port=5201)
        lab.iperf_server("snd", port=5202)
        lab.iperf_server("rcv", port=5203)
        lab.download("cubic", 50, port=5201)
        # Let CUBIC fill the buffer: ping through it shows the queue.
        wait_for(lambda: statistics.median(lab.ping("snd", RCV4, count=3)) > idle + 500,
                 timeout=30, step=1, what="a standing queue of more than 500 ms")
        time.sleep(6)
        # Two slow flows open behind the queue.
        lab.download("cubic", 30, port=5202, extra=("-b", "1M"))
        lab.spawn("snd", "iperf3", "-c", NEW_ADDR, "-p", "5203", "-C", "cubic", "-t", "30", "-b", "1M")

        views = {
            "bulk sender": dict(local_port=5201, cc="cubic"),
            "bulk receiver": dict(remote_port=5201, cc="cubic"),
            "same-host sender": dict(local_port=5202, cc="cubic"),
            "same-host receiver": dict(remote_port=5202, cc="cubic"),
            "new-address sender": dict(remote_addr=NEW_ADDR, remote_port=5203, cc="cubic"),
            "new-address receiver": dict(local_addr=NEW_ADDR, local_port=5203, cc="cubic"),
        }
        wait_for(lambda: all(pick(d.sockets(), **w) for w in views.values()),
                 timeout=15, what="all six sockets in bloatd")
        time.sleep(8)  # srtt of the new flows settles on the queue

        # Readings taken while ping runs through the same bottleneck.
        pinger = lab.ping_background("snd", RCV4, seconds=10)
        delays = {name: [] for name in views}
        sources = {}
        for _ in range(10):
            socks = d.sockets()
            for name, want in views.items():
                s = pick(socks, **want)
                self.assertIsNotNone(s, f"{name} listed")
                v = s["rcv_queue_delay_us"] if "receiver" in name else s["queue_delay_us"]
                delays[name].append(v / 1000)
                sources[name] = s["floor_source"]
            time.sleep(1)
        loaded = statistics.mean(pinger.result())
        queue = loaded - idle
        print(f"    ping idle {idle:.1f} ms, loaded {loaded:.1f} ms: queue {queue:.0f} ms", flush=True)
        for name, v in delays.items():
            print(f"    {name}: queueing delay {statistics.mean(v):.0f} ms "
                  f"(floor from {sources[name]})", flush=True)
        if sources["new-address sender"] != "inferred":
            for k, v in bpf_map_dump("floors"):
                if k["addr"][:3] == [10, 9, 4]:
                    print("    floor", k, v, flush=True)
        self.assertGreater(queue, 300, "the bulk flow keeps a standing queue")
        for name, v in delays.items():
            ours = statistics.mean(v)
            self.assertLess(abs(ours - queue), 0.25 * queue,
                            f"{name}: bloatd {ours:.0f} ms vs ping {queue:.0f} ms")
        self.assertEqual(sources["same-host sender"], "peer")
        self.assertEqual(sources["new-address sender"], "inferred")
        self.assertIn(sources["bulk sender"], ("socket", "peer"))


if __name__ == "__main__":
    main()
