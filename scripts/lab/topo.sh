#!/usr/bin/env bash
# The lab topology: three network namespaces, sender - router - receiver.
#
#   NAME-snd eth0 10.9.1.1 fd09:1::1  <->  snd0 10.9.1.2 fd09:1::2  NAME-rtr
#   NAME-rtr rcv0 10.9.2.1 fd09:2::1  <->  eth0 10.9.2.2 fd09:2::2  NAME-rcv
#
# The sender plays the server, the receiver the phone: the papers' traffic is
# all downlink (web pages and bulk downloads toward the mobile).
#
# The bottleneck is a tbf qdisc on the router's egress toward the receiver:
# on the sender's own egress TCP Small Queues would keep the queue in the
# socket instead of the qdisc, and no bufferbloat would show in the RTT.
# Offloads are off so the router queues MTU-sized packets, as a cellular
# base station would, and tbf's buffer is counted in real packets.
#
# The base RTT comes from a delay line (scripts/lab/delayline/, NFQUEUE: this
# kernel has no sch_netem) on the router's ingress from the receiver, so the
# whole base RTT sits on the uplink, the path of the ACKs and of the
# requests, and the downlink data meets the tbf queue undelayed:
# - TCP only sees the sum of both directions: its RTT, its ACK clock, and
#   Westwood+'s ACK-counting bandwidth estimate are the same whichever side
#   of the loop carries the delay, because every delay line packet waits the
#   same time and leaves in order.
# - The downlink carries the data, 10-40 times the packets and bytes of the
#   uplink: keeping user space off that path leaves the bottleneck's arrival
#   process exactly what the senders emit, and keeps the delay line's load
#   (and so its error) small. Queueing at the bottleneck happens after any
#   delay on this direction would have, so where the tbf sits relative to
#   the delay is immaterial for a constant delay; what matters is that the
#   delay line itself never queues behind the bottleneck (it does not: it is
#   on the other direction) and never reorders (it is FIFO).
#
# With an AQM (--aqm codel|fq_codel) the bottleneck is the link emulator
# (scripts/lab/delayline/, its --rate or --trace link with CoDel or
# FQ-CoDel) instead of tbf: the host has neither sch_codel nor
# sch_fq_codel. With cross traffic (--cross, or a profile naming some)
# three more namespaces share the bottleneck, each with a known owner:
#
#   NAME-far eth0 10.9.3.1  <->  far0 10.9.3.2 NAME-rtr   (far side: the
#        external traffic's senders, "the rest of the internet")
#   NAME-rcv nbr0 10.9.4.1  <->  eth0 10.9.4.2 NAME-nbr   (a container or
#        pod beside the receiver: its own namespace, sockets bloatd sees)
#   NAME-rcv ext0 10.9.5.1  <->  eth0 10.9.5.2 NAME-ext   (another device
#        behind the same link: traffic bloatd cannot see or is told to ignore)
#
# The receiver routes to nbr and ext, so all of their downlink crosses the
# router's rcv0 and its bottleneck, and their uplink the delay line. The
# external TCP comes from its own namespace and not from the router's: a
# flow sent by the router itself would meet the bottleneck on its own
# egress, where TCP Small Queues keeps it to a few packets queued, and it
# would not load the queue as another user's traffic does.
set -euo pipefail

usage() {
	cat <<'TXT'
usage: scripts/lab/topo.sh up NAME [options]    create (or re-create) the topology
       scripts/lab/topo.sh down NAME            remove it: namespaces, qdiscs, rules, delay line
       scripts/lab/topo.sh status NAME          exit 0 if it exists, print its qdisc and delay line
       scripts/lab/topo.sh backlog NAME         bytes queued at the bottleneck now (tbf or trace link)
       scripts/lab/topo.sh delay NAME MS        change the base RTT live (the delay line's delay), same
                                                interface and gateway: the path got longer or shorter
       scripts/lab/topo.sh restart-trace NAME   a trace link starts its trace over, from its first
                                                line now (lab --replay: each arm from the episode's start)
       scripts/lab/topo.sh list                 namespaces that look like lab topologies
       scripts/lab/topo.sh trace T              print the file of trace T (a name or a path)
       scripts/lab/topo.sh profile NAME         print a profile as rate=.. delay_ms=.. buffer_bytes=.. [trace=..]
       scripts/lab/topo.sh profiles             print all profiles

options for up:
  --profile P          3g, 3.5g, 4g (the papers' links, constant rate), umts,
                       evdo, lte (measured cellular traces) or custom; flags
                       override it
  --rate RATE          bottleneck rate, tc syntax (default 10mbit)
  --trace T            instead of a constant rate, a link that follows a
                       Mahimahi trace: a name in the traces directory
                       (TMobile-LTE-short...; $BLOATD_TRACES, else
                       ../shared/traces next to the repository, else the
                       copies in scripts/lab/traces/) or a file;
                       NAME.down drives the downlink and NAME.up, if it
                       exists, the uplink
  --buffer-bytes N     bottleneck buffer in bytes (tbf limit or the trace
                       link's drop-tail buffer, default 1500000)
  --delay-ms N         base RTT added by the router's delay line (default 0)
  --aqm A              the bottleneck's queue: droptail (default), codel (RFC 8289)
                       or fq_codel (RFC 8290), run by the link emulator
  --ecn                with an AQM: mark ECN-capable packets CE instead of
                       dropping them; every end namespace sets tcp_ecn=1
  --target-ms N        CoDel's target (default 5)
  --interval-ms N      CoDel's interval (default 100)
  --cross              add the cross-traffic namespaces (NAME-far, NAME-nbr,
                       NAME-ext; see the top of this file)
  --direct             no router, no bottleneck, offloads on: NAME-snd and
                       NAME-rcv joined by one veth pair (10.9.1.1/16 and
                       10.9.2.2/16), the line-rate setup of the benchmarks

Congestion control: every new netns starts with bbr, and a non-init netns may
only default to the host's tcp_allowed_congestion_control. So the lab never
relies on a namespace default: every flow sets its congestion control on the
socket (iperf3 -C NAME, setsockopt TCP_CONGESTION), which root may always do.

A profile may carry options after its name, P:key=value:...: aqm, ecn (0
or 1), target_ms, interval_ms (the flags above), and the cross traffic it
runs, which brings up the cross-traffic namespaces: nbr=CC (a neighbour's
bulk download), udp=RATE (an external UDP stream), xtcp=CC (an external
TCP bulk download); lab.py and the tests start that traffic. Example:
3.5g:aqm=fq_codel:ecn=1:udp=4mbit. Flags override the profile's values.

Namespaces are NAME-snd, NAME-rtr and NAME-rcv (and NAME-far, NAME-nbr,
NAME-ext with cross traffic). NAME: 1-8 of [a-z0-9]. `up` writes what the
lab is (link, AQM, hosts, owners) to /run/bloatd-lab/NAME.json.
On error or Ctrl-C during `up`, everything made so far is removed.
TXT
}

die() { echo "topo.sh: $*" >&2; exit 2; }

check_name() {
	[[ ${1:-} =~ ^[a-z0-9]{1,8}$ ]] || die "bad topology name '${1:-}' (1-8 of [a-z0-9])"
}

LAB_RUN=/run/bloatd-lab
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# The links of the papers. Each line: name rate base_rtt_ms buffer_bytes.
# Sources (text in /work/shared/papers/, figures cited by number):
# 3g   150kbit, 150 ms, 28000 B
#      rate: Alfredsson et al. 2013, Sec. IV-C: over 3G a 320 kB transfer with
#        no competing traffic takes about 19 s, about 135 kbit/s end to end;
#        150 kbit/s leaves room for the handshake and slow start.
#      RTT: Jiang et al. 2012, Sec. 4: observed minimum RTT about 150 ms on a
#        3G (EVDO) path.
#      buffer: De Cicco & Mascolo, Sec. IV-A, quoting their UMTS study: average
#        RTTs of 1102-1550 ms under load; 1.5 s of queue at 150 kbit/s is
#        28 kB (about 19 full-size packets).
# 3.5g 16mbit, 80 ms, 1000000 B
#      rate: Alfredsson et al. 2013, Sec. IV-B (Figs. 3-5): single long flows
#        over 3.5G (HSPA+) reach 16.1, 15.5 and 15.7 Mbit/s.
#      RTT: Alfredsson et al. 2013, Sec. IV-B (Fig. 6): "without any
#        background flow, the average round-trip time of a short flow is
#        about 80 ms".
#      buffer: Jiang et al. 2012, Sec. 2 (Fig. 1): "fat pipes" on all four
#        carriers measured (HSPA+ among them), Sprint holding more than
#        1000 KB in flight: a buffer of 1 MB (0.5 s at 16 Mbit/s).
# 4g   40mbit, 100 ms, 500000 B
#      rate: no paper gives an LTE link rate for these runs; Jiang et al.
#        2012, Table 2: Android caps the LTE receive window at 484848 B, its
#        vendor's guess of the LTE bandwidth-delay product; over Ong et al.'s
#        LTE RTT (Table III, about 100 ms for 2 MiB transfers, uniform across
#        congestion controls, so little queueing) that is about 39 Mbit/s.
#      buffer: Alfredsson et al. 2013, Sec. IV-C (Fig. 10): only a minor
#        impact of background flows over 4G, "improved buffer management":
#        one bandwidth-delay product (500 kB, 100 ms at 40 Mbit/s).
PROFILES='3g 150kbit 150 28000
3.5g 16mbit 80 1000000
4g 40mbit 100 500000'

# Trace-driven links: name trace base_rtt_ms buffer_bytes. The traces are
# measured capacity (Winstein et al., NSDI 2013, distributed with Mahimahi;
# ../shared/traces/README.md); delay and buffer from the papers:
# umts TMobile-UMTS-driving (2.02 Mbit/s), 80 ms, 1000000 B
#      RTT: Alfredsson et al. 2013, Sec. IV-B (Fig. 6): about 80 ms on an
#        idle 3.5G (HSPA) path. buffer: Jiang et al. 2012, Sec. 2 (Fig. 1):
#        more than 1000 KB in flight on every carrier's 3G.
# evdo Verizon-EVDO-driving (0.52 Mbit/s), 150 ms, 1000000 B
#      RTT: Jiang et al. 2012, Sec. 4: observed minimum RTT about 150 ms on
#        EVDO. buffer: Jiang et al., Sec. 2: Sprint's EVDO held more than
#        1000 KB in flight.
# lte  TMobile-LTE-short (16.70 Mbit/s), 80 ms, 1000000 B
#      the rate of Alfredsson's 3.5G runs (16.1 Mbit/s), so F1 and F2 can
#        run on it with 3.5g's base RTT and buffer (sources above).
TRACE_PROFILES='umts TMobile-UMTS-driving 80 1000000
evdo Verizon-EVDO-driving 150 1000000
lte TMobile-LTE-short 80 1000000'

# Where trace names are looked up.
# $BLOATD_TRACES, else ../shared/traces next to the repository, else the
# copies vendored in scripts/lab/traces/ (xz), decompressed once into
# $LAB_RUN/traces.
traces_dir() {
	local d f t out
	for d in "${BLOATD_TRACES:-}" "$HERE/../../../shared/traces"; do
		[[ -n $d && -d $d ]] && { (cd "$d" && pwd); return; }
	done
	out=$LAB_RUN/traces
	mkdir -p "$out"
	for f in "$HERE"/traces/*.xz; do
		[[ -e $f ]] || continue
		d=$out/$(basename "$f" .xz)
		[[ -s $d ]] && continue
		if ! { t=$(mktemp "$d.XXXXXX") && xz -dc "$f" >"$t" && chmod 644 "$t" && mv "$t" "$d"; }; then
			die "cannot decompress $f"
		fi
	done
	echo "$out"
}

# A trace name or file -> the downlink file's path.
trace_file() {
	local t=$1 f
	if [[ $t == */* || -f $t ]]; then
		f=$t
	else
		f=$(traces_dir) || exit 2
		f=$f/$t.down
	fi
	[[ -f $f && -r $f ]] || die "trace '$t': no file $f (see ../shared/traces/README.md)"
	echo "$f"
}

# The uplink file next to a downlink trace (NAME.down -> NAME.up), if any.
trace_up_file() {
	local f=$1
	[[ $f == *.down && -f ${f%.down}.up ]] && echo "${f%.down}.up"
	return 0
}

# Mean rate of a trace file as tc writes it (1500 B per line over the
# period, the last line's time).
trace_rate() {
	awk 'END { if ($1 > 0) printf "%dbit\n", NR * 1500 * 8 * 1000 / $1 }' "$1"
}

# The options of a profile spec (P:key=value:...) and their defaults.
OPTION_DEFAULTS='aqm=droptail ecn=0 target_ms=5 interval_ms=100'

# One option key=value, checked; dies naming what is wrong.
check_option() {
	local k=${1%%=*} v=${1#*=}
	[[ $1 == *=* ]] || die "profile option '$1': want key=value"
	case $k in
	aqm) [[ $v =~ ^(droptail|codel|fq_codel)$ ]] || die "aqm=$v: want droptail, codel or fq_codel" ;;
	ecn) [[ $v =~ ^[01]$ ]] || die "ecn=$v: want 0 or 1" ;;
	target_ms|interval_ms) [[ $v =~ ^[0-9]+(\.[0-9]+)?$ && $v != 0 ]] || die "$k=$v: want a positive number of ms" ;;
	nbr|xtcp) [[ $v =~ ^[a-z0-9_]+$ ]] || die "$k=$v: want a congestion control name" ;;
	udp) rate_bps "$v" >/dev/null ;;
	*) die "unknown profile option '$k' (aqm, ecn, target_ms, interval_ms, nbr, udp, xtcp)" ;;
	esac
}

# "RATE DELAY_MS BUFFER_BYTES TRACE key=value..." of a profile spec (TRACE
# "-": constant rate; RATE of a trace profile: the trace's mean; the
# options with their defaults, then the spec's own).
profile_fields() {
	local name=${1%%:*} opts='' line t o
	[[ $1 == *:* ]] && opts=${1#*:}
	line=$(awk -v p="$name" '$1 == p {print $2, $3, $4, "-"}' <<<"$PROFILES")
	if [[ -z $line ]]; then
		line=$(awk -v p="$name" '$1 == p {print $2, $3, $4}' <<<"$TRACE_PROFILES")
		[[ -n $line ]] || die "unknown profile '$name' (3g, 3.5g, 4g, umts, evdo, lte, or custom with --rate/--trace/--delay-ms/--buffer-bytes)"
		read -r t _ <<<"$line"
		t=$(trace_file "$t") || exit 2
		line="$(trace_rate "$t") ${line#* } $t"
	fi
	line="$line $OPTION_DEFAULTS"
	if [[ -n $opts ]]; then
		local -a list
		IFS=: read -r -a list <<<"$opts"
		for o in "${list[@]}"; do
			check_option "$o"
			line="$line $o"
		done
	fi
	echo "$line"
}

# key=value of a profile spec's options (the last one given wins), or $2.
option() {
	local v=$3 o
	for o in $1; do
		[[ $o == "$2="* ]] && v=${o#*=}
	done
	echo "$v"
}

profile() {
	local f rate delay buffer trace opts k out
	f=$(profile_fields "$1") || exit 2
	read -r rate delay buffer trace opts <<<"$f"
	out="rate=$rate delay_ms=$delay buffer_bytes=$buffer"
	[[ $trace != - ]] && out="$out trace=$trace"
	for k in aqm ecn target_ms interval_ms nbr udp xtcp; do
		local v; v=$(option "$opts" "$k" "")
		[[ -n $v ]] && out="$out $k=$v"
	done
	echo "$out"
}

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

nsx() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# End one process and wait (up to 2 s) until it is gone.
stop_pid() {
	local pid=$1 i
	kill "$pid" 2>/dev/null || return 0
	for ((i = 0; i < 40; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.05
	done
	kill -9 "$pid" 2>/dev/null || true
}

# The delay line this `up` launched, until it has written its pid file: an
# interrupt can land before that, even before it entered the namespace.
DELAY_CHILD=
LINK_CHILD=

down() {
	local name=$1 ns pid
	[[ -n $DELAY_CHILD ]] && stop_pid "$DELAY_CHILD"
	[[ -n $LINK_CHILD ]] && stop_pid "$LINK_CHILD"
	local f
	for f in "$LAB_RUN/$name.delay.pid" "$LAB_RUN/$name.link.pid"; do
		[[ -f $f ]] || continue
		pid=$(cat "$f" 2>/dev/null || true)
		[[ $pid =~ ^[0-9]+$ ]] && stop_pid "$pid"
	done
	# Deleting a namespace removes its veths, qdiscs and iptables rules with it.
	for ns in "$name-snd" "$name-rtr" "$name-rcv" "$name-far" "$name-nbr" "$name-ext"; do
		if ns_exists "$ns"; then
			# Processes left in the namespace (servers, the delay line...)
			# would keep its sockets alive: end them first.
			for pid in $(ip netns pids "$ns" 2>/dev/null); do
				stop_pid "$pid"
			done
			ip netns del "$ns"
		fi
	done
	rm -f "$LAB_RUN/$name.delay.pid" "$LAB_RUN/$name.delay.log" "$LAB_RUN/$name.delay.ms" \
		"$LAB_RUN/$name.link.pid" "$LAB_RUN/$name.link.log" "$LAB_RUN/$name.json" \
		"$LAB_RUN/$name.json.new" "$LAB_RUN/$name.delay.ms.new"
}

offloads_off() {
	nsx "$1" ethtool -K "$2" tso off gso off gro off >/dev/null 2>&1 || true
}

# The delay line: its own process in the router namespace (setsid: a Ctrl-C
# meant for the caller must not stop it before `down` runs), then the
# NFQUEUE rules, only once it has bound the queue.
delay_up() {
	local name=$1 delay_ms=$2; shift 2
	# The delay lives in a file, so `topo.sh delay` can change it live.
	mkdir -p "$LAB_RUN"
	echo "$delay_ms" >"$LAB_RUN/$name.delay.ms"
	DELAY_CHILD=$(emulator_start "$name" delay "$@" --delay-file "$LAB_RUN/$name.delay.ms" --queue 0)
	# raw PREROUTING: the first hook, before conntrack and routing.
	nsx "$name-rtr" iptables -w -t raw -A PREROUTING -i rcv0 -j NFQUEUE --queue-num 0
	nsx "$name-rtr" ip6tables -w -t raw -A PREROUTING -i rcv0 -j NFQUEUE --queue-num 0
}

# The emulated downlink: a second delay line process (queue 1) with a
# trace (--trace) or constant-rate (--rate) link and its buffer, drop-tail
# or an AQM, for the packets the router forwards toward the receiver (from
# the sender, and from NAME-far with cross traffic). FORWARD only: what the
# router itself sends or receives (neighbour discovery) does not cross the
# emulated link.
link_up() {
	local name=$1; shift
	LINK_CHILD=$(emulator_start "$name" link "$@" --queue 1)
	nsx "$name-rtr" iptables -w -t mangle -A FORWARD -o rcv0 -j NFQUEUE --queue-num 1
	nsx "$name-rtr" ip6tables -w -t mangle -A FORWARD -o rcv0 -j NFQUEUE --queue-num 1
}

# A namespace joined to another by a veth pair: veth_ns NS IP4 IP6 PEER_NS
# PEER_IF PEER_IP4 PEER_IP6 (addresses with their prefix length); the new
# namespace's default route goes through the peer.
veth_ns() {
	local ns=$1 a4=$2 a6=$3 peer=$4 pif=$5 p4=$6 p6=$7
	ip netns add "$ns"
	nsx "$ns" ip link set lo up
	nsx "$ns" sysctl -qw net.ipv6.conf.default.accept_dad=0 net.ipv6.conf.all.accept_dad=0
	nsx "$ns" sysctl -qw net.ipv4.tcp_no_metrics_save=1
	ip -n "$ns" link add eth0 type veth peer name "$pif" netns "$peer"
	ip -n "$ns" addr add "$a4" dev eth0
	ip -n "$ns" addr add "$a6" dev eth0 nodad
	ip -n "$peer" addr add "$p4" dev "$pif"
	ip -n "$peer" addr add "$p6" dev "$pif" nodad
	offloads_off "$ns" eth0; offloads_off "$peer" "$pif"
	ip -n "$ns" link set eth0 up
	ip -n "$peer" link set "$pif" up
	ip -n "$ns" route add default via "${p4%/*}"
	ip -n "$ns" -6 route add default via "${p6%/*}"
}

# The cross-traffic namespaces (see the top of this file).
cross_up() {
	local name=$1 rtr=$1-rtr rcv=$1-rcv
	veth_ns "$name-far" 10.9.3.1/24 fd09:3::1/64 "$rtr" far0 10.9.3.2/24 fd09:3::2/64
	veth_ns "$name-nbr" 10.9.4.2/24 fd09:4::2/64 "$rcv" nbr0 10.9.4.1/24 fd09:4::1/64
	veth_ns "$name-ext" 10.9.5.2/24 fd09:5::2/64 "$rcv" ext0 10.9.5.1/24 fd09:5::1/64
	nsx "$rcv" sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
	local n
	for n in 4 5; do
		ip -n "$rtr" route add "10.9.$n.0/24" via 10.9.2.2
		ip -n "$rtr" -6 route add "fd09:$n::/64" via fd09:2::2
	done
}

# The kernel's count of what each owner was sent through the bottleneck
# (the router, before it: "offered") and what came out of it (the
# receiver, after it: "delivered"): rules without a target, one per owner,
# named by comment; lab truth reads their counters. In the router's mangle
# FORWARD they come before the link emulator's NFQUEUE rule.
accounting_up() {
	local name=$1 cross=$2 tool owner a4 a6 dir
	for tool in iptables ip6tables; do
		for owner in self neighbour external; do
			case $owner in
			self) a4=10.9.2.2 a6=fd09:2::2 dir="INPUT -i eth0" ;;
			neighbour) a4=10.9.4.0/24 a6=fd09:4::/64 dir="FORWARD -i eth0 -o nbr0" ;;
			external) a4=10.9.5.0/24 a6=fd09:5::/64 dir="FORWARD -i eth0 -o ext0" ;;
			esac
			[[ $owner != self && $cross == 0 ]] && continue
			[[ $tool == ip6tables ]] && a4=$a6
			nsx "$name-rtr" "$tool" -w -t mangle -A FORWARD -o rcv0 -d "$a4" \
				-m comment --comment "lab offered $owner"
			# shellcheck disable=SC2086  # "CHAIN -i IF [-o IF]"
			nsx "$name-rcv" "$tool" -w -A $dir -d "$a4" -m comment --comment "lab delivered $owner"
		done
	done
}

# What the lab is, for whoever reads its truth ($LAB_RUN/NAME.json): the
# link and its queue, the hosts and which owner each belongs to.
write_config() {
	local name=$1 prof=$2 kind=$3 rate=$4 bps=$5 trace=$6 buffer=$7 delay_ms=$8 \
		bottleneck=$9 aqm=${10} ecn=${11} target=${12} interval=${13} cross=${14} opts=${15}
	local tr=null k v traffic=
	[[ $trace != - ]] && tr="\"$trace\""
	for k in nbr udp xtcp; do
		v=$(option "$opts" "$k" "")
		[[ -n $v ]] && traffic="$traffic${traffic:+, }\"$k\": \"$v\""
	done
	local hosts='"snd": {"ns": "'$name'-snd", "addr": "10.9.1.1", "addr6": "fd09:1::1"},
  "rtr": {"ns": "'$name'-rtr"},
  "rcv": {"ns": "'$name'-rcv", "addr": "10.9.2.2", "addr6": "fd09:2::2"}'
	local owners='"self": {"near": "rcv", "far": "snd"}'
	if ((cross)); then
		hosts="$hosts"',
  "far": {"ns": "'$name'-far", "addr": "10.9.3.1", "addr6": "fd09:3::1"},
  "nbr": {"ns": "'$name'-nbr", "addr": "10.9.4.2", "addr6": "fd09:4::2"},
  "ext": {"ns": "'$name'-ext", "addr": "10.9.5.2", "addr6": "fd09:5::2"}'
		owners="$owners"', "neighbour": {"near": "nbr", "far": "snd"}, "external": {"near": "ext", "far": "far"}'
	fi
	cat >"$LAB_RUN/$name.json.new" <<JSON
{"name": "$name", "profile": "$prof", "link": "$kind", "rate": "$rate", "rate_bps": $bps,
 "trace": $tr, "buffer_bytes": $buffer, "delay_ms": $delay_ms, "bottleneck": "$bottleneck",
 "aqm": "$aqm", "ecn": $( ((ecn)) && echo true || echo false), "target_ms": $target, "interval_ms": $interval,
 "cross": $( ((cross)) && echo true || echo false), "traffic": {$traffic},
 "hosts": {
  $hosts},
 "owners": {$owners}}
JSON
	mv "$LAB_RUN/$name.json.new" "$LAB_RUN/$name.json"
}

# Start the delay line binary as its own process in the router namespace
# (setsid: a Ctrl-C meant for the caller must not stop it before `down`
# runs) with pid file and log $LAB_RUN/NAME.ROLE.*; returns once it has
# bound its queue (the NFQUEUE rule may only come after), printing its pid.
emulator_start() {
	local name=$1 role=$2 bin i child; shift 2
	bin=$("$HERE/delayline/build.sh")
	mkdir -p "$LAB_RUN"
	rm -f "$LAB_RUN/$name.$role.pid"
	setsid ip netns exec "$name-rtr" "$bin" "$@" \
		--pidfile "$LAB_RUN/$name.$role.pid" --rt 50 \
		</dev/null >>"$LAB_RUN/$name.$role.log" 2>&1 &
	child=$!
	for ((i = 0; i < 100; i++)); do
		[[ -s $LAB_RUN/$name.$role.pid ]] && break
		kill -0 "$child" 2>/dev/null || { cat "$LAB_RUN/$name.$role.log" >&2; die "$role emulator did not start"; }
		sleep 0.02
	done
	[[ -s $LAB_RUN/$name.$role.pid ]] || { stop_pid "$child"; die "$role emulator did not bind its queue within 2 s"; }
	echo "$child"
}

# Sender and receiver on one veth pair with the kernel's offloads: what a
# host at line rate looks like, for measuring CPU cost (no queue, no delay).
# The lab is whole: from here a Ctrl-C or TERM is ignored, so `up` ends 0
# with the lab up. (Removing the traps instead left a window in which the
# signal's default action killed `up` with everything made: a lab up
# behind an exit status that says interrupted. Seen once in CI.) INT and
# TERM are ignored before the EXIT trap goes, so no instant is uncovered.
setup_done() {
	trap '' INT TERM
	trap - EXIT
}

direct_up() {
	local name=$1 snd=$1-snd rcv=$1-rcv ns
	for ns in "$snd" "$rcv"; do
		ip netns add "$ns"
		nsx "$ns" ip link set lo up
		nsx "$ns" sysctl -qw net.ipv6.conf.default.accept_dad=0 net.ipv6.conf.all.accept_dad=0
		nsx "$ns" sysctl -qw net.ipv4.tcp_no_metrics_save=1
	done
	ip -n "$snd" link add eth0 type veth peer name eth0 netns "$rcv"
	ip -n "$snd" addr add 10.9.1.1/16 dev eth0
	ip -n "$snd" addr add fd09:1::1/32 dev eth0 nodad
	ip -n "$rcv" addr add 10.9.2.2/16 dev eth0
	ip -n "$rcv" addr add fd09:2::2/32 dev eth0 nodad
	ip -n "$snd" link set eth0 up
	ip -n "$rcv" link set eth0 up
}

up() {
	local name=$1; shift
	local rate=10mbit buffer=1500000 delay_ms=0 prof=custom direct=0 trace=- opts=$OPTION_DEFAULTS
	local -A set=()
	while (($#)); do
		case $1 in
		--profile) prof=${2:?}; shift 2 ;;
		--rate) set[rate]=${2:?}; shift 2 ;;
		--trace) set[trace]=${2:?}; shift 2 ;;
		--buffer-bytes) set[buffer]=${2:?}; shift 2 ;;
		--delay-ms) set[delay_ms]=${2:?}; shift 2 ;;
		--aqm) set[aqm]=${2:?}; shift 2 ;;
		--ecn) set[ecn]=1; shift ;;
		--target-ms) set[target_ms]=${2:?}; shift 2 ;;
		--interval-ms) set[interval_ms]=${2:?}; shift 2 ;;
		--cross) set[cross]=1; shift ;;
		--direct) direct=1; shift ;;
		-h|--help) usage; exit 0 ;;
		*) die "unknown option '$1' (see --help)" ;;
		esac
	done
	if [[ $prof != custom ]]; then
		local f
		f=$(profile_fields "$prof") || exit 2
		read -r rate delay_ms buffer trace opts <<<"$f"
	fi
	local k
	for k in aqm ecn target_ms interval_ms; do
		[[ -n ${set[$k]:-} ]] && { check_option "$k=${set[$k]}"; opts="$opts $k=${set[$k]}"; }
	done
	local aqm ecn target_ms interval_ms cross=${set[cross]:-0}
	aqm=$(option "$opts" aqm droptail) ecn=$(option "$opts" ecn 0)
	target_ms=$(option "$opts" target_ms 5) interval_ms=$(option "$opts" interval_ms 100)
	[[ $ecn == 1 && $aqm == droptail ]] && die "ecn=1 marks instead of dropping: it needs an AQM (--aqm codel or fq_codel)"
	[[ -n $(option "$opts" nbr "")$(option "$opts" udp "")$(option "$opts" xtcp "") ]] && cross=1
	[[ -n ${set[rate]:-} && -n ${set[trace]:-} ]] && die "--rate and --trace exclude each other"
	[[ -n ${set[rate]:-} ]] && trace=-
	[[ -n ${set[trace]:-} ]] && { trace=$(trace_file "${set[trace]}") || exit 2; }
	[[ $trace != - ]] && rate=$(trace_rate "$trace")
	rate=${set[rate]:-$rate} buffer=${set[buffer]:-$buffer} delay_ms=${set[delay_ms]:-$delay_ms}
	[[ $buffer =~ ^[0-9]+$ && $buffer -ge 3000 ]] || die "--buffer-bytes must be an integer >= 3000"
	[[ $delay_ms =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--delay-ms must be a number"
	local bps; bps=$(rate_bps "$rate")

	down "$name"
	# Whatever stops us before the end (an error under set -e, Ctrl-C,
	# TERM), the EXIT trap removes what was made so far.
	# (Expanded now: the trap runs after this function's locals are gone.)
	# shellcheck disable=SC2064
	trap "echo 'topo.sh: setup of $name did not finish, removing it' >&2; down $name" EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM

	if ((direct)); then
		[[ $aqm == droptail && $cross == 0 ]] || die "--direct has no bottleneck: no AQM, no cross traffic"
		direct_up "$name"
		setup_done
		echo "lab $name up: direct veth pair, no bottleneck"
		return
	fi

	local snd=$name-snd rtr=$name-rtr rcv=$name-rcv ns
	for ns in "$snd" "$rtr" "$rcv"; do
		ip netns add "$ns"
		nsx "$ns" ip link set lo up
		# No duplicate address detection: it keeps IPv6 link-local
		# addresses (and so neighbour discovery) unusable for a second.
		nsx "$ns" sysctl -qw net.ipv6.conf.default.accept_dad=0 net.ipv6.conf.all.accept_dad=0
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
	# Alfredsson et al. flushed the TCP metrics cache before every
	# connection: no flow may start from the ssthresh or RTT of the last.
	nsx "$snd" sysctl -qw net.ipv4.tcp_no_metrics_save=1
	nsx "$rcv" sysctl -qw net.ipv4.tcp_no_metrics_save=1
	((cross)) && cross_up "$name"
	if [[ $ecn == 1 ]]; then
		# ECN only marks flows that negotiated it: every end asks for it
		local ends=("$snd" "$rcv")
		((cross)) && ends+=("$name-far" "$name-nbr" "$name-ext")
		for ns in "${ends[@]}"; do
			nsx "$ns" sysctl -qw net.ipv4.tcp_ecn=1
		done
	fi
	accounting_up "$name" "$cross"

	local up_trace='' bottleneck=delayline
	local -a aqm_args=()
	[[ $aqm != droptail ]] && aqm_args=(--aqm "$aqm" --target-ms "$target_ms" --interval-ms "$interval_ms")
	[[ $ecn == 1 ]] && aqm_args+=(--ecn)
	if [[ $trace != - ]]; then
		link_up "$name" --trace "$trace" --buffer-bytes "$buffer" "${aqm_args[@]}"
		up_trace=$(trace_up_file "$trace")
	elif [[ $aqm != droptail ]]; then
		# no sch_codel here: the link emulator is the constant-rate link too
		link_up "$name" --rate "$bps" --buffer-bytes "$buffer" "${aqm_args[@]}"
	else
		# tbf needs a bucket of at least one MTU and enough for one timer
		# tick at the configured rate, or it cannot reach the rate.
		local burst=$(( bps / 8 / 250 ))
		(( burst < 3028 )) && burst=3028
		nsx "$rtr" tc qdisc replace dev rcv0 root tbf rate "$rate" burst "$burst" limit "$buffer"
		bottleneck=tbf
	fi

	if [[ -n $up_trace ]]; then
		# the uplink's capacity too, with the base delay after it
		delay_up "$name" "$delay_ms" --trace "$up_trace" --buffer-bytes "$buffer"
	elif [[ $delay_ms != 0 ]]; then
		delay_up "$name" "$delay_ms"
	fi
	write_config "$name" "$prof" "$([[ $trace == - ]] && echo const || echo trace)" "$rate" "$bps" \
		"$trace" "$buffer" "$delay_ms" "$bottleneck" "$aqm" "$ecn" "$target_ms" "$interval_ms" \
		"$cross" "$opts"
	setup_done
	local queue=$aqm
	[[ $ecn == 1 ]] && queue="$queue+ecn"
	((cross)) && queue="$queue, cross-traffic namespaces"
	if [[ $trace == - ]]; then
		echo "lab $name up: profile $prof, rate $rate, buffer $buffer B ($queue), base RTT ${delay_ms} ms"
	else
		echo "lab $name up: profile $prof, trace $(basename "$trace") (mean $rate${up_trace:+, uplink $(basename "$up_trace")}), buffer $buffer B ($queue), base RTT ${delay_ms} ms"
	fi
}

status() {
	local name=$1 pid
	ns_exists "$name-rtr" || { echo "lab $name: not up"; exit 1; }
	nsx "$name-rtr" tc qdisc show dev rcv0
	local role
	for role in delay link; do
		pid=$(cat "$LAB_RUN/$name.$role.pid" 2>/dev/null || true)
		if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
			echo "$role emulator: pid $pid, $(grep -m1 -E 'trace|rate' "$LAB_RUN/$name.$role.log" || head -1 "$LAB_RUN/$name.$role.log")"
			grep -m1 'delayline: aqm' "$LAB_RUN/$name.$role.log" || true
		else
			echo "$role emulator: none"
		fi
	done
}

# Bytes waiting at the bottleneck: tbf's backlog, or what the trace link
# holds that has not left it (its stats line, printed on SIGUSR1).
backlog() {
	local name=$1 pid log i line
	ns_exists "$name-rtr" || die "lab $name is not up"
	pid=$(cat "$LAB_RUN/$name.link.pid" 2>/dev/null || true)
	if [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
		log=$LAB_RUN/$name.link.log
		local before
		before=$(grep -c 'delayline stats' "$log" || true)
		kill -USR1 "$pid"
		for ((i = 0; i < 100; i++)); do
			(( $(grep -c 'delayline stats' "$log" || true) > before )) && break
			sleep 0.01
		done
		line=$(grep 'delayline stats' "$log" | tail -1)
		[[ $line =~ queued_bytes=([0-9]+) ]] || die "trace link: no stats from pid $pid"
		echo "${BASH_REMATCH[1]}"
		return
	fi
	nsx "$name-rtr" tc -s qdisc show dev rcv0 | awk '
		/backlog/ { v = $2; if (v ~ /Kb$/) v *= 1024; else if (v ~ /Mb$/) v *= 1048576; else v += 0; print int(v); exit }'
}

# The base RTT, live: the delay line reads its file again on SIGHUP. New
# packets take the new delay; held ones keep theirs (no reordering).
set_delay() {
	local name=$1 ms=${2:-} pid
	[[ $ms =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "delay: want a delay in ms, not '$ms'"
	pid=$(cat "$LAB_RUN/$name.delay.pid" 2>/dev/null || true)
	if ! { [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; }; then
		die "lab $name has no delay line (up with --delay-ms > 0)"
	fi
	echo "$ms" >"$LAB_RUN/$name.delay.ms.new"
	mv "$LAB_RUN/$name.delay.ms.new" "$LAB_RUN/$name.delay.ms"
	kill -HUP "$pid"
}

# The trace links (the downlink's and, with an uplink trace, the delay
# line's) start their traces over from now (SIGRTMIN). Their logs say
# "trace restarted, start_ns=N". Restart with the link idle: packets
# already held keep their departures.
restart_trace() {
	local name=$1 role pid n=0
	for role in link delay; do
		grep -q "delayline: trace " "$LAB_RUN/$name.$role.log" 2>/dev/null || continue
		pid=$(cat "$LAB_RUN/$name.$role.pid" 2>/dev/null || true)
		{ [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; } || continue
		kill -s RTMIN "$pid"
		n=$((n + 1))
	done
	((n)) || die "lab $name has no trace link (up with --trace or a trace profile)"
}

cmd=${1:-}
case $cmd in
up) shift; check_name "${1:-}"; up "$@" ;;
down) shift; check_name "${1:-}"; down "$1" ;;
status) shift; check_name "${1:-}"; status "$1" ;;
backlog) shift; check_name "${1:-}"; backlog "$1" ;;
delay) shift; check_name "${1:-}"; set_delay "$1" "${2:-}" ;;
restart-trace) shift; check_name "${1:-}"; restart_trace "$1" ;;
list) ip netns list | awk '{print $1}' | sed -n 's/-snd$//p' ;;
profile) shift; profile "${1:?profile name}" ;;
trace) shift; trace_file "${1:?trace name or file}" ;;
profiles) while read -r p _; do echo "$p $(profile "$p")"; done <<<"$PROFILES"$'\n'"$TRACE_PROFILES" ;;
-h|--help|help) usage ;;
*) usage >&2; exit 2 ;;
esac
