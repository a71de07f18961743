#!/bin/bash
# Runs as pid 1 of a test VM (scripts/vm/init chroots here), in the host's
# filesystem shared read-only: the rest of the system mounts, the kernel's
# module requests pointed at the guest kernel's modules in the VM cache, the
# kernel tier (kernel_tier.py), its results in /run/vm-out, and power off.
# The kernel command line carries what the host decided: bloatd.modules=DIR
# (the unpacked kernel package), bloatd.bin=PATH (the binary under test)
# and bloatd.args=... (kernel_tier.py's arguments, commas for spaces).
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp LANG=C.UTF-8
OUT=/run/vm-out
HERE=$(cd "$(dirname "$0")" && pwd)

param() { tr ' ' '\n' </proc/cmdline | sed -n "s/^bloatd.$1=//p"; }

finish() {
	echo "guest: exit $1"
	echo "$1" >"$OUT/exit"
	sync
	echo o >/proc/sysrq-trigger
	sleep 10
}

mount -t tmpfs -o mode=1777 tmpfs /dev/shm 2>/dev/null || { mkdir -p /dev/shm && mount -t tmpfs tmpfs /dev/shm; }
mkdir -p /dev/pts && mount -t devpts devpts /dev/pts
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t bpf bpf /sys/fs/bpf
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null || true
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null || true
ip link set lo up
hostname "vm-$(uname -r | cut -d. -f1,2)"

MODULES=$(param modules)
# What an installed Debian kernel has in /boot: its config, which libbpf
# reads for the Kconfig values a BPF object uses (bloatd_cubic's CONFIG_HZ).
# 6.12's guest goes without, as a host that publishes no config: bloatd
# then measures HZ itself (struct_ops/src/kconfig.rs).
mount -t tmpfs tmpfs /boot
case $(uname -r) in
6.12.*) echo "guest: no /boot/config-$(uname -r): bloatd measures HZ" ;;
*) cp "$MODULES"/boot/config-* /boot/ ;;
esac
echo "$HERE/modprobe.sh" >/proc/sys/kernel/modprobe
# What the lab and the tests use; the kernel asks for more (netfilter
# matches, nf_tables expressions) through modprobe.sh as it needs them.
for m in veth sch_tbf sch_ingress nfnetlink_queue xt_NFQUEUE nft_queue iptable_raw iptable_mangle \
	ip6table_raw ip6table_mangle tcp_bbr; do
	modprobe -d "$MODULES" "$m" 2>/dev/null || echo "guest: module $m not loaded"
done

args=$(param args | tr ',' ' ')
# The binary the host tested (scripts/vm/run.sh: BLOATD_BIN, the static
# release binary under `make vm-test`).
BLOATD_BIN=$(param bin)
export BLOATD_BIN
echo "guest: bloatd binary $BLOATD_BIN ($(file -b "$BLOATD_BIN" 2>/dev/null | cut -d, -f1-4))"
# shellcheck disable=SC2086
python3 "$HERE/kernel_tier.py" --out "$OUT" $args >"$OUT/tier.log" 2>&1
finish $?
