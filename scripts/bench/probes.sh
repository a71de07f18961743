#!/usr/bin/env bash
# bloatd's overhead, measured side by side in one run (not a test: it
# reports, it does not judge).
#
#  1. Cost per event of each probe, from the kernel's BPF statistics
#     (run_time_ns / run_cnt), next to two reference programs attached to
#     the same tracepoint and so seeing the same events: an empty program
#     (the cost of running any program there, measurement included) and a
#     program that only updates a hash map keyed by socket cookie.
#  2. Daemon CPU (user + sys) per second of wall time with one flow at
#     veth line rate (many sockets: scripts/bench/scale.py).
#  3. iperf3 -C cubic throughput with and without bloatd, alternating short
#     runs with the sender and receiver pinned to one CPU each.
#
# Usage: scripts/bench/probes.sh [--runs N] [--seconds S]   (root)
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=12 SECS=3
while (($#)); do
	case $1 in
	--runs) RUNS=$2; shift 2 ;;
	--seconds) SECS=$2; shift 2 ;;
	-h|--help) sed -n '2,16p' "$0"; exit 0 ;;
	*) echo "probes.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
[[ $(id -u) -eq 0 ]] || { echo "probes.sh: run as root" >&2; exit 1; }

TARGET=${CARGO_TARGET_DIR:-target}
BIN=${BLOATD_BIN:-$TARGET/release/bloatd}
cargo build --release -q -p bloatd --example bench_probes
REF=$TARGET/release/examples/bench_probes
LAB=bbench RUN=$(mktemp -d /tmp/bloatd-bench.XXXX) PORT=9499
PY=/usr/bin/python3
HOLD=()

cleanup() {
	"$BIN" --run-dir "$RUN" stop >/dev/null 2>&1 || true
	for fd in "${HOLD[@]}"; do eval "exec $fd>&-"; done
	pkill -f "bench_probes baseline" 2>/dev/null || true
	scripts/lab/topo.sh down "$LAB" >/dev/null 2>&1 || true
	rm -rf "$RUN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

nsx() { local side=$1; shift; ip netns exec "$LAB-$side" "$@"; }
start_bloatd() { "$BIN" --run-dir "$RUN" start --no-cc --listen "127.0.0.1:$PORT" "$@" >/dev/null; }
stop_bloatd() { "$BIN" --run-dir "$RUN" stop >/dev/null; }
bloatd_pid() { cat "$RUN/bloatd.pid"; }
# CPU seconds (user + sys) of a process, from /proc/PID/stat.
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat"; }
# Download from the sender for S seconds; prints Gbit/s.
download() {
	nsx snd iperf3 -s -1 -D -p 5400 -A 1 >/dev/null; sleep 0.3
	nsx rcv iperf3 -c 10.9.1.1 -p 5400 -C cubic -t "$1" -R -A 0 -J |
		$PY -c 'import json,sys; print("%.2f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9))'
}

echo "== veth at line rate: scripts/lab/topo.sh --direct (no router, no bottleneck, offloads on)"
scripts/lab/topo.sh up "$LAB" --direct >/dev/null

echo
echo "== 1. cost per event (kernel BPF statistics), all programs on the same events"
start_bloatd --bpf-stats
exec {h}> >("$REF" baseline tcp_probe >/dev/null 2>&1); HOLD+=("$h")
sleep 1
gbps=$(download 10)
bpftool -j prog show | $PY -c '
import json, sys
progs = {p["name"]: p for p in json.load(sys.stdin) if p.get("run_cnt", 0) > 0}
def ns(name):
    p = progs.get(name) or progs.get(name[:15])
    return (p["run_time_ns"] / p["run_cnt"], p["run_cnt"]) if p else (float("nan"), 0)
empty, _ = ns("bench_empty")
ref, _ = ns("bench_hash_update")
print("  %-26s %10s %10s %12s" % ("program", "events", "ns/event", "minus empty"))
for name in ["tcp_probe", "inet_sock_set_state", "tcp_retransmit_skb", "tcp_cong_state_set",
             "bench_hash_update", "bench_empty"]:
    v, n = ns(name)
    print("  %-26s %10d %10.1f %12.1f" % (name, n, v, v - empty))
v, _ = ns("tcp_probe")
print("  tcp_probe / hash-update reference: %.2f   (body: %.2f)" % (v / ref, (v - empty) / (ref - empty)))
'
echo "  (flow: $gbps Gbit/s)"
exec {h}>&-; stop_bloatd

echo
echo "== 2. daemon CPU with one flow at line rate (many sockets: scripts/bench/scale.py)"
start_bloatd
pid=$(bloatd_pid); c0=$(cpu_s "$pid"); t0=$(date +%s.%N)
gbps=$(download 10)
c1=$(cpu_s "$pid"); t1=$(date +%s.%N)
awk -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v g="$gbps" \
	'BEGIN{printf "  %.2f Gbit/s: daemon CPU %.2f%% of one core\n", g, 100*(c1-c0)/(t1-t0)}'
stop_bloatd

echo
echo "== 3. iperf3 -C cubic, with and without bloatd, $RUNS pairs of ${SECS}s, order alternating"
# veth throughput swings from run to run on this VM: besides the throughput
# ratio, the CPU the whole machine spent per byte is compared, which moves
# far less.
busy_jiffies() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
# One run: "gbps busy_jiffies_per_GB".
measure() {
	local b0 b1 g
	b0=$(busy_jiffies)
	g=$(download "$SECS")
	b1=$(busy_jiffies)
	awk -v g="$g" -v b=$((b1 - b0)) -v s="$SECS" 'BEGIN{printf "%s %.3f\n", g, b / (g * s / 8)}'
}
: >"$RUN/pairs"
for i in $(seq "$RUNS"); do
	if ((i % 2)); then order="without with"; else order="with without"; fi
	for mode in $order; do
		if [[ $mode == with ]]; then start_bloatd; sleep 0.5; fi
		r=$(measure)
		if [[ $mode == with ]]; then stop_bloatd; fi
		echo "$i $mode $r" >>"$RUN/pairs"
	done
	awk -v i="$i" '$1 == i {printf "  pair %d: %s %s Gbit/s (%s jiffies/GB)\n", i, $2, $3, $4}' "$RUN/pairs" | paste -sd' '
done
$PY - "$RUN/pairs" <<'PYEOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    i, mode, g, cpu = line.split()
    runs.setdefault(int(i), {})[mode] = (float(g), float(cpu))
tput = [p["with"][0] / p["without"][0] for p in runs.values()]
cpu = [p["with"][1] / p["without"][1] for p in runs.values()]
q = lambda v: statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3
print("  throughput with/without: median %.3f (quartiles %.3f .. %.3f)" % (statistics.median(tput), q(tput)[0], q(tput)[2]))
print("  machine CPU per byte with/without: median %.3f (quartiles %.3f .. %.3f)" % (statistics.median(cpu), q(cpu)[0], q(cpu)[2]))
PYEOF
