#!/usr/bin/env bash
# `make image`: the container image localhost/bloatd:VERSION, built with
# Debian's buildah from scratch (Containerfile beside this script), and its
# archive target/image/bloatd_VERSION_ARCH.tar (docker-archive: `podman
# load`, `docker load`, `ctr -n k8s.io images import` take it).
#
# The image holds what bloatd's Debian package holds (make deb) and the
# Debian packages its Depends names, with theirs, minus adduser (only the
# package's postinst uses it): unpacked, not installed, so no maintainer
# script runs and no shell or package manager is needed. The only fetch is
# `apt-get download` of those packages from Debian's archive (the versions
# apt would install here), kept in target/image/debs for the next build.
#
# STORAGE_DRIVER (overlay, vfs) chooses buildah's storage; SOURCE_DATE_EPOCH
# (default: the last commit) stamps the image, so a rebuild of the same
# inputs gives the same layer.
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=target/image
DEB=$(ls -t target/deb/bloatd_*.deb 2>/dev/null | head -1)
[[ -n $DEB ]] || { echo "image: no target/deb/bloatd_*.deb: run make deb first (make image does)" >&2; exit 1; }
command -v buildah >/dev/null || { echo "image: buildah not found: run scripts/deps.sh (make deps)" >&2; exit 1; }
VERSION=$(dpkg-deb -f "$DEB" Version)
ARCH=$(dpkg-deb -f "$DEB" Architecture)
NAME=localhost/bloatd:$VERSION
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
storage=()
[[ -z ${STORAGE_DRIVER:-} ]] || storage=(--storage-driver "$STORAGE_DRIVER")

# The package names in a Depends/Pre-Depends field: first of each
# alternative, no versions, no architecture qualifier.
names() { tr ',' '\n' | sed -e 's/|.*//' -e 's/(.*)//' -e 's/:any//' -e 's/[[:space:]]//g' | sed '/^$/d'; }

# The runtime closure of the package's dependencies, in apt's candidates.
queue=($(dpkg-deb -f "$DEB" Depends | names | grep -vx adduser))
declare -A seen=()
pkgs=()
while ((${#queue[@]})); do
	p=${queue[0]}
	queue=("${queue[@]:1}")
	[[ -z ${seen[$p]:-} ]] || continue
	seen[$p]=1
	info=$(apt-cache show --no-all-versions "$p" 2>/dev/null) ||
		{ echo "image: apt knows no package $p: run apt-get update" >&2; exit 1; }
	pkgs+=("$p=$(sed -n 's/^Version: //p' <<<"$info")")
	queue+=($(sed -n -e 's/^Depends: //p' -e 's/^Pre-Depends: //p' <<<"$info" | names))
done

# apt names a downloaded file PKG_VERSION_ARCH.deb, the epoch's colon as %3a
debfile() { ls "$OUT/debs/${1%%=*}_$(sed 's/:/%3a/' <<<"${1#*=}")_"*.deb 2>/dev/null | head -1; }
mkdir -p "$OUT/debs"
for pv in "${pkgs[@]}"; do
	[[ -n $(debfile "$pv") ]] || (cd "$OUT/debs" && apt-get download -q=2 "$pv" 2>&1 | grep -v unsandboxed >&2 || true)
	[[ -n $(debfile "$pv") ]] || { echo "image: apt-get download $pv failed" >&2; exit 1; }
done

CTX=$OUT/context
rm -rf "$CTX"
mkdir -p "$CTX/rootfs"
for pv in "${pkgs[@]}"; do dpkg-deb -x "$(debfile "$pv")" "$CTX/rootfs"; done
dpkg-deb -x "$DEB" "$CTX/rootfs"
# uid and gid 0 by name; the chart mounts its own /etc/group for api.group
R=$CTX/rootfs
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\n' > "$R/etc/passwd"
printf 'root:x:0:\n' > "$R/etc/group"
printf 'passwd: files\ngroup: files\n' > "$R/etc/nsswitch.conf"
mkdir -p "$R/run" "$R/tmp" "$R/proc" "$R/sys" "$R/dev"
chmod 1777 "$R/tmp"
printf '%s\n' "${pkgs[@]}" "bloatd=$VERSION" | sort > "$R/usr/share/bloatd/image-packages"
cp daemon/dist/container/Containerfile "$CTX/"

buildah "${storage[@]}" bud -q --timestamp "$SOURCE_DATE_EPOCH" --build-arg "VERSION=$VERSION" \
	-f "$CTX/Containerfile" -t "$NAME" "$CTX" >/dev/null
ARCHIVE=$OUT/bloatd_${VERSION}_${ARCH}.tar
rm -f "$ARCHIVE"
buildah "${storage[@]}" push -q "$NAME" "docker-archive:$ARCHIVE:$NAME" >/dev/null
echo "$NAME ($(du -sh "$R" | cut -f1) unpacked): $ARCHIVE"
