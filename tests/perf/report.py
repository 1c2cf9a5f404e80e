#!/usr/bin/env python3
"""report.py - turn the results.csv of peers.sh and gateway.sh into one markdown report: the
main table (req/s, ratios to direct and to nginx/HAProxy, CPU us/request, RSS), then S2 latency,
S3 filter cost, S5 added latency, S8 idle memory, the BENCHMARKS.md bar, and how firm each of its
verdicts is (the rounds resampled).

usage: report.py --peers peers/results.csv --gateway gateway/results.csv [--notes notes.txt]
"""
import argparse
import csv
import os
import random
import statistics
from collections import defaultdict

PROXIES = ["nginx", "haproxy", "weir"]
TARGETS = ["direct"] + PROXIES
LABEL = {"direct": "direct", "nginx": "nginx", "haproxy": "HAProxy", "weir": "weir"}
# S1's ceiling: nginx's L4 relay (stream proxy_pass) in the proxy's place copies bytes and does no
# HTTP work, so no proxy on this rig can do much better (the load generator and the backend share
# the other core).
RELAY = "nginx_tcp"
ODDS_DRAWS = 2000  # resamplings of the rounds for the odds table (a few seconds)
NUM = ["requests", "rps", "errors", "timeouts", "p50_ms", "p95_ms", "p99_ms", "p999_ms", "max_ms",
       "proxy_us_req", "proxy_pss_mib", "proxy_rss_mib", "pss_before_mib", "kib_per_conn", "foreign_cores", "steal_cores"]


def by_round(path):
    """{(mode, phase, conns, rate): {round: {target: row}}}: the rows as measured, for the
    round-by-round comparison ('candidate' becomes 'weir')."""
    out = defaultdict(lambda: defaultdict(dict))
    with open(path) as f:
        for r in csv.DictReader(f):
            t = "weir" if r["target"] == "candidate" else r["target"]
            out[(r["mode"], r["phase"], r["conns"], r["rate"])][r["run"]][t] = r
    return out


def load(rounds, foreign_max, steal_max):
    """{(mode, phase, conns, rate): {target: row}} over the runs and rounds of `by_round`, each
    number the median (one burst of other tenants' load moves a mean, not a median of three).
    Flagged when a row kept more foreign load, or (fixed-rate rows) more steal, than allowed."""
    out = {}
    for key, by_run in rounds.items():
        by_t = defaultdict(list)
        for row in by_run.values():
            for t, r in row.items():
                by_t[t].append(r)
        out[key] = {}
        for t, rows in by_t.items():
            avg = {}
            for k in NUM:
                vals = [float(r[k]) for r in rows if r.get(k) not in (None, "")]
                avg[k] = statistics.median(vals) if vals else None
            avg["max_ms"] = max((float(r["max_ms"]) for r in rows if r.get("max_ms")), default=None)
            avg["flag"] = " (!)" if any(float(r["foreign_cores"] or 0) > foreign_max
                                        or float(r.get("steal_cores") or 0) > steal_max for r in rows) else ""
            avg["runs"] = len(rows)
            out[key][t] = avg
    return out


def rounds_table(p_rounds, g_rounds, mode):
    """The bar's comparisons within each round: the rows of one round are measured within a
    minute of each other, so a slow spell of the machine moves them together."""
    lines = []

    def num(r, k):
        return float(r[k]) if r.get(k) not in (None, "") else None

    def row(label, rounds, fn):
        vals = []
        for _, by_t in sorted(rounds.items(), key=lambda kv: int(kv[0])):
            v = fn(by_t)
            if v is not None:
                vals.append(v)
        if len(vals) > 1:
            lines.append(f"| {label} | {' · '.join(f'{v:.2f}' for v in vals)} | {statistics.median(vals):.2f} |")

    def weir_over_lower_peer(figure):
        """weir's `figure(row)` over the lower of nginx's and HAProxy's in a round."""
        def ratio_in(by_t):
            vals = [figure(by_t[t]) if t in by_t else None for t in ("weir", "nginx", "haproxy")]
            if None in vals or not min(vals[1:]):
                return None
            return vals[0] / min(vals[1:])
        return ratio_in

    def us(r):
        return num(r, "proxy_us_req")

    def us_over_backend(r):
        """The proxy's CPU per request over the backend's in the same window: the backend does the
        same work behind every proxy, so a slow spell of the machine moves both."""
        p, b = num(r, "proxy_us_req"), num(r, "backend_us_req")
        return p / b if p is not None and b else None

    cpu, cpu_for_backend = weir_over_lower_peer(us), weir_over_lower_peer(us_over_backend)

    def added_p99(by_t):
        w, n, d = by_t.get("weir"), by_t.get("nginx"), by_t.get("direct")
        if not (w and n and d):
            return None
        return (num(w, "p99_ms") - num(d, "p99_ms")) - (num(n, "p99_ms") - num(d, "p99_ms"))

    def over(a, b):
        """a's req/s over b's in a round."""
        return lambda by_t: (num(by_t[a], "rps") / num(by_t[b], "rps")
                             if a in by_t and b in by_t and num(by_t[b], "rps") else None)

    for (m, ph, c, _), rounds in sorted(p_rounds.items(), key=lambda kv: int(kv[0][2] or 0)):
        if m == mode and ph == "h1":
            row(f"S1 -c{c} weir's CPU ÷ the lower peer's", rounds, cpu)
            row(f"S1 -c{c} the same, each CPU over the backend's in its window", rounds, cpu_for_backend)
            row(f"S1 -c{c} weir's req/s ÷ nginx's", rounds, over("weir", "nginx"))
            row(f"S1 -c{c} the L4 relay's req/s ÷ nginx's (the ceiling)", rounds, over(RELAY, "nginx"))
            row(f"S1 -c{c} weir's req/s ÷ the L4 relay's", rounds, over("weir", RELAY))
    order = ["s3-get-bare", "s3-get-filtered", "s3-post-bare", "s3-post-filtered"]
    s3 = [(k, v) for k, v in g_rounds.items() if k[0] == mode and k[1] in order]
    for (m, ph, c, _), rounds in sorted(s3, key=lambda kv: order.index(kv[0][1])):
        row(f"S3 {ph[3:]} weir's CPU ÷ the lower peer's", rounds, cpu)
        row(f"S3 {ph[3:]} the same, each CPU over the backend's in its window", rounds, cpu_for_backend)
    for (m, ph, c, _), rounds in p_rounds.items():
        if m == mode and ph == "rate":
            row("S5 weir's added p99 − nginx's (ms)", rounds, added_p99)
    if not lines:
        return []
    return ["", "The bar's comparisons round by round (each round's rows are measured within a minute of each "
            "other; the bar below uses the medians of the rounds, as the tables above). The rows \"over the "
            "backend's\" divide each proxy's CPU per request by the backend's in the same window, which "
            "does the same work behind every proxy and slows with the machine; a cross-check, not the bar:", "",
            "| comparison | rounds | median |", "|---|---|---|"] + lines


def fmt(x, spec="{:,.0f}"):
    return "-" if x is None else spec.format(x)


def ratio(a, b):
    return "-" if not a or not b else f"{a['rps'] / b['rps']:.2f}" if b["rps"] else "-"


def of(by_t):
    """', median of N' when a row's numbers are medians of several rounds."""
    n = max(r["runs"] for r in by_t.values())
    return f", median of {n}" if n > 1 else ""


def main_table(rows):
    """rows: [(scenario, load, {target: row}, direct row)]"""
    lines = ["| scenario | load | direct req/s | nginx req/s (÷direct) | HAProxy req/s (÷direct) "
             "| weir req/s (÷direct) | weir ÷ nginx | weir ÷ HAProxy "
             "| CPU µs/req nginx · HAProxy · weir | RSS MiB nginx · HAProxy · weir "
             "| errors+timeouts nginx · HAProxy · weir |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for sc, load_, by_t, d in rows:
        cells = [sc, load_, fmt(d and d["rps"]) + (d["flag"] if d else "")]
        for t in PROXIES:
            r = by_t.get(t)
            cells.append("-" if not r else f"{r['rps']:,.0f} ({ratio(r, d)}){r['flag']}")
        w = by_t.get("weir")
        cells += [ratio(w, by_t.get("nginx")), ratio(w, by_t.get("haproxy"))]
        cells.append(" · ".join(fmt(by_t.get(t, {}).get("proxy_us_req"), "{:.1f}") for t in PROXIES))
        cells.append(" · ".join(fmt(by_t.get(t, {}).get("proxy_rss_mib"), "{:.1f}") for t in PROXIES))
        cells.append(" · ".join(
            "-" if t not in by_t else fmt((by_t[t]["errors"] or 0) + (by_t[t]["timeouts"] or 0))
            for t in PROXIES))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peers")
    ap.add_argument("--gateway")
    ap.add_argument("--notes", action="append", default=[])
    ap.add_argument("--foreign-max", type=float, default=0.15)
    ap.add_argument("--steal-max", type=float, default=0.005)
    a = ap.parse_args()
    PR = by_round(a.peers) if a.peers else {}
    GR = by_round(a.gateway) if a.gateway else {}
    P, G = load(PR, a.foreign_max, a.steal_max), load(GR, a.foreign_max, a.steal_max)
    modes = sorted({k[0] for k in list(P) + list(G)})
    out = []
    for mode in modes:
        p, g = split(P, G, mode)
        if len(modes) > 1:
            out += ["", f"### pinning: {mode}"]
        rows = []
        for (ph, c, rate), by_t in sorted(p.items(), key=lambda kv: int(kv[0][1] or 0)):
            if ph == "h1":
                rows.append(("S1", f"HTTP/1.1 keep-alive, wrk -c{c}{of(by_t)}", by_t, by_t.get("direct")))
        for (ph, c, rate), by_t in sorted(g.items(), key=lambda kv: int(kv[0][1] or 0)):
            if ph == "s2":
                rows.append(("S2", f"/auth-service rewrite → 2 endpoints, no keep-alive, ab -c{c}",
                             by_t, by_t.get("direct")))
        for meth in ("get", "post"):
            for var in ("bare", "filtered"):
                for (ph, c, rate), by_t in g.items():
                    if ph == f"s3-{meth}-{var}":
                        d = g.get((f"s3-{meth}-bare", c, rate), {}).get("direct")
                        what = "route only" if var == "bare" else "+ AddQueryParameter + set header"
                        body = " (JSON body)" if meth == "post" else ""
                        rows.append(("S3", f"{meth.upper()}{body} {what}, wrk -c{c}{of(by_t)}", by_t, d))
        for (ph, c, rate), by_t in p.items():
            if ph == "h2":
                rows.append(("S6", f"h2c, h2load {c} conns (HTTP/1.1 upstream){of(by_t)}", by_t, by_t.get("direct")))
        for (ph, c, rate), by_t in g.items():
            if ph == "grpc":
                rows.append(("S6", f"gRPC unary over h2c, h2load {c} conns", by_t, by_t.get("direct")))
        out += main_table(rows)
        out += ceiling_table(p) + s2_table(g) + s3_table(g) + s5_table(p)
        out += s5_steal_table(beside(a.peers, "results-attempts.csv"), mode) + wakeups_table(a.peers, mode) + s8_table(p)
        vs = verdicts(p, g)
        out += rounds_table(PR, GR, mode) + bar(vs) + odds(PR, GR, mode, a, vs)
    notes = []
    for n in a.notes:
        try:
            notes += [ln.strip() for ln in open(n) if ln.strip()]
        except OSError:
            pass
    if notes:
        out += ["", "Notes from the checks run before measuring:", ""] + [f"- {n}" for n in notes]
    print("\n".join(out))


def ceiling_table(p):
    rows = sorted(((int(c), by_t) for (ph, c, _), by_t in p.items() if ph == "h1" and RELAY in by_t),
                  key=lambda x: x[0])
    if not rows:
        return []
    out = ["", "S1's ceiling: nginx's L4 relay (`stream`, `proxy_pass`: bytes copied, no HTTP parsed) in the "
           "proxy's place, measured in the same rounds. The backend and wrk share CPU 0, so a proxy that does "
           "no HTTP work shows how far any proxy can go here.", "",
           "| load | direct req/s | L4 relay req/s (÷direct) | relay ÷ nginx | weir ÷ relay "
           "| CPU µs/req relay · nginx · weir |", "|---|---|---|---|---|---|"]
    for c, by_t in rows:
        r, d = by_t[RELAY], by_t.get("direct")
        cpu = " · ".join(fmt(by_t.get(t, {}).get("proxy_us_req"), "{:.1f}") for t in (RELAY, "nginx", "weir"))
        out.append(f"| wrk -c{c}{of(by_t)} | {fmt(d and d['rps'])} | {r['rps']:,.0f} ({ratio(r, d)}){r['flag']} "
                   f"| {ratio(r, by_t.get('nginx'))} | {ratio(by_t.get('weir'), r)} | {cpu} |")
    return out


def s2_table(g):
    rows = sorted(((int(c), by_t) for (ph, c, _), by_t in g.items() if ph == "s2"), key=lambda x: x[0])
    if not rows:
        return []
    out = ["", "S2 latency (ab, whole ms): p50 / p95 / max, failures", "",
           "| ab -c | " + " | ".join(LABEL[t] for t in TARGETS) + " |", "|---" * (len(TARGETS) + 1) + "|"]
    for c, by_t in rows:
        cells = [str(c)]
        for t in TARGETS:
            r = by_t.get(t)
            cells.append("-" if not r else
                         f"{r['p50_ms']:.0f} / {r['p95_ms']:.0f} / {r['max_ms']:.0f}, {r['errors']:.0f}{r['flag']}")
        out.append("| " + " | ".join(cells) + " |")
    return out


def s3_table(g):
    out = []
    for meth in ("get", "post"):
        for (ph, c, rate), bare in g.items():
            if ph != f"s3-{meth}-bare":
                continue
            filt = g.get((f"s3-{meth}-filtered", c, rate), {})
            if not out:
                out = ["", "S3 filter cost: filtered ÷ bare route, same proxy and run", "",
                       "| request | proxy | req/s bare → filtered | ratio | CPU µs/req bare → filtered "
                       "| p99 ms bare → filtered | errors · timeouts (filtered) |", "|---|---|---|---|---|---|---|"]
            for t in PROXIES:
                b, f = bare.get(t), filt.get(t)
                if not b or not f:
                    continue
                out.append(f"| {meth.upper()} -c{c} | {LABEL[t]} | {b['rps']:,.0f} → {f['rps']:,.0f} | {ratio(f, b)} "
                           f"| {b['proxy_us_req']:.1f} → {f['proxy_us_req']:.1f} | {b['p99_ms']:.1f} → {f['p99_ms']:.1f} "
                           f"| {f['errors']:.0f} · {f['timeouts'] or 0:.0f} |")
    return out


def s5_table(p):
    out = []
    for (ph, c, rate), by_t in p.items():
        if ph != "rate":
            continue
        d = by_t.get("direct")
        out += ["", f"S5 fixed rate {rate} req/s over {c} connections{of(by_t)}: latency in ms and added over direct", "",
                "| target | p50 | p99 | p99.9 | +p50 | +p99 | +p99.9 | CPU µs/req | steal cores |",
                "|---|---|---|---|---|---|---|---|---|"]
        for t in TARGETS:
            r = by_t.get(t)
            if not r:
                continue
            add = (lambda k: "-" if t == "direct" or not d else f"{r[k] - d[k]:+.3f}")
            out.append(f"| {LABEL[t]}{r['flag']} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} | {r['p999_ms']:.3f} "
                       f"| {add('p50_ms')} | {add('p99_ms')} | {add('p999_ms')} | {fmt(r['proxy_us_req'], '{:.1f}')} "
                       f"| {fmt(r['steal_cores'], '{:.4f}')} |")
    return out


# Steal bins of S5's table against steal (cores the hypervisor gave other tenants in the window).
STEAL_BINS = [0, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, float("inf")]


def beside(peers, name):
    """The file `name` that peers.sh wrote beside its results.csv, if it did: results-attempts.csv
    (every window measured, those measured again included: lib.sh's record_attempt) or
    wakeups.csv (the trace phase)."""
    path = peers and os.path.join(os.path.dirname(peers), name)
    return path if path and os.path.exists(path) else None


def s5_steal_table(path, mode):
    """S5's p99 against the steal of its window, over every attempt: p99 at this rate follows
    steal for every proxy (HISTORY.md, sessions 15 and 22), so two medians of windows with
    different steal compare the hypervisor more than the proxies; windows with like steal
    compare the proxies."""
    if not path:
        return []
    wins = defaultdict(list)
    with open(path) as f:
        for r in csv.DictReader(f):
            if r["mode"] != mode or r["phase"] != "rate" or not r.get("steal_cores"):
                continue
            t = "weir" if r["target"] == "candidate" else r["target"]
            if t in TARGETS:
                wins[t].append((float(r["steal_cores"]), float(r["p99_ms"])))
    if not wins:
        return []
    ts = [t for t in TARGETS if t in wins]
    out = ["", "S5 p99 (ms) against the steal of its window, every window measured (those measured again "
           "included): median (windows). p99 at this rate follows steal for every proxy; compare along a row.", "",
           "| steal cores | " + " | ".join(LABEL[t] for t in ts) + " |", "|---|" + "---|" * len(ts)]
    for lo, hi in zip(STEAL_BINS, STEAL_BINS[1:]):
        cells = []
        for t in ts:
            xs = [p99 for st, p99 in wins[t] if lo <= st < hi]
            cells.append(f"{statistics.median(xs):.3f} ({len(xs)})" if xs else "-")
        if any(c != "-" for c in cells):
            span = f"≥ {lo:g}" if hi == float("inf") else f"{lo:g}–{hi:g}"
            out.append(f"| {span} | " + " | ".join(cells) + " |")
    return out


def wakeups_table(peers, mode):
    """peers.sh's trace phase (wakeups.csv beside results.csv): the proxy's CPU per run at S5's
    rate, the median of the rounds."""
    path = beside(peers, "wakeups.csv")
    if not path:
        return []
    by_t = defaultdict(list)
    with open(path) as f:
        for r in csv.DictReader(f):
            if r["mode"] == mode:
                by_t["weir" if r["target"] == "candidate" else r["target"]].append(r)
    cols = ["runs_per_req", "busy_p50_us", "busy_p99_us", "busy_mean_us", "ipi_p50_us", "ipi_p99_us"]
    out = ["", "S5's rate traced (ftrace's sched events, `wakeups.py`): the proxy's CPU runs per request, each "
           "from a wake-up to sleeping again; how long a run lasts (the proxy's work and the kernel's for it); "
           "and the time from the remote CPU's wake-up call to the run starting (the IPI and the vCPU's "
           "resume). Median of the rounds.", "",
           "| proxy | rounds | runs/request | run p50 · p99 · mean µs | wake-up p50 · p99 µs |", "|---|---|---|---|---|"]
    for t in PROXIES:
        rows = by_t.get(t)
        if not rows:
            continue
        m = {k: statistics.median(float(r[k]) for r in rows) for k in cols}
        out.append(f"| {LABEL[t]} | {len(rows)} | {m['runs_per_req']:.2f} | {m['busy_p50_us']:.0f} · "
                   f"{m['busy_p99_us']:.0f} · {m['busy_mean_us']:.0f} | {m['ipi_p50_us']:.0f} · {m['ipi_p99_us']:.0f} |")
    return out


def s8_table(p):
    out = []
    for (ph, c, rate), by_t in p.items():
        if ph != "idle":
            continue
        out += ["", f"S8 idle memory: fresh process, then {c} idle keep-alive connections (one request each), PSS once settled (within 1% for 1 s)", "",
                "| proxy | conns ok | PSS before MiB | PSS with conns MiB | RSS with conns MiB | KiB/conn |",
                "|---|---|---|---|---|---|"]
        for t in PROXIES:
            r = by_t.get(t)
            if r:
                out.append(f"| {LABEL[t]} | {r['requests']:.0f} | {r['pss_before_mib']:.1f} | {r['proxy_pss_mib']:.1f} "
                           f"| {r['proxy_rss_mib']:.1f} | {r['kib_per_conn']:.1f} |")
    return out


def verdicts(p, g):
    """The BENCHMARKS.md bar, item by item, from one set of medians: (label, met, text, rows)
    per item, rows being those whose flags make the item inconclusive."""
    res = []

    def get(src, ph, t, c=None):
        for (ph2, c2, _), by_t in src.items():
            if ph2 == ph and (c is None or c2 == c) and t in by_t:
                return by_t[t]
        return None

    for c in sorted({k[1] for k in p if k[0] == "h1"}, key=int):
        w, n, h = get(p, "h1", "weir", c), get(p, "h1", "nginx", c), get(p, "h1", "haproxy", c)
        if w and n and h:
            res.append((f"S1 -c{c} CPU", w["proxy_us_req"] <= min(n["proxy_us_req"], h["proxy_us_req"]),
                        f"S1 -c{c} CPU/request ≤ nginx and HAProxy: {w['proxy_us_req']:.1f} vs "
                        f"{n['proxy_us_req']:.1f} / {h['proxy_us_req']:.1f} µs", ()))
            relay = get(p, "h1", RELAY, c)
            ceiling = f" (the L4 relay: {relay['rps'] / n['rps']:.2f} ×)" if relay else ""
            res.append((f"S1 -c{c} throughput", w["rps"] >= 1.1 * n["rps"],
                        f"S1 -c{c} throughput ≥ 1.1 × nginx: {w['rps'] / n['rps']:.2f} ×{ceiling}", (w, n)))
            if relay:  # not an item: the ceiling, for the odds table
                res.append((f"S1 -c{c} the L4 relay's throughput", relay["rps"] >= 1.1 * n["rps"], None, ()))
    for ph in ("s3-get-bare", "s3-get-filtered", "s3-post-bare", "s3-post-filtered"):
        w, n, h = get(g, ph, "weir"), get(g, ph, "nginx"), get(g, ph, "haproxy")
        if w and n and h:
            res.append((f"S3 {ph[3:]} CPU", w["proxy_us_req"] <= min(n["proxy_us_req"], h["proxy_us_req"]),
                        f"S3 {ph[3:]} CPU/request ≤ nginx and HAProxy: {w['proxy_us_req']:.1f} vs "
                        f"{n['proxy_us_req']:.1f} / {h['proxy_us_req']:.1f} µs", ()))
    w, n, d = get(p, "rate", "weir"), get(p, "rate", "nginx"), get(p, "rate", "direct")
    if w and n and d:
        res.append(("S5 added p99", w["p99_ms"] - d["p99_ms"] <= n["p99_ms"] - d["p99_ms"],
                    f"S5 added p99 ≤ nginx's: {w['p99_ms'] - d['p99_ms']:+.3f} vs {n['p99_ms'] - d['p99_ms']:+.3f} ms",
                    (w, n, d)))
    w = get(p, "idle", "weir")
    if w:
        res.append(("S8 idle memory", w["pss_before_mib"] <= 15 and w["kib_per_conn"] <= 8,
                    f"S8 idle ≤ 15 MiB and ≤ 8 KiB/connection: {w['pss_before_mib']:.1f} MiB PSS, "
                    f"{w['kib_per_conn']:.1f} KiB/conn", ()))
    return res


def bar(vs):
    """The bar as this run's medians have it (`verdicts`)."""
    shaky = " (!) measured while others loaded the machine (or the hypervisor ran them on its CPUs): not conclusive"
    res = [f"- {'✅' if ok else '❌'} {text}{shaky if any(r['flag'] for r in rows) else ''}"
           for _, ok, text, rows in vs if text]
    return ["", "The bar (BENCHMARKS.md), this run:", ""] + res if res else []


def odds(p_rounds, g_rounds, mode, args, here, draws=ODDS_DRAWS):
    """How firm each verdict is: the bar over `draws` resamplings of this run's rounds (each
    row's rounds drawn with replacement, as many as it had: a bootstrap), beside `here`, the
    run's own verdicts. One run's rounds only, so it shows how much a verdict hangs on which
    windows the run happened to get."""
    total = sum(1 for _, _, text, _ in here if text)
    if not total or max((len(r) for k, r in p_rounds.items() if k[0] == mode), default=0) < 3:
        return []  # one or two rounds: nothing to resample
    rng = random.Random(1)  # the same report for the same results

    def draw(rounds):
        out = {}
        for key, by_run in rounds.items():
            if key[0] != mode:
                continue
            runs = list(by_run.values())
            out[key] = {str(i): rng.choice(runs) for i in range(len(runs))}
        return out

    met, per_draw = defaultdict(int), []
    for _ in range(draws):
        P, G = load(draw(p_rounds), args.foreign_max, args.steal_max), load(draw(g_rounds), args.foreign_max, args.steal_max)
        vs = verdicts(*split(P, G, mode))
        for label, ok, _, _ in vs:
            met[label] += ok
        per_draw.append(sum(ok for _, ok, text, _ in vs if text))
    met_here = {label: ok for label, ok, _, _ in here}

    def pct(n):
        return "<1%" if 0 < 100 * n < draws / 2 else f"{100 * n / draws:.0f}%"

    rows = [f"| {label} | {'met' if met_here.get(label) else 'missed'} | {pct(n)} |" for label, n in met.items()]
    spread = " · ".join(f"{k}: {pct(per_draw.count(k))}" for k in range(total + 1) if per_draw.count(k))
    return ["", f"How firm each verdict is: the bar over {draws:,} resamplings of this run's rounds (each row's "
            "rounds drawn again with replacement, as many as it had). The rounds of one run only: it shows how "
            "much a verdict hangs on the windows this run happened to get. The L4 relay's line is not an item: "
            "it is how often a proxy that parses no HTTP would clear 1.1 × nginx in the same draws.", "",
            "| item | this run | met in the resampled runs |", "|---|---|---|"] + rows + [
            "", f"Items met of {total}, share of the resampled runs: {spread}; the median resampled run meets "
            f"{statistics.median(per_draw):.0f}."]


def split(P, G, mode):
    """One pinning mode's medians, keyed without the mode."""
    return {k[1:]: v for k, v in P.items() if k[0] == mode}, {k[1:]: v for k, v in G.items() if k[0] == mode}


if __name__ == "__main__":
    main()
