"""The validation table: one row per `ravnest validate` folder, and the targets over all of them.

    table.py [--cases A,B,...] [--merge] RUNS_DIR OUT_DIR
        reads RUNS_DIR/*/validate.json (and measured.json: the commit and date of each run);
        writes OUT_DIR/table.md and OUT_DIR/results.json. --merge keeps OUT_DIR/results.json's
        rows for runs not in RUNS_DIR; --cases lists every case, so that the table names those
        not measured yet.

Targets (over the runs): the geometric mean of the steady samples/s errors at most 10% and the
worst at most 25%; every working node's busy fraction within 0.1; final test accuracy within 2
points. A run that misses one says why: the host not keeping up (late compute spans), the two runs'
plans differing, or the figures furthest apart.
"""
import argparse
import json
import math
import os
import platform

TARGET_GEOMEAN, TARGET_WORST, TARGET_BUSY, TARGET_POINTS, TARGET_LATE = 0.10, 0.25, 0.10, 2.0, 0.05


def figure(v, name):
    for f in v.get("figures", []):
        if f["figure"] == name:
            return f
    return {}


def busy_worst(v):
    diffs = [abs(n["busy_fraction"]["difference"]) for n in v.get("per_node", [])
             if n.get("stage", -1) >= 0 and n["busy_fraction"].get("difference") is not None]
    return max(diffs) if diffs else math.nan


def why(v, samples_error, busy, points):
    """What separates the two runs where a target is missed, from the validation's own figures."""
    reasons = []
    if v.get("late_fraction", 0) > TARGET_LATE:
        reasons.append(f"host did not keep up: {100 * v['late_fraction']:.0f}% of real compute spans late")
    if not v.get("same_plan", True):
        reasons.append("the two runs' plans differ")
    missed = (samples_error > TARGET_WORST or busy > TARGET_BUSY or
              (not math.isnan(points) and points > TARGET_POINTS))
    if missed:
        apart = sorted((f for f in v.get("figures", []) if f.get("error") is not None and f["error"] > 0.10
                        and f["figure"] not in ("steady_samples_per_s", "final/test_accuracy")),
                       key=lambda f: -f["error"])
        reasons += [f"{f['label']} {100 * f['error']:.0f}% apart" for f in apart[:3]]
    return "; ".join(reasons)


def main(runs_dir, out_dir, cases, merge):
    rows, refused = [], {}
    for name in sorted(os.listdir(runs_dir)):
        path = os.path.join(runs_dir, name, "validate.json")
        if os.path.isfile(os.path.join(runs_dir, name, "refused.txt")):
            with open(os.path.join(runs_dir, name, "refused.txt")) as f:
                refused[name] = " ".join(f.read().split()).removeprefix("ravnest: error: ")
            continue
        if not os.path.isfile(path):
            continue
        with open(path) as f:
            v = json.load(f)
        s = figure(v, "steady_samples_per_s")
        acc = figure(v, "final/test_accuracy")
        points = abs(acc["difference"]) * 100 if acc.get("difference") is not None else math.nan
        err = s.get("error")
        err = math.nan if err is None else err
        busy = busy_worst(v)
        measured = {}
        if os.path.isfile(os.path.join(runs_dir, name, "measured.json")):
            with open(os.path.join(runs_dir, name, "measured.json")) as f:
                measured = json.load(f)
        rows.append({"commit": measured.get("commit", "-"), "date": measured.get("date", "-"),
                     "run": name, "algorithm": v.get("algorithm"), "nodes": v.get("nodes"),
                     "clusters": v.get("clusters"), "dilation": v.get("dilation"),
                     "steady_sim": s.get("sim"), "steady_real": s.get("real"), "steady_error": err,
                     "busy_worst": busy, "accuracy_sim": acc.get("sim"), "accuracy_real": acc.get("real"),
                     "accuracy_points": points, "late_fraction": v.get("late_fraction"),
                     "agrees": v.get("agrees"), "why": why(v, err, busy, points)})
    if merge and os.path.isfile(os.path.join(out_dir, "results.json")):
        with open(os.path.join(out_dir, "results.json")) as f:
            old = json.load(f)
        fresh = {x["run"] for x in rows} | set(refused)
        rows = sorted(rows + [r for r in old["rows"] if r["run"] not in fresh], key=lambda r: r["run"])
        for name, reason in old.get("summary", {}).get("refused", {}).items():
            if name not in fresh:
                refused[name] = reason
    missing = [c for c in cases if c not in {r["run"] for r in rows} and c not in refused]
    errors = [r["steady_error"] for r in rows if not math.isnan(r["steady_error"])]
    geomean = math.exp(sum(math.log1p(e) for e in errors) / len(errors)) - 1 if errors else math.nan
    worst = max(errors) if errors else math.nan
    busy_all = max((r["busy_worst"] for r in rows if not math.isnan(r["busy_worst"])), default=math.nan)
    points_all = max((r["accuracy_points"] for r in rows if not math.isnan(r["accuracy_points"])), default=math.nan)
    summary = {"runs": len(rows), "not_measured": missing, "refused": refused, "steady_error_geomean": geomean, "steady_error_worst": worst,
               "busy_worst": busy_all, "accuracy_points_worst": points_all,
               "targets": {"steady_error_geomean": TARGET_GEOMEAN, "steady_error_worst": TARGET_WORST,
                           "busy_worst": TARGET_BUSY, "accuracy_points_worst": TARGET_POINTS},
               "met": {"steady_error_geomean": geomean <= TARGET_GEOMEAN, "steady_error_worst": worst <= TARGET_WORST,
                       "busy_worst": busy_all <= TARGET_BUSY, "accuracy_points_worst": points_all <= TARGET_POINTS},
               "host": {"machine": platform.machine(), "cores": os.cpu_count()}}

    def pct(x):
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"

    def num(x, spec):
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)

    def ok(flag):
        return "met" if flag else "**missed**"

    lines = ["# The simulator against emulated real runs", "",
             f"`papers/validation/run.sh` on a {summary['host']['cores']}-core {summary['host']['machine']} host: "
             "each run is `ravnest validate` (simulation and emulated real run of the same scenario, seed and plan, "
             "both dilated k times so that the host keeps up). Error: exp(|ln(sim/real)|) - 1.", "",
             "| run | algorithm | nodes | clusters | k | steady samples/s sim | real | error | busy, worst difference "
             "| test accuracy sim | real | points | late spans | why (where a target is missed) | commit, date |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        lines.append(f"| {r['run']} | {r['algorithm']} | {r['nodes']} | {r['clusters']} | {num(r['dilation'], 'g')} "
                     f"| {num(r['steady_sim'], '.1f')} | {num(r['steady_real'], '.1f')} | {pct(r['steady_error'])} "
                     f"| {num(r['busy_worst'], '.3f')} | {num(r['accuracy_sim'], '.4f')} | {num(r['accuracy_real'], '.4f')} "
                     f"| {num(r['accuracy_points'], '.2f')} | {pct(r['late_fraction'])} | {r['why'] or '-'} "
                     f"| {r.get('commit', '-')}, {r.get('date', '-')} |")
    if refused:
        lines += ["", "Refused on this host (`ravnest validate` exits 2 where even a dilation of 100 is too little):"]
        lines += [f"- {name}: {reason}" for name, reason in sorted(refused.items())]
    if missing:
        lines += ["", "Not measured yet (`papers/validation/run.sh RUNS_DIR CASE...` adds them): " +
                  ", ".join(missing) + ". The targets below are over the rows above only."]
    lines += ["", "| target | measured | goal | |", "|---|---:|---:|---|",
              f"| steady samples/s, geometric mean error | {pct(geomean)} | 10% | {ok(summary['met']['steady_error_geomean'])} |",
              f"| steady samples/s, worst error | {pct(worst)} | 25% | {ok(summary['met']['steady_error_worst'])} |",
              f"| busy fraction, worst difference | {num(busy_all, '.3f')} | 0.1 | {ok(summary['met']['busy_worst'])} |",
              f"| test accuracy, worst difference (points) | {num(points_all, '.2f')} | 2 | "
              f"{ok(summary['met']['accuracy_points_worst'])} |", ""]
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "table.md"), "w") as f:
        f.write("\n".join(lines))
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump({"summary": summary, "rows": rows}, f, indent=1, allow_nan=True)
    print("\n".join(lines))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="", help="every case's name, comma-separated")
    ap.add_argument("--merge", action="store_true", help="keep results.json's rows of runs not in RUNS_DIR")
    ap.add_argument("runs_dir")
    ap.add_argument("out_dir")
    a = ap.parse_args()
    main(a.runs_dir, a.out_dir, [c for c in a.cases.split(",") if c], a.merge)
