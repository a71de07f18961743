# bloatd: build, test, run. Targets that touch the kernel need root.
CARGO  ?= cargo
PY     ?= $(shell scripts/python.sh)
BIN    := target/release/bloatd
PREFIX ?= /usr/local
LAB_OUT ?= lab-results

DOCS   := target/docs
RULES  := daemon/dist/prometheus
FLEET_CHECK := daemon/dist/kubernetes/check

.PHONY: all deps build lint test unit-test kernel-test rules-test fleet-test integration-test vm-test bench docs \
        install uninstall release deb image fleet-manifest vmlinux demo lab lab-quick lab-classify delayline clean kernels-table \
        api-schema

all: build

## deps: Debian packages for build, run and tests (apt, as root)
deps:
	scripts/deps.sh

## build: release binary at target/release/bloatd (BPF objects via build.rs)
build:
	$(CARGO) build --release
	scripts/lab/delayline/build.sh >/dev/null

## test: everything CI runs: lint, unit tests, the fleet kit's checks, then
## kernel integration tests, then the kernel matrix (5.10, 5.14, 5.15, 6.1,
## 6.12 in VMs, and this host's)
test: deps build lint unit-test rules-test fleet-test kernel-test integration-test vm-test

## lint: rustfmt and clippy (warnings are errors), kernel-test code included;
## shellcheck on every shell script, pyflakes on the Python
lint:
	$(CARGO) fmt --all -- --check
	rustfmt --check --edition 2021 bpf/build_bpf.rs
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings
	$(CARGO) clippy --release -p bloatd-cc --features kernel-tests --all-targets -- -D warnings
	shellcheck -x $$(git ls-files | xargs grep -lsE '^#!.*(bash|/sh)')
	pyflakes3 $$(git ls-files '*.py')

## unit-test: root-free, fast (what `cargo test` runs anywhere), and the
## lab emulator's CoDel/FQ-CoDel against RFC 8289/8290 in simulated time
## (scripts/lab/delayline/aqm_test.c: under a second)
unit-test:
	$(CARGO) test --release --workspace
	scripts/lab/delayline/aqm_test.sh

## kernel-test: the struct_ops algorithms loaded into this kernel (root)
kernel-test:
	$(CARGO) test --release -p bloatd-cc --features kernel-tests

## rules-test: the Prometheus rules are valid and do what their tests say
rules-test:
	promtool check rules $(RULES)/bloatd.rules.yml
	cd $(RULES) && promtool test rules bloatd.rules.test.yml

## fleet-test: the Helm chart and the plain DaemonSet manifest: helm lint,
## helm template and a strict decode of every rendered object into the
## Kubernetes API types (Go; modules and build cached after the first run)
fleet-test: build
	@command -v go >/dev/null || { echo "fleet-test: needs Go >= 1.26 (go.mod of $(FLEET_CHECK))" >&2; exit 1; }
	cd $(FLEET_CHECK) && BLOATD_BIN=$(CURDIR)/$(BIN) go test -count=1 ./...

## api-schema: write docs/api.schema.json from bloatd-model's types (a unit
## test fails while the two differ; commit the file with the change)
api-schema:
	BLOATD_WRITE_SCHEMA=1 $(CARGO) test --release -p bloatd-model -- schema::tests::the_checked_in
	@git diff --stat -- docs/api.schema.json

## fleet-manifest: regenerate daemon/dist/kubernetes/bloatd.yaml from the chart
fleet-manifest:
	cd $(FLEET_CHECK) && go test -count=1 -run TestPlainManifest . -args -update

integration-test:
	scripts/tests/run.sh

## vm-test: the kernel tier on every kernel of the matrix; writes
## target/vm/table.md (one kernel: sudo scripts/vm/run.sh 6.1), with the
## static release binary
vm-test: release
	BLOATD_BIN=$(CURDIR)/target/release-dist/bloatd scripts/vm/run.sh

## kernels-table: README's "Supported kernels" table from the last full
## matrix run (target/vm), if every kernel of it passed
kernels-table:
	$(PY) scripts/vm/table.py --results target/vm --readme README.md

## bench: probe cost, daemon CPU, throughput ratios, this build beside the
## previous one (BLOATD_BASELINE=BIN, else HEAD~1 built; not a test)
bench: deps build
	scripts/bench/run.sh

## docs: man pages and shell completions, generated from the CLI definition
docs: build
	rm -rf $(DOCS)
	$(BIN) generate-docs $(DOCS)

## install: binary, config (kept if present), systemd unit, man pages,
## completions, Prometheus rules, README, the journal's directory
## /var/lib/bloatd; creates the API group bloatd
install: docs
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/bloatd
	install -d $(DESTDIR)/etc/bloatd
	[ -e $(DESTDIR)/etc/bloatd/bloatd.toml ] || install -m 0644 daemon/dist/bloatd.toml $(DESTDIR)/etc/bloatd/bloatd.toml
	install -d -m 0750 $(DESTDIR)/var/lib/bloatd
	install -d $(DESTDIR)/etc/systemd/system
	sed 's#/usr/local/#$(PREFIX)/#g' daemon/dist/bloatd.service > $(DESTDIR)/etc/systemd/system/bloatd.service
	chmod 0644 $(DESTDIR)/etc/systemd/system/bloatd.service
	install -D -m 0644 README.md $(DESTDIR)$(PREFIX)/share/doc/bloatd/README.md
	install -d $(DESTDIR)$(PREFIX)/share/doc/bloatd/docs
	install -m 0644 docs/*.md $(DESTDIR)$(PREFIX)/share/doc/bloatd/docs/
	install -d $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 0644 $(DOCS)/man/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -D -m 0644 $(DOCS)/completions/bloatd.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/bloatd
	install -D -m 0644 $(DOCS)/completions/_bloatd $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_bloatd
	install -D -m 0644 $(DOCS)/completions/bloatd.fish $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/bloatd.fish
	install -D -m 0644 $(RULES)/bloatd.rules.yml $(DESTDIR)$(PREFIX)/share/bloatd/prometheus/bloatd.rules.yml
	install -D -m 0644 $(RULES)/bloatd.rules.test.yml $(DESTDIR)$(PREFIX)/share/bloatd/prometheus/bloatd.rules.test.yml
	install -D -m 0644 daemon/dist/grafana/bloatd.json $(DESTDIR)$(PREFIX)/share/bloatd/grafana/bloatd.json
	[ -n "$(DESTDIR)" ] || getent group bloatd >/dev/null || groupadd --system bloatd
	@echo "installed; start with: systemctl daemon-reload && systemctl enable --now bloatd"

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/bloatd $(DESTDIR)/etc/systemd/system/bloatd.service
	rm -f $(DESTDIR)$(PREFIX)/share/man/man1/bloatd.1 $(DESTDIR)$(PREFIX)/share/man/man1/bloatd-*.1
	rm -f $(DESTDIR)$(PREFIX)/share/bash-completion/completions/bloatd \
	      $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_bloatd \
	      $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/bloatd.fish
	rm -rf $(DESTDIR)$(PREFIX)/share/doc/bloatd $(DESTDIR)$(PREFIX)/share/bloatd
	@echo "kept /etc/bloatd/bloatd.toml, the journal in /var/lib/bloatd and the group bloatd"

## release: one static binary for every distribution (glibc, libbpf, libelf
## and zlib linked in) at target/release-dist/bloatd, a tarball with the
## unit, config, man pages, completions, rules and dashboard, and SHA256SUMS
release:
	scripts/release.sh

## deb: a Debian package in target/deb/ (the release binary, unit, config,
## man pages, completions, rules, docs); depends on adduser alone
deb: release
	daemon/dist/deb/build.sh

## image: the container image localhost/bloatd:VERSION (buildah, from the
## Debian package's files alone: no library) and its archive
## target/image/bloatd_VERSION_ARCH.tar
image: deb
	daemon/dist/container/build.sh

## vmlinux: regenerate bpf/vmlinux.h from the running kernel's BTF
vmlinux:
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > bpf/vmlinux.h.tmp
	mv bpf/vmlinux.h.tmp bpf/vmlinux.h

## demo: the 3.5G lab, a CUBIC download and web fetches, watched with bloatd top
demo: deps build
	scripts/demo.sh

## lab: the full campaign of the papers' experiments (long)
lab: deps build
	$(PY) scripts/lab/lab.py --out $(LAB_OUT)

## lab-quick: the quick subset (under 5 minutes)
lab-quick: deps build
	$(PY) scripts/lab/lab.py --quick --out $(LAB_OUT)/quick

## lab-classify: the bottleneck classifier against the lab's truth, a confusion table (108 runs, 20 s each: 33 min measured at 15 s)
lab-classify: deps build
	$(PY) scripts/lab/lab.py --classify --out $(LAB_OUT)/classify

delayline:
	scripts/lab/delayline/build.sh >/dev/null

clean:
	$(CARGO) clean
	rm -f scripts/lab/delayline/delayline
