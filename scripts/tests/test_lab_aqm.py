"""The lab's AQMs and cross traffic: the truth a bottleneck classifier is
tested against (issue 33).

- RFC behaviour in simulated time is `make unit-test`'s
  (scripts/lab/delayline/aqm_test.c, under a second).
- On real traffic through the lab (ping through the bottleneck is the
  oracle for the queue; the floor is ping's minimum on the idle path):
  one CUBIC flow under CoDel, on the 3.5g constant link and on the lte
  trace, once past slow start: CoDel keeps dropping (each drop needs the
  sojourn time above its 5 ms target for an interval), the buffer never
  overflows, and the queueing delay's median stays within 15 ms
  (drop-tail: about 500 ms). The issue asked for the median in [3, 15] ms:
  on the trace it is, and the test holds it there; on the constant link
  one CUBIC flow leaves the queue empty for a while after each drop (0.7 x
  a window of one BDP + 5 ms is below the BDP at 16 Mbit/s and 80 ms), so
  its median is below 3 ms (1.3-2.1 ms measured) and only the upper bound is
  held; beside a bulk flow under
  FQ-CoDel, ping (a sparse flow) stays within 1 ms of its floor at p90 (under
  CoDel, sharing the bulk flow's queue, it measured 1.9-4.8 ms);
  with ECN, CoDel marks and does not drop: the delay line counts CE marks
  and no drops, the receiver's kernel counts exactly those CE packets
  (IpExt InCEPkts), its TCP_INFO shows the connection negotiated ECN and
  saw it (this iproute2's ss prints neither), and the sender retransmits
  nothing.
- Cross traffic with a known owner: on a drop-tail link a neighbour's
  download (NAME-nbr, a pod beside the receiver), an external TCP download
  (NAME-far -> NAME-ext) and an external UDP stream share the bottleneck
  with the path's own download; the kernel's counters before and after the
  bottleneck give each owner's rate, which adds up to the link, and every
  owner carries traffic through it (CUBIC's shares of a 500 ms buffer are
  not fair within 10 s: the neighbour's was 8% of the link once); what the counters say was lost is what tbf says
  it dropped.

Every run's truth (scripts/bloatdpy/truth.py: the queue, the flows and their
owners, each owner's packets in and out, drops and marks) is printed.
About 115 s (110-118 s measured).
"""
import json
import time

from bloatdpy.harness import RCV4, TestCase, lab_leftovers, main

N = "blaqm"


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def in_ce_packets(lab, side):
    """The kernel's count of CE-marked packets received in a namespace
    (IpExt InCEPkts, RFC 3168's counter of the IP layer)."""
    text = lab.exec(side, "cat", "/proc/net/netstat").stdout.splitlines()
    for names, values in zip(text[::2], text[1::2]):
        if names.startswith("IpExt:"):
            return int(dict(zip(names.split()[1:], values.split()[1:]))["InCEPkts"])
    raise AssertionError("no IpExt line in /proc/net/netstat")


def summary(t):
    """One line of the truth: the queue, and per owner what went in and out."""
    b = t["bottleneck"]
    parts = [f"{t['config']['profile']} {b['kind']} {b['aqm']}" + (" ecn" if t["config"]["ecn"] else "")]
    for owner, c in sorted(t["owners"].items()):
        line = f"{owner} offered {c['offered_packets']} delivered {c['delivered_packets']}"
        aqm = b.get("owners", {}).get(owner)
        if aqm:
            line += f" codel_dropped {aqm['codel_dropped']} overlimit {aqm['overlimit_dropped']} " \
                    f"ce_marked {aqm['ce_marked']}"
        parts.append(line)
    flows = [f"{f['owner']}:{f['proto']}" + (f":{f['cc']}" if "cc" in f else "") for f in t["flows"]]
    return "; ".join(parts) + f"; flows {', '.join(flows)}"


class LabAqm(TestCase):
    def bulk_with_ping(self, profile, cc="cubic", warm_s=5.0, ping_s=12.0):
        """One bulk download through a fresh lab with `profile`; ping from
        the sender through the bottleneck while it runs. Returns (lab,
        floor ms, queueing delays ms, the download's truth)."""
        lab = self.lab(N, profile=profile)
        lab.ping("snd", RCV4, count=2, interval=0.2)  # ARP, first packets
        floor = min(lab.ping("snd", RCV4, count=20, interval=0.05))
        lab.traffic.bulk("self", cc, warm_s + ping_s + 2)
        time.sleep(warm_s)
        lab.emulator_reset("link")  # the emulator's counts: from here on
        rtts = lab.ping("snd", RCV4, count=int(ping_s / 0.05), interval=0.05)
        self.assertGreater(len(rtts), ping_s / 0.05 * 0.9, "pings lost")
        t = lab.truth()
        print(f"  {summary(t)}", flush=True)
        return lab, floor, [x - floor for x in rtts], t

    def check_codel(self, profile, p50_min=0.0):
        lab, floor, q, t = self.bulk_with_ping(profile)
        st = t["bottleneck"]["stats"]
        p50, p90 = pct(q, 0.5), pct(q, 0.9)
        print(f"  {profile}: floor {floor:.2f} ms; queue by ping p50 {p50:.2f} ms, p90 {p90:.2f} ms, "
              f"max {max(q):.1f} ms; past slow start, the emulator's sojourn p50/p90/p99 "
              f"{int(st['sojourn_us_p50']) / 1000:.1f}/{int(st['sojourn_us_p90']) / 1000:.1f}/"
              f"{int(st['sojourn_us_p99']) / 1000:.1f} ms; codel drops {st['codel_dropped']}, "
              f"overflow {st['overlimit_dropped']}", flush=True)
        self.assertEqual(t["bottleneck"]["aqm"], "codel")
        self.assertGreater(int(st["codel_dropped"]), 0, "CoDel did not drop past slow start")
        self.assertEqual(int(st["overlimit_dropped"]), 0, "the buffer overflowed under CoDel")
        self.assertLessEqual(p50, 15, f"{profile}: queueing delay p50 {p50:.2f} ms: not controlled")
        self.assertGreaterEqual(p50, p50_min, f"{profile}: queueing delay p50 {p50:.2f} ms: no standing queue")

    def test_codel_one_cubic_flow_constant_rate(self):
        self.check_codel("3.5g:aqm=codel")

    def test_codel_one_cubic_flow_trace(self):
        self.check_codel("lte:aqm=codel", p50_min=3.0)

    def test_fq_codel_sparse_flow_at_its_floor(self):
        lab, floor, q, t = self.bulk_with_ping("3.5g:aqm=fq_codel")
        st = t["bottleneck"]["stats"]
        bulk = [s for s in lab.ss("snd") if s["local_port"] == 8000 and s["state"] == "ESTAB"]
        srtt = bulk[0]["srtt_us"] / 1000 if bulk else float("nan")
        p50, p90 = pct(q, 0.5), pct(q, 0.9)
        print(f"  ping beside the bulk flow: floor {floor:.2f} ms, above it p50 {p50:.2f} ms, "
              f"p90 {p90:.2f} ms, max {max(q):.2f} ms; the bulk flow's srtt {srtt:.1f} ms; "
              f"sojourn of all packets p50/p90 {int(st['sojourn_us_p50']) / 1000:.1f}/"
              f"{int(st['sojourn_us_p90']) / 1000:.1f} ms", flush=True)
        self.assertEqual(t["bottleneck"]["aqm"], "fq_codel")
        self.assertLessEqual(p90, 1.0, f"the sparse flow waits {p90:.2f} ms at p90 beside the bulk flow")
        self.assertGreater(srtt - floor, p90, "the bulk flow queues no more than ping: no contrast")

    def test_ecn_marks_instead_of_drops(self):
        lab = self.lab(N, profile="3.5g:aqm=codel:ecn=1")
        lab.ping("snd", RCV4, count=2, interval=0.2)
        lab.emulator_reset("link")
        ce0 = in_ce_packets(lab, "rcv")
        p = lab.traffic.bulk("self", "cubic", 12)
        time.sleep(9)
        snd = [s for s in lab.ss("snd") if s["local_port"] == 8000 and s["state"] == "ESTAB"]
        done = json.loads(p.stdout.readline())
        t = lab.truth()
        print(f"  {summary(t)}", flush=True)
        mine = t["bottleneck"]["owners"]["self"]
        ce = in_ce_packets(lab, "rcv") - ce0
        print(f"  goodput {done['goodput_bps'] / 1e6:.2f} Mbit/s; CE marks by the delay line "
              f"{mine['ce_marked']}, received by the receiver's kernel (InCEPkts) {ce}; "
              f"ECT packets {mine['ect']} of {mine['packets']}; sender retransmits "
              f"{snd[0]['retrans'] if snd else '?'}; the receiver's TCP_INFO options "
              f"{' '.join(done['tcp_options'])}",
              flush=True)
        self.assertGreater(mine["ce_marked"], 0, "no CE marks")
        self.assertEqual((mine["codel_dropped"], mine["overlimit_dropped"]), (0, 0), "drops with ECN on")
        self.assertEqual(ce, mine["ce_marked"], "CE packets the receiver got vs marks the delay line made")
        self.assertTrue(snd and snd[0]["retrans"] == 0, f"the sender retransmitted: {snd}")
        self.assertIn("ecn", done["tcp_options"], "the receiver's connection did not negotiate ECN")
        self.assertIn("ecn_seen", done["tcp_options"], "the receiver saw no ECT/CE packet")

    def test_cross_traffic_owners_share_the_bottleneck(self):
        lab = self.lab(N, profile="3.5g:nbr=cubic:xtcp=cubic:udp=3mbit")
        rate = lab.traffic.cfg["rate_bps"]
        hosts = lab.traffic.cfg["hosts"]
        for far, near in (("snd", "rcv"), ("snd", "nbr"), ("far", "ext")):
            lab.exec(far, "ping", "-c", "1", "-W", "3", hosts[near]["addr"], check=False)
        lab.traffic.bulk("self", "cubic", 25)
        lab.traffic.from_profile(seconds=25)
        time.sleep(8)
        c0, t0 = lab.truth()["owners"], time.monotonic()
        time.sleep(10)
        c1, t1 = lab.truth()["owners"], time.monotonic()
        mbit = {o: (c1[o]["delivered_bytes"] - c0[o]["delivered_bytes"]) * 8 / (t1 - t0) / 1e6
                for o in c1}
        total = sum(mbit.values())
        print("  delivered over 10 s: " + ", ".join(f"{o} {v:.2f} Mbit/s" for o, v in sorted(mbit.items()))
              + f"; total {total:.2f} of {rate / 1e6:.0f}", flush=True)
        # the flows: who sent what, with namespaces bloatd can name
        t = lab.truth()
        print(f"  {summary(t)}", flush=True)
        owners = sorted((f["owner"], f["proto"]) for f in t["flows"])
        self.assertEqual(owners, [("external", "tcp"), ("external", "udp"), ("neighbour", "tcp"),
                                  ("self", "tcp")])
        ns = {f["owner"] + ":" + f["proto"]: (f["sender_ns"], f["receiver_ns"]) for f in t["flows"]}
        self.assertEqual(ns["neighbour:tcp"], (f"{N}-snd", f"{N}-nbr"))
        self.assertEqual(ns["external:udp"], (f"{N}-far", f"{N}-ext"))
        nbr_socks = [s for s in lab.ss("nbr") if s["state"] == "ESTAB"]
        self.assertTrue(nbr_socks, "the neighbour's socket is not in its own namespace")
        self.assertTrue(0.9 * rate / 1e6 <= total <= 1.03 * rate / 1e6,
                        f"the owners' rates add up to {total:.2f} Mbit/s, the link is {rate / 1e6:.0f}")
        self.assertGreater(mbit["self"], 0.02 * rate / 1e6, "the path's own flow got no share")
        self.assertGreater(mbit["neighbour"], 0.02 * rate / 1e6, "the neighbour's flow got no share")
        # the external owner: 3 Mbit/s of UDP (less what the full buffer
        # drops) plus its TCP flow's share
        self.assertGreater(mbit["external"], 0.8 * 3, "the external traffic got less than its UDP")
        # what the kernel's counters say was lost is what tbf dropped
        for p in lab.procs:
            p.terminate()
        time.sleep(1.5)  # the buffer drains (0.5 s at 16 Mbit/s)
        t = lab.truth()
        lost = sum(c["offered_packets"] - c["delivered_packets"] for c in t["owners"].values())
        print(f"  lost by the counters {lost}, dropped by tbf {t['bottleneck']['dropped']}, "
              f"backlog {t['bottleneck']['backlog_bytes']} B", flush=True)
        self.assertLessEqual(abs(lost - t["bottleneck"]["dropped"]), 2,
                             "offered - delivered against tbf's drops")
        lab.close()
        self.assertEqual(lab_leftovers(N), [], "left behind")


if __name__ == "__main__":
    main()
