#!/usr/bin/env bash
# Build the delay line if its binary is missing or older than its sources.
# Called by topo.sh before it starts a delay line, and by `make delayline`.
# Prints the binary's path.
set -euo pipefail
dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=$dir/delayline
srcs=("$dir/delayline.c" "$dir/aqm.c")
stale=0
[[ -x $bin ]] || stale=1
for f in "${srcs[@]}" "$dir/aqm.h"; do
	[[ $f -nt $bin ]] && stale=1
done
if ((stale)); then
	if [[ ! -e /usr/include/libnetfilter_queue/libnetfilter_queue.h ]]; then
		echo "delayline: libnetfilter_queue headers missing: run sudo scripts/deps.sh" >&2
		exit 1
	fi
	# A private temporary name: two labs may come up at the same time.
	${CC:-gcc} -O2 -Wall -Wextra -Wno-unused-parameter -o "$bin.$$.tmp" "${srcs[@]}" \
		-lnetfilter_queue -lnfnetlink -lm
	mv -f "$bin.$$.tmp" "$bin"
fi
echo "$bin"
