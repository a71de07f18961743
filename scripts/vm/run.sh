#!/usr/bin/env bash
# The kernel matrix: bloatd's kernel tier (scripts/vm/kernel_tier.py) on
# the matrix's kernels (scripts/vm/kernels.sh), each booted in a VM, and on
# the host's kernel.
#
#   sudo scripts/vm/run.sh             every kernel, then the feature x kernel
#                                      table (target/vm/table.md; nothing
#                                      tracked changes: `make kernels-table`
#                                      puts it into README)
#   sudo scripts/vm/run.sh 6.1         one kernel (5.10, 5.14, 5.15, 6.1,
#                                      6.12 or host)
#
# A VM: qemu with TCG (KVM on these machines only boots its own kernels),
# the kernel and an initramfs from the VM cache (scripts/vm/kernels.sh,
# run by `make deps`), the host's root shared read-only over virtio 9p
# (the build, the scripts, python, iproute2: all the host's), and
# target/vm/KERNEL shared writable for the results: result.json,
# tier.log (the tier's output), console.log (the guest's console).
# A guest that fails (a check, a crash, a timeout) fails the run with what
# failed, on which kernel, and the tails of its logs.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$REPO/scripts/vm
CACHE=${BLOATD_VM_CACHE:-/var/cache/bloatd-vm}
OUT=$REPO/target/vm
# Time one guest may take before it counts as hung (TCG: ~1-3 min each;
# 5.15's verifier takes minutes of it at start).
GUEST_TIMEOUT=${BLOATD_VM_TIMEOUT:-1200}
# One guest CPU: with two, multi-threaded TCG once let a CPU run a stale
# int3 of the kernel's live code patching (a static key flipped when the
# sock_ops program was detached at stop): "Oops: int3" in
# bpf_skops_hdr_opt_len on 6.12, on a `66 90` nop, a fault of the
# emulation's cross-CPU code modification rather than of the kernel's
# protocol. The host's own run keeps the tier's multi-CPU coverage.
SMP=${BLOATD_VM_SMP:-1}
MEM=${BLOATD_VM_MEM:-2048}
# Guests booted at once: one a host core (each is one emulated CPU, one
# host thread), so the matrix takes about half as long on two cores. The
# host's own run takes a slot like a guest.
JOBS=${BLOATD_VM_JOBS:-$(nproc)}

usage() {
	echo "usage: scripts/vm/run.sh [all | host | KERNEL...]   (kernels: $("$HERE/kernels.sh" --list))" >&2
	exit 2
}

if [[ $(id -u) -ne 0 ]]; then
	echo "scripts/vm/run.sh: run as root (the kernel tier loads BPF and makes network namespaces)" >&2
	exit 1
fi
# The bloatd every guest runs: the build's, or BLOATD_BIN (the static
# release binary: BLOATD_BIN=$PWD/target/release-dist/bloatd), an absolute
# path outside /tmp, /run and /var/tmp, which the guests mount their own
# tmpfs over.
BIN=${BLOATD_BIN:-$REPO/target/release/bloatd}
case $BIN in
/tmp/* | /run/* | /var/tmp/*)
	echo "vm: BLOATD_BIN=$BIN is under /tmp, /run or /var/tmp, which the guests hide: put it elsewhere" >&2
	exit 2
	;;
/*) ;;
*)
	echo "vm: BLOATD_BIN=$BIN: give an absolute path" >&2
	exit 2
	;;
esac
[[ -x $BIN ]] || { echo "vm: $BIN missing: run \`make build\` (or \`make release\` for the static binary)" >&2; exit 1; }
export BLOATD_BIN=$BIN

QEMU_PID=
cleanup() {
	if [[ -n $QEMU_PID ]] && kill -0 "$QEMU_PID" 2>/dev/null; then
		kill "$QEMU_PID" 2>/dev/null || true
		wait "$QEMU_PID" 2>/dev/null || true
	fi
}
# The guests running in the background (run_guests), ended with the run.
GUEST_JOBS=()
cleanup_all() {
	local p
	for p in "${GUEST_JOBS[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	for p in "${GUEST_JOBS[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	cleanup
}
trap cleanup_all EXIT
trap 'exit 130' INT TERM

# The last lines of a log, indented, for a failure report.
tail_of() {
	local f=$1 n=$2
	[[ -s $f ]] || { echo "    ($f: empty)"; return; }
	echo "  --- $f (last $n lines) ---"
	tail -n "$n" "$f" | sed 's/^/    /'
}

# Why a kernel's run failed: "" if it passed.
verdict() {
	local dir=$1 code
	[[ -f $dir/exit ]] || { echo "the guest ended without a result (crash or timeout)"; return; }
	code=$(cat "$dir/exit")
	[[ $code == 0 ]] && return
	if [[ -f $dir/result.json ]]; then
		python3 - "$dir/result.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
bad = [f"{c['name']}: {c['detail']}" for c in r["checks"] if c["status"] == "fail"]
print("; ".join(bad) or f"the tier exited {r.get('exit')}")
PY
	else
		echo "the tier exited $code before writing its result"
	fi
}

run_host() {
	local dir=$OUT/host start
	rm -rf "$dir"
	mkdir -p "$dir"
	start=$(date +%s)
	set +e
	python3 "$HERE/kernel_tier.py" --out "$dir" >"$dir/tier.log" 2>&1
	echo $? >"$dir/exit"
	set -e
	echo "$(($(date +%s) - start))" >"$dir/seconds"
}

run_vm() {
	local k=$1 dir=$OUT/$1 kdir kver start rc
	kdir=$CACHE/$k
	if [[ ! -e $kdir/.ready ]]; then
		echo "vm: kernel $k is not in $CACHE: run \`sudo make deps\` (scripts/vm/kernels.sh $k)" >&2
		return 1
	fi
	kdir=$(readlink -f "$kdir")
	kver=$(basename "$kdir")
	rm -rf "$dir"
	mkdir -p "$dir"
	start=$(date +%s)
	qemu-system-x86_64 -accel tcg,thread=multi -cpu max -smp "$SMP" -m "$MEM" \
		-no-reboot -display none -monitor none -nic none \
		-kernel "$kdir/boot/vmlinuz-$kver" -initrd "$kdir/initrd.img" \
		-append "console=ttyS0 panic=-1 random.trust_cpu=on bloatd.guest=$HERE/guest.sh bloatd.modules=$kdir bloatd.bin=$BIN" \
		-virtfs "local,path=/,mount_tag=root,security_model=none,readonly=on,multidevs=remap" \
		-virtfs "local,path=$dir,mount_tag=out,security_model=none" \
		-device virtio-rng-pci -serial "file:$dir/console.log" &
	QEMU_PID=$!
	rc=0
	timeout_at=$((start + GUEST_TIMEOUT))
	while kill -0 "$QEMU_PID" 2>/dev/null; do
		if (($(date +%s) > timeout_at)); then
			echo "vm: $k: no result after ${GUEST_TIMEOUT}s: stopping the guest" >&2
			kill "$QEMU_PID" 2>/dev/null || true
			rc=1
			break
		fi
		sleep 1
	done
	wait "$QEMU_PID" 2>/dev/null || true
	QEMU_PID=
	echo "$(($(date +%s) - start))" >"$dir/seconds"
	return $rc
}

# Run one kernel; print its line; return 1 if it failed.
one() {
	local k=$1 dir=$OUT/$1 why
	if [[ $k == host ]]; then run_host; else run_vm "$k" || true; fi
	why=$(verdict "$dir")
	if [[ -z $why ]]; then
		echo "vm: $k: ok ($(cat "$dir/seconds") s)"
		return 0
	fi
	echo "vm: $k: FAILED after $(cat "$dir/seconds" 2>/dev/null || echo ?) s: $why"
	tail_of "$dir/tier.log" 30
	[[ $k == host ]] || tail_of "$dir/console.log" 20
	return 1
}

kernels=("$@")
all=0
if ((${#kernels[@]} == 0)) || [[ ${kernels[0]} == all ]]; then
	read -r -a kernels <<<"$("$HERE/kernels.sh" --list) host"
	all=1
fi
for k in "${kernels[@]}"; do
	[[ $k == host ]] || echo " $("$HERE/kernels.sh" --list) " | grep -q " $k " || usage
done

# The guest mounts tmpfs over /tmp, /run and /var/tmp of the host's root
# (scripts/vm/init): a checkout there is hidden from it.
if [[ " ${kernels[*]} " != " host " ]]; then
	case $REPO/ in
	/tmp/* | /run/* | /var/tmp/*)
		echo "scripts/vm/run.sh: $REPO is under /tmp, /run or /var/tmp, which the guests mount" \
			"their own tmpfs over: clone bloatd elsewhere to boot kernels in VMs" >&2
		exit 2
		;;
	esac
fi
mkdir -p "$OUT"
failed=()
# The guests and the host's own run, JOBS at a time (the next starts as
# soon as one ends), each in a subshell of its own (a guest's qemu to stop
# on exit) writing its report to OUT/KERNEL.report. The host's run takes
# a slot like a guest (one host thread each): beside the last guests,
# not after them.
guests=() listed=()
for k in "${kernels[@]}"; do
	[[ $k == host ]] || guests+=("$k")
done
listed=("${guests[@]}")
[[ " ${kernels[*]} " != *" host "* ]] || listed+=(host)
# Longest first, by the last run's seconds where there is one, else by
# the seconds one CI run measured (DEFAULT_SECONDS): the short ones fill
# in at the end. The whole matrix from a clean target/vm: 415 s measured
# (5.15 239, 6.12 171, 6.1 170, 5.14 144, host 63, 5.10 31 s); newest
# first with the host after the guests, the last CI run's ~452 s.
declare -A DEFAULT_SECONDS=([5.10]=30 [5.14]=140 [5.15]=210 [6.1]=180 [6.12]=180 [host]=65)
mapfile -t runs < <(for k in "${listed[@]}"; do
	echo "$(cat "$OUT/$k/seconds" 2>/dev/null || echo "${DEFAULT_SECONDS[$k]:-0}") $k"
done | sort -rn | cut -d' ' -f2)
for k in "${runs[@]}"; do
	while (($(jobs -rp | wc -l) >= JOBS)); do
		wait -n || true
	done
	(
		trap cleanup EXIT
		trap 'exit 130' TERM
		if one "$k" >"$OUT/$k.report" 2>&1; then echo 0; else echo 1; fi >"$OUT/$k.rc"
	) &
	GUEST_JOBS+=($!)
done
for p in "${GUEST_JOBS[@]}"; do
	wait "$p" || true
done
GUEST_JOBS=()
for k in "${listed[@]}"; do
	cat "$OUT/$k.report"
	[[ $(cat "$OUT/$k.rc" 2>/dev/null) == 0 ]] || failed+=("$k")
	rm -f "$OUT/$k.report" "$OUT/$k.rc"
done
if ((all)); then
	python3 "$HERE/table.py" --results "$OUT" >"$OUT/table.md"
	cat "$OUT/table.md"
fi
if ((${#failed[@]})); then
	echo "vm: FAILED on ${failed[*]}"
	exit 1
fi
