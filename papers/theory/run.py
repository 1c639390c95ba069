#!/usr/bin/python3
"""The convergence bound (docs/theory.md) measured on a problem with known constants.

Usage: papers/theory/run.py [RUNS_DIR] [--jobs N] [--only a,b,c,d]   (default runs/theory, 2 jobs)

Every point is `ravnest sim` (numeric, SimGrid) of a ravnest run on the quadratic of
docs/theory.md (d = 16 in 4 blocks, two stages per cluster, Hessian spectrum 0.1 .. 1 so L = 1,
batch 8), then `ravnest theory` on its folder: the exact squared gradient norm at the clusters'
average after each update, and the bound with the run's own eta, T (the largest staleness any
update recorded), C, H, N and K. The staleness is set by the pipeline's micro-batches in flight
(training.max_in_flight = T + 1). Nothing here is fitted: the bound is the code's formula
(theory/bound.h) with no slack, and every run's constants come from the problem.

Writes into papers/theory/: results.json, table.md and four figures:
  (a) claims_a.png    seed-averaged measured/bound for C in {1,2,4,8} x T in {1,2,4,8} x two step
                      sizes inside the condition (the largest it allows, and a quarter of it),
                      averaging every 10 updates, 10 seeds each: 320 runs; every mean must be at
                      most 1
  (b) slope.png       eta = 2 / sqrt(K), K from 100 to 3200 (C = 1, T = 1, 10 seeds): the log-log
                      slope of the averaged squared gradient norm against K, expected -0.5 +- 0.1
  (c) speedup.png     updates per cluster until the running average reaches a target fixed before
                      the runs (in the noise-dominated regime: sigma^2 = 16), with eta = C x 0.02
                      and averaging every max(2, T + 1) updates, for T in {1,2,4,8,16,32}: within
                      25% of 1/C where the condition holds, and where that stops as T grows
  (d) breaking.png    runs outside the condition (eta past 2 / L, or T = 8 at a step that suits
                      T = 1) beside one inside it
"""

import argparse
import concurrent.futures
import json
import math
import os
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RAVNEST = os.path.join(ROOT, "build", "ravnest")
L = 1.0  # eig_max of every problem here
# (a): clusters average every 10 updates, so that a pipeline's staleness can reach 8 between two
# averagings (bulk-synchronous averaging drains the pipelines).
AVERAGE_EVERY_A = 10
# (c): the staleness bounds, past the theorem's regime (16 and 32) to see where the speedup stops.
C_STALENESS = (1, 2, 4, 8, 16, 32)


def scenario(name, clusters, staleness, lr, steps, seed, average_every, sigma2=1.0):
    """A ravnest run of the quadratic on `clusters` two-stage pipelines."""
    lines = [f'name = "{name}"', f"seed = {seed}",
             "[model]", 'kind = "blocks"', "blocks = 4",
             "[data]", 'kind = "quadratic"', "features = 16", "eig_min = 0.1", "eig_max = 1.0",
             f"sigma2 = {sigma2}", "batch_size = 8", "problem_seed = 1",
             "[training]", 'algorithm = "ravnest"', f"lr = {lr!r}", f"steps = {steps}",
             f"max_in_flight = {staleness + 1}", f"average_every = {average_every}", "eval_every = 0",
             "[planner]", 'method = "manual"',
             "[network]", 'model = "ideal"']
    for c in range(clusters):
        lines += ["[[planner.cluster]]", f"nodes = [{2 * c}, {2 * c + 1}]", "stage_layers = [2, 3]"]
    lines += ["[[devices]]", f"count = {2 * clusters}", "tflops = 0.001", "up_mbps = 1000",
              "down_mbps = 1000", "latency_ms = 5"]
    return "\n".join(lines) + "\n"


def largest_lr(staleness, clusters, average_every):
    """The largest eta with L eta + L^2 eta^2 (a T^2 + 4 kappa^2) <= 1 (bound.h largest_lr)."""
    a, kappa = (1, 0) if clusters == 1 else (2, average_every - 1)
    q = a * staleness ** 2 + 4 * kappa ** 2
    return 1 / L if q == 0 else (-L + math.sqrt(L * L + 4 * L * L * q)) / (2 * L * L * q)


def run(runs, name, toml):
    """Simulates one scenario and measures it; returns (theory.json, theory.csv columns)."""
    folder = os.path.join(runs, name)
    path = folder + ".toml"
    if not os.path.exists(os.path.join(folder, "theory.json")):
        with open(path, "w") as f:
            f.write(toml)
        subprocess.run(["rm", "-rf", folder], check=True)
        for cmd in ([RAVNEST, "sim", path, "--run-dir", folder, "--progress", "off"],
                    [RAVNEST, "theory", folder, "--no-plot"]):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stderr}")
    with open(os.path.join(folder, "theory.json")) as f:
        t = json.load(f)
    curve = np.genfromtxt(os.path.join(folder, "theory.csv"), delimiter=",", names=True)
    return t, curve


def run_all(runs, jobs, points):
    """points: {name: toml}; returns {name: (theory, curve)}."""
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futures = {n: pool.submit(run, runs, n, t) for n, t in points.items()}
        return {n: f.result() for n, f in futures.items()}


def claim_a(runs, jobs):
    configs = []
    for c in (1, 2, 4, 8):
        for t in (1, 2, 4, 8):
            top = largest_lr(t, c, AVERAGE_EVERY_A)
            for share in (1.0, 0.25):
                configs.append((c, t, share, top * share))
    points = {f"a-c{c}-t{t}-s{share}-seed{s}": scenario("a", c, t, lr, 200, s, AVERAGE_EVERY_A)
              for c, t, share, lr in configs for s in range(1, 11)}
    res = run_all(runs, jobs, points)
    rows = []
    for c, t, share, lr in configs:
        ts = [res[f"a-c{c}-t{t}-s{share}-seed{s}"][0] for s in range(1, 11)]
        measured = float(np.mean([x["measured"] for x in ts]))
        bounds = [x["bound"]["value"] for x in ts]
        rows.append({"clusters": c, "staleness_set": t, "staleness_max": max(x["inputs"]["staleness"] for x in ts),
                     "lr": lr, "lr_share_of_largest": share, "seeds": len(ts), "measured": measured,
                     "bound_min": min(bounds), "bound_max": max(bounds),
                     "ratio": measured / float(np.mean(bounds)),
                     "ratio_max_seed": max(x["ratio"] for x in ts),
                     "conditions_met": all(x["applies"] for x in ts)})
    fig, ax = plt.subplots(figsize=(8, 5))
    for share, marker in ((1.0, "o"), (0.25, "s")):
        for t, colour in zip((1, 2, 4, 8), ("C0", "C1", "C2", "C3")):
            pts = [r for r in rows if r["lr_share_of_largest"] == share and r["staleness_set"] == t]
            ax.plot([r["clusters"] for r in pts], [r["ratio"] for r in pts], marker=marker, color=colour,
                    linestyle="-" if share == 1.0 else ":",
                    label=f"T = {t}, eta = {'largest' if share == 1.0 else 'largest / 4'}")
    ax.axhline(1, color="black", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_xticks([1, 2, 4, 8], ["1", "2", "4", "8"])
    ax.set_ylim(0, 1.1)
    ax.set_xlabel("clusters C")
    ax.set_ylabel("measured / bound (10 seeds)")
    ax.set_title("(a) the bound holds inside its condition")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(os.path.join(HERE, "claims_a.png"), dpi=110)
    plt.close(fig)
    return {"runs": len(points), "rows": rows,
            "worst_ratio": max(r["ratio"] for r in rows),
            "holds": all(r["ratio"] <= 1 and r["conditions_met"] for r in rows)}


def claim_b(runs, jobs):
    ks = (100, 200, 400, 800, 1600, 3200)
    points = {f"b-k{k}-seed{s}": scenario("b", 1, 1, 2 / math.sqrt(k), k, s, 50)
              for k in ks for s in range(1, 11)}
    res = run_all(runs, jobs, points)
    measured = [float(np.mean([res[f"b-k{k}-seed{s}"][0]["measured"] for s in range(1, 11)])) for k in ks]
    bound = [float(np.mean([res[f"b-k{k}-seed{s}"][0]["bound"]["value"] for s in range(1, 11)])) for k in ks]
    slope = float(np.polyfit(np.log(ks), np.log(measured), 1)[0])
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.loglog(ks, measured, "o-", label=f"measured (slope {slope:.3f})")
    ax.loglog(ks, bound, "s--", label="bound")
    ax.set_xlabel("updates K (eta = 2 / sqrt K)")
    ax.set_ylabel("(1/K) sum ||grad f(w_k)||^2 (10 seeds)")
    ax.set_title("(b) the rate: O(1 / sqrt K)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(HERE, "slope.png"), dpi=110)
    plt.close(fig)
    return {"runs": len(points), "k": list(ks), "measured": measured, "bound": bound, "slope": slope,
            "holds": abs(slope + 0.5) <= 0.1}


def first_below(curve, target):
    below = np.nonzero(curve["running_mean"] <= target)[0]
    return int(curve["k"][below[0]]) + 1 if len(below) else None


def claim_c(runs, jobs):
    eta1, sigma2, steps = 0.02, 16.0, 4000
    # Fixed before the runs: twice the one-cluster bound's noise term L eta sigma^2 / N.
    target = 2 * L * eta1 * sigma2 / 8
    # Averaging every T + 1 updates (at least 2), so that staleness T is reached between averagings.
    points = {f"c-c{c}-t{t}-seed{s}": scenario("c", c, t, eta1 * c, steps // c, s, max(2, t + 1), sigma2)
              for c in (1, 2, 4, 8) for t in C_STALENESS for s in range(1, 6)}
    res = run_all(runs, jobs, points)
    rows = []
    for t in C_STALENESS:
        for c in (1, 2, 4, 8):
            reached = [first_below(res[f"c-c{c}-t{t}-seed{s}"][1], target) for s in range(1, 6)]
            applies = all(res[f"c-c{c}-t{t}-seed{s}"][0]["applies"] for s in range(1, 6))
            rows.append({"staleness_set": t, "clusters": c,
                         "staleness_max": max(res[f"c-c{c}-t{t}-seed{s}"][0]["inputs"]["staleness"] for s in range(1, 6)),
                         "updates": None if None in reached else float(np.mean(reached)),
                         "conditions_met": applies})
    for r in rows:
        base = next(x for x in rows if x["staleness_set"] == r["staleness_set"] and x["clusters"] == 1)["updates"]
        r["speedup"] = base / r["updates"] if base and r["updates"] else None
        r["within_25pct_of_linear"] = r["speedup"] is not None and abs(r["speedup"] / r["clusters"] - 1) <= 0.25
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot([1, 8], [1, 8], color="black", linewidth=1, label="linear")
    for t, colour in zip(C_STALENESS, ("C0", "C1", "C2", "C3", "C4", "C5")):
        pts = [r for r in rows if r["staleness_set"] == t and r["speedup"]]
        ax.plot([r["clusters"] for r in pts], [r["speedup"] for r in pts], "o-", color=colour, label=f"T = {t}")
        out = [r for r in pts if not r["conditions_met"]]
        ax.plot([r["clusters"] for r in out], [r["speedup"] for r in out], "x", color=colour, markersize=10)
        # Not reached within the run's updates: the speedup is below base / (steps / C).
        base = next(r for r in rows if r["staleness_set"] == t and r["clusters"] == 1)["updates"]
        miss = [r for r in rows if r["staleness_set"] == t and r["updates"] is None and base]
        ax.plot([r["clusters"] for r in miss], [base / (steps // r["clusters"]) for r in miss], "v", color=colour,
                markersize=10, label=f"T = {t}: target not reached (speedup below)" if miss else None)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks([1, 2, 4, 8], ["1", "2", "4", "8"])
    ax.set_xlabel("clusters C (eta = 0.02 C, averaged every max(2, T + 1) updates; x: outside the condition)")
    ax.set_ylabel("speedup in updates to the target (5 seeds)")
    ax.set_title(f"(c) linear speedup while the condition holds (target {target:g})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(HERE, "speedup.png"), dpi=110)
    plt.close(fig)
    inside = [r for r in rows if r["conditions_met"]]
    return {"runs": len(points), "target": target, "rows": rows,
            "holds": all(r["within_25pct_of_linear"] for r in inside)}


def claim_d(runs, jobs):
    cases = [("inside: eta = 0.3, T = 1", 1, 0.3), ("eta = 0.3, T = 8 (condition 6.1)", 8, 0.3),
             ("eta = 1.5, T = 1 (condition 3.75)", 1, 1.5), ("eta = 2.2 > 2 / L, T = 1", 1, 2.2)]
    points = {f"d-{i}-seed{s}": scenario("d", 1, t, lr, 300, s, 50)
              for i, (_, t, lr) in enumerate(cases) for s in range(1, 4)}
    res = run_all(runs, jobs, points)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    finals = []
    for i, (label, t, lr) in enumerate(cases):
        curves = [res[f"d-{i}-seed{s}"][1]["running_mean"] for s in range(1, 4)]
        mean = np.mean(curves, axis=0)
        ax.plot(np.arange(1, len(mean) + 1), mean, label=label)
        finals.append({"case": label, "staleness_set": t, "lr": lr, "final_running_mean": float(mean[-1]),
                       "conditions_met": all(res[f"d-{i}-seed{s}"][0]["applies"] for s in range(1, 4))})
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("updates K")
    ax.set_ylabel("(1/K) sum ||grad f(w_k)||^2 (3 seeds)")
    ax.set_title("(d) outside the condition")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(HERE, "breaking.png"), dpi=110)
    plt.close(fig)
    inside = finals[0]["final_running_mean"]
    return {"runs": len(points), "cases": finals,
            "holds": all(f["final_running_mean"] > 2 * inside for f in finals[1:])}


def table(results):
    a, b, c, d = (results.get(k) for k in "abcd")
    lines = ["# The convergence bound, measured", "",
             "`papers/theory/run.py` (a quadratic with L = 1, sigma^2 = 1 unless said, d = 16 in 4 blocks, "
             "two stages per cluster; `ravnest sim`, then `ravnest theory`). The bound is "
             "theory/bound.h's formula (docs/theory.md) with no slack.", ""]
    if a:
        lines += [f"## (a) measured / bound, {a['runs']} runs (10 seeds per row)", "",
                  "| C | T set | T measured | eta | of the largest | measured | bound | measured / bound | worst seed |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in a["rows"]:
            lines.append(f"| {r['clusters']} | {r['staleness_set']} | {r['staleness_max']} | {r['lr']:.4g} "
                         f"| {r['lr_share_of_largest']:g} | {r['measured']:.4g} | {r['bound_min']:.4g} "
                         f"| {r['ratio']:.3f} | {r['ratio_max_seed']:.3f} |")
        lines += ["", f"Worst seed-averaged ratio {a['worst_ratio']:.3f}: "
                  + ("every mean at or under its bound." if a["holds"] else "**a mean above its bound.**"), ""]
    if b:
        lines += [f"## (b) rate, {b['runs']} runs", "",
                  "| K | eta | measured | bound |", "|---:|---:|---:|---:|"]
        for k, m, bd in zip(b["k"], b["measured"], b["bound"]):
            lines.append(f"| {k} | {2 / math.sqrt(k):.4g} | {m:.4g} | {bd:.4g} |")
        lines += ["", f"Log-log slope {b['slope']:.3f} (expected -0.5 +- 0.1): " + ("met." if b["holds"] else "**missed.**"), ""]
    if c:
        lines += [f"## (c) speedup in C, {c['runs']} runs (5 seeds per point; target {c['target']:g})", "",
                  "| T set | T measured | C | updates to target | speedup | within 25% of C | condition |",
                  "|---:|---:|---:|---:|---:|---|---|"]
        for r in c["rows"]:
            up = f"{r['updates']:.0f}" if r["updates"] else "not reached"
            sp = f"{r['speedup']:.2f}" if r["speedup"] else "-"
            lines.append(f"| {r['staleness_set']} | {r['staleness_max']} | {r['clusters']} | {up} | {sp} "
                         f"| {'yes' if r['within_25pct_of_linear'] else 'no'} | {'met' if r['conditions_met'] else 'broken'} |")
        lines += ["", "Every point inside the condition within 25% of linear: " + ("yes." if c["holds"] else "**no.**"), ""]
    if d:
        lines += [f"## (d) outside the condition, {d['runs']} runs", "",
                  "| case | final running average | condition |", "|---|---:|---|"]
        for f in d["cases"]:
            lines.append(f"| {f['case']} | {f['final_running_mean']:.4g} | {'met' if f['conditions_met'] else 'broken'} |")
        lines += ["", "Every broken case at least twice the inside case: " + ("yes." if d["holds"] else "**no.**"), ""]
    lines += ["![a](claims_a.png) ![b](slope.png) ![c](speedup.png) ![d](breaking.png)", ""]
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="?", default=os.path.join(ROOT, "runs", "theory"))
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--only", default="a,b,c,d")
    args = p.parse_args()
    os.makedirs(args.runs, exist_ok=True)
    path = os.path.join(HERE, "results.json")
    results = {}
    if os.path.exists(path):
        with open(path) as f:
            results = json.load(f)
    claims = {"a": claim_a, "b": claim_b, "c": claim_c, "d": claim_d}
    for key in args.only.split(","):
        print(f"== claim ({key})", file=sys.stderr)
        results[key] = claims[key](args.runs, args.jobs)
        print(f"   holds: {results[key]['holds']}", file=sys.stderr)
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
    with open(os.path.join(HERE, "table.md"), "w") as f:
        f.write(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
