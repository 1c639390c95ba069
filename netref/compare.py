#!/usr/bin/python3
"""Scores the project's flow models (rv-flow-ref: tcp, lv08, ideal) against ns-3's packet-level
TCP (rv-ns3-ref) on seeded home-like star pools of 8 to 1,024 nodes.

Usage: compare.py BUILD_DIR [--out netref/results] [--budget-mb 1000] [--sizes 8,16,64,256,1024]
                  [--patterns pipeline,ring,ravnest] [--jobs 2]

Every ns-3 run is capped at a traffic budget (payload bytes of all messages, --budget-mb): a
pattern whose smallest meaningful form exceeds it is not run and is listed as such. Writes
OUT/patterns/*.json (inputs), OUT/runs/*.json (outputs), OUT/summary.json and OUT/table.md.
Errors are signed: flow / ns-3 - 1 (a round time above 0 means the flow model is slower; a rate
above 0 means it is faster). Nothing is fitted.
"""
import argparse
import json
import os
import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

MODELS = ["tcp", "lv08", "ideal"]


def pool(n, seed):
    """Node links: up U(20,100) Mbit/s, down U(100,500) Mbit/s, one-way latency U(5,50) ms."""
    r = random.Random(seed)
    return [{"up_mbps": round(r.uniform(20, 100), 3), "down_mbps": round(r.uniform(100, 500), 3),
             "latency_ms": round(r.uniform(5, 50), 3)} for _ in range(n)]


# Pipelines: k stages (4 up to 16 nodes, else 8), forward 20 ms and backward 40 ms per stage,
# activations and gradients of 200 kB, window T = k, M micro-batches per pipeline (24, or fewer
# down to 2T to fit the budget).
A = G = 200_000
FWD, BWD = 0.02, 0.04
RING_BYTES = 20_000_000  # ring all-reduce payload P, lowered to fit the budget
RING_ROUNDS = 2
STAGE_BYTES = 2_000_000  # ravnest: parameters per stage averaged each period
RAVNEST_ROUNDS = 2


def stages_for(n):
    return 4 if n <= 16 else 8


def pipeline_pattern(n, budget):
    k = stages_for(n)
    clusters = [list(range(c * k, (c + 1) * k)) for c in range(n // k)]
    per_mb = len(clusters) * (k - 1) * (A + G)
    m = min(24, budget // per_mb)
    if m < 2 * k:
        return None, f"needs {2 * k * per_mb / 1e6:.0f} MB at M = 2T = {2 * k} (budget {budget / 1e6:.0f} MB)"
    return {"kind": "pipeline", "clusters": clusters, "fwd_s": [FWD] * k, "bwd_s": [BWD] * k,
            "activation_bytes": A, "gradient_bytes": G, "micro_batches": int(m),
            "max_in_flight": k}, None


def ring_pattern(n, budget):
    p = min(RING_BYTES, budget // (RING_ROUNDS * 2 * (n - 1)))
    if p < n:
        return None, "budget below one byte per segment"
    return {"kind": "ring", "rings": [list(range(n))], "bytes": int(p), "rounds": RING_ROUNDS}, None


def ravnest_pattern(n, budget):
    k = stages_for(n)
    c = n // k
    if c < 2:
        return None, "fewer than 2 clusters"
    clusters = [list(range(i * k, (i + 1) * k)) for i in range(c)]
    ring = k * 2 * (c - 1) * STAGE_BYTES
    per_period_mb = c * (k - 1) * (A + G)
    h = min(12, (budget // RAVNEST_ROUNDS - ring) // per_period_mb)
    if h < k + 1:
        need = RAVNEST_ROUNDS * (ring + (k + 1) * per_period_mb)
        return None, f"needs {need / 1e6:.0f} MB at H = k + 1 (budget {budget / 1e6:.0f} MB)"
    return {"kind": "ravnest", "clusters": clusters, "fwd_s": [FWD] * k, "bwd_s": [BWD] * k,
            "activation_bytes": A, "gradient_bytes": G, "micro_batches": int(h),
            "max_in_flight": k, "stage_bytes": [STAGE_BYTES] * k, "rounds": RAVNEST_ROUNDS}, None


MAKERS = {"pipeline": pipeline_pattern, "ring": ring_pattern, "ravnest": ravnest_pattern}


def run(cmd, out):
    p = subprocess.run(cmd + ["-o", out, "--summary"], capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": f"exit {p.returncode}: {p.stderr.strip()}"}
    with open(out) as f:
        return json.load(f)


def err(flow, ref):
    return flow / ref - 1.0 if ref and flow is not None else None


def pct(x):
    return "-" if x is None else f"{100 * x:+.1f}%"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--budget-mb", type=float, default=1000)
    ap.add_argument("--sizes", default="8,16,64,256,1024")
    ap.add_argument("--patterns", default="pipeline,ring,ravnest")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--cc", default="cubic")
    a = ap.parse_args()
    try:
        sizes = [int(s) for s in a.sizes.split(",")]
        patterns = a.patterns.split(",")
        if any(s < 2 for s in sizes) or any(p not in MAKERS for p in patterns) or a.budget_mb <= 0:
            raise ValueError
    except ValueError:
        print("error: --sizes needs integers >= 2, --patterns a subset of pipeline,ring,ravnest, "
              "--budget-mb > 0", file=sys.stderr)
        return 2
    ns3 = os.path.join(a.build, "rv-ns3-ref")
    flow = os.path.join(a.build, "rv-flow-ref")
    for d in ("patterns", "runs"):
        os.makedirs(os.path.join(a.out, d), exist_ok=True)
    budget = int(a.budget_mb * 1e6)
    cases, skipped = [], []
    for n in sizes:
        for pat in patterns:
            p, why = MAKERS[pat](n, budget)
            if p is None:
                skipped.append({"pattern": pat, "nodes": n, "why": why})
                continue
            name = f"{pat}-{n}"
            path = os.path.join(a.out, "patterns", name + ".json")
            with open(path, "w") as f:
                json.dump({"comment": f"seed {n}; compare.py", "nodes": pool(n, n), "pattern": p}, f)
            cases.append((name, pat, n, path))
    results = {}
    for name, pat, n, path in cases:  # the flow models first: fast
        results[name] = {m: run([flow, path, "--model", m], os.path.join(a.out, "runs", f"{name}.{m}.json")) for m in MODELS}

    def ns3_job(c):
        name, pat, n, path = c
        r = run([ns3, path, "--cc", a.cc], os.path.join(a.out, "runs", f"{name}.ns3.json"))
        print(f"{name}: ns-3 {'error ' + r['error'] if 'error' in r else 'done in %.0f s' % r['wall_s']}", flush=True)
        return name, r

    with ThreadPoolExecutor(a.jobs) as ex:
        for name, r in ex.map(ns3_job, cases):
            results[name]["ns3"] = r
    rows = []
    for name, pat, n, path in cases:
        r = results[name]
        ref = r["ns3"]
        row = {"pattern": pat, "nodes": n, "name": name}
        if "error" in ref:
            row["ns3_error"] = ref["error"]
        else:
            row.update(ns3_round_s=ref["round_times_s"], ns3_rate=ref.get("steady_rate"),
                       unit=ref.get("steady_unit"), traffic_bytes=ref["traffic_bytes"],
                       ns3_wall_s=ref["wall_s"], ns3_bytes_per_wall_s=ref["traffic_bytes_per_wall_s"],
                       drops=ref["drops"], messages=ref["message_count"])
            for m in MODELS:
                fr = r[m]
                if "error" in fr:
                    row[m] = {"error": fr["error"]}
                    continue
                rounds = [err(x, y) for x, y in zip(fr["round_times_s"], ref["round_times_s"])]
                row[m] = {"round_s": fr["round_times_s"], "rate": fr.get("steady_rate"),
                          "round_err": rounds, "round_err_mean_abs": sum(abs(e) for e in rounds) / len(rounds),
                          "rate_err": err(fr.get("steady_rate"), ref.get("steady_rate"))}
        rows.append(row)
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump({"budget_bytes": budget, "cc": a.cc, "rows": rows, "not_run": skipped}, f, indent=1)
    lines = [f"ns-3 congestion control: {a.cc}; traffic budget per ns-3 run: {budget / 1e6:.0f} MB. "
             "Round error: flow / ns-3 - 1 of each round's time (listed per round); rate error: "
             "flow / ns-3 - 1 of the steady rate.", "",
             "| pattern | nodes | traffic MB | ns-3 rounds (s) | ns-3 steady rate | tcp round err | tcp rate err "
             "| lv08 round err | lv08 rate err | ideal round err | ideal rate err | ns-3 MB per wall s | ns-3 wall s | drops |",
             "|---|---:|---:|---|---:|---|---:|---|---:|---|---:|---:|---:|---:|"]
    for row in rows:
        if "ns3_error" in row:
            lines.append(f"| {row['pattern']} | {row['nodes']} | | ns-3 failed: {row['ns3_error']} |||||||||||")
            continue
        cells = []
        for m in MODELS:
            e = row[m]
            if "error" in e:
                cells += ["error", "error"]
            else:
                cells += [" / ".join(pct(x) for x in e["round_err"]), pct(e["rate_err"])]
        rate = row["ns3_rate"]
        lines.append(f"| {row['pattern']} | {row['nodes']} | {row['traffic_bytes'] / 1e6:.0f} | "
                     f"{' / '.join('%.2f' % x for x in row['ns3_round_s'])} | "
                     f"{'-' if rate is None else '%.4g' % rate} | " + " | ".join(cells) +
                     f" | {row['ns3_bytes_per_wall_s'] / 1e6:.1f} | {row['ns3_wall_s']:.0f} | {row['drops']} |")
    if skipped:
        lines += ["", "Not run (over the traffic budget):", ""]
        lines += [f"- {s['pattern']} at {s['nodes']} nodes: {s['why']}" for s in skipped]
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
