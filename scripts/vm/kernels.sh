#!/usr/bin/env bash
# The kernels of the VM matrix (scripts/vm/run.sh): Debian's own packages,
# fetched with `apt-get download` and unpacked into a cache directory, never
# installed (nothing in the host's /boot or /lib/modules changes).
#
#   5.10   Debian 11 (bullseye): from the same archive through a private apt
#          configuration (its own sources and lists), so the host's apt never
#          sees bullseye and nothing else can come from it
#   6.1    Debian 12 (bookworm)'s kernel
#   6.12   Debian 13's kernel, as bookworm's archive carries it (+deb12)
#
# For each: the newest package version available now, unpacked into
# $CACHE/KVER (boot/vmlinuz-KVER, lib/modules/KVER with modules.dep made by
# depmod), an initramfs ($CACHE/KVER/initrd.img: busybox, scripts/vm/init and
# the modules that mount the host's filesystem over virtio 9p), and the short
# name $CACHE/SHORT -> KVER. Older versions of a short name are removed.
# Idempotent: a kernel already in the cache is not fetched again.
#
#   scripts/vm/kernels.sh              fetch every kernel of the matrix
#   scripts/vm/kernels.sh 6.1          one
#   scripts/vm/kernels.sh --list       the short names
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${BLOATD_VM_CACHE:-/var/cache/bloatd-vm}
KERNELS=(5.10 6.1 6.12)

# apt package name pattern of each short name
pattern() {
	case $1 in
	5.10) echo '^linux-image-5\.10\.0-[0-9]+-amd64-unsigned$' ;;
	6.1) echo '^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$' ;;
	6.12) echo '^linux-image-6\.12\.[0-9]+\+deb12-amd64-unsigned$' ;;
	*) return 1 ;;
	esac
}

# A private apt for bullseye: its own sources, lists and cache under $CACHE.
BULLSEYE_APT=$CACHE/apt-bullseye
bullseye_opts() {
	echo "-o Dir::Etc::SourceList=$BULLSEYE_APT/sources.list -o Dir::Etc::SourceParts=/dev/null" \
		"-o Dir::State::Lists=$BULLSEYE_APT/lists -o Dir::Cache=$BULLSEYE_APT/cache" \
		"-o APT::Sandbox::User=root"
}

bullseye_update() {
	mkdir -p "$BULLSEYE_APT/lists/partial" "$BULLSEYE_APT/cache/archives/partial"
	cat >"$BULLSEYE_APT/sources.list" <<'EOF'
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bullseye main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bullseye-security main
EOF
	# once a day is enough: a kernel update is not urgent for a test matrix
	if [[ -z $(find "$BULLSEYE_APT/lists" -name '*Packages*' -mtime -1 2>/dev/null | head -1) ]]; then
		# shellcheck disable=SC2046
		apt-get $(bullseye_opts) update -qq
	fi
}

apt_opts() {
	if [[ $1 == 5.10 ]]; then bullseye_opts; else echo "-o APT::Sandbox::User=root"; fi
}

# The newest package of a short name the archive offers now.
newest() {
	local short=$1
	# shellcheck disable=SC2046
	apt-cache $(apt_opts "$short") search --names-only "$(pattern "$short")" |
		awk '{print $1}' | sort -V | tail -1
}

# Modules the initramfs loads, in dependency order: virtio PCI, the 9p
# transport and file system, and the RNG (early entropy on old kernels).
initrd_modules() {
	local root=$1 kver=$2 m
	for m in virtio_pci 9pnet_virtio 9p virtio_rng; do
		modprobe -d "$root" -S "$kver" --show-depends "$m" | awk '$1 == "insmod" {print $2}'
	done | awk '!seen[$0]++'
}

make_initrd() {
	local root=$1 kver=$2 tmp f name
	tmp=$(mktemp -d)
	# shellcheck disable=SC2064
	trap "rm -rf '$tmp'" RETURN
	mkdir -p "$tmp/bin" "$tmp/lib/modules" "$tmp/proc" "$tmp/sys" "$tmp/dev" "$tmp/mnt"
	cp /bin/busybox "$tmp/bin/busybox"
	cp "$HERE/init" "$tmp/init"
	chmod 0755 "$tmp/init"
	: >"$tmp/lib/modules/order"
	for f in $(initrd_modules "$root" "$kver"); do
		name=$(basename "$f")
		name=${name%.xz}
		# busybox insmod takes plain objects: unpack what Debian compressed
		case $f in
		*.xz) xz -dc "$f" >"$tmp/lib/modules/$name" ;;
		*) cp "$f" "$tmp/lib/modules/$name" ;;
		esac
		echo "$name" >>"$tmp/lib/modules/order"
	done
	(cd "$tmp" && find . | cpio -o -H newc --quiet | gzip -1) >"$root/initrd.img.tmp"
	mv "$root/initrd.img.tmp" "$root/initrd.img"
}

fetch() {
	local short=$1 pkg kver deb dir old
	[[ $short == 5.10 ]] && bullseye_update
	pkg=$(newest "$short")
	if [[ -z $pkg && $short != 5.10 ]]; then
		# the host's package lists may never have been fetched
		apt-get update -qq
		pkg=$(newest "$short")
	fi
	if [[ -z $pkg ]]; then
		if [[ -e $CACHE/$short/.ready ]]; then
			echo "kernels: no package matches $(pattern "$short") now; keeping $(readlink "$CACHE/$short")" >&2
			return 0
		fi
		echo "kernels: no package matches $(pattern "$short") in the archive" >&2
		return 1
	fi
	kver=${pkg#linux-image-}
	kver=${kver%-unsigned}
	dir=$CACHE/$kver
	if [[ ! -e $dir/.ready || $HERE/init -nt $dir/initrd.img ]]; then
		rm -rf "$dir" "$CACHE/dl-$short"
		mkdir -p "$CACHE/dl-$short"
		# shellcheck disable=SC2046
		(cd "$CACHE/dl-$short" && apt-get $(apt_opts "$short") download -qq "$pkg" >/dev/null)
		deb=$(ls "$CACHE/dl-$short"/*.deb)
		mkdir -p "$dir"
		dpkg-deb -x "$deb" "$dir"
		rm -rf "$CACHE/dl-$short"
		depmod -b "$dir" "$kver"
		make_initrd "$dir" "$kver"
		touch "$dir/.ready"
		echo "kernels: $short = $pkg"
	fi
	# the short name follows the newest; older versions of it go
	old=$(readlink "$CACHE/$short" 2>/dev/null || true)
	ln -sfn "$kver" "$CACHE/$short"
	if [[ -n $old && $old != "$kver" ]]; then
		rm -rf "${CACHE:?}/$old"
	fi
}

case ${1:-all} in
--list) echo "${KERNELS[*]}" ;;
all)
	mkdir -p "$CACHE"
	for k in "${KERNELS[@]}"; do fetch "$k"; done
	;;
*)
	pattern "$1" >/dev/null || { echo "kernels: unknown kernel '$1' (known: ${KERNELS[*]})" >&2; exit 2; }
	mkdir -p "$CACHE"
	fetch "$1"
	;;
esac
