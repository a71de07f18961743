#!/usr/bin/env python3
"""Issue 21: the shipped Grafana dashboard (daemon/dist/grafana/bloatd.json)
works against what bloatd really serves. A real Prometheus (Debian's),
loaded with the shipped rules, scrapes a real bloatd during a bloated CUBIC
download from a service of its own (a cgroup v2): every query of every
panel, with the dashboard's variables as "All", returns data (a finite
value), the variables' own queries find the host and the service, and
every shipped rule evaluates without error on the real series."""

import json
import math
import os
import sys

from bloatdpy.harness import FLOWS, REPO, SND4, TestCase, main, wait_for

DASHBOARD = os.path.join(REPO, "daemon", "dist", "grafana", "bloatd.json")
RULES = os.path.join(REPO, "daemon", "dist", "prometheus", "bloatd.rules.yml")
# What Grafana puts in for the variables set to "All" (their allValue), and
# for $__rate_interval: at least four scrapes of the test's 1 s.
VARIABLES = {"$instance": ".*", "$service": ".*", "$role": ".*", "$__rate_interval": "15s"}


def expand(expr):
    for var, value in VARIABLES.items():
        expr = expr.replace(var, value)
    return expr


def finite(result):
    """Whether a query's result holds a finite number."""
    return any(math.isfinite(float(r["value"][1])) for r in result or [])


class Dashboard(TestCase):
    def test_every_panel_query_returns_data_during_a_bloated_download(self):
        with open(DASHBOARD) as f:
            dash = json.load(f)
        panels = [p for p in dash["panels"] if p["type"] != "row"]
        ids = [p["id"] for p in dash["panels"]]
        self.assertEqual(len(ids), len(set(ids)), "panel ids are unique")
        targets = []
        for p in panels:
            self.assertEqual(p["datasource"]["uid"], "${datasource}", p["title"])
            self.assertTrue(p["targets"], f"{p['title']}: no query")
            for t in p["targets"]:
                self.assertNotIn("$", expand(t["expr"]), f"{p['title']}: unknown variable")
                targets.append((p["title"], t["legendFormat"], expand(t["expr"])))

        bulk = self.cgroup("bulk")
        d = self.daemon("--no-cc")
        d.start()
        lab = self.lab("bgr1", rate="10mbit", buffer_bytes=1_000_000, delay_ms=20)
        lab.spawn("snd", sys.executable, FLOWS, "serve", "--port", "8080", cgroup=bulk)
        wait_for(lambda: lab.exec("snd", "ss", "-tlnH", "( sport = :8080 )").stdout.strip(),
                 what="the server")
        lab.spawn("rcv", sys.executable, FLOWS, "fetch", "--addr", SND4, "--port", "8080",
                  "--bytes", "0", "--seconds", "60", "--cc", "cubic")
        prom = self.prometheus(d.port, rules=[RULES])
        lab.wait_for_queue(20, 200)

        def without_data():
            return [(t, legend, e) for t, legend, e in targets if not finite(prom.query(e))]
        try:
            wait_for(lambda: not without_data(), timeout=40, step=2, what="data for every query")
        except AssertionError:
            self.fail(f"queries without data: {without_data()}")
        print(f"    {len(targets)} queries of {len(panels)} panels returned data")

        # The variables: the host, and the service among the label's values.
        for var in dash["templating"]["list"]:
            if var["type"] != "query":
                continue
            metric, label = var["definition"][len("label_values("):-1].rsplit(", ", 1)
            series = prom.api("/api/v1/series?match[]=" + expand(metric).replace(" ", "")) or []
            values = {s.get(label) for s in series}
            self.assertTrue(values - {None}, f"${var['name']}: {var['definition']}")
            if var["name"] == "service":
                self.assertIn(bulk.service, values)

        # Every shipped rule evaluates on the real series without error.
        def rules():
            groups = (prom.api("/api/v1/rules") or {}).get("groups", [])
            rs = [r for g in groups for r in g["rules"]]
            return rs if rs and all(r.get("lastEvaluation", "").startswith("20") for r in rs) else None
        rs = wait_for(rules, timeout=20, what="every rule evaluated")
        bad = [(r["name"], r.get("lastError")) for r in rs if r.get("health") != "ok"]
        self.assertFalse(bad, bad)
        # A rule evaluated is not yet a value for this service: a rate needs two
        # scrapes of its series inside the window when the rule runs.
        query = ('instance_service_role:bloatd_tcp_queueing_delay_seconds:'
                 f'share_above_100ms_rate5m{{service="{bulk.service}"}}')

        def recorded():
            r = prom.query(query)
            return r if finite(r) else None
        try:
            share = wait_for(recorded, timeout=20, step=1, what="the service's recording rule")
        except AssertionError:
            self.fail(f"the service's recording rule has no value for the download's queue: "
                      f"{prom.query(query)}")
        print(f"    {len(rs)} rules healthy; {bulk.service}: "
              f"{float(share[0]['value'][1]):.0%} of socket-time above 100 ms")


if __name__ == "__main__":
    main()
