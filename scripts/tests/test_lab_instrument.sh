#!/usr/bin/env bash
# bloatd's numbers for a lab flow against the kernel's own (ss -ti): the lab
# reports bloatd's RTT, window and retransmissions, so they must agree with
# the oracle. One CUBIC bulk download on the 3.5g profile; bloatd's API and
# ss are read back to back, 20 times, once the queue has built.
# Needs the release build; starts bloatd if it is not running (and stops it
# after). Run as root: sudo scripts/tests/test_lab_instrument.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
NAME=test_lab_instrument
source scripts/tests/lib.sh
N=blinst
source scripts/lab/bloatd.sh
PIDS=()

cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
	"$TOPO" down "$N" >/dev/null 2>&1 || true
	bloatd_release
}
trap cleanup EXIT
trap 'exit 130' INT TERM

need_root
[[ -x $BLOATD ]] || { echo "test_lab_instrument: $BLOATD missing: run cargo build --release"; exit 1; }
bloatd_ensure || { echo "test_lab_instrument: bloatd start failed"; exit 1; }

"$TOPO" up "$N" --profile 3.5g >/dev/null || exit 1
ip netns exec "$N-snd" /usr/bin/python3 scripts/lab/flows.py serve --port 8000 >/dev/null &
PIDS+=($!)
sleep 0.5
ip netns exec "$N-rcv" /usr/bin/python3 scripts/lab/flows.py fetch --bytes 0 --seconds 14 \
	--cc cubic >/dev/null &
PIDS+=($!)
sleep 4

echo "test_lab_instrument: bloatd vs ss on a CUBIC download (lab '$N')"
/usr/bin/python3 - "$N" <<'PY'
import sys, time
sys.path.insert(0, "scripts/lab")
sys.path.insert(0, "scripts/tests")
import instrument
from bloatdtest import Checks
ns = sys.argv[1] + "-snd"
ino = instrument.netns_inode(ns)
pairs = []
for _ in range(20):
    b = {s["remote_port"]: s for s in instrument.read_bloatd(ino, 8000)}
    o = {s["remote_port"]: s for s in instrument.read_ss(ns, 8000)}
    for port in b.keys() & o.keys():
        if b[port]["state"] == "ESTAB" and o[port]["state"] == "ESTAB":
            pairs.append((b[port], o[port]))
    time.sleep(0.4)
check = Checks()
check(len(pairs) >= 15, f"{len(pairs)} paired readings of the download's socket")
if not pairs:
    sys.exit(1)
def rel(a, b):
    return abs(a - b) / max(b, 1)
def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]
srtt = median([rel(b["srtt_us"], o["srtt_us"]) for b, o in pairs])
cwnd = median([rel(b["cwnd"], o["cwnd"]) for b, o in pairs])
minrtt = median([abs(b["min_rtt_us"] - o["min_rtt_us"]) for b, o in pairs])
infl = median([rel(b["inflight"] * b["mss"], o["inflight"] * o["mss"]) for b, o in pairs])
last_b, last_o = pairs[-1]
print(f"  last pair: bloatd srtt {last_b['srtt_us']} us cwnd {last_b['cwnd']} inflight {last_b['inflight']} "
      f"retrans {last_b['retrans']} cc {last_b['cc']}; ss srtt {last_o['srtt_us']} us cwnd {last_o['cwnd']} "
      f"inflight {last_o['inflight']} retrans {last_o['retrans']} cc {last_o['cc']}")
check(srtt <= 0.10, f"srtt: median difference {srtt:.1%} (<= 10%)")
check(cwnd <= 0.10, f"cwnd: median difference {cwnd:.1%} (<= 10%)")
check(infl <= 0.10, f"in flight: median difference {infl:.1%} (<= 10%)")
check(minrtt <= 2000, f"min RTT: median difference {minrtt} us (<= 2 ms)")
# bloatd is read first: its counters may trail ss's, never lead them.
check(all(b["retrans"] <= o["retrans"] for b, o in pairs), "retrans: bloatd never above ss")
check(all(b["bytes_acked"] <= o["bytes_acked"] for b, o in pairs), "bytes_acked: bloatd never above ss")
check(all(b["cc"] == "cubic" == o["cc"] for b, o in pairs), "both see congestion control cubic")
check.done()
PY
(($? == 0)) || fail "bloatd and ss disagree (above)"
finish
