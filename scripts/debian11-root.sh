#!/usr/bin/env bash
# A Debian 11 (bullseye) root, made once with debootstrap from Debian's
# archive and kept in a cache: the other distribution test_release.py runs
# the release binary in (glibc 2.31, older than the 2.34 the dynamic build
# needs; no libelf). Prints its path.
#
#   scripts/debian11-root.sh          the root, made if missing (~2 min)
#
# minbase plus adduser (the Debian package's Depends). Made in a private
# mount namespace (debootstrap mounts /proc and /sys in the root while it
# installs: nothing of that can outlive it), then moved into place whole,
# so a root in the cache is always complete. Nothing ever changes it after:
# tests run in an overlay over it. BLOATD_ROOT_CACHE moves the cache.
set -euo pipefail
CACHE=${BLOATD_ROOT_CACHE:-/var/cache/bloatd-release}
ROOT=$CACHE/debian11
MIRROR=http://deb.debian.org/debian

if [[ -x $ROOT/bin/sh && -e $ROOT/etc/debian_version ]]; then
	echo "$ROOT"
	exit 0
fi
[[ $(id -u) -eq 0 ]] || { echo "debian11-root: run as root (debootstrap)" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "debian11-root: debootstrap not found: run scripts/deps.sh (make deps)" >&2; exit 1; }
mkdir -p "$CACHE"
tmp=$(mktemp -d "$CACHE/debian11.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "debian11-root: debootstrap bullseye into $ROOT (once)" >&2
if ! unshare --mount --propagation private \
	debootstrap --variant=minbase --include=adduser bullseye "$tmp/root" "$MIRROR" >"$tmp/log" 2>&1; then
	tail -n 20 "$tmp/log" >&2
	echo "debian11-root: debootstrap failed (log above)" >&2
	exit 1
fi
rm -rf "$tmp/root/var/cache/apt/archives/"*.deb
rm -rf "$ROOT"
mv "$tmp/root" "$ROOT"
echo "$ROOT"
