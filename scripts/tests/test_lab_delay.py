"""The delay line (scripts/lab/delayline/) gives each profile its base RTT:
ping across the idle lab must average within 2 ms of the profile's RTT and
never come in under it. Then the delay line carries 100 Mbit/s (UDP, in the
delayed direction) and ping must still average within 1 ms of the target
(plus the delay line's own mean lateness each way); the delay line's own
lateness statistics and the kernel's queue drop counters are printed and
checked. The timing is the machine's: a load whose timing fails is made
once more (a CI run's VM lost time to its hypervisor), and must pass then.
"""
import json
import os
import re
import subprocess
import time

from bloatdpy.harness import RCV4, REPO, SND4, TestCase, main, run, stolen_s, topo_profile

N = "bldelay"
DELAYLINE_BUILD = os.path.join(REPO, "scripts", "lab", "delayline", "build.sh")


def ping_stats(lab, side, addr, *args):
    """min, avg, max in ms from ping's summary (three decimals, where the
    per-reply lines round to the RTT's magnitude)."""
    out = lab.exec(side, "ping", "-q", *args, addr, check=False, timeout=120).stdout
    m = re.search(r"^rtt [^=]*= ([\d.]+)/([\d.]+)/([\d.]+)/", out, re.M)
    if not m:
        raise AssertionError(f"ping {' '.join(args)} {addr} from {side}: no summary in\n{out}")
    return tuple(float(x) for x in m.groups())


class LabDelay(TestCase):
    def test_base_rtt_of_each_profile(self):
        for prof in ("3g", "3.5g", "4g"):
            with self.subTest(profile=prof):
                target = float(topo_profile(prof)["delay_ms"])
                lab = self.lab(N, profile=prof)
                lab.exec("snd", "ping", "-c", "1", "-W", "3", RCV4, check=False)  # ARP, first packet
                lo, avg, hi = ping_stats(lab, "snd", RCV4, "-c", "50", "-i", "0.02", "-s", "56")
                print(f"  {prof}: target {target:g} ms, ping min/avg/max {lo}/{avg}/{hi} ms", flush=True)
                self.assertLessEqual(abs(avg - target), 2, f"{prof}: ping average {avg} ms, target {target:g}")
                self.assertGreaterEqual(lo, target, f"{prof}: ping minimum {lo} ms below the target {target:g}")

    def test_load_through_the_delay_line(self):
        # The floor under the delay line's lateness: how late this host
        # wakes a SCHED_FIFO task from a timed sleep at all (printed, not
        # checked).
        delayline = run(DELAYLINE_BUILD).stdout.strip()
        timer = run(delayline, "--timer-test", "4", "--rt", "50", check=False)
        print(f"  host {(timer.stdout + timer.stderr).strip()}", flush=True)

        lab = self.lab(N, rate="1gbit", delay_ms=80, buffer_bytes=3000000)
        lab.iperf_server("snd")
        lab.exec("rcv", "ping", "-c", "1", "-W", "3", SND4, check=False)
        # The timing checks judge the delay line by the machine's clock: a
        # stretch of time the hypervisor takes from this VM (steal, counted
        # by /proc/stat; seconds of it in a CI run) makes every timer late.
        # An attempt whose timing fails is made once more; a delay line
        # that is slow by itself fails both.
        for attempt in (1, 2):
            failed = self.load_once(lab, last=attempt == 2)
            if not failed:
                break
            print(f"  attempt {attempt}: {'; '.join(failed)}: once more", flush=True)

    def load_once(self, lab, last):
        """One load through the delay line, checked; the timing checks that
        failed (raised on the last attempt, with the others)."""
        lab.emulator_reset()  # lateness statistics from here on
        steal0 = stolen_s()
        # The receiver sends: its packets are the ones the delay line holds.
        load = lab.spawn("rcv", "iperf3", "-c", SND4, "-u", "-b", "100M", "-l", "1400", "-t", "8", "-J",
                         stdout=subprocess.PIPE)
        time.sleep(1)
        lo, avg, hi = ping_stats(lab, "rcv", SND4, "-c", "500", "-i", "0.01")
        out, err = load.communicate(timeout=60)
        st = lab.emulator_stats()
        steal = stolen_s() - steal0
        try:
            rate = json.loads(out)["end"]["sum"]["bits_per_second"] / 1e6
        except (ValueError, KeyError) as e:
            raise AssertionError(f"iperf3's report: {e!r}:\n{out}{err}")
        print(f"  load: {rate:.1f} Mbit/s UDP; ping min/avg/max {lo}/{avg}/{hi} ms; "
              f"{steal:.2f} s of CPU stolen by the hypervisor meanwhile")
        print("  " + " ".join(f"{k}={v}" for k, v in st.items()))
        with self.subTest("load"):
            self.assertGreaterEqual(rate, 95, f"the load only reached {rate:.1f} Mbit/s")
        with self.subTest("drops"):
            self.assertEqual((st["queue_dropped"], st["user_dropped"]), ("0", "0"),
                             "packets dropped by the queue (queue_dropped, user_dropped)")
        with self.subTest("ping minimum"):
            self.assertGreaterEqual(lo, 80, f"under load ping minimum {lo} ms below 80")
        # A ping is as late as the delay line releases it (its own mean
        # lateness, checked below, at most once each way) and a
        # millisecond more: a busy machine's timers (a CI run: 541 us mean,
        # ping 81.23 ms) are not the delay line queueing pings behind the
        # load, which shows as tens of milliseconds.
        # The delay line's own account: its mean lateness must stay under
        # 1 ms. Its tail depends on what else the machine runs (on 2 busy
        # vCPUs the p99 has been measured from 0.09 to 4.8 ms): only a gross
        # regression (a tail of 10 ms, a timer that ticks instead of
        # sleeping to the due time) fails here.
        late_ms = float(st["late_us_mean"]) / 1000
        timing = (("ping under load", abs(avg - 80) <= 1 + 2 * late_ms,
                   f"under load ping averages {avg} ms, target 80 (delay line {late_ms:.2f} ms late)"),
                  ("mean lateness", late_ms < 1, f"mean release lateness {late_ms * 1000:.0f} us, at most 1000"),
                  ("lateness p99", int(st["late_us_p99"]) <= 10000,
                   f"release lateness p99 {st['late_us_p99']} us, at most 10000"))
        failed = [why for _, ok, why in timing if not ok]
        if last:
            for what, ok, why in timing:
                with self.subTest(what):
                    self.assertTrue(ok, why)
        return failed


if __name__ == "__main__":
    main()
