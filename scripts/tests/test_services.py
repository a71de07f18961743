#!/usr/bin/env python3
"""Issue 21: which service is bloated.

- Two services on one host, each a cgroup v2 of its own (a bulk server and
  a web-like one, behind the same bottleneck): each socket names its
  service and the process that holds it (accepted connections included,
  `ss -p` as the oracle), in `bloatd sockets`, `bloatd top`, `bloatd
  paths`, `bloatd services`, the filter and /metrics.
- The `service` label of /metrics stays bounded: 1000 cgroups with traffic
  give at most N + 1 values (N = service_labels, default 20), and what the
  labelled series grow by is every sample the kernel counted.
- A policy rule `notsent_lowat` bounds a bulk server's unsent backlog (`ss`
  notsent as the oracle) at unchanged goodput.
"""

import os
import re
import statistics
import subprocess
import sys
import time

from bloatdpy.harness import BLOATD, FLOWS, RCV4, SND4, TestCase, main, wait_for

# The histograms that carry the service label.
SERVICE_FAMILIES = ("bloatd_tcp_queueing_delay_seconds", "bloatd_tcp_srtt_seconds")


def counts_by_service(text, family):
    """{(service, cc, role): observations} of a histogram family."""
    out = {}
    for line in text.splitlines():
        if not line.startswith(f"{family}_count{{"):
            continue
        labels = dict(re.findall(r'([a-z_]+)="([^"]*)"', line))
        key = (labels.get("service"), labels.get("cc"), labels.get("role"))
        out[key] = out.get(key, 0) + float(line.rsplit(" ", 1)[1])
    return out


def total_count(text, family):
    """Observations of a histogram family, over all its series."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(f"{family}_count{{"))


def ss_owner(lab, side, port):
    """{remote_port: pid} of the sockets on local `port` by `ss -tnp`: the
    kernel's own answer to who holds each socket."""
    out = lab.exec(side, "ss", "-tnpH", "state", "connected", f"( sport = :{port} )").stdout
    owners = {}
    for line in out.splitlines():
        m = re.search(r"pid=(\d+)", line)
        if m:
            owners[int(line.split()[3].rsplit(":", 1)[1])] = int(m.group(1))
    return owners


class Services(TestCase):
    # Long (88 lines): one scenario, the same two services seen by each view in turn.
    def test_two_services_show_apart_in_sockets_top_paths_services_and_metrics(self):
        bulk, web = self.cgroup("bulk"), self.cgroup("web")
        lab = self.lab("bsv1", rate="10mbit", buffer_bytes=600_000, delay_ms=20)
        # The web server's listener exists before bloatd starts (its holder
        # is found in the open files at start); the bulk one's after (found
        # at listen()).
        web_srv = lab.spawn("snd", sys.executable, FLOWS, "serve", "--port", "8081", cgroup=web)
        d = self.daemon("--no-cc")
        wait_for(lambda: ss_listening(lab, 8081), what="the web server")
        d.start()
        bulk_srv = lab.spawn("snd", sys.executable, FLOWS, "serve", "--port", "8080", cgroup=bulk)
        wait_for(lambda: ss_listening(lab, 8080), what="the bulk server")
        lab.spawn("rcv", sys.executable, FLOWS, "fetch", "--addr", SND4, "--port", "8080",
                  "--bytes", "0", "--seconds", "30", "--cc", "cubic")
        lab.spawn("rcv", sys.executable, FLOWS, "fetch", "--addr", SND4, "--port", "8081",
                  "--bytes", "100000", "--count", "200", "--gap", "0.2", "--cc", "cubic")
        lab.wait_for_queue(20, 100)

        # sockets: every server socket names its service and its process,
        # the one `ss -p` names.
        def servers():
            socks = d.sockets()
            b = [s for s in socks if s["local_port"] == 8080 and s["bytes_acked"] > 100_000]
            w = [s for s in socks if s["local_port"] == 8081 and s["bytes_acked"] > 10_000]
            return (b, w) if b and w else None
        b, w = wait_for(servers, timeout=20, step=0.5, what="both servers' sockets in bloatd")
        for socks, cg, srv, port in ((b, bulk, bulk_srv, 8080), (w, web, web_srv, 8081)):
            owners = ss_owner(lab, "snd", port)
            for s in socks:
                self.assertEqual(s["service"], cg.service, s)
                self.assertEqual((s["pid"], s["comm"]), (srv.pid, "python3"), s)
                if s["remote_port"] in owners:
                    self.assertEqual(s["pid"], owners[s["remote_port"]], f"ss -p: {owners}")
        print(f"    sockets: {len(b)} of {bulk.service} (pid {bulk_srv.pid}), {len(w)} of "
              f"{web.service} (pid {web_srv.pid}), as ss -p names them")

        # the filter, in the API and the dashboard's syntax
        name = os.path.basename(bulk.path)
        snap = d.api(f"/v1/snapshot?limit=100&filter=svc:{name}")
        self.assertTrue(snap["sockets"] and all(s["service"] == bulk.service for s in snap["sockets"]),
                        [s["service"] for s in snap["sockets"]])

        # services: both, the bulk one in a bloated queue
        services = {s["service"]: s for s in d.api("/v1/services")}
        self.assertIn(bulk.service, services)
        self.assertIn(web.service, services)
        sb, sw = services[bulk.service], services[web.service]
        print(f"    services: bulk queue p50 {sb['queue_delay_p50_us'] / 1000:.0f} ms, backlog "
              f"{sb['unsent_delay_p50_us'] / 1000:.0f} ms, {sb['wait_us'] / 1000:.0f} ms wait "
              f"({60_000_000 // max(sb['wait_us'], 1)} RPM); web queue p50 "
              f"{sw['queue_delay_p50_us'] / 1000:.0f} ms, {sw['wait_us'] / 1000:.0f} ms wait")
        self.assertGreater(sb["queue_delay_p50_us"], 100_000, sb)
        self.assertEqual(sb["processes"], ["python3"])
        text = d.cli("services").stdout
        print("    bloatd services:\n" + "".join(f"      {line}\n" for line in text.splitlines()))
        self.assertRegex(text, re.escape(bulk.service) + r"\s+\d+\s+\d+\s+\d+ms")
        self.assertIn(web.service, text)

        # paths: the bottleneck's path carries both services
        path = next(p for p in d.api("/v1/paths") if p["peer"] == RCV4)
        self.assertLessEqual({bulk.service, web.service}, set(path["services"]), path)

        # top: the SERVICE column, and the services view (S)
        once = d.cli("top", "--once", "--width", "220").stdout
        header = next(line for line in once.splitlines() if "SERVICE" in line)
        col = header.index("SERVICE")
        # (a long name is cut to the column's 24 characters, with "…")
        cells = {line[col:col + 24].split("…")[0].strip()
                 for line in once.splitlines() if " 8080 " in line or ":8080 " in line}
        self.assertTrue(any(len(c) > 10 and bulk.service.startswith(c) for c in cells), once)
        term = self.tmux("bsv-top")
        term.new("top", f"{BLOATD} --run-dir {d.run_dir} top", width=200, height=40)
        wait_for(lambda: "SERVICE" in term.screen("top"), what="bloatd top")
        term.keys("top", "S")
        screen = wait_for(lambda: (lambda t: t if bulk.service in t and web.service in t
                                   and "BACKLOG" in t else None)(term.screen("top")),
                          timeout=10, what="the services view with both services")
        self.assertIn("users wait", screen)

        # metrics: the histograms by service
        def both_counted():
            c = counts_by_service(d.metrics(), "bloatd_tcp_queueing_delay_seconds")
            per = {svc: sum(v for (s, _, _), v in c.items() if s == svc)
                   for svc in (bulk.service, web.service)}
            return per if all(per.values()) else None
        per = wait_for(both_counted, timeout=15, what="both services in /metrics")
        print(f"    /metrics: queueing delay observations {per}")

    def test_the_service_label_stays_bounded_under_1000_cgroups(self):
        parent = self.cgroup("many")
        d = self.daemon("--no-cc")
        d.start()
        dirs = []
        for i in range(1000):
            path = os.path.join(parent.path, f"s{i:04d}")
            os.mkdir(path)
            dirs.append(path)
        # One process opens a connection from each cgroup in turn (a
        # socket belongs to the cgroup its creator was in), then sends on
        # all of them for 3 s; the accepted ends are in the root's.
        helper = self.process([sys.executable, "-c", MANY_CGROUPS, parent.root, *dirs],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        scrapes, values, increase, last = 0, 0, 0.0, {}
        done = False
        while not done:
            done = helper.poll() is not None
            time.sleep(0.5)  # after the end, one more: the last samples are in
            text = d.metrics()
            scrapes += 1
            now = counts_by_service(text, "bloatd_tcp_queueing_delay_seconds")
            for family in SERVICE_FAMILIES:
                v = {s for s, _, _ in counts_by_service(text, family)}
                values = max(values, len(v))
                self.assertLessEqual(len(v), 21, f"{family}: {sorted(v)}")
            # What a scraper sees the series grow by: each series' growth,
            # a new one in full.
            self.assertTrue(all(v >= last.get(k, 0) for k, v in now.items()), "counters only grow")
            increase += sum(v - last.get(k, 0) for k, v in now.items())
            last = now
        out, err = helper.communicate()
        self.assertEqual(helper.returncode, 0, err)
        self.assertIn("1000 connections", out)
        # The floor histogram counts the same samples, by cc and role only.
        reference = total_count(text, "bloatd_tcp_min_rtt_seconds")
        services = sorted({s for s, _, _ in now})
        print(f"    1000 cgroups: at most {values} service values in {scrapes} scrapes "
              f"({len(services)} now, 'other' included); {increase:.0f} observations over the "
              f"labelled series, {reference:.0f} in the floor histogram")
        self.assertIn("other", services)
        self.assertLessEqual(len(services), 21)
        self.assertGreater(reference, 1000, "every cgroup's socket was sampled")
        self.assertEqual(increase, reference, "no sample lost to the bound")

    def test_notsent_lowat_cuts_a_bulk_senders_backlog_at_unchanged_goodput(self):
        d = self.daemon("--no-cc", "--policy", "name=lowat,sport=5402,notsent_lowat=128Ki")
        d.start()
        lab = self.lab("bsv3", rate="10mbit", buffer_bytes=150_000, delay_ms=40)
        # A server with large send buffers (4 MB, as bulk servers set them to
        # "go fast"): autotuning alone sizes them to about twice the window.
        lab.exec("snd", "sysctl", "-qw", "net.ipv4.tcp_wmem=4096 4194304 4194304")
        for port in (5401, 5402):
            lab.spawn("snd", sys.executable, FLOWS, "serve", "--port", str(port))
            wait_for(lambda: ss_listening(lab, port), what=f"the server on {port}")
        result = {}
        for port in (5401, 5402):
            fetch = subprocess.Popen(["ip", "netns", "exec", lab.ns("rcv"), sys.executable, FLOWS,
                                      "fetch", "--addr", SND4, "--port", str(port), "--bytes", "0",
                                      "--seconds", "8", "--cc", "cubic"],
                                     stdout=subprocess.PIPE, text=True)
            self.addCleanup(fetch.kill)
            time.sleep(3)  # past slow start: the backlog has built
            ss, ours = [], []
            for _ in range(16):
                sock = [s for s in lab.ss("snd") if s["local_port"] == port and s["state"] == "ESTAB"]
                mine = [s for s in d.sockets() if s["local_port"] == port and s["role"] == "sender"]
                if sock and mine:
                    ss.append(sock[0]["notsent_bytes"])
                    ours.append(mine[0])
                time.sleep(0.25)
            out, _ = fetch.communicate(timeout=60)
            done = [x for x in map(eval_json, out.splitlines()) if x.get("event") == "done"]
            self.assertTrue(done and ours, out)
            result[port] = (statistics.median(ss),
                            statistics.median(s["unsent_bytes"] for s in ours),
                            statistics.median(s["unsent_delay_us"] for s in ours),
                            done[0]["goodput_bps"], ours[-1].get("policy"))
        (ss0, b0, t0, g0, p0), (ss1, b1, t1, g1, p1) = result[5401], result[5402]
        print(f"    backlog without notsent_lowat: ss notsent {ss0 / 1e3:.0f} kB, bloatd "
              f"{b0 / 1e3:.0f} kB = {t0 / 1000:.0f} ms at its rate; goodput {g0 / 1e6:.2f} Mbit/s")
        print(f"    with notsent_lowat=128Ki:      ss notsent {ss1 / 1e3:.0f} kB, bloatd "
              f"{b1 / 1e3:.0f} kB = {t1 / 1000:.0f} ms at its rate; goodput {g1 / 1e6:.2f} Mbit/s")
        self.assertIsNone(p0, "no rule on 5401")
        self.assertEqual(p1["notsent_lowat_rule"], "lowat", "bloatd names the rule")
        self.assertGreater(ss0, 1_000_000, "a writer ahead of a 10 Mbit/s link keeps megabytes unsent")
        self.assertLess(ss1, 128 * 1024 + 64 * 1024, "notsent_lowat bounds it (plus one write's skb)")
        self.assertLess(abs(b1 - ss1), max(64 * 1024, 0.25 * ss1), "bloatd agrees with ss")
        self.assertGreater(t0, 5 * t1, "the backlog's time falls with it")
        self.assertLess(abs(g1 - g0) / g0, 0.10, "at the same goodput")
        counts = d.api("/v1/policy")["counts"]
        self.assertGreaterEqual(counts["notsent_lowat_set_total"], 1)
        self.assertEqual(counts["notsent_lowat_failed_total"], 0)


def eval_json(line):
    import json
    try:
        return json.loads(line)
    except ValueError:
        return {}


def ss_listening(lab, port):
    return bool(lab.exec("snd", "ss", "-tlnH", f"( sport = :{port} )").stdout.strip())


# Opens one connection per cgroup (argv[2:]), from inside each, to a
# listener of its own, then sends on all of them for 3 s.
MANY_CGROUPS = r"""
import os, selectors, socket, sys, threading, time
root, dirs = sys.argv[1], sys.argv[2:]
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(2048)
addr = srv.getsockname()
accepted = []
def serve():
    sel = selectors.DefaultSelector()
    srv.setblocking(False)
    sel.register(srv, selectors.EVENT_READ)
    end = None
    while end is None or time.time() < end:
        for key, _ in sel.select(0.1):
            if key.fileobj is srv:
                c, _ = srv.accept(); c.setblocking(False)
                sel.register(c, selectors.EVENT_READ); accepted.append(c)
            else:
                try:
                    key.fileobj.recv(65536)
                except OSError:
                    pass
        if len(accepted) >= len(dirs) and end is None:
            end = time.time() + 4
threading.Thread(target=serve, daemon=True).start()
conns = []
for d in dirs:
    with open(os.path.join(d, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))
    conns.append(socket.create_connection(addr))
with open(os.path.join(root, "cgroup.procs"), "w") as f:
    f.write(str(os.getpid()))
end = time.time() + 3
while time.time() < end:
    for c in conns:
        c.send(b"x" * 1000)
    time.sleep(0.05)
for c in conns:
    c.close()
print(f"{len(conns)} connections")
"""


if __name__ == "__main__":
    main()
