#!/usr/bin/env bash
# The evidence behind the path floors' 30-minute window (README, "Path
# floors"): does a CUBIC bulk flow's queue ever drain? A download over
# 8 Mbit/s with a 1.5 MB drop-tail buffer and 40 ms base RTT, ping through
# the bottleneck for the flow's life; the lowest ping per 30 s says what a
# windowed minimum taken during the flow would hold as the path's floor.
#
# Usage: scripts/bench/floor_window.sh [SECONDS]   (root; default 360)
set -euo pipefail
cd "$(dirname "$0")/../.."
T=${1:-360}
OUT=$(mktemp -d)
scripts/lab/topo.sh down evw >/dev/null 2>&1 || true
scripts/lab/topo.sh up evw --rate 8mbit --buffer-bytes 1500000 --delay-ms 40 >/dev/null
trap 'pkill -f "iperf3 -s -p 5301" || true; scripts/lab/topo.sh down evw >/dev/null 2>&1; rm -rf "$OUT"' EXIT
ip netns exec evw-snd iperf3 -s -p 5301 -D
sleep 1
echo "idle: $(ip netns exec evw-snd ping -c 20 -i 0.2 10.9.2.2 | tail -1)"
ip netns exec evw-rcv iperf3 -c 10.9.1.1 -p 5301 -R -C cubic -t "$T" -i 0 > "$OUT/iperf.txt" &
ip netns exec evw-snd ping -D -i 0.2 -w "$T" 10.9.2.2 > "$OUT/ping.txt" || true
wait
/usr/bin/python3 - "$OUT/ping.txt" <<'PY'
import re, sys
rows = [(float(m[1]), float(m[2])) for m in
        (re.match(r"\[(\d+\.\d+)\].*time=([\d.]+)", l) for l in open(sys.argv[1])) if m]
t0 = rows[0][0]
rows = [(t - t0, r) for t, r in rows]
print("second  lowest ping  median (ms), per 30 s of the download")
for b in range(0, int(rows[-1][0]) + 1, 30):
    w = sorted(r for t, r in rows if b <= t < b + 30)
    if w:
        print(f"{b:6d} {w[0]:12.0f} {w[len(w) // 2]:8.0f}")
after = [r for t, r in rows if t >= 10]
print(f"lowest ping after the first 10 s: {min(after):.0f} ms")
PY
