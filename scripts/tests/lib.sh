# Sourced by the shell integration tests (scripts/tests/test_*.sh), from the
# repository's root: their checks, their verdict, the lab's topology. The
# shell counterpart of bloatdtest.py. Set NAME (the test's name) first.

TOPO=scripts/lab/topo.sh
# The binary under test: BLOATD_BIN, as for every test (scripts/tests/run.sh).
BLOATD=${BLOATD_BIN:-${BLOATD:-$PWD/target/release/bloatd}}
FAILS=0

pass() { echo "  ok: $*"; }
fail() { echo "  FAIL: $*"; FAILS=$((FAILS + 1)); }

# Root or nothing: network namespaces, BPF.
need_root() { [[ $(id -u) -eq 0 ]] || { echo "$NAME: run as root"; exit 1; }; }

# The verdict of the checks made: exit 1 if any failed.
finish() {
	if ((FAILS)); then
		echo "$NAME: $FAILS failure(s)"
		exit 1
	fi
	echo "$NAME: passed"
}
