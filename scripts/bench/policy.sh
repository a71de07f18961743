#!/usr/bin/env bash
# The cost of acting on bloat (issue 10): the cgroup sock_ops program per
# callback, from the kernel's BPF statistics (run_time_ns / run_cnt), with
# one download at veth line rate, in each configuration of the policy:
#
#   none          no rule, DRWA disabled: the program's old work only
#                 (state callbacks; closing senders)
#   port rule     a rule matched at the handshake (sport)
#   bulk waiting  a bulk rule whose bytes never come: RTT_CB on every ACK
#                 with an RTT sample, for the whole flow (the worst case)
#   drwa armed    DRWA armed, switched off: HDR_OPT_LEN_CB per segment sent
#                 (the receiver's ACKs; the sender gives it back after
#                 drwa_min_bytes)
#   drwa on       DRWA on: the same callbacks, a round once per RTT
#
# Configurations alternate, --reps times; medians are reported (this VM's
# veth swings between 14 and 50 Gbit/s from one run to the next). With
# --baseline BIN each configuration runs with that build too, right before
# this one's ("NAME before" rows): a change's cost side by side.
# Not a test: it reports. Usage: scripts/bench/policy.sh [--seconds S] [--reps N]
#   [--baseline BIN] (root)
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=10 REPS=3 BASE=
while (($#)); do
	case $1 in
	--seconds) SECS=$2; shift 2 ;;
	--reps) REPS=$2; shift 2 ;;
	--baseline) BASE=$2; shift 2 ;;
	-h|--help) sed -n '2,23p' "$0"; exit 0 ;;
	*) echo "policy.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
[[ $(id -u) -eq 0 ]] || { echo "policy.sh: run as root" >&2; exit 1; }

BIN=${BLOATD_BIN:-${CARGO_TARGET_DIR:-target}/release/bloatd}
LAB=bpolicy RUN=$(mktemp -d /tmp/bloatd-bench.XXXX) PORT=9498
PY=/usr/bin/python3

cleanup() {
	"$BIN" --run-dir "$RUN" stop >/dev/null 2>&1 || true
	[[ -z $BASE ]] || "$BASE" --run-dir "$RUN" stop >/dev/null 2>&1 || true
	scripts/lab/topo.sh down "$LAB" >/dev/null 2>&1 || true
	rm -rf "$RUN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

nsx() { local side=$1; shift; ip netns exec "$LAB-$side" "$@"; }
# Download for S seconds (the server sends with cubic); prints Gbit/s.
download() {
	nsx snd iperf3 -s -1 -D -p 5400 -A 1 >/dev/null; sleep 0.3
	nsx rcv iperf3 -c 10.9.1.1 -p 5400 -C cubic -t "$1" -R -A 0 -J |
		$PY -c 'import json,sys; print("%.2f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9))'
}
# sock_ops program statistics: "runs run_time_ns".
sockops_stats() {
	bpftool -j prog show name sock_ops | $PY -c '
import json, sys
d = json.load(sys.stdin)
d = d if isinstance(d, list) else [d]
print(sum(p.get("run_cnt", 0) for p in d), sum(p.get("run_time_ns", 0) for p in d))'
}

echo "== veth at line rate (topo.sh --direct), ${SECS} s downloads, ${REPS} per configuration, alternating"
scripts/lab/topo.sh up "$LAB" --direct >/dev/null
RESULTS=$RUN/results
# One configuration with this build, after the baseline's if there is one.
run() {
	[[ -z $BASE ]] || run_with "$BASE" "$1 before" "${@:2}"
	run_with "$BIN" "$@"
}
run_with() {
	local bin=$1 name=$2; shift 2
	"$bin" --run-dir "$RUN" start --no-cc --bpf-stats --listen "127.0.0.1:$PORT" "$@" >/dev/null
	sleep 0.5
	read -r n0 t0 < <(sockops_stats)
	local t_start g t_end
	t_start=$(date +%s.%N)
	g=$(download "$SECS")
	t_end=$(date +%s.%N)
	read -r n1 t1 < <(sockops_stats)
	"$bin" --run-dir "$RUN" stop >/dev/null
	echo "$name|$g|$((n1 - n0))|$((t1 - t0))|$t_start|$t_end" >>"$RESULTS"
}
for ((r = 1; r <= REPS; r++)); do
	run "none"
	run "port rule" --policy "sport=5400,cc=cubic"
	run "bulk waiting" --policy "bulk_bytes=1000G,cc=reno"
	run "drwa armed" --drwa=off
	run "drwa on" --drwa
done
$PY - "$RESULTS" <<'PYEOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, g, n, t, t0, t1 = line.strip().split("|")
    rows.setdefault(name, []).append((float(g), int(n), int(t), float(t1) - float(t0)))
print("  %-14s %14s %10s %10s %10s %12s" % ("config", "Gbit/s", "callbacks", "per s", "ns/call", "% of a core"))
for name, rs in rows.items():
    g = statistics.median(r[0] for r in rs)
    n = sum(r[1] for r in rs); t = sum(r[2] for r in rs); dt = sum(r[3] for r in rs)
    spread = "%.1f-%.1f" % (min(r[0] for r in rs), max(r[0] for r in rs))
    ns = t / n if n else float("nan")
    print("  %-14s %5.1f (%s) %10d %10.0f %10.0f %12.2f" % (name, g, spread, n, n / dt, ns, 100 * t / 1e9 / dt))
PYEOF
