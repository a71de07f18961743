#!/usr/bin/env bash
# The lab topology: three network namespaces, sender - router - receiver.
#
#   NAME-snd eth0 10.9.1.1 fd09:1::1  <->  snd0 10.9.1.2 fd09:1::2  NAME-rtr
#   NAME-rtr rcv0 10.9.2.1 fd09:2::1  <->  eth0 10.9.2.2 fd09:2::2  NAME-rcv
#
# The bottleneck is a tbf qdisc on the router's egress toward the receiver:
# on the sender's own egress TCP Small Queues would keep the queue in the
# socket instead of the qdisc, and no bufferbloat would show in the RTT.
# Offloads are off so the router queues MTU-sized packets, as a cellular
# base station would, and tbf's buffer is counted in real packets.
set -euo pipefail

usage() {
	cat <<'TXT'
usage: scripts/lab/topo.sh up NAME [options]    create (or re-create) the topology
       scripts/lab/topo.sh down NAME            remove it: namespaces, qdiscs, rules, delay line
       scripts/lab/topo.sh status NAME          exit 0 if it exists, print its qdisc
       scripts/lab/topo.sh list                 namespaces that look like lab topologies

options for up:
  --rate RATE          bottleneck rate, tc syntax (default 10mbit)
  --buffer-bytes N     bottleneck buffer in bytes (tbf limit, default 1500000)
  --delay-ms N         base RTT added by the router's delay line (default 0)

Congestion control: every new netns starts with bbr, and a non-init netns may
only default to the host's tcp_allowed_congestion_control. So the lab never
relies on a namespace default: every flow sets its congestion control on the
socket (iperf3 -C NAME, setsockopt TCP_CONGESTION), which root may always do.

Namespaces are NAME-snd, NAME-rtr and NAME-rcv. NAME: 1-8 of [a-z0-9].
On error or Ctrl-C during `up`, everything made so far is removed.
TXT
}

die() { echo "topo.sh: $*" >&2; exit 2; }

check_name() {
	[[ ${1:-} =~ ^[a-z0-9]{1,8}$ ]] || die "bad topology name '${1:-}' (1-8 of [a-z0-9])"
}

LAB_RUN=/run/bloatd-lab

# tc rates to bit/s, so the tbf burst can follow the rate.
rate_bps() {
	local r=${1,,} n unit
	[[ $r =~ ^([0-9]+(\.[0-9]+)?)([kmg]?)(bit|bps)?$ ]] || die "bad rate '$1' (e.g. 10mbit, 500kbit)"
	n=${BASH_REMATCH[1]} unit=${BASH_REMATCH[3]}
	case $unit in
	k) awk -v n="$n" 'BEGIN{printf "%d", n*1000}' ;;
	m) awk -v n="$n" 'BEGIN{printf "%d", n*1000000}' ;;
	g) awk -v n="$n" 'BEGIN{printf "%d", n*1000000000}' ;;
	*) awk -v n="$n" 'BEGIN{printf "%d", n}' ;;
	esac
}

ns_exists() { ip netns list | awk '{print $1}' | grep -qx "$1"; }

down() {
	local name=$1 ns
	if [[ -f $LAB_RUN/$name.delay.pid ]]; then
		kill "$(cat "$LAB_RUN/$name.delay.pid")" 2>/dev/null || true
		rm -f "$LAB_RUN/$name.delay.pid"
	fi
	# Deleting a namespace removes its veths, qdiscs and iptables rules with it.
	for ns in "$name-snd" "$name-rtr" "$name-rcv"; do
		if ns_exists "$ns"; then
			# Processes left in the namespace (iperf3 servers...) would keep
			# its sockets alive: end them first.
			ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true
			ip netns del "$ns"
		fi
	done
}

nsx() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

offloads_off() {
	nsx "$1" ethtool -K "$2" tso off gso off gro off >/dev/null 2>&1 || true
}

up() {
	local name=$1; shift
	local rate=10mbit buffer=1500000 delay_ms=0
	while (($#)); do
		case $1 in
		--rate) rate=${2:?}; shift 2 ;;
		--buffer-bytes) buffer=${2:?}; shift 2 ;;
		--delay-ms) delay_ms=${2:?}; shift 2 ;;
		-h|--help) usage; exit 0 ;;
		*) die "unknown option '$1' (see --help)" ;;
		esac
	done
	[[ $buffer =~ ^[0-9]+$ && $buffer -ge 3000 ]] || die "--buffer-bytes must be an integer >= 3000"
	[[ $delay_ms =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--delay-ms must be a number"
	local bps; bps=$(rate_bps "$rate")

	down "$name"
	trap 'echo "topo.sh: setup of $name failed, removing it" >&2; down "$name"' ERR
	trap 'down "$name"; exit 130' INT TERM

	local snd=$name-snd rtr=$name-rtr rcv=$name-rcv ns
	for ns in "$snd" "$rtr" "$rcv"; do
		ip netns add "$ns"
		nsx "$ns" ip link set lo up
	done
	ip -n "$snd" link add eth0 type veth peer name snd0 netns "$rtr"
	ip -n "$rcv" link add eth0 type veth peer name rcv0 netns "$rtr"

	ip -n "$snd" addr add 10.9.1.1/24 dev eth0
	ip -n "$snd" addr add fd09:1::1/64 dev eth0 nodad
	ip -n "$rtr" addr add 10.9.1.2/24 dev snd0
	ip -n "$rtr" addr add fd09:1::2/64 dev snd0 nodad
	ip -n "$rtr" addr add 10.9.2.1/24 dev rcv0
	ip -n "$rtr" addr add fd09:2::1/64 dev rcv0 nodad
	ip -n "$rcv" addr add 10.9.2.2/24 dev eth0
	ip -n "$rcv" addr add fd09:2::2/64 dev eth0 nodad
	offloads_off "$snd" eth0; offloads_off "$rtr" snd0
	offloads_off "$rtr" rcv0; offloads_off "$rcv" eth0
	ip -n "$snd" link set eth0 up
	ip -n "$rtr" link set snd0 up
	ip -n "$rtr" link set rcv0 up
	ip -n "$rcv" link set eth0 up
	ip -n "$snd" route add default via 10.9.1.2
	ip -n "$snd" -6 route add default via fd09:1::2
	ip -n "$rcv" route add default via 10.9.2.1
	ip -n "$rcv" -6 route add default via fd09:2::1
	nsx "$rtr" sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1

	# tbf needs a bucket of at least one MTU and enough for one timer tick
	# at the configured rate, or it cannot reach the rate.
	local burst=$(( bps / 8 / 250 ))
	(( burst < 3028 )) && burst=3028
	nsx "$rtr" tc qdisc replace dev rcv0 root tbf rate "$rate" burst "$burst" limit "$buffer"

	if [[ $delay_ms != 0 ]]; then
		delay_up "$name" "$delay_ms"
	fi
	trap - ERR INT TERM
	echo "lab $name up: rate $rate, buffer $buffer B, base delay ${delay_ms} ms"
}

delay_up() {
	die "--delay-ms: the delay line is not implemented yet"
}

cmd=${1:-}
case $cmd in
up) shift; check_name "${1:-}"; up "$@" ;;
down) shift; check_name "${1:-}"; down "$1" ;;
status)
	shift; check_name "${1:-}"
	ns_exists "$1-rtr" || { echo "lab $1: not up"; exit 1; }
	nsx "$1-rtr" tc qdisc show dev rcv0 ;;
list) ip netns list | awk '{print $1}' | sed -n 's/-rtr$//p' ;;
-h|--help|help) usage ;;
*) usage >&2; exit 2 ;;
esac
