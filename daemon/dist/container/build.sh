#!/usr/bin/env bash
# `make image`: the container image localhost/bloatd:VERSION, built with
# Debian's buildah from scratch (Containerfile beside this script), and its
# archive target/image/bloatd_VERSION_ARCH.tar (docker-archive: `podman
# load`, `docker load`, `ctr -n k8s.io images import` take it).
#
# The image holds what bloatd's Debian package holds (make deb), whose
# binary is the static release binary (make release): no library, no
# shell, no package manager, nothing fetched. The package is unpacked, not
# installed, so no maintainer script runs.
#
# STORAGE_DRIVER (overlay, vfs) chooses buildah's storage; SOURCE_DATE_EPOCH
# (default: the last commit) stamps the image, so a rebuild of the same
# inputs gives the same layer.
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=target/image
# shellcheck disable=SC2012  # the newest by time; the names are bloatd_VERSION_ARCH.deb
DEB=$(ls -t target/deb/bloatd_*.deb 2>/dev/null | head -1)
[[ -n $DEB ]] || { echo "image: no target/deb/bloatd_*.deb: run make deb first (make image does)" >&2; exit 1; }
command -v buildah >/dev/null || { echo "image: buildah not found: run scripts/deps.sh (make deps)" >&2; exit 1; }
VERSION=$(dpkg-deb -f "$DEB" Version)
ARCH=$(dpkg-deb -f "$DEB" Architecture)
NAME=localhost/bloatd:$VERSION
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
storage=()
[[ -z ${STORAGE_DRIVER:-} ]] || storage=(--storage-driver "$STORAGE_DRIVER")

# Nothing but the binary runs in the image: a package that depends on
# more than adduser (only its postinst uses that) needs files from
# elsewhere, which this image does not have.
depends=$(dpkg-deb -f "$DEB" Depends)
[[ $depends == adduser ]] || { echo "image: $DEB depends on '$depends', not adduser alone: build it from the static binary (make deb)" >&2; exit 1; }

CTX=$OUT/context
rm -rf "$CTX"
mkdir -p "$CTX/rootfs"
dpkg-deb -x "$DEB" "$CTX/rootfs"
# uid and gid 0 by name; the chart mounts its own /etc/group for api.group
R=$CTX/rootfs
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\n' > "$R/etc/passwd"
printf 'root:x:0:\n' > "$R/etc/group"
mkdir -p "$R/run" "$R/tmp" "$R/proc" "$R/sys" "$R/dev"
chmod 1777 "$R/tmp"
cp daemon/dist/container/Containerfile "$CTX/"

buildah "${storage[@]}" bud -q --timestamp "$SOURCE_DATE_EPOCH" --build-arg "VERSION=$VERSION" \
	-f "$CTX/Containerfile" -t "$NAME" "$CTX" >/dev/null
ARCHIVE=$OUT/bloatd_${VERSION}_${ARCH}.tar
rm -f "$ARCHIVE"
buildah "${storage[@]}" push -q "$NAME" "docker-archive:$ARCHIVE:$NAME" >/dev/null
echo "$NAME ($(du -sh "$R" | cut -f1) unpacked): $ARCHIVE"
