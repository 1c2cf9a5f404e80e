#!/usr/bin/env python3
"""report_s4_policy.py - markdown for the two issue-4 benchmarks: S4 (a 50 ms backend at
100..1000 connections, s4.sh) and the policy cost (bare route against filters and policy,
policy.sh), each with its bar.

usage: report_s4_policy.py s4 S4_OUT/results.csv [--delay-ms 50]
       report_s4_policy.py policy POLICY_OUT/results.csv [--callgrind POLICY_OUT/callgrind.csv]
                           [--cpu-split POLICY_OUT/cpu_split.csv]
"""
import argparse
import csv
from collections import defaultdict

LABEL = {"direct": "direct", "nginx": "nginx", "haproxy": "HAProxy", "weir": "weir"}
FOREIGN_MAX = 0.15


def rows(path):
    with open(path) as f:
        return [r for r in csv.DictReader(f) if r.get("rps")]


def num(r, k):
    v = r.get(k)
    return float(v) if v not in (None, "") else 0.0


def mean(xs):
    xs = list(xs)
    return sum(xs) / len(xs) if xs else 0.0


def flag(rs):
    return " (!)" if any(num(r, "foreign_cores") > FOREIGN_MAX for r in rs) else ""


def s4(path, delay_ms):
    by = defaultdict(list)  # (conns, target) -> rows over runs
    for r in rows(path):
        by[(int(r["conns"]), r["target"])].append(r)
    conns = sorted({c for c, _ in by})
    targets = [t for t in LABEL if any((c, t) in by for c in conns)]
    out = [f"S4: every request answered after {delay_ms:g} ms (weir-slow-backend); wrk closed loop, "
           "keep-alive. Theory = connections ÷ delay.", "",
           "| conns | theory req/s | " + " | ".join(f"{LABEL[t]} req/s (÷theory)" for t in targets)
           + " | weir ÷ direct | p50 / p99 ms " + " · ".join(LABEL[t] for t in targets)
           + " | CPU µs/req " + " · ".join(LABEL[t] for t in targets if t != "direct")
           + " | wrk+backend cores (direct) |",
           "|---" * (len(targets) + 6) + "|"]
    res = {}
    for c in conns:
        theory = c / (delay_ms / 1000)
        agg = {t: by[(c, t)] for t in targets if (c, t) in by}
        rps = {t: mean(num(r, "rps") for r in rs) for t, rs in agg.items()}
        res[c] = (theory, rps, agg)
        cells = [str(c), f"{theory:,.0f}"]
        cells += [f"{rps[t]:,.0f} ({rps[t] / theory:.3f}){flag(agg[t])}" if t in rps else "-" for t in targets]
        cells.append(f"{rps['weir'] / rps['direct']:.3f}" if rps.get("weir") and rps.get("direct") else "-")
        cells.append(" · ".join(
            f"{mean(num(r, 'p50_ms') for r in agg[t]):.1f} / {mean(num(r, 'p99_ms') for r in agg[t]):.1f}"
            if t in agg else "-" for t in targets))
        cells.append(" · ".join(f"{mean(num(r, 'proxy_us_req') for r in agg[t]):.1f}" if t in agg else "-"
                                for t in targets if t != "direct"))
        d = agg.get("direct")
        # cores CPU_A spent on load generator and backend: above ~0.9 the client side is the limit
        cells.append(f"{mean((num(r, 'backend_us_req') + num(r, 'loadgen_us_req')) * num(r, 'rps') / 1e6 for r in d):.2f}"
                     if d else "-")
        errs = sum(num(r, "errors") + num(r, "timeouts") for t in agg for r in agg[t])
        if errs:
            cells[0] += f" ({errs:.0f} errors)"
        out.append("| " + " | ".join(cells) + " |")
    bar = []
    for c in conns:
        theory, rps, agg = res[c]
        w = rps.get("weir")
        if w is None:
            continue
        sh = flag(agg["weir"]) + (flag(agg["direct"]) if "direct" in agg else "")
        sh = " (!) measured while others loaded the machine: not conclusive" if sh else ""
        if c <= 500:
            ok = abs(w / theory - 1) <= 0.05
            d = f"; direct {rps['direct'] / theory:.3f}" if rps.get("direct") else ""
            bar.append(f"- {'✅' if ok else '❌'} S4 -c{c}: weir within 5% of connections ÷ delay: "
                       f"{w:,.0f} of {theory:,.0f} ({w / theory:.3f}{d}){sh}")
        if c >= 1000 and rps.get("direct"):
            ok = w >= 0.9 * rps["direct"]
            bar.append(f"- {'✅' if ok else '❌'} S4 -c{c}: weir ≥ 90% of direct: {w / rps['direct']:.3f}{sh}")
        if c == 250:
            p99 = mean(num(r, "p99_ms") for r in agg["weir"])
            bar.append(f"- {'✅' if p99 <= 60 else '❌'} S4 -c250: weir p99 ≤ 60 ms: {p99:.1f} ms{sh}")
    return out + (["", "The bar (issue 4), this run:", ""] + bar if bar else [])


WHAT = {
    "bare": "no filter, no policy",
    "filters": "RequestHeaderModifier + URLRewrite + AddQueryParameter",
    "policy": "filters + retry + route circuitBreaker; service retryBudget + endpoint circuitBreaker",
    "timeouts": "policy + timeouts (request 10 s, backendRequest 5 s)",
}


def user_share(path):
    """The proxy's user time over its user + system time in the wrk windows, or None."""
    try:
        with open(path) as f:
            r = next(csv.DictReader(f))
        u, s = float(r["user_ticks"]), float(r["system_ticks"])
        return u / (u + s) if u + s > 0 else None
    except (OSError, KeyError, ValueError, StopIteration):
        return None


def policy(path, cg_path, split_path):
    by = defaultdict(dict)  # variant -> round -> row
    for r in rows(path):
        by[r["phase"].removeprefix("policy-")][int(r["run"])] = r
    variants = [v for v in WHAT if v in by] + [v for v in by if v not in WHAT]
    if "bare" not in by:
        return ["policy: no bare rows"]
    conns = next(iter(by["bare"].values()))["conns"]
    cg = {}
    if cg_path:
        try:
            with open(cg_path) as f:
                cg = {r["variant"]: float(r["instructions"]) / float(r["requests"])
                      for r in csv.DictReader(f) if float(r["requests"] or 0) > 0}
        except (OSError, KeyError, ValueError):
            cg = {}
    agg = {v: (mean(num(r, "rps") for r in by[v].values()), mean(num(r, "proxy_us_req") for r in by[v].values()))
           for v in variants}
    b_rps, b_us = agg["bare"]
    out = [f"Policy cost: S1's load (2-byte body, keep-alive, wrk -c{conns}) on routes of one weir gateway, "
           "rounds alternating the order (ABBA); means over rounds.", "",
           "| route | carries | req/s | ÷ bare | CPU µs/req | ÷ bare | p50 / p99 ms | errors | instructions/req (callgrind) | ÷ bare |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for v in variants:
        rps, us = agg[v]
        rs = list(by[v].values())
        ins = cg.get(v)
        ins_cell = "-" if ins is None else f"{ins:,.0f}"
        ins_ratio = "-" if ins is None or "bare" not in cg else f"{ins / cg['bare']:.3f}"
        out.append(f"| {v}{flag(rs)} | {WHAT.get(v, '')} | {rps:,.0f} | {rps / b_rps:.3f} | {us:.1f} | {us / b_us:.3f} "
                   f"| {mean(num(r, 'p50_ms') for r in rs):.2f} / {mean(num(r, 'p99_ms') for r in rs):.2f} "
                   f"| {sum(num(r, 'errors') + num(r, 'timeouts') for r in rs):.0f} "
                   f"| {ins_cell} | {ins_ratio} |")
    rounds = sorted({k for v in variants for k in by[v]})
    out += ["", "Per round (req/s · CPU µs/req):", "",
            "| round | " + " | ".join(variants) + " |", "|---" * (len(variants) + 1) + "|"]
    for k in rounds:
        out.append(f"| {k} | " + " | ".join(
            f"{num(by[v][k], 'rps'):,.0f} · {num(by[v][k], 'proxy_us_req'):.1f}{flag([by[v][k]])}" if k in by[v] else "-"
            for v in variants) + " |")
    bar = []
    if "policy" in agg:
        rps, us = agg["policy"]
        sh = " (!) measured while others loaded the machine: not conclusive" if flag(
            list(by["policy"].values()) + list(by["bare"].values())) else ""
        bar.append(f"- {'✅' if rps >= 0.9 * b_rps else '❌'} policy route < 10% slower than bare: "
                   f"{rps / b_rps:.3f} × the req/s, {us / b_us:.3f} × the CPU per request{sh}")
        share = user_share(split_path) if split_path else None
        if "policy" in cg and "bare" in cg and share:
            # callgrind counts user space only; the kernel's socket work is the same for every route
            extra = (cg["policy"] / cg["bare"] - 1) * share
            bar.append(f"- {'✅' if extra < 0.1 else '❌'} policy route's CPU per request from callgrind (repeatable): "
                       f"{cg['policy'] / cg['bare'] - 1:+.1%} user-space instructions × {share:.0%} of the proxy's CPU "
                       f"in user space = {extra:+.1%} CPU per request (< +10%)")
    return out + (["", "The bar (issue 4), this run:", ""] + bar if bar else [])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["s4", "policy"])
    ap.add_argument("csv")
    ap.add_argument("--delay-ms", type=float, default=50)
    ap.add_argument("--callgrind")
    ap.add_argument("--cpu-split")
    a = ap.parse_args()
    print("\n".join(s4(a.csv, a.delay_ms) if a.what == "s4" else policy(a.csv, a.callgrind, a.cpu_split)))


if __name__ == "__main__":
    main()
