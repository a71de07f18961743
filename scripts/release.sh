#!/usr/bin/env bash
# `make release`: one bloatd binary for every distribution whose kernel
# bloatd supports, and what goes with it, in target/release-dist/:
#
#   bloatd                          the binary, statically linked: glibc
#                                   (crt-static), libbpf, libelf and zlib
#                                   in it; it loads no library at all
#   docs/                           man pages and completions it generated
#   bloatd-VERSION-linux-ARCH.tar.gz   the binary, unit, config, man pages,
#                                   completions, Prometheus rules, Grafana
#                                   dashboard, README, copyright
#   SHA256SUMS                      of the binary and the tarball
#
# There is no musl target here, so "static" is glibc's static linking:
# crt-static given to the final link alone (`cargo rustc -- -C
# target-feature=+crt-static`: the crates are those of `make build`,
# only libbpf's and what depends on it are built again with the `static`
# feature), into target/release/bloatd like `make build`'s. RUSTFLAGS
# with --target, as before, built every crate a second time for its own
# directory (~3 min; this way 52 s after `make build`, measured). libbpf is built from the
# crate's copy (as in every build); libelf and zlib are Debian's static
# archives (libelf-dev, zlib1g-dev).
#
# A static glibc still has NSS (getgrnam, getpwnam, getaddrinfo...): those
# dlopen the running system's libnss modules, built for another glibc, and
# fail or crash on another distribution. bloatd calls none of them (groups
# come from /etc/group, daemon/src/rundir.rs); the link is checked for
# them here, and the build fails if one comes in.
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}
DIST=target/release-dist
BUILT=target/release/bloatd

# The lookups a static glibc serves through NSS, whose modules it would
# dlopen (glibc's link warnings name the same functions). glibc's own
# NSS and dlopen code is in every static binary (fork and stdio refer to
# it), inert while no lookup calls it.
NSS='getpw(nam|uid|ent)(_r)?|getgr(nam|gid|ent)(_r)?|getgrouplist|initgroups|getaddrinfo|getnameinfo|gethostby(name|name2|addr)(_r)?|getservby(name|port)(_r)?|getprotoby(name|number)(_r)?|getspnam(_r)?|iconv_open'

# where libbpf-sys finds libelf.a and libz.a (rustc searches no system
# directory for a static library)
libdirs=$(pkg-config --variable=libdir libelf zlib | tr " " "\n" | sort -u | paste -sd:)
# The same path as `make build`'s binary: removed first, so that cargo
# puts this build's there even when both are up to date (it copies a
# build up to date only to where its file is missing).
rm -f "$BUILT"
nice -n "${NICE:-19}" env LIBBPF_SYS_LIBRARY_PATH="$libdirs" \
	"$CARGO" rustc --release --locked -p bloatd --bin bloatd --features static -- -C target-feature=+crt-static

# Static: no program interpreter, no needed library.
if readelf -lW "$BUILT" | grep -q 'INTERP' || readelf -dW "$BUILT" | grep -q '(NEEDED)'; then
	echo "release: $BUILT is not static:" >&2
	readelf -dW "$BUILT" | grep NEEDED >&2 || true
	exit 1
fi
bad=$(nm "$BUILT" | awk '$2 ~ /^[TtWw]$/ {print $3}' | grep -xE "$NSS" || true)
if [[ -n $bad ]]; then
	echo "release: $BUILT calls NSS lookups that a static glibc cannot serve on another distribution: ${bad//$'\n'/ }" >&2
	exit 1
fi

rm -rf "$DIST"
mkdir -p "$DIST"
install -m 0755 -s "$BUILT" "$DIST/bloatd"
VERSION=$("$DIST/bloatd" --version | awk '{print $2}')
ARCH=$(uname -m)
"$DIST/bloatd" generate-docs "$DIST/docs" >/dev/null

NAME=bloatd-$VERSION-linux-$ARCH
STAGE=$DIST/$NAME
mkdir -p "$STAGE"
install -m 0755 "$DIST/bloatd" "$STAGE/bloatd"
install -m 0644 daemon/dist/bloatd.service daemon/dist/bloatd.toml README.md "$STAGE/"
install -m 0644 daemon/dist/deb/copyright "$STAGE/COPYRIGHT"
cp -r "$DIST/docs/man" "$DIST/docs/completions" "$STAGE/"
install -D -m 0644 -t "$STAGE/prometheus" daemon/dist/prometheus/bloatd.rules.yml daemon/dist/prometheus/bloatd.rules.test.yml
install -D -m 0644 -t "$STAGE/grafana" daemon/dist/grafana/bloatd.json
# The same inputs give the same tarball: names sorted, owner root, times
# from the last commit.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
	-C "$DIST" -cf - "$NAME" | gzip -9n >"$DIST/$NAME.tar.gz"
rm -rf "$STAGE"
(cd "$DIST" && sha256sum bloatd "$NAME.tar.gz" >SHA256SUMS)
echo "$DIST/bloatd ($(stat -c %s "$DIST/bloatd") bytes, static)"
echo "$DIST/$NAME.tar.gz"
echo "$DIST/SHA256SUMS"
