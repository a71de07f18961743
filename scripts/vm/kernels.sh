#!/usr/bin/env bash
# The kernels of the VM matrix (scripts/vm/run.sh): distributions' own
# kernel packages, fetched with `apt-get download` and unpacked into a cache
# directory, never installed (nothing in the host's /boot or /lib/modules
# changes), and one kernel built here where no package has BTF.
#
#   5.10   Debian 11 (bullseye)'s kernel
#   5.14   Linux 5.14, RHEL 9's base version, built here from its source
#          (the pristine tarball Ubuntu's linux-oem-5.14 source package
#          carries; that package's own kernel has no BTF): tinyconfig and
#          scripts/vm/linux-5.14.config, only what the tier uses, everything
#          built in. A stand-in for RHEL 9's kernel, which is 5.14 with many
#          later features backported: what runs on this one runs there.
#   5.15   Ubuntu 22.04 (jammy)'s generic kernel (linux-image-unsigned and
#          linux-modules)
#   6.1    Debian 12 (bookworm)'s kernel
#   6.12   Debian 13's kernel, as bookworm's archive carries it (+deb12)
#
# The host's apt serves bookworm's kernels. The others come through private
# apt configurations (their own sources, lists and caches under the cache
# directory), so the host's apt never sees them and nothing else can come
# from them: Debian's (bullseye; bookworm-backports for the ubuntu-keyring
# package, whose keys check Ubuntu's archive) and Ubuntu's (jammy-updates;
# focal-updates' sources for 5.14's tarball, checked against its signed
# index).
#
# For each: the newest version available now, in $CACHE/KVER
# (boot/vmlinuz-KVER, boot/config-KVER, lib/modules/KVER with modules.dep
# made by depmod), an initramfs ($CACHE/KVER/initrd.img: busybox,
# scripts/vm/init and the modules that mount the host's filesystem over
# virtio 9p), and the short name $CACHE/SHORT -> KVER. Older versions of a
# short name are removed. Idempotent: a kernel already in the cache is not
# fetched (or built) again; 5.14 is built again when its config's content
# changes.
#
#   scripts/vm/kernels.sh              fetch every kernel of the matrix
#   scripts/vm/kernels.sh 6.1          one
#   scripts/vm/kernels.sh --list       the short names
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${BLOATD_VM_CACHE:-/var/cache/bloatd-vm}
KERNELS=(5.10 5.14 5.15 6.1 6.12)
UBUNTU=http://archive.ubuntu.com/ubuntu
# The release of the 5.14 built here (CONFIG_LOCALVERSION of linux-5.14.config).
BUILT_514=5.14.0-bloatd

# apt package name pattern of each short name's kernel image
pattern() {
	case $1 in
	5.10) echo '^linux-image-5\.10\.0-[0-9]+-amd64-unsigned$' ;;
	5.14) echo "(built from Linux 5.14's source)" ;;
	5.15) echo '^linux-image-unsigned-5\.15\.0-[0-9]+-generic$' ;;
	6.1) echo '^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$' ;;
	6.12) echo '^linux-image-6\.12\.[0-9]+\+deb12-amd64-unsigned$' ;;
	*) return 1 ;;
	esac
}

# A private apt: its sources, lists and cache under $CACHE/apt-NAME.
private_opts() {
	local d=$CACHE/apt-$1
	echo "-o Dir::Etc::SourceList=$d/sources.list -o Dir::Etc::SourceParts=/dev/null" \
		"-o Dir::State::Lists=$d/lists -o Dir::Cache=$d/cache -o APT::Sandbox::User=root" \
		"-o Acquire::Languages=none -o APT::Architectures=amd64" \
		"-o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false"
}

# Write the private apt NAME's sources (stdin) and fetch its lists, at most
# once a day: a kernel update is not urgent for a test matrix.
private_update() {
	local name=$1 d=$CACHE/apt-$1 sources
	sources=$(cat)
	mkdir -p "$d/lists/partial" "$d/cache/archives/partial"
	if [[ ! -f $d/sources.list || $(cat "$d/sources.list") != "$sources" ]]; then
		echo "$sources" >"$d/sources.list"
		rm -f "$d/lists/"*Packages* "$d/lists/"*Sources*
	fi
	if [[ -z $(find "$d/lists" -name '*Packages*' -mtime -1 2>/dev/null | head -1) ]]; then
		# shellcheck disable=SC2046
		apt-get $(private_opts "$name") update -qq
	fi
}

debian_update() {
	private_update debian <<'EOF'
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bullseye main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bullseye-security main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm-backports main
EOF
}

# Ubuntu's archive keys, from Debian's ubuntu-keyring package (unpacked).
UBUNTU_KEYS=$CACHE/ubuntu-keyring/usr/share/keyrings/ubuntu-archive-keyring.gpg

ubuntu_update() {
	debian_update
	if [[ ! -s $UBUNTU_KEYS ]]; then
		local dl=$CACHE/dl-ubuntu-keyring
		rm -rf "$dl" && mkdir -p "$dl"
		# shellcheck disable=SC2046
		(cd "$dl" && apt-get $(private_opts debian) download -qq ubuntu-keyring >/dev/null)
		dpkg-deb -x "$dl"/ubuntu-keyring_*.deb "$CACHE/ubuntu-keyring"
		rm -rf "$dl"
	fi
	private_update ubuntu <<EOF
deb [signed-by=$UBUNTU_KEYS] $UBUNTU jammy-updates main
deb-src [signed-by=$UBUNTU_KEYS] $UBUNTU focal-updates main
EOF
}

apt_opts() {
	case $1 in
	5.10) private_opts debian ;;
	5.14 | 5.15) private_opts ubuntu ;;
	*) echo "-o APT::Sandbox::User=root" ;;
	esac
}

# The newest package of a short name the archive offers now.
newest() {
	local short=$1
	# shellcheck disable=SC2046
	apt-cache $(apt_opts "$short") search --names-only "$(pattern "$short")" |
		awk '{print $1}' | sort -V | tail -1
}

# The kernel release a short name's package installs.
release_of() {
	local short=$1 pkg=$2 kver
	case $short in
	5.15) kver=${pkg#linux-image-unsigned-} ;;
	*) kver=${pkg#linux-image-} && kver=${kver%-unsigned} ;;
	esac
	echo "$kver"
}

# The packages that make the kernel: Ubuntu puts its modules (and the
# config) in a package of their own.
packages_of() {
	local short=$1 pkg=$2
	case $short in
	5.15) echo "$pkg linux-modules-$(release_of "$short" "$pkg")" ;;
	*) echo "$pkg" ;;
	esac
}

# Modules the initramfs loads, in dependency order: virtio PCI, the 9p
# transport and file system, and the RNG (early entropy on old kernels).
# Built-in ones have nothing to load.
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

# Linux 5.14 from its source into $dir: the pristine tarball of Ubuntu's
# linux-oem-5.14 source package, checked against the SHA-256 of the signed
# index (apt-helper), then built with the matrix's config.
build_514() {
	local dir=$1 dl=$CACHE/build-5.14 line dirpath file sha src j wrap
	rm -rf "$dl" && mkdir -p "$dl"
	# shellcheck disable=SC2046
	line=$(apt-cache $(private_opts ubuntu) showsrc linux-oem-5.14 | awk '
		/^Directory:/ && !dir { dir = $2 }
		/^Checksums-Sha256:/ { f = 1; next }
		/^[^ ]/ { f = 0 }
		f && $3 ~ /_5\.14\.0\.orig\.tar\.gz$/ && !orig { orig = $1 " " $3 }
		END { if (dir && orig) print dir, orig }')
	[[ -n $line ]] || { echo "kernels: no linux-oem-5.14 source (Linux 5.14's tarball) in $UBUNTU focal-updates" >&2; return 1; }
	read -r dirpath sha file <<<"$line"
	/usr/lib/apt/apt-helper -o APT::Sandbox::User=root download-file \
		"$UBUNTU/$dirpath/$file" "$dl/$file" "SHA256:$sha" >/dev/null
	tar -xzf "$dl/$file" -C "$dl"
	src=$dl/linux-5.14
	rm "$dl/$file"
	# GCC 12 warns where Linux 5.14's tools (objtool, their libraries) made
	# warnings errors: they stay warnings.
	sed -i 's/ -Werror\b//; s/-Werror //' "$src/tools/objtool/Makefile" \
		"$src/tools/lib/subcmd/Makefile" "$src/tools/lib/bpf/Makefile"
	# pahole 1.24 writes 64-bit enums as BTF_KIND_ENUM64, which 5.14 cannot
	# read (its BTF would be refused at boot).
	wrap=$dl/pahole
	if [[ $(pahole --help 2>&1) == *skip_encoding_btf_enum64* ]]; then
		printf '#!/bin/sh\nexec pahole --skip_encoding_btf_enum64 "$@"\n' >"$wrap"
	else
		printf '#!/bin/sh\nexec pahole "$@"\n' >"$wrap"
	fi
	chmod +x "$wrap"
	mkdir -p "$dl/out"
	make -s -C "$src" O="$dl/out" tinyconfig >/dev/null
	"$src/scripts/kconfig/merge_config.sh" -m -O "$dl/out" "$dl/out/.config" "$HERE/linux-5.14.config" >/dev/null
	make -s -C "$src" O="$dl/out" olddefconfig
	# Every option the matrix asks for took (an unmet dependency drops one).
	local want got k v bad=0
	while IFS= read -r want; do
		k=${want%%=*} v=${want#*=}
		got=$(grep "^$k=" "$dl/out/.config" | cut -d= -f2- || true)
		if [[ ($v == n && -n $got) || ($v != n && $got != "$v") ]]; then
			echo "kernels: 5.14's config has ${got:-no} $k, scripts/vm/linux-5.14.config asks $v" >&2
			bad=1
		fi
	done < <(grep -E '^CONFIG_' "$HERE/linux-5.14.config")
	((bad == 0)) || return 1
	j=$(nproc)
	echo "kernels: building Linux 5.14 (-j$j; about 7 minutes on 2 cores, once): $dl/build.log"
	if ! nice -n 19 make -C "$src" O="$dl/out" -j"$j" PAHOLE="$wrap" bzImage modules >"$dl/build.log" 2>&1; then
		tail -20 "$dl/build.log" >&2
		echo "kernels: building Linux 5.14 failed: $dl/build.log" >&2
		return 1
	fi
	make -s -C "$src" O="$dl/out" INSTALL_MOD_PATH="$dir" modules_install >/dev/null
	rm -f "$dir/lib/modules/$BUILT_514/build" "$dir/lib/modules/$BUILT_514/source"
	mkdir -p "$dir/boot"
	cp "$dl/out/arch/x86/boot/bzImage" "$dir/boot/vmlinuz-$BUILT_514"
	cp "$dl/out/.config" "$dir/boot/config-$BUILT_514"
	rm -rf "$dl"
}

# The kernel of a short name into the cache, unless it is there.
fetch() {
	local short=$1 pkg kver dir old p
	case $short in
	5.10) debian_update ;;
	5.14 | 5.15) ubuntu_update ;;
	esac
	if [[ $short == 5.14 ]]; then
		kver=$BUILT_514
		dir=$CACHE/$kver
		# Built again when the config's content changed (not its time: a
		# fresh clone's files are all new). A cache built before the copy
		# was kept is adopted as it is.
		if [[ -e $dir/.ready && ! -e $dir/linux-5.14.config ]]; then
			cp "$HERE/linux-5.14.config" "$dir/linux-5.14.config"
		fi
		if [[ -e $dir/.ready ]] && ! cmp -s "$HERE/linux-5.14.config" "$dir/linux-5.14.config"; then
			rm -rf "$dir"
		fi
		if [[ ! -e $dir/.ready ]]; then
			rm -rf "$dir"
			build_514 "$dir"
			depmod -b "$dir" "$kver"
			make_initrd "$dir" "$kver"
			cp "$HERE/linux-5.14.config" "$dir/linux-5.14.config"
			touch "$dir/.ready"
			echo "kernels: 5.14 = Linux $kver, built here"
		fi
	else
		pkg=$(newest "$short")
		if [[ -z $pkg && $short != 5.* ]]; then
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
		kver=$(release_of "$short" "$pkg")
		dir=$CACHE/$kver
		if [[ ! -e $dir/.ready ]]; then
			rm -rf "$dir" "$CACHE/dl-$short"
			mkdir -p "$CACHE/dl-$short" "$dir"
			# shellcheck disable=SC2046
			(cd "$CACHE/dl-$short" && apt-get $(apt_opts "$short") download -qq $(packages_of "$short" "$pkg") >/dev/null)
			for p in "$CACHE/dl-$short"/*.deb; do
				dpkg-deb -x "$p" "$dir"
			done
			rm -rf "$CACHE/dl-$short"
			depmod -b "$dir" "$kver"
			make_initrd "$dir" "$kver"
			touch "$dir/.ready"
			echo "kernels: $short = $pkg"
		fi
	fi
	if [[ $HERE/init -nt $dir/initrd.img ]]; then
		make_initrd "$dir" "$kver"
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
	# the private apt of bullseye alone, before Debian's took its place
	rm -rf "$CACHE/apt-bullseye"
	for k in "${KERNELS[@]}"; do fetch "$k"; done
	;;
*)
	pattern "$1" >/dev/null || { echo "kernels: unknown kernel '$1' (known: ${KERNELS[*]})" >&2; exit 2; }
	mkdir -p "$CACHE"
	fetch "$1"
	;;
esac
