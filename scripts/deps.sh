#!/usr/bin/env bash
# Install every Debian package that building, running and testing bloatd needs.
# Idempotent: packages already present are skipped, so a second run is quick.
set -euo pipefail

PKGS=(
	# build: BPF C probes and struct_ops (CO-RE), libbpf-rs (vendored libbpf)
	clang-19 llvm-19 libbpf-dev bpftool libelf-dev zlib1g-dev pkg-config make gcc
	# lab and tests: namespaces, bottleneck, delay line, traffic, oracle, the
	# vendored capacity traces (xz)
	iproute2 iptables ethtool libnetfilter-queue-dev iperf3 iputils-ping procps psmisc
	tmux curl ca-certificates xz-utils
	# Prometheus server and promtool for the scrape test and the rules' tests
	prometheus
	# operator's kit: unit rating (systemd-analyze), capability bounds (setpriv),
	# the Debian package's dependencies (dpkg-shlibdeps) and its API group, the
	# unit's system-call filter applied to test daemons (python3-seccomp)
	systemd util-linux dpkg-dev adduser python3-seccomp
	# the fleet kit: the image (buildah), run as the DaemonSet's pod in
	# test_image.py (podman with runc, which takes hybrid cgroup hosts)
	buildah podman runc
	# the benchmarks' variant builds (scripts/bench/cold_breakdown.py)
	patch
	# plots and statistics for the lab; the tests check the API's answers
	# against docs/api.schema.json (python3-jsonschema)
	python3 python3-matplotlib python3-jsonschema
	# the kernel matrix (scripts/vm/): VMs, their initramfs, the guest
	# kernels' module dependencies, and building its Linux 5.14 (with BTF:
	# pahole from dwarves)
	qemu-system-x86 busybox-static kmod cpio flex bison bc libssl-dev dwarves
	# make release: glibc's static archive (libc.a; libelf.a and libz.a come
	# with libelf-dev, zlib1g-dev); test_release.py: a Debian 11 root, `file`
	libc6-dev debootstrap file
	# make lint: the shell scripts and the Python (pyflakes: ruff is not in
	# Debian 12, and nothing here comes from PyPI)
	shellcheck pyflakes3
)

if [[ $(id -u) -ne 0 ]]; then
	echo "scripts/deps.sh: run as root (it installs Debian packages with apt-get)" >&2
	exit 1
fi

missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian's prometheus package starts a service; the tests run their own.
if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then
	systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
# The kernels of the matrix, unpacked into a cache (never installed).
"$(dirname "$0")/vm/kernels.sh"
echo "deps: ok"
