"""Statistics, table, findings F1-F4 and plots for the lab's results.

Input: DIR/meta.json and DIR/raw.jsonl written by lab.py (one JSON object
per long flow of run A and per short flow of runs B-D). Output: DIR/table.txt,
DIR/findings.txt, DIR/summary.json and PNGs in the style of Alfredsson et
al.'s figures; the table and the findings are also printed.

Statistics follow the paper (Sec. III-B): outliers more than an order of
magnitude from the median, or beyond 9 inter-quartile ranges, are rejected;
means carry a 95% confidence interval (Student's t).
"""
import json
import math
import os

# Two-sided 95% Student t quantiles, by degrees of freedom.
_T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
        2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
        2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]

CC_ORDER = ["cubic", "reno", "bloatd_cubic", "bloatd_westwood"]
CC_LABEL = {"cubic": "CUBIC", "reno": "NewReno", "bloatd_cubic": "bloatd CUBIC",
            "bloatd_westwood": "Westwood+"}
CC_COLOR = {"cubic": "#d62728", "reno": "#1f77b4", "bloatd_cubic": "#ff9896",
            "bloatd_westwood": "#2ca02c"}
WW = "bloatd_westwood"


# ------------------------------------------------------------ small helpers

def fmt_ms(us):
    return "-" if us is None else f"{us / 1000:.0f} ms"


def fmt_kb(b):
    return "-" if b is None else f"{b / 1000:.0f} kB"


def step_label(step):
    if step["run"] == "A":
        return f"run A long flow {step['cc']} (rep {step['rep'] + 1}, {step['seconds']:.0f} s)"
    if step["run"] == "B":
        return f"run B {step['shorts']} short flows {step['short_cc']} alone"
    n = 1 if step["run"] == "C" else 5
    return (f"run {step['run']} {n} bulk {step['bg_cc']} + {step['shorts']} short "
            f"{step['short_cc']}")


def long_flow_summary(series):
    """Averages of a run A flow after its startup phase.

    Startup ends at the first retransmission: in a deep tail-drop buffer
    slow start only stops when the buffer overflows. Alfredsson et al.
    compare outstanding windows "after the TCP startup phase" (Sec. IV-B);
    the RTT average uses the same window so the two describe the same time.
    """
    if not series:
        return {"srtt_mean_us": None, "srtt_max_us": None, "inflight_mean_bytes": None,
                "inflight_max_bytes": None, "retrans": None, "startup_s": None,
                "retrans_startup": None, "retrans_steady_per_min": None}
    start = next((i for i, x in enumerate(series) if x["retrans"] > 0), 0)
    steady = series[start:]
    # The startup's loss episode (slow start overflowing the buffer) ends
    # once no retransmission came for 2 s; what follows is the steady state
    # the paper's 180 s flows are dominated by (De Cicco & Mascolo, Table II).
    last_t, last_n, episode_end = None, 0, None
    for x in steady:
        if last_t is not None and x["t"] - last_t >= 2.0:
            episode_end = (last_t, last_n)
            break
        if x["retrans"] > last_n or last_t is None:
            last_t, last_n = x["t"], x["retrans"]
    if episode_end and series[-1]["t"] > episode_end[0]:
        steady_min = (series[-1]["t"] - episode_end[0]) / 60
        per_min = (series[-1]["retrans"] - episode_end[1]) / steady_min if steady_min > 0 else None
    else:
        per_min = None
    retrans_startup = episode_end[1] if episode_end else series[-1]["retrans"]
    srtt = [x["srtt_us"] for x in steady if x["srtt_us"] > 0]
    infl = [x["inflight_bytes"] for x in steady]
    return {
        "srtt_mean_us": sum(srtt) / len(srtt) if srtt else None,
        "srtt_max_us": max((x["srtt_us"] for x in series), default=None),
        "inflight_mean_bytes": sum(infl) / len(infl) if infl else None,
        "inflight_max_bytes": max((x["inflight_bytes"] for x in series), default=None),
        "retrans": series[-1]["retrans"],
        "retrans_startup": retrans_startup,
        "retrans_steady_per_min": per_min,
        "startup_s": steady[0]["t"] if steady else None,
    }


def reject_outliers(xs):
    """The paper's rule: drop values an order of magnitude from the median,
    then values beyond 9 IQRs from the quartiles."""
    xs = sorted(x for x in xs if x is not None)
    if len(xs) < 4:
        return xs
    med = xs[len(xs) // 2]
    xs = [x for x in xs if med / 10 <= x <= med * 10] if med > 0 else xs
    q1, q3 = xs[len(xs) // 4], xs[(3 * len(xs)) // 4]
    iqr = q3 - q1
    return [x for x in xs if q1 - 9 * iqr <= x <= q3 + 9 * iqr]


def mean_ci(xs, reject=True):
    """(n, mean, 95% CI half-width or None), after outlier rejection unless
    `reject` is False (F5: a web transfer DRWA did not act on is a result,
    and the rule dropped such transfers from a tight group of the others)."""
    xs = reject_outliers(xs) if reject else sorted(x for x in xs if x is not None)
    n = len(xs)
    if n == 0:
        return 0, None, None
    mean = sum(xs) / n
    if n < 2:
        return n, mean, None
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    t = _T95[n - 2] if n - 1 <= len(_T95) else 1.96
    return n, mean, t * sd / math.sqrt(n)


def diff_ci(xs, ys, reject=True):
    """(mean of xs - mean of ys, 95% CI half-width or None), Welch's t
    interval (unequal variances, Welch-Satterthwaite degrees of freedom),
    after the same outlier rejection as mean_ci (none if `reject` is
    False)."""
    if reject:
        xs, ys = reject_outliers(xs), reject_outliers(ys)
    else:
        xs, ys = [x for x in xs if x is not None], [y for y in ys if y is not None]
    if not xs or not ys:
        return None, None
    d = sum(xs) / len(xs) - sum(ys) / len(ys)
    if len(xs) < 2 or len(ys) < 2:
        return d, None

    def var_n(v):
        m = sum(v) / len(v)
        return sum((x - m) ** 2 for x in v) / (len(v) - 1) / len(v)
    a, b = var_n(xs), var_n(ys)
    if a + b == 0:
        return d, 0.0
    df = (a + b) ** 2 / ((a ** 2 / (len(xs) - 1) if a else 0) + (b ** 2 / (len(ys) - 1) if b else 0))
    k = max(1, int(df))   # rounding the degrees of freedom down widens the interval
    t = _T95[k - 1] if k <= len(_T95) else 1.96
    return d, t * math.sqrt(a + b)


def disjoint(a, b):
    """True when the 95% intervals of stats a and b (n, mean, ci) do not overlap
    and a is the larger."""
    if a[1] is None or b[1] is None or a[2] is None or b[2] is None:
        return False
    return a[1] - a[2] > b[1] + b[2]


def fmt_stat(st, scale=1.0, digits=2):
    n, m, ci = st
    if m is None:
        return "-"
    s = f"{m * scale:.{digits}f}"
    return s + (f" ± {ci * scale:.{digits}f}" if ci is not None else "")


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def ratio_ci(a, b):
    """(a's mean / b's mean, its 95% CI half-width or None) of two
    (n, mean, CI) stats: the delta method, the two means independent
    (r x sqrt((ci_a / a)^2 + (ci_b / b)^2))."""
    r = ratio(a[1], b[1])
    if r is None or a[2] is None or b[2] is None or not a[1]:
        return r, None
    return r, abs(r) * math.sqrt((a[2] / a[1]) ** 2 + (b[2] / b[1]) ** 2)


def fmt_ratio(r):
    return "n/a" if r is None else f"{r:.2f}"


def finding(name, text, value=None, holds=False):
    """One finding: its line starts with its name and ends with the verdict."""
    return {"name": name, "value": value, "holds": bool(holds),
            "line": f"{name} {text}; " + ("holds" if holds else "does not hold")}


# ------------------------------------------------------------ load + group

def load(d):
    with open(os.path.join(d, "meta.json")) as f:
        meta = json.load(f)
    recs = []
    with open(os.path.join(d, "raw.jsonl")) as f:
        for line in f:
            if line.strip():
                recs.append(json.loads(line))
    return meta, recs


def cc_sorted(ccs):
    return sorted(ccs, key=lambda c: (CC_ORDER.index(c) if c in CC_ORDER else 99, c))


class Results:
    def __init__(self, meta, recs):
        self.meta = meta
        self.recs = recs

    def profiles(self):
        seen = []
        for r in self.recs:
            if r["profile"] not in seen:
                seen.append(r["profile"])
        return seen

    def long(self, prof, cc=None):
        return [r for r in self.recs if r["profile"] == prof and r["run"] == "A"
                and (cc is None or r["cc"] == cc)]

    def short(self, prof, run, bg=None, cc=None):
        return [r for r in self.recs if r["profile"] == prof and r["run"] == run
                and (bg is None or r.get("bg_cc") == bg) and (cc is None or r["short_cc"] == cc)]

    def stat(self, rows, key):
        return mean_ci([r.get(key) for r in rows])

    def ccs(self, prof, run, field):
        return cc_sorted({r[field] for r in self.recs if r["profile"] == prof and r["run"] == run})


# ------------------------------------------------------------ table

def table(res):
    out = []
    for prof in res.profiles():
        p = res.meta["profiles"].get(prof, {})
        link = f"trace {p['trace']} (mean {p.get('rate')})" if p.get("trace") else f"rate {p.get('rate')}"
        out.append(f"profile {prof}: {link}, base RTT {p.get('delay_ms')} ms, "
                   f"buffer {p.get('buffer_bytes')} B (instrument: {res.meta.get('instrument')})")
        ccs = res.ccs(prof, "A", "cc")
        if ccs:
            out.append("  run A (long flows; RTT and in-flight averaged after startup)")
            out.append(f"    {'cc':<16} {'n':>2}  {'goodput Mbit/s':<16} {'RTT ms':<16} "
                       f"{'in flight kB':<16} {'max RTT ms':<10} retrans")
            for cc in ccs:
                rows = res.long(prof, cc)
                out.append(
                    f"    {cc:<16} {len(rows):>2}  "
                    f"{fmt_stat(res.stat(rows, 'goodput_bps'), 1e-6):<16} "
                    f"{fmt_stat(res.stat(rows, 'srtt_mean_us'), 1e-3, 0):<16} "
                    f"{fmt_stat(res.stat(rows, 'inflight_mean_bytes'), 1e-3, 0):<16} "
                    f"{fmt_stat(res.stat(rows, 'srtt_max_us'), 1e-3, 0):<10} "
                    f"{fmt_stat(res.stat(rows, 'retrans'), 1, 0)}")
        for run in ("B", "C", "D"):
            rows_run = res.short(prof, run)
            if not rows_run:
                continue
            what = {"B": "short flows alone", "C": "1 background bulk flow",
                    "D": "5 background bulk flows"}[run]
            out.append(f"  run {run} ({what}; 320 kB response time, the short flow's RTT and "
                       f"retransmitted share of its segments)")
            out.append(f"    {'background':<16} {'short':<16} {'n':>3}  {'response s':<16} "
                       f"{'RTT ms':<16} loss %")
            bgs = res.ccs(prof, run, "bg_cc") if run != "B" else [None]
            for bg in bgs:
                for cc in res.ccs(prof, run, "short_cc"):
                    rows = res.short(prof, run, bg, cc)
                    if not rows:
                        continue
                    out.append(
                        f"    {bg or '-':<16} {cc:<16} {len(rows):>3}  "
                        f"{fmt_stat(res.stat(rows, 'response_s')):<16} "
                        f"{fmt_stat(res.stat(rows, 'srtt_mean_us'), 1e-3, 0):<16} "
                        f"{fmt_stat(res.stat(rows, 'loss_pct'), 1, 1)}")
        out.append("")
    return "\n".join(out)


# ------------------------------------------------------------ findings

def roles(res):
    """Which profile plays the papers' fast (3.5G), slow (3G) and contrast
    (4G) links in these results (lab.py's LINKS; results of earlier
    releases were all constant-rate)."""
    return res.meta.get("roles") or {"fast": "3.5g", "slow": "3g", "contrast": "4g"}


def _pool_short(res, prof, run, bg):
    return res.stat(res.short(prof, run, bg), "response_s")


def finding_f1(res):
    prof = roles(res)["fast"]
    alone = _pool_short(res, prof, "B", None)
    c = {bg: _pool_short(res, prof, "C", bg) for bg in res.ccs(prof, "C", "bg_cc")}
    d = {bg: _pool_short(res, prof, "D", bg) for bg in res.ccs(prof, "D", "bg_cc")}
    if "cubic" not in c or WW not in c:
        return finding("F1", f"{prof} short flow beside 1 CUBIC vs 1 Westwood+ bulk flow: not measured "
                       "(needs run C with cubic and bloatd_westwood background)")
    core = ratio(c["cubic"][1], c[WW][1])
    parts = [f"alone {fmt_stat(alone)} s (paper ~0.8)"] if alone[1] else []
    one = []
    for bg in cc_sorted(c):
        x = ratio(c[bg][1], alone[1])
        one.append(f"{bg} {c[bg][1]:.2f} s" + (f" ({x:.1f}x)" if x else ""))
    parts.append("beside 1 bulk: " + ", ".join(one) + " (paper: CUBIC/NewReno ~5x, Westwood+ ~2x)")
    if d:
        parts.append("beside 5 bulk: " + ", ".join(f"{bg} {d[bg][1]:.2f} s" for bg in cc_sorted(d))
                     + " (paper: CUBIC ~8, NewReno ~6, Westwood+ ~5 s)")
    spread = [res.stat(res.short(prof, "C", "cubic", cc), "response_s")[1]
              for cc in res.ccs(prof, "C", "short_cc")]
    spread = [x for x in spread if x]
    if len(spread) > 1:
        parts.append(f"short-flow CC spread beside 1 CUBIC {max(spread) / min(spread):.2f}x "
                     "(paper: matters little)")
    ok = core is not None and core > 1.3 and disjoint(c["cubic"], c[WW])
    return finding("F1", f"{prof} response beside 1 CUBIC / beside 1 Westwood+ bulk = {fmt_ratio(core)} "
                   f"(paper ~2: 5x vs 2x of idle; 95% CIs {'apart' if disjoint(c['cubic'], c[WW]) else 'overlap'}); "
                   + "; ".join(parts), core, ok)


def finding_f2(res):
    prof = roles(res)["fast"]
    g = {cc: res.stat(res.long(prof, cc), "goodput_bps") for cc in res.ccs(prof, "A", "cc")}
    if "cubic" not in g or WW not in g:
        return finding("F2", f"{prof} long flows CUBIC vs Westwood+: not measured "
                       "(needs run A with cubic and bloatd_westwood)")
    r = {cc: res.stat(res.long(prof, cc), "srtt_mean_us") for cc in g}
    w = {cc: res.stat(res.long(prof, cc), "inflight_mean_bytes") for cc in g}
    x = {cc: res.stat(res.long(prof, cc), "retrans") for cc in g}
    xs = {cc: res.stat(res.long(prof, cc), "retrans_startup") for cc in g}
    xm = {cc: res.stat(res.long(prof, cc), "retrans_steady_per_min") for cc in g}
    steady_ratio = ratio(xm["cubic"][1], xm[WW][1])
    rtt_ratio = ratio(r["cubic"][1], r[WW][1])
    win_ratio = ratio(w["cubic"][1], w[WW][1])
    ret_ratio = ratio(x["cubic"][1], x[WW][1])
    gp_ratio = ratio(g["cubic"][1], g[WW][1])
    gps = ", ".join(f"{cc} {g[cc][1] / 1e6:.1f}" for cc in cc_sorted(g))
    ok = rtt_ratio is not None and rtt_ratio > 1.2 and gp_ratio is not None and 0.9 <= gp_ratio <= 1.1
    return finding("F2", f"{prof} long-flow RTT CUBIC / Westwood+ = {fmt_ratio(rtt_ratio)} "
                   f"(paper 1.5; HSDPA 1.54); goodput Mbit/s {gps} (paper 16.1 CUBIC, 15.5 NewReno, "
                   f"15.7 Westwood+; CUBIC/Westwood+ {fmt_ratio(gp_ratio)}); outstanding window "
                   f"ratio {fmt_ratio(win_ratio)} (paper ~2); retransmissions ratio "
                   f"{fmt_ratio(ret_ratio)} (HSDPA ~3; of them in the startup's loss episode: "
                   f"cubic {fmt_stat(xs['cubic'], 1, 0)}, Westwood+ {fmt_stat(xs[WW], 1, 0)}; "
                   f"after it, per minute: cubic {fmt_stat(xm['cubic'], 1, 1)}, Westwood+ "
                   f"{fmt_stat(xm[WW], 1, 1)}, ratio {fmt_ratio(steady_ratio)})", rtt_ratio, ok)


def finding_f3(res):
    r = roles(res)
    prof = next((r[k] for k in ("slow", "fast", "contrast") if k in r and res.long(r[k], "cubic")), None)
    if prof is None:
        return finding("F3", "fat pipe: not measured (needs a run A CUBIC flow)")
    p = res.meta["profiles"][prof]
    bdp = p["rate_bps"] / 8 * p["delay_ms"] / 1000
    infl = res.stat(res.long(prof, "cubic"), "inflight_mean_bytes")[1]
    rmax = max(r["srtt_max_us"] or 0 for r in res.long(prof, "cubic"))
    fat = ratio(infl, bdp)
    ok = fat is not None and fat >= 5 and rmax >= 1_000_000
    return finding("F3", f"{prof} CUBIC long flow in flight / BDP = {fmt_ratio(fat)} "
                   f"({fmt_kb(infl)} vs {fmt_kb(bdp)}; paper: >1000 kB vs 58 kB, ~17); max RTT "
                   f"{rmax / 1e6:.2f} s (paper: seconds, up to 10 s)", fat, ok)


def finding_f4(res):
    def short_cc_ratio(prof):
        a = res.stat(res.short(prof, "D", "cubic", WW), "response_s")
        b = res.stat(res.short(prof, "D", "cubic", "cubic"), "response_s")
        return a, b, ratio(a[1], b[1])
    slow, fast = roles(res)["slow"], roles(res)["fast"]
    ww3, cu3, r3 = short_cc_ratio(slow)
    if r3 is None:
        return finding("F4", f"{slow} short flow's own CC beside 5 CUBIC bulk flows: not measured "
                       f"(needs {slow} run D with cubic and bloatd_westwood short flows: the full campaign)")
    loss = res.stat(res.short(slow, "D", "cubic"), "loss_pct")
    _, _, r35 = short_cc_ratio(fast)
    ok = r3 > 1.3 and (loss[1] or 0) >= 1 and (r35 is None or r3 > r35)
    return finding("F4", f"{slow} response Westwood+ short / CUBIC short beside 5 CUBIC bulk = {r3:.2f} "
                   f"({ww3[1]:.0f} s vs {cu3[1]:.0f} s; paper >300 s vs <150 s, ~2); short-flow "
                   f"retransmitted {fmt_stat(loss, 1, 1)} % (paper: ~15 % loss); same ratio on {fast} "
                   f"{fmt_ratio(r35)} (paper: matters little)", r3, ok)


def findings(res):
    return [finding_f1(res), finding_f2(res), finding_f3(res), finding_f4(res)]


# ------------------------------------------------------------ plots

def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_short(res, prof, key, scale, ylabel, path):
    """Alfredsson et al. Figs. 2, 6, 8, 10: grouped bars, one group per
    background load, bars colored by the short flow's congestion control."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(12, 4.5))
    x, ticks, ticklabels, group_mid = 0.0, [], [], []
    used = set()
    for run, title in (("B", "no background"), ("C", "1 background flow"),
                       ("D", "5 background flows")):
        bgs = res.ccs(prof, run, "bg_cc") if run != "B" else [None]
        start = x
        any_bar = False
        for bg in bgs:
            sub = x
            for cc in res.ccs(prof, run, "short_cc"):
                n, m, ci = res.stat(res.short(prof, run, bg, cc), key)
                if m is None:
                    continue
                ax.bar(x, m * scale, color=CC_COLOR.get(cc, "grey"),
                       yerr=(ci or 0) * scale, capsize=3,
                       label=CC_LABEL.get(cc, cc) if cc not in used else None)
                used.add(cc)
                x += 1
                any_bar = True
            if x > sub:
                # One label per background congestion control, under its bars.
                ticks.append((sub + x - 1) / 2)
                ticklabels.append(CC_LABEL.get(bg, bg) if bg else "")
            x += 0.3
        if any_bar:
            group_mid.append(((start + x - 1.3) / 2, title))
            x += 1
    if not ticks:
        plt.close(fig)
        return False
    ax.set_xticks(ticks)
    ax.set_xticklabels(ticklabels, fontsize=8)
    for mid, title in group_mid:
        ax.text(mid, 1.01, title, transform=ax.get_xaxis_transform(), ha="center", fontsize=9)
    ax.set_ylim(bottom=0)
    ax.set_ylabel(ylabel)
    ax.set_xlabel("congestion control of the background flow(s); color: the short flow's")
    ax.legend(title="short flow", fontsize=8)
    ax.set_title(f"{prof}: 320 kB short flows, mean and 95% CI", pad=18)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_long_bars(res, prof, path):
    """Fig. 3: goodput and average RTT of single long flows."""
    plt = _plt()
    ccs = res.ccs(prof, "A", "cc")
    if not ccs:
        return False
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.8))
    for i, cc in enumerate(ccs):
        rows = res.long(prof, cc)
        for ax, key, scale in ((a1, "goodput_bps", 1e-6), (a2, "srtt_mean_us", 1e-3)):
            n, m, ci = res.stat(rows, key)
            if m is not None:
                ax.bar(i, m * scale, color=CC_COLOR.get(cc, "grey"), yerr=(ci or 0) * scale, capsize=4)
    for ax, lab in ((a1, "goodput (Mbit/s)"), (a2, "average RTT (ms)")):
        ax.set_ylim(bottom=0)
        ax.set_xticks(range(len(ccs)))
        ax.set_xticklabels([CC_LABEL.get(c, c) for c in ccs], fontsize=8)
        ax.set_ylabel(lab)
    fig.suptitle(f"{prof}: single long flows (run A), mean and 95% CI")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_long_series(res, prof, key, scale, ylabel, path):
    """Figs. 4 and 5: RTT and outstanding window over one long flow per CC."""
    plt = _plt()
    ccs = res.ccs(prof, "A", "cc")
    if not ccs:
        return False
    fig, axes = plt.subplots(len(ccs), 1, figsize=(9, 2.2 * len(ccs)), sharex=True, squeeze=False)
    ymax = 0
    for ax, cc in zip(axes[:, 0], ccs):
        rows = res.long(prof, cc)
        s = rows[0]["series"] if rows else []
        t = [p["t"] for p in s]
        y = [p[key] * scale for p in s]
        ymax = max([ymax] + y)
        ax.plot(t, y, color=CC_COLOR.get(cc, "grey"), lw=0.8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.set_title(CC_LABEL.get(cc, cc), fontsize=9, loc="left")
    for ax in axes[:, 0]:
        ax.set_ylim(0, ymax * 1.05 if ymax else 1)
    axes[-1, 0].set_xlabel("time (s)")
    fig.suptitle(f"{prof}: single long flows (run A), sender's view by "
                 f"{res.meta.get('instrument')}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_long_dynamics(res, prof, path):
    """Why the queue stays or drains: cwnd against Westwood+'s BWE x RTTmin
    (its pipe) and the queueing delay over one long flow each of CUBIC and
    Westwood+ (needs runs measured with bloatd, which exports the pipe)."""
    plt = _plt()
    ccs = [c for c in ("cubic", WW) if res.long(prof, c)]
    rows = {cc: res.long(prof, cc)[0]["series"] for cc in ccs}
    if WW not in rows or not any(p.get("pipe") for p in rows[WW]):
        return False
    fig, axes = plt.subplots(2, len(ccs), figsize=(5 * len(ccs), 5.5), sharex=True, squeeze=False)
    for j, cc in enumerate(ccs):
        s = rows[cc]
        t = [p["t"] for p in s]
        top, bottom = axes[0, j], axes[1, j]
        top.plot(t, [p["cwnd"] for p in s], color=CC_COLOR.get(cc, "grey"), lw=0.8, label="cwnd")
        pipe = [(p["t"], p["pipe"]) for p in s if p.get("pipe")]
        if pipe:
            top.plot([x for x, _ in pipe], [y for _, y in pipe], color="black", lw=0.8, ls="--",
                     label="BWE x RTTmin")
        top.set_ylabel("segments", fontsize=8)
        top.set_title(CC_LABEL.get(cc, cc), fontsize=9, loc="left")
        top.legend(fontsize=7)
        bottom.plot(t, [(p.get("queue_delay_us") or 0) / 1000 for p in s],
                    color=CC_COLOR.get(cc, "grey"), lw=0.8)
        r = [p["t"] for a, p in zip(s, s[1:]) if p["retrans"] > a["retrans"]]
        if r:
            bottom.plot(r, [0] * len(r), "x", color="red", ms=4, label="retransmission")
            bottom.legend(fontsize=7)
        bottom.set_ylabel("queueing delay (ms)", fontsize=8)
        bottom.set_xlabel("time (s)")
    link = res.meta["profiles"].get(prof, {})
    what = f"trace {link['trace']}" if link.get("trace") else f"constant {link.get('rate')}"
    fig.suptitle(f"{prof} ({what}): cwnd, Westwood+'s pipe and the queue over one long flow")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plots(res, d):
    made = []
    for prof in res.profiles():
        tag = prof.replace(".", "_")
        jobs = [
            (f"response_{tag}.png", lambda p: plot_short(res, prof, "response_s", 1,
                                                         "web response time (s)", p)),
            (f"short_rtt_{tag}.png", lambda p: plot_short(res, prof, "srtt_mean_us", 1e-3,
                                                          "short flow RTT (ms)", p)),
            (f"short_loss_{tag}.png", lambda p: plot_short(res, prof, "loss_pct", 1,
                                                           "short flow retransmitted %", p)),
            (f"long_{tag}.png", lambda p: plot_long_bars(res, prof, p)),
            (f"long_dynamics_{tag}.png", lambda p: plot_long_dynamics(res, prof, p)),
            (f"long_rtt_{tag}.png", lambda p: plot_long_series(res, prof, "srtt_us", 1e-3,
                                                               "RTT (ms)", p)),
            (f"long_window_{tag}.png", lambda p: plot_long_series(
                res, prof, "inflight_bytes", 1e-3, "outstanding (kB)", p)),
        ]
        for name, fn in jobs:
            path = os.path.join(d, name)
            if fn(path):
                made.append(name)
    return made


# ------------------------------------------------------------ report

def report(d):
    meta, recs = load(d)
    res = Results(meta, recs)
    tab = table(res)
    fnd = findings(res)
    with open(os.path.join(d, "table.txt"), "w") as f:
        f.write(tab + "\n")
    with open(os.path.join(d, "findings.txt"), "w") as f:
        f.write("\n".join(x["line"] for x in fnd) + "\n")
    try:
        made = plots(res, d)
    except ImportError as e:
        made = []
        print(f"lab: no plots ({e}): install python3-matplotlib (scripts/deps.sh) "
              "and run with the python3 scripts/python.sh names")
    summary = {"meta": meta, "findings": fnd, "plots": made}
    fnd = [f["line"] for f in fnd]
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(tab)
    print("\n".join(fnd))
    print(f"lab: table, findings and {len(made)} plots in {d}/")
    return 0
