#!/usr/bin/env python3
"""Issue 2: a real Prometheus server scrapes bloatd during a CUBIC download;
PromQL through its HTTP API returns the queueing delay histogram of that
flow, and `promtool check metrics` accepts the exposition."""

import re
import subprocess
import sys
import time

from bloatdpy.harness import SND4, TestCase, main, wait_for


def histogram(text, name, labels):
    """Count, sum and cumulative buckets of a histogram in a Prometheus
    exposition, summed over the series carrying `labels` (the delay
    histograms have one per service too)."""
    want = set(labels.items())
    count = sum_ = 0.0
    buckets = {}
    for line in text.splitlines():
        if not line.startswith(name) or "{" not in line:
            continue
        series, value = line.rsplit(" ", 1)
        got = dict(re.findall(r'([a-z_]+)="([^"]*)"', series))
        if not want <= set(got.items()):
            continue
        if series.startswith(f"{name}_count{{"):
            count += float(value)
        elif series.startswith(f"{name}_sum{{"):
            sum_ += float(value)
        elif series.startswith(f"{name}_bucket{{"):
            buckets[got["le"]] = buckets.get(got["le"], 0.0) + float(value)
    return count, sum_, buckets


class PrometheusScrape(TestCase):
    def test_promql_returns_cubic_queueing_delay_histogram(self):
        d = self.daemon("--no-cc")
        d.start()
        lab = self.lab("bp1", rate="10mbit", buffer_bytes=1500000)
        lab.bulk_download("cubic", 15)
        prom = self.prometheus(d.port)

        q = 'bloatd_tcp_queueing_delay_seconds_bucket{cc="cubic",role="sender"}'

        def histogram():
            res = prom.query(f"sum by (le) ({q})")  # over services
            if not res:
                return None
            buckets = {r["metric"]["le"]: float(r["value"][1]) for r in res}
            # Samples beyond 100 ms of queue reached the server.
            if buckets.get("+Inf", 0) > 0 and buckets["+Inf"] > buckets.get("0.1", 0):
                return buckets
            return None

        buckets = wait_for(histogram, timeout=30, step=1, what="queueing delay histogram in Prometheus")
        print(f"    cubic sender queueing delay buckets: {buckets}")
        self.assertIn("0.5", buckets)
        # Cumulative buckets never decrease.
        les = sorted((float(k), v) for k, v in buckets.items())
        self.assertEqual([v for _, v in les], sorted(v for _, v in les))
        # A quantile over the histogram comes back too.
        p90 = wait_for(lambda: prom.query(f'histogram_quantile(0.9, sum by (le) (rate({q}[5s])))'),
                       timeout=20, step=1, what="histogram_quantile")
        print(f"    p90 queueing delay: {float(p90[0]['value'][1]) * 1000:.0f} ms")

        text = d.metrics()
        r = subprocess.run(["promtool", "check", "metrics"], input=text, text=True, capture_output=True)
        self.assertEqual(r.returncode, 0, f"promtool: {r.stdout}{r.stderr}")
        # Labels are bounded: no socket detail (addresses, ports, pids)
        # ever becomes a label; those stay in the API.
        # `kind`: an episode's, path or service (the flight recorder);
        # `class`: a path's kind of queue (the bottleneck classifier);
        # `owner`: whose traffic fills its queue (never a namespace).
        keys = set(re.findall(r'[{,]([a-z_]+)="', text))
        self.assertLessEqual(keys, {"cc", "role", "state", "probe", "reason", "le", "version", "action",
                                    "feature", "service", "kind", "class", "owner"}, keys)
        kinds = set(re.findall(r'[{,]kind="([^"]*)"', text))
        self.assertLessEqual(kinds, {"path", "service"}, kinds)
        classes = set(re.findall(r'[{,]class="([^"]*)"', text))
        self.assertEqual(classes, {"clear", "droptail", "aqm", "ecn-aqm", "unknown"}, classes)
        owners = set(re.findall(r'[{,]owner="([^"]*)"', text))
        self.assertEqual(owners, {"self", "neighbour", "external", "mixed", "unknown"}, owners)


    def test_kernel_histogram_counts_socket_time_as_the_samples_do(self):
        """The histograms are counted in the kernel at each sample. Over a
        window, the reno sender's histogram must grow by one observation
        per sampling interval of its one busy socket, with the queueing
        delay its streamed samples carry and ping through the bottleneck
        measures."""
        d = self.daemon("--no-cc")
        d.start()
        lab = self.lab("bp2", rate="10mbit", buffer_bytes=1000000, delay_ms=20)
        idle = sorted(lab.ping("snd", "10.9.2.2", count=5))[2]
        lab.bulk_download("reno", 40)
        lab.wait_for_queue(idle, 200)
        sender = wait_for(lambda: next((x for x in d.sockets() if x["cc"] == "reno" and x["role"] == "sender"
                                        and x["local_port"] == 5201), None), what="the reno sender in bloatd")
        # Asking for its series watches it: its samples stream from now on.
        d.api(f"/v1/series/{sender['cookie']}")
        time.sleep(1)
        name, labels = "bloatd_tcp_queueing_delay_seconds", {"cc": "reno", "role": "sender"}
        c0, s0, _ = histogram(d.metrics(), name, labels)
        t0 = d.api(f"/v1/series/{sender['cookie']}")["samples"][-1]["t_ms"]
        pinger = lab.ping_background("snd", "10.9.2.2", 10)
        time.sleep(10)
        c1, s1, buckets = histogram(d.metrics(), name, labels)
        t1 = d.api(f"/v1/series/{sender['cookie']}")["samples"][-1]["t_ms"]
        samples = [x for x in d.api(f"/v1/series/{sender['cookie']}?since_ms={t0}")["samples"] if x["t_ms"] <= t1]
        pings = sorted(pinger.result())
        n, mean_ms = c1 - c0, (s1 - s0) / max(c1 - c0, 1) * 1000
        smean_ms = sum(x["queue_delay_us"] for x in samples) / max(len(samples), 1) / 1000
        ping_q = pings[len(pings) // 2] - idle
        qs = sorted(x["queue_delay_us"] / 1000 for x in samples)
        smedian_ms = qs[len(qs) // 2] if qs else 0
        print(f"    10 s: histogram +{n:.0f} observations, mean {mean_ms:.0f} ms; streamed samples "
              f"{len(samples)}, mean {smean_ms:.0f} ms, median {smedian_ms:.0f} ms; "
              f"ping queue (median) {ping_q:.0f} ms")
        # One observation per 100 ms interval of the one busy socket.
        self.assertGreater(n, 80, "the busy sender is counted every interval")
        self.assertLess(n, 125, "and only once per interval")
        self.assertLess(abs(n - len(samples)), max(3, 0.05 * n),
                        "the histogram and the streamed samples count the same intervals")
        self.assertLess(abs(mean_ms - smean_ms), max(5, 0.05 * smean_ms), "with the same delays")
        # Medians: during loss recovery the kernel's srtt stays where it
        # was (no RTT samples) while ping already sees the queue drain.
        self.assertLess(abs(smedian_ms - ping_q), max(15, 0.15 * ping_q), "which ping confirms")
        # Every rate is the data that crossed the link between its two
        # readings: the flow's samples stay at the 10 Mbit/s link's rate,
        # every one of them (a recovery's cumulative ACK counted a whole
        # window in one interval: 82 Mbit/s once).
        rates = sorted(x["throughput_bps"] for x in samples)
        med, p95 = rates[len(rates) // 2], rates[int(0.95 * (len(rates) - 1))]
        print(f"    throughput of the samples: median {med / 1e6:.2f}, p95 {p95 / 1e6:.2f}, "
              f"max {rates[-1] / 1e6:.2f} Mbit/s (link 10)")
        self.assertGreater(med, 8e6, "the busy sender runs at the link's rate")
        self.assertLess(p95, 11e6, "and not above it")
        self.assertLess(rates[-1], 11e6, "not in any interval")
        les = sorted((float(k), v) for k, v in buckets.items())
        self.assertEqual([v for _, v in les], sorted(v for _, v in les), "cumulative buckets")

    def test_downloads_are_never_counted_as_senders(self):
        """A connection's first interval starts after its handshake: the
        SYN's acknowledged byte and the handshake's RTT must not make the
        receiving end of a download count as a sender. 20 downloads of
        200 kB, the client on reno and the server on cubic: the reno
        sender histogram stays empty while the cubic one counts the
        downloads' socket-time."""
        d = self.daemon("--no-cc")
        d.start()
        lab = self.lab("bp3", rate="100mbit", buffer_bytes=1000000, delay_ms=20)
        n, port = 20, 8100
        server = lab.spawn("snd", sys.executable, "-c", f"""
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", {port})); s.listen(64)
for _ in range({n}):
    c, _ = s.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"cubic")
    c.sendall(b"x" * 200000)
    c.close()
""")
        client = lab.exec("rcv", sys.executable, "-c", f"""
import socket, time
got = 0
for _ in range({n}):
    for attempt in range(50):
        c = socket.socket()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"reno")
        try:
            c.connect(("{SND4}", {port}))
            break
        except ConnectionRefusedError:
            c.close(); time.sleep(0.1)
    while True:
        b = c.recv(65536)
        if not b:
            break
        got += len(b)
    c.close()
    time.sleep(0.05)
print(got)
""", timeout=120)
        self.assertEqual(int(client.stdout), n * 200000, "every download completed")
        server.wait(timeout=10)
        time.sleep(0.5)
        text = d.metrics()
        name = "bloatd_tcp_queueing_delay_seconds"
        reno_sender = histogram(text, name, {"cc": "reno", "role": "sender"})[0]
        cubic_sender = histogram(text, name, {"cc": "cubic", "role": "sender"})[0]
        reno_receiver = histogram(text, name, {"cc": "reno", "role": "receiver"})[0]
        print(f"    {n} downloads: observations reno sender {reno_sender:.0f}, reno receiver "
              f"{reno_receiver:.0f}, cubic sender {cubic_sender:.0f}")
        # Socket-time: each 200 kB download lasts 3-8 round trips of 20 ms,
        # under an interval; its close counts its fraction of one with that
        # probability (bpf/sampler.h), so 20 of them count about 6-16.
        self.assertGreaterEqual(cubic_sender, 0.15 * n, "the server sockets counted as the senders they are")
        self.assertLessEqual(cubic_sender, 2 * n, "never more than their socket-time")
        self.assertEqual(reno_sender, 0, "no downloading socket counted as a sender")


if __name__ == "__main__":
    main()
