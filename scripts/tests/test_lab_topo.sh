#!/usr/bin/env bash
# The lab topology comes up as specified and goes away completely: no
# namespace, qdisc, iptables rule, delay line process or run file is left,
# also when `up` is interrupted (SIGINT) at any point of its work.
# Run as root: sudo scripts/tests/test_lab_topo.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
NAME=test_lab_topo
source scripts/tests/lib.sh
N=bltopo

cleanup() { "$TOPO" down "$N" >/dev/null 2>&1 || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM

need_root

# Everything `up` can leave behind, one line per item; empty when clean.
leftovers() {
	local ns
	for ns in $(ip netns list | awk '{print $1}' | grep -E "^$N-" || true); do
		echo "namespace $ns"
	done
	# Processes still holding a handle on the lab (the delay line's
	# command line names its pid file).
	pgrep -af "bloatd-lab/$N\.(delay|link)" | sed 's/^/process /'
	ls /run/bloatd-lab/"$N".* 2>/dev/null | sed 's/^/run file /'
	# The lab never touches the root namespace's devices or rules: check.
	ip -br link | awk '{print $1}' | grep -E '^(snd0|rcv0)(@|$)' | sed 's/^/root link /'
	tc qdisc show | grep -E 'dev (snd0|rcv0) ' | sed 's/^/root qdisc /'
	{ iptables -t raw -S; ip6tables -t raw -S; iptables -t mangle -S; ip6tables -t mangle -S; } 2>/dev/null |
		grep -i nfqueue | sed 's/^/root rule /'
}

expect_clean() {
	local left
	left=$(leftovers)
	if [[ -z $left ]]; then pass "$1: nothing left behind"; else fail "$1: left behind: $left"; fi
}

echo "test_lab_topo: up/down of lab '$N'"
cleanup
expect_clean "before the test"

"$TOPO" up "$N" --profile 3.5g --buffer-bytes 200000 >/dev/null || fail "up failed"
"$TOPO" status "$N" >/dev/null && pass "status: up" || fail "status after up"
nns=$(ip netns list | awk '{print $1}' | grep -cE "^$N-(snd|rtr|rcv)$")
[[ $nns -eq 3 ]] && pass "3 namespaces" || fail "namespaces: $nns"
q=$(ip netns exec "$N-rtr" tc qdisc show dev rcv0)
[[ $q == *"tbf"*"rate 16Mbit"* ]] && pass "tbf on the router: $q" || fail "qdisc: $q"
# tc shows the buffer as the latency it adds: (limit - burst) / rate =
# (200000 - 8000) B / 2 MB/s = 96 ms.
[[ $q == *"lat 96ms"* ]] && pass "--buffer-bytes overrides the profile (200000 B: lat 96ms)" || fail "buffer: $q"
rules=$(ip netns exec "$N-rtr" iptables -t raw -S PREROUTING | grep -c NFQUEUE)
rules6=$(ip netns exec "$N-rtr" ip6tables -t raw -S PREROUTING | grep -c NFQUEUE)
[[ $rules -eq 1 && $rules6 -eq 1 ]] && pass "NFQUEUE rules in the router (v4 $rules, v6 $rules6)" || fail "rules v4 $rules v6 $rules6"
dpid=$(cat /run/bloatd-lab/$N.delay.pid 2>/dev/null)
kill -0 "$dpid" 2>/dev/null && pass "delay line running (pid $dpid)" || fail "no delay line"
ip netns exec "$N-snd" ping -c 2 -i 0.2 -W 2 10.9.2.2 >/dev/null && pass "sender reaches receiver" || fail "no connectivity"

"$TOPO" up "$N" --profile 3g >/dev/null || fail "second up failed"
kill -0 "$dpid" 2>/dev/null && fail "old delay line survived the re-create" || pass "re-create replaced the delay line"
n_dl=$(pgrep -fc "bloatd-lab/$N\.delay")
[[ $n_dl -eq 1 ]] && pass "one delay line after re-create" || fail "$n_dl delay lines"
q=$(ip netns exec "$N-rtr" tc qdisc show dev rcv0)
[[ $q == *"rate 150Kbit"* ]] && pass "re-create applied the 3g profile" || fail "qdisc after re-create: $q"

"$TOPO" down "$N"
expect_clean "down"
"$TOPO" status "$N" >/dev/null && fail "status after down" || pass "status: not up"
"$TOPO" down "$N" && pass "down of an absent lab succeeds" || fail "second down failed"

# A trace-driven link: the downlink through the link emulator (FORWARD,
# queue 1), the uplink's trace and base delay through the delay line.
"$TOPO" up "$N" --profile lte >/dev/null || fail "up --profile lte failed"
q=$(ip netns exec "$N-rtr" tc qdisc show dev rcv0)
[[ $q != *tbf* ]] && pass "trace link: no tbf on the router" || fail "trace link has a qdisc: $q"
rules=$(ip netns exec "$N-rtr" iptables -t mangle -S FORWARD | grep -c "NFQUEUE --queue-num 1")
[[ $rules -eq 1 ]] && pass "trace link: FORWARD NFQUEUE rule" || fail "FORWARD rules: $rules"
lpid=$(cat /run/bloatd-lab/$N.link.pid 2>/dev/null)
dpid=$(cat /run/bloatd-lab/$N.delay.pid 2>/dev/null)
kill -0 "$lpid" 2>/dev/null && grep -q "TMobile-LTE-short.down" /run/bloatd-lab/$N.link.log \
	&& pass "link emulator on the .down trace (pid $lpid)" || fail "no link emulator"
kill -0 "$dpid" 2>/dev/null && grep -q "TMobile-LTE-short.up" /run/bloatd-lab/$N.delay.log \
	&& pass "uplink on the .up trace with the base delay (pid $dpid)" || fail "no uplink emulator"
ip netns exec "$N-snd" ping -c 2 -i 0.2 -W 2 10.9.2.2 >/dev/null && pass "sender reaches receiver" || fail "no connectivity"
b=$("$TOPO" backlog "$N")
[[ $b =~ ^[0-9]+$ ]] && pass "backlog of the trace link: $b B" || fail "backlog: '$b'"
"$TOPO" up "$N" --trace /nonexistent/trace.down >/dev/null 2>&1
[[ $? -eq 2 ]] && pass "a missing trace file: exit 2" || fail "missing trace accepted"
"$TOPO" down "$N"
expect_clean "down of a trace link"

# Interrupt `up` at increasing points of its work. Job control gives the
# background job its own process group, so SIGINT is not ignored in it;
# `env --default-signal=INT` undoes an ignored SIGINT inherited from whoever
# started the suite (a background `make test` ignores it, and an ignored
# signal can be neither trapped nor delivered).
set -m
interrupted=0
for at in 0.01 0.03 0.05 0.08 0.12 0.2; do
	env --default-signal=INT "$TOPO" up "$N" --profile 3.5g >/dev/null 2>&1 &
	pid=$!
	sleep "$at"
	kill -INT "$pid" 2>/dev/null
	wait "$pid"
	rc=$?
	if [[ $rc -eq 130 ]]; then
		interrupted=$((interrupted + 1))
		expect_clean "SIGINT after ${at}s (up exited 130)"
	else
		echo "  note: up finished (rc $rc) before SIGINT at ${at}s"
		"$TOPO" down "$N"
		expect_clean "down after an up that finished"
	fi
done
for at in 0.05 0.1 0.15 0.2 0.3 0.45; do
	env --default-signal=INT "$TOPO" up "$N" --profile lte >/dev/null 2>&1 &
	pid=$!
	sleep "$at"
	kill -INT "$pid" 2>/dev/null
	wait "$pid"
	rc=$?
	if [[ $rc -eq 130 ]]; then
		interrupted=$((interrupted + 1))
		expect_clean "trace link: SIGINT after ${at}s (up exited 130)"
	else
		echo "  note: up --profile lte finished (rc $rc) before SIGINT at ${at}s"
		"$TOPO" down "$N"
		expect_clean "down after an up that finished"
	fi
done
set +m
[[ $interrupted -ge 4 ]] && pass "$interrupted interrupted runs of up" || fail "only $interrupted runs of up were interrupted"

# Ctrl-C in the middle of an experiment (lab.py, background flow running):
# traffic stopped, lab removed, exit 130.
OUT=$(mktemp -d /tmp/bloatd-lab-topo.XXXXXX)
set -m
env --default-signal=INT /usr/bin/python3 scripts/lab/lab.py --name "$N" --instrument ss --profiles 3.5g --runs C \
	--ccs cubic --shorts 3 --out "$OUT" >"$OUT/log" 2>&1 &
pid=$!
for ((i = 0; i < 100; i++)); do
	grep -q "run C" "$OUT/log" 2>/dev/null && break
	sleep 0.1
done
sleep 2
flows=$(pgrep -fc "$PWD/scripts/lab/flows.py")
kill -INT "$pid"
wait "$pid"
rc=$?
set +m
[[ $rc -eq 130 ]] && pass "lab.py interrupted with $flows traffic processes running: exit 130" \
	|| fail "lab.py after SIGINT exited $rc: $(tail -3 "$OUT/log")"
expect_clean "interrupted lab.py"
left=$(pgrep -fa "$PWD/scripts/lab/flows.py")
[[ -z $left ]] && pass "no traffic process left" || fail "traffic left: $left"
rm -rf "$OUT"

# A failing up (bad option value at tc) removes what it made.
"$TOPO" up "$N" --rate 16mbit --buffer-bytes 99999999999999 >/dev/null 2>&1 && fail "absurd buffer accepted" || true
expect_clean "failed up"

finish
