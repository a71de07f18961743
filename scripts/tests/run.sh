#!/usr/bin/env bash
# Runs every integration test (scripts/tests/test_*.py, on scripts/bloatdpy/harness.py)
# one after another, as root, on the real kernel. Tests that measure share
# two cores: running them in parallel would make them measure each other.
#   scripts/tests/run.sh              all of them
#   scripts/tests/run.sh test_daemon  those whose name contains the word
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
[[ $(id -u) -eq 0 ]] || { echo "scripts/tests/run.sh: run as root (BPF, network namespaces)" >&2; exit 1; }
export BLOATD_BIN=${BLOATD_BIN:-$PWD/target/release/bloatd}
[[ -x $BLOATD_BIN ]] || { echo "no $BLOATD_BIN: run make build first" >&2; exit 1; }
PY=$(scripts/python.sh) || exit 1
export PYTHON=$PY

failed=()
start_all=$(date +%s)
for t in scripts/tests/test_*.py; do
	name=$(basename "$t")
	[[ -n ${1:-} && $name != *"$1"* ]] && continue
	echo "=== $name"
	t0=$(date +%s)
	(cd scripts/tests && $PY "$name")
	rc=$?
	echo "=== $name: $([[ $rc -eq 0 ]] && echo ok || echo "FAILED ($rc)") in $(( $(date +%s) - t0 ))s"
	((rc == 0)) || failed+=("$name")
done
echo "integration tests took $(( $(date +%s) - start_all ))s"
if ((${#failed[@]})); then
	echo "FAILED: ${failed[*]}"
	exit 1
fi
echo "all integration tests passed"
