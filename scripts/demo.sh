#!/usr/bin/env bash
# bloatd's demo: watch a download bloat an emulated 3.5G link's buffer.
#
# Creates the lab (scripts/lab/topo.sh) with the 3.5g profile: 16 Mbit/s,
# 80 ms base RTT, 1 MB of buffer at the bottleneck, as Alfredsson et al. and
# Jiang et al. measured on HSPA+ networks. Starts bloatd if it is not running,
# then a CUBIC bulk download and, every few seconds, a 320 kB "web page"
# fetch beside it, and opens `bloatd top`: the download's RTT climbs from
# 80 ms toward 600 ms while its throughput stays flat, and every web fetch
# waits behind the queue. Quit top (q) or press Ctrl-C: the lab, the traffic,
# and the daemon if the demo started it, are removed.
#
# The receiver's fix, live: bloatd starts with DRWA armed (--drwa=off);
# press D in `bloatd top` and the receiver clamps its advertised window to
# 3 x the data it gets per RTT, scaled by floor/RTT (Jiang et al.'s DRWA):
# the queue drains to about twice the floor while the download keeps its
# rate; D again gives the window back and the queue refills.
#
# Without a terminal on stdout, prints a `bloatd top --once` frame every
# second for DEMO_SECONDS (default 30) instead, switching DRWA on after
# DEMO_DRWA_AT seconds if set.
#
# Environment: DEMO_CC=bloatd_westwood runs the download with Westwood+ (it
# empties the queue after each loss), DEMO_SECONDS, DEMO_DRWA_AT, BLOATD (the
# binary, default target/release/bloatd).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BLOATD=${BLOATD:-$ROOT/target/release/bloatd}
DEMO_CC=${DEMO_CC:-cubic}
DEMO_SECONDS=${DEMO_SECONDS:-30}
DEMO_DRWA_AT=${DEMO_DRWA_AT:-}
LAB=bldemo
PY=$(scripts/python.sh) || exit 1
FLOWS=$ROOT/scripts/lab/flows.py
TOPO=$ROOT/scripts/lab/topo.sh
RUN=/run/bloatd-lab

die() { echo "demo: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "run as root (sudo make demo): the lab creates network namespaces"
[[ -x $BLOATD ]] || die "$BLOATD not found: build it first (make build)"
[[ $DEMO_SECONDS =~ ^[0-9]+$ ]] || die "DEMO_SECONDS must be a number of seconds"
[[ -z $DEMO_DRWA_AT || $DEMO_DRWA_AT =~ ^[0-9]+$ ]] || die "DEMO_DRWA_AT must be a number of seconds"

# shellcheck source=scripts/lab/bloatd.sh
source "$ROOT/scripts/lab/bloatd.sh"
PIDS=()
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	echo
	echo "demo: stopping traffic, removing the lab"
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	"$TOPO" down "$LAB" >/dev/null 2>&1 || true
	if ((${BLOATD_STARTED:-0})); then
		echo "demo: stopping the bloatd the demo started"
		bloatd_release
	fi
	rm -f "$RUN/$LAB.fetches.log"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "demo: creating the lab '$LAB' with the 3.5g profile"
"$TOPO" up "$LAB" --profile 3.5g

set +e
bloatd_ensure --drwa=off || die "could not start bloatd (see above)"
if ((BLOATD_STARTED)); then
	echo "demo: started bloatd (DRWA armed, off: D in bloatd top switches it)"
else
	echo "demo: bloatd is already running: using it"
	"$BLOATD" policy list 2>/dev/null | grep -q "^DRWA: disabled" &&
		echo "demo: its DRWA is disabled: D in bloatd top will say so (start it with --drwa=off)"
fi
grep -qw "$DEMO_CC" /proc/sys/net/ipv4/tcp_available_congestion_control ||
	die "congestion control $DEMO_CC is not available (bloatd_* are registered by bloatd start)"

# Traffic: sessions of their own (setsid) so the terminal's Ctrl-C reaches
# only this script, which stops them in order.
mkdir -p "$RUN"
setsid ip netns exec "$LAB-snd" "$PY" "$FLOWS" serve --port 8000 >/dev/null 2>&1 &
PIDS+=($!)
sleep 0.5
# The download starts two seconds in, so the dashboard shows the queue
# building from empty.
setsid bash -c "sleep 2; exec ip netns exec $LAB-rcv $PY $FLOWS fetch --bytes 0 --seconds 86400 --cc $DEMO_CC --label bulk" \
	>/dev/null 2>&1 &
PIDS+=($!)
setsid ip netns exec "$LAB-rcv" "$PY" "$FLOWS" fetch --bytes 320000 --cc "$DEMO_CC" \
	--count 1000000 --gap 3 --label web >"$RUN/$LAB.fetches.log" 2>&1 &
PIDS+=($!)

# The last web fetch's response time, for the text mode.
last_fetch() {
	grep '"done"' "$RUN/$LAB.fetches.log" 2>/dev/null | tail -1 |
		"$PY" -c 'import json, sys
line = sys.stdin.read().strip()
if line:
    print("last 320 kB web fetch: %.2f s" % json.loads(line)["response_s"])' || true
}

echo "demo: $DEMO_CC bulk download from $LAB-snd to $LAB-rcv through a 16 Mbit/s link with 1 MB of buffer,"
echo "      and a 320 kB web fetch every 3 s beside it"
if [[ -t 1 ]]; then
	echo "demo: opening bloatd top (D switches DRWA on/off, q quits, Ctrl-C tears everything down)"
	sleep 1
	"$BLOATD" top || true
else
	echo "demo: no terminal: a bloatd top --once frame every second for ${DEMO_SECONDS} s"
	for ((i = 1; i <= DEMO_SECONDS; i++)); do
		sleep 1
		if [[ $i == "$DEMO_DRWA_AT" ]]; then
			"$BLOATD" policy drwa on || echo "(could not switch DRWA on)"
		fi
		echo "---- t=${i}s  $(last_fetch)"
		"$BLOATD" top --once --width 160 || echo "(bloatd top --once failed)"
	done
fi
