#!/usr/bin/env bash
# `make bench`: every benchmark, one after the other (root). Reports
# numbers and ratios measured side by side; nothing here passes or fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=$(scripts/python.sh)
echo "### probes and daemon (scripts/bench/probes.sh)"
scripts/bench/probes.sh "$@"
echo
echo "### server scale: 10,000 busy and 100,000 sockets (scripts/bench/scale.py)"
$PY scripts/bench/scale.py ${BLOATD_BASELINE:+--baseline "$BLOATD_BASELINE"}
echo
echo "### the kernel's share and the watcher's, this build beside the previous"
echo "### (scripts/bench/share.py; BLOATD_BASELINE=BIN, or built from HEAD~1)"
$PY scripts/bench/share.py --baseline "${BLOATD_BASELINE:-$(scripts/bench/baseline.sh HEAD~1)}"
echo
# scripts/bench/cold_breakdown.py, where exact sampling's time went on cold
# sockets (the record of why sampling is adaptive, docs/measurements.md),
# builds the probes of 9d67fca, which kernels that refuse map-element
# iterators do not start: run it by hand where they do.
echo "### the chart's pod under the same loads (scripts/bench/pod.py; make image first)"
make --no-print-directory image >/dev/null
$PY scripts/bench/pod.py
echo
echo "### acting on bloat: the sock_ops program per callback (scripts/bench/policy.sh)"
scripts/bench/policy.sh
echo
echo "### congestion controls (scripts/bench/cc.sh)"
scripts/bench/cc.sh
echo
echo "### dashboard frame time with 10,000 sockets (cargo bench -p bloatd-tui)"
cargo bench -q -p bloatd-tui --bench frame
