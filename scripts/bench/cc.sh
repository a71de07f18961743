#!/usr/bin/env bash
# Benchmark bloatd's struct_ops congestion controls against the kernel's.
#
# 1. bloatd_cubic vs the kernel's cubic on a veth pair at line rate (no
#    bottleneck: the CPU is the limit, so any per-ACK overhead of the BPF
#    version shows up as throughput and as CPU per byte). Many short runs,
#    alternating the order, in one invocation; medians of the per-pair ratios.
# 2. Per-callback cost of every struct_ops program from the kernel's BPF
#    statistics (kernel.bpf_stats_enabled: run_time_ns / run_cnt), for
#    bloatd_cubic and bloatd_westwood under the same load.
#
# usage: scripts/bench/cc.sh [--pairs N] [--secs S]     (root; default 20 pairs of 3 s)
# Namespaces bcb-snd (sender) and bcb-rcv (receiver) from scripts/lab/topo.sh
# --direct; removed on exit.
set -euo pipefail

PAIRS=20 SECS=3
while (($#)); do
	case $1 in
	--pairs) PAIRS=${2:?}; shift 2 ;;
	--secs) SECS=${2:?}; shift 2 ;;
	-h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "cc.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
	esac
done
[[ $(id -u) -eq 0 ]] || { echo "cc.sh: run as root (loads BPF, creates namespaces)" >&2; exit 1; }
for t in iperf3 bpftool python3 taskset chrt; do
	command -v "$t" >/dev/null || { echo "cc.sh: $t missing: run scripts/deps.sh" >&2; exit 1; }
done

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
WORK=$(mktemp -d /tmp/bloatd-bench-cc.XXXXXX)
A=bcb-snd B=bcb-rcv
HOLD_PIDS=()
STATS_WAS=$(sysctl -n kernel.bpf_stats_enabled)

cleanup() {
	set +e
	sysctl -qw kernel.bpf_stats_enabled="$STATS_WAS"
	for p in "${HOLD_PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
	"$ROOT/scripts/lab/topo.sh" down bcb >/dev/null 2>&1
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "building the loader (cargo, release)..." >&2
cargo build -q --release -p bloatd-cc --example cc_hold --manifest-path "$ROOT/Cargo.toml"
HOLD=$CARGO_TARGET_DIR/release/examples/cc_hold

# Sender and receiver on a veth pair, each pinned to its own core and at
# real-time priority 1, so that other load on the machine (builds, other
# tests) does not land in one run and not the next.
"$ROOT/scripts/lab/topo.sh" up bcb --direct >/dev/null
ip netns exec $B chrt -f 1 taskset -c 1 iperf3 -s -D -p 5299 --pidfile "$WORK/iperf3.pid" >/dev/null
sleep 0.3

# One loader per algorithm: if another bloatd holds bloatd_westwood, its
# per-callback costs are skipped instead of failing the whole benchmark.
HOLD_PIDS=()
STAT_ALGOS=()
hold() {
	local cc=$1
	"$HOLD" "$cc" >"$WORK/hold.$cc" 2>"$WORK/hold.$cc.err" &
	HOLD_PIDS+=($!)
	for _ in $(seq 100); do
		grep -q '^ready' "$WORK/hold.$cc" 2>/dev/null && { STAT_ALGOS+=("$cc"); return 0; }
		kill -0 "${HOLD_PIDS[-1]}" 2>/dev/null || break
		sleep 0.1
	done
	cat "$WORK/hold.$cc.err" >&2
	return 1
}
hold bloatd_cubic || exit 1
hold bloatd_westwood || echo "cc.sh: skipping bloatd_westwood's per-callback costs" >&2
for cc in "${STAT_ALGOS[@]}"; do cat "$WORK/hold.$cc"; done >"$WORK/hold.out"

busy_jiffies() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }

# One run: prints "cc bits_per_s sender_cpu_pct system_busy_jiffies bytes".
run() {
	local cc=$1 out=$WORK/run.json b0 b1
	b0=$(busy_jiffies)
	ip netns exec $A chrt -f 1 taskset -c 0 iperf3 -c 10.9.2.2 -p 5299 -t "$SECS" -C "$cc" -J >"$out"
	b1=$(busy_jiffies)
	python3 - "$cc" "$out" $((b1 - b0)) <<'PY'
import json, sys
cc, path, busy = sys.argv[1], sys.argv[2], int(sys.argv[3])
j = json.load(open(path))
e = j["end"]
r = e["sum_received"]
# iperf3 3.12 caps "bytes" at 2^31 - 1 in JSON: derive it from the rate
print(cc, r["bits_per_second"], e["cpu_utilization_percent"]["host_total"],
      busy, r["bits_per_second"] * r["seconds"] / 8)
PY
}

echo "warm-up" >&2
run cubic >/dev/null
run bloatd_cubic >/dev/null

echo "bloatd_cubic vs cubic: $PAIRS pairs of ${SECS} s, alternating order" >&2
: >"$WORK/pairs.txt"
for i in $(seq "$PAIRS"); do
	if ((i % 2)); then order="cubic bloatd_cubic"; else order="bloatd_cubic cubic"; fi
	for cc in $order; do run "$cc" | tee -a "$WORK/pairs.txt" >&2; done
done

echo "per-callback cost (kernel.bpf_stats_enabled)" >&2
sysctl -qw kernel.bpf_stats_enabled=1
: >"$WORK/stats.txt"
for cc in "${STAT_ALGOS[@]}"; do
	ids=$(grep "^registered $cc " "$WORK/hold.out" | tr ' ' '\n' | sed -n 's/.*=\([0-9]*\)$/\1/p')
	snap() { for id in $ids; do bpftool prog show id "$id" -j; echo; done; }
	snap >"$WORK/before.json"
	run "$cc" | tee -a "$WORK/stats_runs.txt" >&2
	snap >"$WORK/after.json"
	python3 - "$cc" "$WORK/before.json" "$WORK/after.json" "$WORK/stats_runs.txt" >>"$WORK/stats.txt" <<'PY'
import json, sys
cc, before, after, runs = sys.argv[1:5]
load = lambda p: {j["name"]: j for j in (json.loads(l) for l in open(p) if l.strip())}
b, a = load(before), load(after)
bytes_ = float([l.split() for l in open(runs) if l.startswith(cc + " ")][-1][4])
for name in sorted(a):
    cnt = a[name].get("run_cnt", 0) - b[name].get("run_cnt", 0)
    ns = a[name].get("run_time_ns", 0) - b[name].get("run_time_ns", 0)
    if cnt:
        print(f"{cc} {name} {cnt} {ns} {ns / cnt:.1f} {cnt / bytes_ * 1e6:.3f}")
PY
done
sysctl -qw kernel.bpf_stats_enabled="$STATS_WAS"

python3 - "$WORK/pairs.txt" "$WORK/stats.txt" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
base = [r for r in rows if r[0] == "cubic"]
ours = [r for r in rows if r[0] == "bloatd_cubic"]
n = min(len(base), len(ours))
tput = [float(ours[i][1]) / float(base[i][1]) for i in range(n)]
# CPU per byte: iperf3 sender process (user+sys) and the whole machine
cpu_s = [(float(ours[i][2]) / float(ours[i][1])) / (float(base[i][2]) / float(base[i][1])) for i in range(n)]
cpu_m = [(float(ours[i][3]) / float(ours[i][4])) / (float(base[i][3]) / float(base[i][4])) for i in range(n)]
med = statistics.median
print("== bloatd_cubic / kernel cubic, veth line rate, %d pairs" % n)
print("throughput: kernel cubic median %.2f Gbit/s, bloatd_cubic median %.2f Gbit/s" % (
    med(float(r[1]) for r in base[:n]) / 1e9, med(float(r[1]) for r in ours[:n]) / 1e9))
q = statistics.quantiles(tput, n=4) if n >= 4 else [min(tput), med(tput), max(tput)]
print("throughput ratio   median %.3f  (quartiles %.3f .. %.3f, min %.3f, max %.3f)" % (
    med(tput), q[0], q[-1], min(tput), max(tput)))
print("sender CPU/byte    median %.3f  (iperf3 sender process, user+sys)" % med(cpu_s))
print("machine CPU/byte   median %.3f  (all CPUs busy time from /proc/stat)" % med(cpu_m))
print("== per-callback cost (one run each, bpf_stats): algo prog calls ns/call calls/MB")
for l in open(sys.argv[2]):
    cc, name, cnt, ns, per, per_mb = l.split()
    print("%-16s %-32s %10s calls %7s ns/call %8s calls/MB" % (cc, name, cnt, per, per_mb))
PY
