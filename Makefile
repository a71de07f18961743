# bloatd: build, test, run. Targets that touch the kernel need root.
CARGO  ?= cargo
PY     := /usr/bin/python3
BIN    := target/release/bloatd
PREFIX ?= /usr/local
LAB_OUT ?= lab-results

.PHONY: all deps build test unit-test integration-test bench install uninstall \
        vmlinux demo lab lab-quick delayline clean

all: build

## deps: Debian packages for build, run and tests (apt, as root)
deps:
	scripts/deps.sh

## build: release binary at target/release/bloatd (BPF objects via build.rs)
build:
	$(CARGO) build --release --workspace
	scripts/delayline/build.sh >/dev/null

## test: everything CI runs: unit tests, then kernel integration tests
test: deps build unit-test integration-test

unit-test:
	$(CARGO) test --release --workspace

integration-test:
	scripts/tests/run.sh

## bench: probe cost, daemon CPU, throughput ratios (not a test)
bench: deps build
	scripts/bench/run.sh

## install: binary, config (kept if present), systemd unit
install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/bloatd
	install -d $(DESTDIR)/etc/bloatd
	[ -e $(DESTDIR)/etc/bloatd/bloatd.toml ] || install -m 0644 daemon/dist/bloatd.toml $(DESTDIR)/etc/bloatd/bloatd.toml
	install -D -m 0644 daemon/dist/bloatd.service $(DESTDIR)/etc/systemd/system/bloatd.service
	install -D -m 0644 README.md $(DESTDIR)$(PREFIX)/share/doc/bloatd/README.md
	@echo "installed; start with: systemctl daemon-reload && systemctl enable --now bloatd"

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/bloatd $(DESTDIR)/etc/systemd/system/bloatd.service
	rm -rf $(DESTDIR)$(PREFIX)/share/doc/bloatd
	@echo "kept /etc/bloatd/bloatd.toml"

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

delayline:
	scripts/delayline/build.sh >/dev/null

clean:
	$(CARGO) clean
	rm -f scripts/delayline/delayline
