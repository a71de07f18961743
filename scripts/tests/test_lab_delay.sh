#!/usr/bin/env bash
# The delay line gives each profile its base RTT: ping across the idle lab
# must average within 2 ms of the profile's RTT and never come in under it.
# Then the delay line carries 100 Mbit/s (UDP, in the delayed direction) and
# ping must still average within 1 ms of the target; its own lateness
# statistics and the kernel's queue drop counters are printed and checked.
# Run as root: sudo scripts/tests/test_lab_delay.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
NAME=test_lab_delay
source scripts/tests/lib.sh
N=bldelay
IPERF_PID=

cleanup() {
	[[ -n $IPERF_PID ]] && kill "$IPERF_PID" 2>/dev/null
	"$TOPO" down "$N" >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

need_root
command -v iperf3 >/dev/null || { echo "test_lab_delay: iperf3 missing: run scripts/deps.sh"; exit 1; }

# "min avg max" of ping's summary, in ms.
ping_stats() {
	ip netns exec "$1" ping -q "${@:2}" | awk -F'[/ =]+' '/^rtt/ {print $6, $7, $8}'
}

# within A B TOL: |A - B| <= TOL
within() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN{d=a-b; if (d<0) d=-d; exit !(d<=t)}'; }
atleast() { awk -v a="$1" -v b="$2" 'BEGIN{exit !(a>=b)}'; }

echo "test_lab_delay: base RTT of each profile (lab '$N')"
for prof in 3g 3.5g 4g; do
	eval "$("$TOPO" profile "$prof")"   # rate= delay_ms= buffer_bytes=
	"$TOPO" up "$N" --profile "$prof" >/dev/null || { fail "$prof: up failed"; continue; }
	ip netns exec "$N-snd" ping -c 1 -W 3 10.9.2.2 >/dev/null   # ARP, first packet
	read -r min avg max < <(ping_stats "$N-snd" -c 50 -i 0.02 -s 56 10.9.2.2)
	echo "  $prof: target ${delay_ms} ms, ping min/avg/max ${min}/${avg}/${max} ms"
	if within "$avg" "$delay_ms" 2 && atleast "$min" "$delay_ms"; then
		pass "$prof: average within 2 ms of ${delay_ms} ms, minimum not below it"
	else
		fail "$prof: ping avg $avg min $min vs target $delay_ms"
	fi
done

# The floor under the delay line's lateness: how late this host wakes a
# SCHED_FIFO task from a timed sleep at all (printed, not checked).
platform=$("$(scripts/lab/delayline/build.sh)" --timer-test 4 --rt 50 2>&1)
echo "  host ${platform}"

echo "test_lab_delay: 100 Mbit/s through the delay line (80 ms)"
"$TOPO" up "$N" --rate 1gbit --delay-ms 80 --buffer-bytes 3000000 >/dev/null || fail "up for the load test"
DPID=$(cat /run/bloatd-lab/$N.delay.pid)
ip netns exec "$N-snd" iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
IPERF_PID=$!
sleep 0.5
ip netns exec "$N-rcv" ping -c 1 -W 3 10.9.1.1 >/dev/null
kill -USR2 "$DPID"     # lateness statistics from here on
# The receiver sends: its packets are the ones the delay line holds.
ip netns exec "$N-rcv" iperf3 -c 10.9.1.1 -u -b 100M -l 1400 -t 8 -J >/tmp/$N.iperf.json 2>&1 &
LOAD=$!
sleep 1
read -r min avg max < <(ping_stats "$N-rcv" -c 500 -i 0.01 10.9.1.1)
wait "$LOAD"
kill -USR1 "$DPID"
sleep 0.3
stats=$(grep 'delayline stats' /run/bloatd-lab/$N.delay.log | tail -1)
rate=$(/usr/bin/python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["end"]["sum"]["bits_per_second"]/1e6, 1))' /tmp/$N.iperf.json 2>/dev/null || echo 0)
rm -f /tmp/$N.iperf.json
echo "  load: ${rate} Mbit/s UDP; ping min/avg/max ${min}/${avg}/${max} ms"
echo "  ${stats#delayline stats: }"
atleast "$rate" 95 && pass "the load reached ${rate} Mbit/s" || fail "load only ${rate} Mbit/s"
within "$avg" 80 1 && atleast "$min" 80 && pass "under load ping averages within 1 ms of 80 ms" \
	|| fail "under load ping avg $avg min $min"
drops=$(sed -n 's/.*queue_dropped=\([0-9]*\) user_dropped=\([0-9]*\).*/\1 \2/p' <<<"$stats")
[[ $drops == "0 0" ]] && pass "no packet dropped by the queue" || fail "queue drops (queue user): $drops"
# The delay line's own account: its mean lateness must stay under 1 ms. Its
# tail depends on what else the machine runs (on 2 busy vCPUs the p99 has
# been measured from 0.09 to 4.8 ms): only a gross regression (a tail of
# 10 ms, a timer that ticks instead of sleeping to the due time) fails here.
mean=$(sed -n 's/.*late_us_mean=\([0-9.]*\).*/\1/p' <<<"$stats")
p99=$(sed -n 's/.*late_us_p99=\([0-9]*\).*/\1/p' <<<"$stats")
[[ -n $mean ]] && ! atleast "$mean" 1000 && pass "mean release lateness ${mean} us (< 1 ms)" \
	|| fail "mean release lateness ${mean:-?} us"
[[ -n $p99 && $p99 -le 10000 ]] && pass "release p99 ${p99} us (<= 10 ms)" || fail "release p99 ${p99:-?} us"

finish
