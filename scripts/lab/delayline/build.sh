#!/usr/bin/env bash
# Build the delay line if its binary is missing or older than its source.
# Called by topo.sh before it starts a delay line, and by `make delayline`.
# Prints the binary's path.
set -euo pipefail
dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$dir/delayline.c bin=$dir/delayline
if [[ ! -x $bin || $src -nt $bin ]]; then
	if [[ ! -e /usr/include/libnetfilter_queue/libnetfilter_queue.h ]]; then
		echo "delayline: libnetfilter_queue headers missing: run sudo scripts/deps.sh" >&2
		exit 1
	fi
	# A private temporary name: two labs may come up at the same time.
	${CC:-gcc} -O2 -Wall -Wextra -Wno-unused-parameter -o "$bin.$$.tmp" "$src" \
		-lnetfilter_queue -lnfnetlink
	mv -f "$bin.$$.tmp" "$bin"
fi
echo "$bin"
