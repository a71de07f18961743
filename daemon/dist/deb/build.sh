#!/usr/bin/env bash
# `make deb`: target/deb/bloatd_VERSION_ARCH.deb from the release binary and
# the docs it generated (make release: target/release-dist). Plain dpkg-deb:
# no debhelper needed. The binary is static, so the package depends on no
# library: on adduser alone (postinst creates the API group bloatd), and it
# installs on any Debian or Ubuntu with a kernel bloatd supports.
set -euo pipefail
cd "$(dirname "$0")/../../.."
BIN=target/release-dist/bloatd
DOCS=target/release-dist/docs
[[ -x $BIN && -d $DOCS/man ]] || { echo "deb: run make release first (make deb does)" >&2; exit 1; }
if readelf -lW "$BIN" | grep -q INTERP; then
	echo "deb: $BIN is dynamically linked: build it with make release" >&2
	exit 1
fi
VERSION=$($BIN --version | awk '{print $2}')
ARCH=$(dpkg --print-architecture)
OUT=target/deb
ROOT=$OUT/root
rm -rf "$OUT"
mkdir -p "$ROOT/DEBIAN"

install -D -m 0755 -s $BIN "$ROOT/usr/bin/bloatd"
install -D -m 0644 daemon/dist/bloatd.toml "$ROOT/etc/bloatd/bloatd.toml"
install -d "$ROOT/lib/systemd/system"
sed -e 's#/usr/local/bin/#/usr/bin/#g' \
    -e 's#file:///usr/local/share/doc/bloatd/README.md#file:///usr/share/doc/bloatd/README.md.gz#' \
    daemon/dist/bloatd.service > "$ROOT/lib/systemd/system/bloatd.service"
chmod 0644 "$ROOT/lib/systemd/system/bloatd.service"
install -d "$ROOT/usr/share/man/man1"
# shellcheck disable=SC2094  # reads the page, writes its .gz elsewhere
for m in "$DOCS"/man/*.1; do gzip -9n < "$m" > "$ROOT/usr/share/man/man1/$(basename "$m").gz"; done
install -D -m 0644 $DOCS/completions/bloatd.bash "$ROOT/usr/share/bash-completion/completions/bloatd"
install -D -m 0644 $DOCS/completions/_bloatd "$ROOT/usr/share/zsh/vendor-completions/_bloatd"
install -D -m 0644 $DOCS/completions/bloatd.fish "$ROOT/usr/share/fish/vendor_completions.d/bloatd.fish"
install -D -m 0644 daemon/dist/prometheus/bloatd.rules.yml "$ROOT/usr/share/bloatd/prometheus/bloatd.rules.yml"
install -D -m 0644 daemon/dist/prometheus/bloatd.rules.test.yml "$ROOT/usr/share/bloatd/prometheus/bloatd.rules.test.yml"
install -D -m 0644 daemon/dist/grafana/bloatd.json "$ROOT/usr/share/bloatd/grafana/bloatd.json"
install -d "$ROOT/usr/share/doc/bloatd"
gzip -9n < README.md > "$ROOT/usr/share/doc/bloatd/README.md.gz"
install -d "$ROOT/usr/share/doc/bloatd/docs"
for d in docs/*.md; do gzip -9n < "$d" > "$ROOT/usr/share/doc/bloatd/$d.gz"; done
install -m 0644 daemon/dist/deb/copyright "$ROOT/usr/share/doc/bloatd/copyright"
printf 'bloatd (%s) unstable; urgency=medium\n\n  * Built from the bloatd repository.\n\n -- bloatd maintainers <bloatd@example.invalid>  %s\n' \
	"$VERSION" "$(date -R -d @"${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}")" |
	gzip -9n > "$ROOT/usr/share/doc/bloatd/changelog.Debian.gz"

for s in postinst prerm postrm; do install -m 0755 "daemon/dist/deb/$s" "$ROOT/DEBIAN/$s"; done
echo /etc/bloatd/bloatd.toml > "$ROOT/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$ROOT" | cut -f1)
cat > "$ROOT/DEBIAN/control" <<CONTROL
Package: bloatd
Version: $VERSION
Architecture: $ARCH
Maintainer: bloatd maintainers <bloatd@example.invalid>
Installed-Size: $size
Depends: adduser
Section: net
Priority: optional
Homepage: https://example.invalid/bloatd
Description: per-socket TCP bufferbloat monitor with eBPF
 bloatd attaches eBPF probes to the kernel's TCP stack and shows, for every
 TCP socket, its congestion window, RTT, minimum RTT and queueing delay. It
 serves Prometheus metrics, a JSON API on a Unix socket and a live dashboard
 (bloatd top), and registers Westwood+ and CUBIC as BPF struct_ops
 congestion controls. Needs a kernel with BTF (/sys/kernel/btf/vmlinux).
CONTROL
dpkg-deb --root-owner-group --build "$ROOT" "$OUT/bloatd_${VERSION}_${ARCH}.deb" >/dev/null
rm -rf "$ROOT"
echo "$OUT/bloatd_${VERSION}_${ARCH}.deb"
