#!/usr/bin/env python3
"""Issue 2: a real Prometheus server scrapes bloatd during a CUBIC download;
PromQL through its HTTP API returns the queueing delay histogram of that
flow, and `promtool check metrics` accepts the exposition."""

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

from bloatdtest import TestCase, free_port, main, run, wait_for


class PrometheusScrape(TestCase):
    def start_prometheus(self, target_port):
        tmp = tempfile.mkdtemp(prefix="bloatd-prom-")
        self.addCleanup(shutil.rmtree, tmp, True)
        cfg = os.path.join(tmp, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                "scrape_configs:\n  - job_name: bloatd\n    static_configs:\n"
                f"      - targets: ['127.0.0.1:{target_port}']\n"
            )
        port = free_port()
        p = subprocess.Popen(
            ["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={tmp}/data",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def stop():
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        self.addCleanup(stop)
        return port

    def query(self, port, promql):
        url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                body = json.load(r)
        except OSError:
            return None
        return body["data"]["result"] if body.get("status") == "success" else None

    def test_promql_returns_cubic_queueing_delay_histogram(self):
        d = self.daemon("--no-cc")
        d.start()
        lab = self.lab("bp1", rate="10mbit", buffer_bytes=1500000)
        lab.bulk_download("cubic", 15)
        prom = self.start_prometheus(d.port)
        wait_for(lambda: self.query(prom, "up") is not None, timeout=30, what="prometheus up")

        q = 'bloatd_tcp_queueing_delay_seconds_bucket{cc="cubic",role="sender"}'

        def histogram():
            res = self.query(prom, q)
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
        p90 = wait_for(lambda: self.query(prom, f'histogram_quantile(0.9, sum by (le) (rate({q}[5s])))'),
                       timeout=20, step=1, what="histogram_quantile")
        print(f"    p90 queueing delay: {float(p90[0]['value'][1]) * 1000:.0f} ms")

        text = d.metrics()
        r = subprocess.run(["promtool", "check", "metrics"], input=text, text=True, capture_output=True)
        self.assertEqual(r.returncode, 0, f"promtool: {r.stdout}{r.stderr}")
        # Labels are bounded: no socket detail (addresses, ports, pids)
        # ever becomes a label; those stay in the API.
        keys = set(re.findall(r'[{,]([a-z_]+)="', text))
        self.assertLessEqual(keys, {"cc", "role", "state", "probe", "reason", "le", "version"}, keys)


if __name__ == "__main__":
    main()
