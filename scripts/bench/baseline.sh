#!/usr/bin/env bash
# Build bloatd as it was at COMMIT, for the benchmarks' --baseline: the
# commit's tree exported (git archive, no worktree registered) under
# target/, its own target directory, built once and kept. Prints the
# binary's path.
#
# Usage: scripts/bench/baseline.sh COMMIT      (e.g. main, HEAD~3)
set -euo pipefail
cd "$(dirname "$0")/../.."
commit=$(git rev-parse --short "${1:?usage: baseline.sh COMMIT}^{commit}")
dir=$PWD/target/baseline-$commit
bin=$dir/target/release/bloatd
if [[ ! -x $bin ]]; then
	rm -rf "$dir/src"
	mkdir -p "$dir/src"
	git archive "$commit" | tar -x -C "$dir/src"
	(cd "$dir/src" && CARGO_TARGET_DIR=$dir/target cargo build --release -q -p bloatd >&2)
	rm -rf "$dir/src"
fi
echo "$bin"
