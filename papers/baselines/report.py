#!/usr/bin/env python3
"""The baselines comparison's table and figures, from the run folders papers/baselines/run.sh made.

Usage: report.py RUNS_DIR OUT_DIR

For every scenario, executor and algorithm, over its seeds: the simulated (or wall) time to the
target test accuracy (the first evaluation at or above it; evaluations come every 50 steps), the
steady throughput, the final accuracy and the samples trained; a run that never reaches the target
counts as not reached, a plan the planner refused is listed with its reason. Then, per scenario,
which algorithm wins and what the measurements say of the others: their busy fraction (bubbles,
stragglers waiting), their share of time in averaging or all-reduce (bandwidth) and their peak
memory. Writes table.md, results.json, time_to_target.png and throughput.png into OUT_DIR.
"""
import json
import math
import os
import statistics
import sys
import tomllib

# Fixed before any run (issue 18): the test accuracy each scenario's comparison counts time to.
TARGETS = {"heterogeneous": 0.85, "memory-bound": 0.70, "digits-cnn": 0.93}
ORDER = ["ravnest", "gpipe", "sync-dp", "dedloc", "pipedream", "diloco"]


def read_run(path):
    """One run folder: its numbers, or its refusal."""
    name = os.path.basename(path)
    scenario, rest = None, None
    for s in TARGETS:
        if name.startswith(s + "-"):
            scenario, rest = s, name[len(s) + 1:]
    if scenario is None:
        return None
    algorithm, seed, executor = rest.rsplit("-", 2)
    run = {"name": name, "scenario": scenario, "algorithm": algorithm, "seed": int(seed[1:]), "executor": executor}
    measured = os.path.join(path, "measured.json")
    if os.path.exists(measured):
        run.update(json.load(open(measured)))
    refused = os.path.join(path, "refused.txt")
    if os.path.exists(refused):
        lines = [l.strip() for l in open(refused) if l.strip()]
        run["refused"] = lines[-1] if lines else "refused"
        return run
    if not os.path.exists(os.path.join(path, "summary.json")):
        print(f"report.py: {name} has no summary.json (a run in progress, or one that stopped): left out",
              file=sys.stderr)
        return None
    summary = json.load(open(os.path.join(path, "summary.json")))
    target = TARGETS[scenario]
    reached = None
    with open(os.path.join(path, "eval.csv")) as f:
        header = f.readline().strip().split(",")
        t, acc = header.index("time_s"), header.index("test_accuracy")
        for line in f:
            row = line.strip().split(",")
            if float(row[acc]) >= target and (reached is None or float(row[t]) < reached):
                reached = float(row[t])
    nodes = summary.get("per_node", [])
    time_s = summary["time_s"]
    computing = compute_seconds(os.path.join(path, "metrics.csv"))
    busy = [computing.get(n["node"], 0.0) / time_s for n in nodes if n.get("updates", 0) > 0 and time_s > 0]
    averaging = [n.get("averaging_s", 0.0) for n in nodes if n.get("updates", 0) > 0]
    # The busiest uplink: the share of the run its bytes need at the device's nominal upload rate
    # (a lower bound on the time the link is busy: protocol overhead and latency come on top).
    with open(os.path.join(path, "scenario.toml"), "rb") as f:
        up_mbps = {d["name"]: d["up_mbps"] for d in tomllib.load(f).get("devices", [])}
    uplink = [n["bytes_sent"] * 8 / (up_mbps[n["device"]] * 1e6) / time_s
              for n in nodes if n.get("updates", 0) > 0 and time_s > 0 and up_mbps.get(n["device"])]
    run.update({
        "time_to_target_s": reached,
        "time_s": time_s,
        "steady_samples_per_s": summary.get("steady_samples_per_s"),
        "final_accuracy": summary["final"]["test_accuracy"],
        "train_samples": summary.get("train_samples"),
        "clusters": summary.get("clusters"),
        "nodes_used": len(busy),
        "busy_fraction": statistics.mean(busy) if busy else None,
        "averaging_share": statistics.mean(averaging) / time_s if averaging and time_s > 0 else None,
        "uplink_share": max(uplink) if uplink else None,
        "peak_memory_bytes": max((n.get("peak_memory_bytes", 0) for n in nodes), default=0),
    })
    return run


def compute_seconds(metrics_csv):
    """{node: seconds spent computing}: the sum of its forward, backward and update spans in the run's
    metrics.csv. Read from the events rather than summary.json's busy fraction, so that every run
    counts the same thing whichever version wrote its summary (summaries before issue 18 counted
    averaging as busy too, which made an all-reduce waiting on the links look like work)."""
    seconds = {}
    with open(metrics_csv) as f:
        header = f.readline().strip().split(",")
        kind, node, start, end = (header.index(c) for c in ("kind", "node", "start_s", "end_s"))
        for line in f:
            row = line.split(",", end + 1)
            if row[kind] in ("forward", "backward", "update"):
                n = int(row[node])
                seconds[n] = seconds.get(n, 0.0) + float(row[end]) - float(row[start])
    return seconds


def spread(values):
    """(mean, min, max) of the values that are numbers; None if there are none."""
    v = [x for x in values if x is not None]
    if not v:
        return None
    return statistics.mean(v), min(v), max(v)


def fmt(s, digits=1):
    if s is None:
        return "-"
    mean, lo, hi = s
    if lo == hi:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def main():
    runs_dir, out = sys.argv[1], sys.argv[2]
    runs = [r for r in (read_run(os.path.join(runs_dir, d)) for d in sorted(os.listdir(runs_dir))
                        if os.path.isdir(os.path.join(runs_dir, d))) if r]
    groups = {}
    for r in runs:
        groups.setdefault((r["scenario"], r["executor"]), {}).setdefault(r["algorithm"], []).append(r)
    lines = ["# Baselines: time to a target accuracy and throughput", "",
             "`papers/baselines/run.sh`: each scenario as shipped (its own steps; evaluations every 50, on 2,000 "
             "test samples), "
             "seeds 1-3 in simulation, seed 1 as real processes. Time to target: the first evaluation at or "
             "above the target accuracy, mean [min, max] over the seeds that reached it (n/N reached). Busy: "
             "the mean share of the run that the nodes that train spend computing (forward, backward and update "
             "passes, from metrics.csv); averaging: their mean share of the run in "
             "averaging or all-reduce; busiest uplink: the largest share of the run that a training node's sent bytes "
             "need at its device's nominal upload rate (a lower bound on the link's busy time).", ""]
    figures = []
    for (scenario, executor), by_algo in sorted(groups.items()):
        target = TARGETS[scenario]
        lines += [f"## {scenario} ({executor}), target test accuracy {target}", "",
                  "| algorithm | time to target, s | reached | steady samples/s | final accuracy | samples | "
                  "clusters | busy | averaging | busiest uplink | peak memory, MiB |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        refusals, rows = [], {}
        for algorithm in [a for a in ORDER if a in by_algo] + sorted(a for a in by_algo if a not in ORDER):
            rs = by_algo[algorithm]
            refused = [r for r in rs if "refused" in r]
            if refused:
                refusals.append((algorithm, refused[0]["refused"]))
                lines.append(f"| {algorithm} | refused | | | | | | | | | |")
                continue
            ttt = spread([r["time_to_target_s"] for r in rs])
            reached = sum(r["time_to_target_s"] is not None for r in rs)
            rows[algorithm] = {"ttt": ttt, "reached": reached, "n": len(rs),
                               "throughput": spread([r["steady_samples_per_s"] for r in rs]),
                               "busy": spread([r["busy_fraction"] for r in rs]),
                               "averaging": spread([r["averaging_share"] for r in rs]),
                               "uplink": spread([r["uplink_share"] for r in rs]),
                               "clusters": spread([r["clusters"] for r in rs]),
                               "memory": max(r["peak_memory_bytes"] for r in rs)}
            lines.append("| {} | {} | {}/{} | {} | {} | {} | {} | {} | {} | {} | {:.1f} |".format(
                algorithm, fmt(ttt, 2), reached, len(rs), fmt(rows[algorithm]["throughput"], 0),
                fmt(spread([r["final_accuracy"] for r in rs]), 4), fmt(spread([r["train_samples"] for r in rs]), 0),
                fmt(rows[algorithm]["clusters"], 0), fmt(rows[algorithm]["busy"], 2),
                fmt(rows[algorithm]["averaging"], 2), fmt(rows[algorithm]["uplink"], 2),
                rows[algorithm]["memory"] / 2**20))
        lines.append("")
        for algorithm, why in refusals:
            lines.append(f"- {algorithm} refused: {why}")
        # Who wins, and what the measurements say of the others.
        ranked = sorted((r["ttt"][0], ORDER.index(a) if a in ORDER else len(ORDER), a)
                        for a, r in rows.items() if r["ttt"] and r["reached"] == r["n"])
        ranked = [(t, a) for t, _, a in ranked]
        if ranked:
            best_t, best = ranked[0]
            # Within 0.1% of the best: a tie (e.g. pipedream and ravnest on one- or two-stage
            # pipelines, where 1F1B and backward-first are the same schedule).
            tied = [a for t, a in ranked if t <= best_t * 1.001]
            b = rows[best]
            lines.append(f"- Fastest to {target}: **{' and '.join(tied)}**, {best_t:.2f} s" +
                         (" (the same time)" if len(tied) > 1 else "") +
                         (f": its nodes compute {b['busy'][0]:.0%} of the run and spend {b['averaging'][0]:.0%} "
                          f"averaging; its busiest uplink is loaded {b['uplink'][0]:.0%} of the run."
                          if b["busy"] and b["averaging"] and b["uplink"] else "."))
            for t, a in ranked[len(tied):]:
                r = rows[a]
                notes = []
                if r["busy"] and rows[best]["busy"] and r["busy"][0] < rows[best]["busy"][0] - 0.05:
                    # Waiting on what: a link that its bytes keep loaded most of the run, else the
                    # schedule (bubbles) or slower peers.
                    if r["uplink"] and r["uplink"][0] >= 0.5:
                        cause = f"on its busiest uplink, loaded {r['uplink'][0]:.0%} of the run"
                    elif r["averaging"] and r["averaging"][0] >= 0.5:
                        cause = ("in averaging or all-reduce, its links loaded less than half the run (latency, or "
                                 "slower peers)")
                    else:
                        cause = "on bubbles or slower peers"
                    notes.append(f"its nodes compute {r['busy'][0]:.0%} of the time against {rows[best]['busy'][0]:.0%}, "
                                 f"waiting {cause}")
                if r["averaging"] and rows[best]["averaging"] and r["averaging"][0] > rows[best]["averaging"][0] + 0.05:
                    notes.append(f"it spends {r['averaging'][0]:.0%} of the run exchanging against "
                                 f"{rows[best]['averaging'][0]:.0%}")
                if r["clusters"] and b["clusters"] and r["clusters"][0] < b["clusters"][0]:
                    notes.append(f"it trains {r['clusters'][0]:.0f} model replica(s) (clusters) against "
                                 f"{b['clusters'][0]:.0f}")
                why = "; ".join(notes) if notes else "its throughput or its samples' progress per step is lower"
                lines.append(f"- {a}: {t / best_t:.2f}x {best}'s time: {why}.")
        missed = [a for a, r in rows.items() if r["reached"] < r["n"]]
        for a in missed:
            lines.append(f"- {a} did not reach {target} in {rows[a]['n'] - rows[a]['reached']} of {rows[a]['n']} runs.")
        lines.append("")
        figures.append((f"{scenario} ({executor})", rows))
    open(os.path.join(out, "table.md"), "w").write("\n".join(lines))
    json.dump(runs, open(os.path.join(out, "results.json"), "w"), indent=1, sort_keys=True)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    for key, label, fname in [("ttt", "time to target, s", "time_to_target.png"),
                              ("throughput", "steady samples/s", "throughput.png")]:
        fig, axes = plt.subplots(1, max(1, len(figures)), figsize=(4.5 * max(1, len(figures)), 3.6), squeeze=False)
        for ax, (title, rows) in zip(axes[0], figures):
            names = [a for a in ORDER if a in rows]
            means = [rows[a][key][0] if rows[a][key] else math.nan for a in names]
            lo = [m - rows[a][key][1] if rows[a][key] else 0 for m, a in zip(means, names)]
            hi = [rows[a][key][2] - m if rows[a][key] else 0 for m, a in zip(means, names)]
            ax.bar(names, means, yerr=[lo, hi], capsize=3, color="#4477aa")
            ax.set_title(title, fontsize=9)
            ax.set_ylabel(label)
            ax.tick_params(axis="x", rotation=45, labelsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out, fname), dpi=120)
        plt.close(fig)


if __name__ == "__main__":
    main()
