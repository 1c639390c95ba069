"""The planner against the simulator on the shipped scenarios (issue 60, item 1): for every shipped
scenario of 1,024 nodes or fewer without churn, and every planning method that gives it a plan,
the plan's predicted steady samples/s and averaging round against the simulation of that plan
(timing mode: the same schedule, no maths). Two executors' agreement is not the point here: both
figures come from the model; this is the planner's analytic shortcut against the simulator.

    python3 bench/planner_fidelity.py RAVNEST OUT_DIR [SCENARIO ...]

Prints one row per (scenario, method): predicted and simulated steady samples/s (summary.json's
steady window: whole averaging periods or flushes, evaluations apart), their error, and the same
for the averaging round (plan.predicted_averaging_s against summary.averaging.mean_round_s, the
mean of the rounds' durations on the node that waited least). Writes planner_fidelity.json in
OUT_DIR. Exit status 0 (figures, not a test); 2 on bad usage or a run that failed."""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METHODS = ("greedy", "ga", "ravnest-ga", "exhaustive", "manual")
MAX_NODES = 1024
# Steps per scenario: enough whole averaging periods for a steady window, short enough to run the
# whole table in minutes (timing mode). A scenario not listed runs its own steps.
STEPS = {"gpt-pipeline": 40, "digits-cnn": 300, "gpt-sort": 200}


def nodes_of(path):
    with open(path, "rb") as f:
        s = tomllib.load(f)
    return sum(int(d.get("count", 1)) for d in s.get("devices", [])), s


def shipped(names):
    out = []
    for f in sorted(os.listdir(os.path.join(ROOT, "scenarios"))):
        name = f[:-5]
        if not f.endswith(".toml") or (names and name not in names):
            continue
        n, s = nodes_of(os.path.join(ROOT, "scenarios", f))
        if n > MAX_NODES or s.get("churn"):
            continue
        out.append((name, s))
    return out


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return p.returncode, p.stderr.strip().splitlines()[-1:] if p.stderr else []


def error(pred, sim):
    return None if not pred or not sim else pred / sim - 1


def case(ravnest, out, name, method):
    run_dir = os.path.join(out, f"{name}-{method}")
    shutil.rmtree(run_dir, ignore_errors=True)
    sets = [f'planner.method="{method}"', 'sim.mode="timing"', "output.trace=false",
            'output.metrics="summary"']
    if name in STEPS:
        sets.append(f"training.steps={STEPS[name]}")
    cmd = [ravnest, "sim", os.path.join(ROOT, "scenarios", name + ".toml"), "--run-dir", run_dir,
           "--progress", "off"]
    for kv in sets:
        cmd += ["--set", kv]
    status, why = run(cmd)
    if status != 0:
        return {"scenario": name, "method": method, "refused": " ".join(why)}
    with open(os.path.join(run_dir, "plan.json")) as f:
        plan = json.load(f)
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    avg = summary.get("averaging") or {}
    row = {
        "scenario": name, "method": method,
        "clusters": len(plan["clusters"]),
        "stages": max(len(c["stages"]) for c in plan["clusters"]),
        "predicted": plan["predicted_samples_per_s"],
        "simulated": summary.get("steady_samples_per_s"),
        "window": (summary.get("steady_window") or {}).get("basis"),
        "predicted_round_s": plan.get("predicted_averaging_s") or None,
        "simulated_round_s": avg.get("mean_round_s"),
    }
    row["error"] = error(row["predicted"], row["simulated"])
    row["round_error"] = error(row["predicted_round_s"], row["simulated_round_s"])
    return row


def pct(x):
    return "-" if x is None else f"{100 * x:+.1f}%"


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    ravnest, out, names = argv[1], argv[2], set(argv[3:])
    os.makedirs(out, exist_ok=True)
    rows = []
    for name, _ in shipped(names):
        for m in METHODS:
            rows.append(case(ravnest, out, name, m))
            r = rows[-1]
            if "refused" in r:
                print(f"{name:18} {m:11} refused: {r['refused']}", flush=True)
                continue
            print(f"{name:18} {m:11} {r['clusters']:3}x{r['stages']:<2} "
                  f"pred {r['predicted']:10.1f} sim {r['simulated'] or 0:10.1f} {pct(r['error']):>8}"
                  f"   round pred {r['predicted_round_s'] or 0:8.4f} sim {r['simulated_round_s'] or 0:8.4f}"
                  f" {pct(r['round_error']):>8}", flush=True)
    scored = [abs(r["error"]) for r in rows if r.get("error") is not None]
    rounds = [abs(r["round_error"]) for r in rows if r.get("round_error") is not None]
    result = {"rows": rows}
    for key, xs in (("steady", scored), ("round", rounds)):
        if xs:
            xs = sorted(xs)
            result[key] = {"median": statistics.median(xs), "p90": xs[int(0.9 * (len(xs) - 1))],
                           "worst": xs[-1], "n": len(xs)}
            print(f"{key}: median {100 * result[key]['median']:.1f}%, 90th percentile "
                  f"{100 * result[key]['p90']:.1f}%, worst {100 * result[key]['worst']:.1f}% over {len(xs)}")
    with open(os.path.join(out, "planner_fidelity.json"), "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
