#!/usr/bin/env bash
# Quick-mode smoke runs of the lab with bloatd as the instrument, on both
# link models: constant rate (3.5g, tbf) and a measured cellular trace (lte,
# the same rate on average). Each under 5 minutes; F1's core ratio (a 320
# kB short flow beside one CUBIC bulk flow vs beside one Westwood+ bulk
# flow) must be above 1.3 and F2's RTT ratio (CUBIC long flow vs Westwood+
# long flow) above 1.2; the paper's are about 2 and 1.5. Also checked: every
# flow ran with the congestion control it asked for, as bloatd saw it, and
# the findings are printed one per line, F1 to F4, F1 and F2 on the model's
# fast link.
# With no daemon running, lab.py must start bloatd itself (as `sudo make
# lab-quick` does on a fresh machine) and stop it again; a daemon that was
# already running is used and left running.
# Needs the release build (cargo build --release). Run as root:
# sudo scripts/tests/test_lab_quick.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
NAME=test_lab_quick
source scripts/tests/lib.sh
N=blquick
OUT=$(mktemp -d /tmp/bloatd-lab-quick.XXXXXX)

cleanup() {
	"$TOPO" down "$N" >/dev/null 2>&1 || true
	if ((FAILS)); then echo "test_lab_quick: results kept in $OUT"; else rm -rf "$OUT"; fi
}
trap cleanup EXIT
trap 'FAILS=$((FAILS + 1)); exit 130' INT TERM

need_root
[[ -x $BLOATD ]] || { echo "test_lab_quick: $BLOATD missing: run cargo build --release"; exit 1; }

was_running=0
"$BLOATD" status >/dev/null 2>&1 && was_running=1

# quick LINK DIR: lab.py --quick on a link model, its time, its findings.
quick() {
	local link=$1 out=$2 t0 t1 rc
	mkdir -p "$out"
	echo "test_lab_quick: lab.py --quick --link $link (bloatd as the instrument)"
	t0=$(date +%s)
	/usr/bin/python3 scripts/lab/lab.py --quick --link "$link" --instrument bloatd --name "$N" \
		--out "$out" | tee "$out/stdout.txt" | grep -E '^(\[|F[1-4] |lab:)'
	rc=${PIPESTATUS[0]}
	t1=$(date +%s)
	[[ $rc -eq 0 ]] && pass "$link: lab.py --quick finished in $((t1 - t0)) s" || fail "$link: lab.py exited $rc"
	((t1 - t0 < 300)) && pass "$link: under 5 minutes" || fail "$link: quick mode took $((t1 - t0)) s"
	/usr/bin/python3 - "$out" <<'PY' || FAILS=$((FAILS + 1))
import json, sys
sys.path.insert(0, "scripts/tests")
from bloatdtest import Checks
d = sys.argv[1]
summ = json.load(open(f"{d}/summary.json"))
link = summ["meta"]["link"]
f = {x["name"]: x for x in summ["findings"]}
checks = Checks()
check = lambda ok, msg: checks(ok, f"{link}: " + msg)
check(summ["meta"]["instrument"] == "bloatd", f"instrument {summ['meta']['instrument']}")
f1, f2 = f["F1"]["value"], f["F2"]["value"]
fmt = lambda v: "n/a" if v is None else f"{v:.2f}"
check(f1 is not None and f1 > 1.3, f"F1 core ratio (beside CUBIC / beside Westwood+) {fmt(f1)} (> 1.3)")
check(f2 is not None and f2 > 1.2, f"F2 RTT ratio (CUBIC / Westwood+ long flow) {fmt(f2)} (> 1.2)")
lines = open(f"{d}/stdout.txt").read().splitlines()
flines = [l for l in lines if l[:3] in ("F1 ", "F2 ", "F3 ", "F4 ")]
check([l[:2] for l in flines] == ["F1", "F2", "F3", "F4"]
      and all(l.endswith("; holds") or l.endswith("; does not hold") for l in flines),
      "four finding lines, F1-F4, each ending with its verdict")
fast = summ["meta"]["roles"]["fast"]
check(all(l.split()[1] == fast for l in flines[:2]), f"F1 and F2 on the {link} model's fast link, {fast}")
wrong, n = [], 0
for line in open(f"{d}/raw.jsonl"):
    r = json.loads(line)
    want = r.get("cc") or r.get("short_cc")
    n += 1
    if r.get("cc_seen") != want:
        wrong.append((r["run"], want, r.get("cc_seen")))
check(n > 0 and not wrong, f"bloatd saw each of {n} flows with the congestion control it asked for"
      + (f": mismatches {wrong[:5]}" if wrong else ""))
checks.done()
PY
}

quick const "$OUT/const"
st=0; "$BLOATD" status >/dev/null 2>&1 || st=$?
if ((was_running)); then
	((st == 0)) && pass "the daemon that was running is still running" || fail "bloatd status $st after the lab"
else
	grep -q "^lab: started bloatd" "$OUT/const/stdout.txt" && pass "with no daemon, the lab started bloatd" \
		|| fail "the lab did not say it started bloatd"
	((st == 3)) && pass "and stopped it at the end" || fail "bloatd status $st after the lab (want 3)"
fi
# The same on one measured cellular trace (lte: the 3.5g runs' rate)
quick trace "$OUT/trace"

finish
