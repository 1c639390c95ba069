"""The planner against the simulator on the shipped scenarios (issue 60, item 1): for every shipped
scenario of 1,024 nodes or fewer without churn, and every planning method that gives it a plan,
the plan's predicted steady samples/s and averaging round against the simulation of that plan
(timing mode: the same schedule, no maths). Two executors' agreement is not the point here: both
figures come from the model; this is the planner's analytic shortcut against the simulator.

    python3 bench/planner_fidelity.py RAVNEST OUT_DIR [SCENARIO ...]
    python3 bench/planner_fidelity.py RAVNEST OUT_DIR --random N [FIRST]

The second form plans and simulates N seeded random pools instead (random_pool(k) for k = FIRST,
FIRST + 1, ...; FIRST 1 by default), by greedy and ga: 16 to 1,024 PCs (log-uniform) of two to
four device kinds, an MLP whose training state needs 2 to 8 of the pool's PCs, 1 or 2 micro-batches
in flight, star or 2-4 regions, the `ideal` or the `tcp` network model. The pools are written to
OUT_DIR/pools; their parameters are in each row. No constant of the planner is fitted on them.

Prints one row per (scenario, method): predicted and simulated steady samples/s (summary.json's
steady window: whole averaging periods or flushes, evaluations apart), their error, and the same
for the averaging round (plan.predicted_averaging_s against the mean of the rounds' durations,
each from its last node's start to its last node's end, metrics.csv). The summary lines add the
prediction against the samples/s over the whole run (summary.json samples_per_s, warm-up
included), beside the steady window's: where clusters' rings end their rounds at different times
the steady window undercounts (issue 60's note), and the two differ. Writes planner_fidelity.json
in OUT_DIR. Exit status 0 (figures, not a test); 2 on bad usage or a run that failed."""
import csv
import json
import os
import random
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
STEPS = {"gpt-pipeline": 120, "digits-cnn": 300, "gpt-sort": 200}


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


def random_pool(k):
    """Seeded random pool k (1, 2, ...): its scenario's text, and its parameters."""
    rng = random.Random(6000 + k)
    n = int(round(16 * 64 ** rng.random()))
    stages = rng.randint(2, 7)  # PCs of mean RAM the model's training state needs
    width, depth = rng.choice([1024, 2048, 4096]), rng.randint(6, 12)
    params = 3072 * width + (depth - 1) * width * width + 10 * width
    state_gb = 4 * params * 4 / 1e9  # weights, gradients, momentum, a stashed copy
    regions = ["r0", "r1", "r2", "r3"][:rng.randint(2, 4)] if rng.random() < 0.5 else []
    net, in_flight, every = rng.choice(["ideal", "tcp"]), rng.choice([1, 2]), rng.choice([10, 20, 40])
    kinds = rng.randint(2, 4)
    lines = [f'name = "random-pool-{k}"', f"seed = {k}",
             f'[model]\nkind = "mlp"\nhead = "linear"\nhidden = [{", ".join([str(width)] * depth)}]',
             f'[data]\nkind = "synthetic"\nside = 32\nbatch_size = {rng.choice([16, 32, 64])}',
             f'[training]\nalgorithm = "ravnest"\noptimizer = "sgd"\nmomentum = 0.9\n'
             f"steps = {4 * every}\naverage_every = {every}\neval_every = 0\nmax_in_flight = {in_flight}",
             '[planner]\nmethod = "greedy"', '[sim]\nmode = "timing"',
             '[output]\nmetrics = "summary"\ntrace = false',
             f'[network]\nmodel = "{net}"' + ('\ntopology = "regions"' if regions else "")]
    for i, a in enumerate(regions):
        for b in regions[i + 1:]:
            lines.append(f'[[network.link]]\na = "{a}"\nb = "{b}"\nlatency_ms = {rng.randint(10, 150)}\n'
                         f"mbps = {rng.choice([100, 300, 1000, 3000])}")
    cuts = sorted(rng.sample(range(1, n), kinds - 1))
    group = 0
    for kind, count in enumerate(b - a for a, b in zip([0] + cuts, cuts + [n])):
        tflops, ram = 0.5 * 40 ** rng.random(), state_gb / stages * rng.uniform(1.0, 1.6)
        up = rng.choice([10, 20, 50, 100, 200])
        link = (f"tflops = {tflops:.3f}\nram_gb = {ram:.3f}\nup_mbps = {up}\n"
                f"down_mbps = {up * rng.choice([2, 5, 10])}\nlatency_ms = {rng.randint(5, 60)}")
        split = {None: count}
        if regions:
            split = {r: 0 for r in regions}
            for _ in range(count):
                split[rng.choice(regions)] += 1
        for r, c in split.items():
            if c:
                lines.append(f'[[devices]]\nname = "kind{kind}-{group}"\ncount = {c}\n' +
                             (f'region = "{r}"\n' if r else "") + link)
                group += 1
    about = {"pcs": n, "kinds": kinds, "in_flight": in_flight, "network": net,
             "regions": len(regions), "model_pcs": stages}
    return "\n".join(lines) + "\n", about


def case(ravnest, out, name, method, scenario=None):
    run_dir = os.path.join(out, f"{name}-{method}")
    shutil.rmtree(run_dir, ignore_errors=True)
    sets = [f'planner.method="{method}"', 'sim.mode="timing"', "output.trace=false",
            'output.metrics="events"']
    if name in STEPS:
        sets.append(f"training.steps={STEPS[name]}")
    cmd = [ravnest, "sim", scenario or os.path.join(ROOT, "scenarios", name + ".toml"), "--run-dir", run_dir,
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
    # Each averaging round from the moment its last node began it (the slowest cluster's, once
    # drained) to the moment the last node ended it, averaged over the run's rounds: the other
    # nodes' spans include their wait for the slowest cluster, which the prediction counts in the
    # clusters' periods, not in the round (summary.json's mean_round_s is the most any node spent).
    begin, end = {}, {}
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        for e in csv.DictReader(f):
            if e["kind"] == "average":
                k = int(e["step"])
                begin[k] = max(begin.get(k, 0.0), float(e["start_s"]))
                end[k] = max(end.get(k, 0.0), float(e["end_s"]))
    os.remove(os.path.join(run_dir, "metrics.csv"))  # large on large pools; the figures are here
    row = {
        "scenario": name, "method": method,
        "clusters": len(plan["clusters"]),
        "stages": max(len(c["stages"]) for c in plan["clusters"]),
        "predicted": plan["predicted_samples_per_s"],
        "simulated": summary.get("steady_samples_per_s"),
        "simulated_over_run": summary.get("samples_per_s"),
        "window": (summary.get("steady_window") or {}).get("basis"),
        "predicted_round_s": plan.get("predicted_averaging_s") or None,
        "simulated_round_s": statistics.mean(end[k] - begin[k] for k in end) if end else None,
    }
    row["error"] = error(row["predicted"], row["simulated"])
    row["run_error"] = error(row["predicted"], row["simulated_over_run"])
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
    cases = [(name, m, None, {}) for name, _ in shipped(names) for m in METHODS]
    if len(argv) in (5, 6) and argv[3] == "--random":
        first = int(argv[5]) if len(argv) == 6 else 1
        os.makedirs(os.path.join(out, "pools"), exist_ok=True)
        cases = []
        for k in range(first, first + int(argv[4])):
            text, about = random_pool(k)
            path = os.path.join(out, "pools", f"random-pool-{k}.toml")
            with open(path, "w") as f:
                f.write(text)
            cases += [(f"random-pool-{k}", m, path, about) for m in ("greedy", "ga")]
    rows = []
    for name, m, path, about in cases:
        rows.append(dict(case(ravnest, out, name, m, path), **about))
        r = rows[-1]
        if "refused" in r:
            print(f"{name:18} {m:11} refused: {r['refused']}", flush=True)
            continue
        print(f"{name:18} {m:11} {r['clusters']:3}x{r['stages']:<2} "
              f"pred {r['predicted']:10.1f} sim {r['simulated'] or 0:10.1f} {pct(r['error']):>8}"
              f"   round pred {r['predicted_round_s'] or 0:8.4f} sim {r['simulated_round_s'] or 0:8.4f}"
              f" {pct(r['round_error']):>8}" + (f"   {about}" if about else ""), flush=True)
    scored = [abs(r["error"]) for r in rows if r.get("error") is not None]
    over_run = [abs(r["run_error"]) for r in rows if r.get("run_error") is not None]
    rounds = [abs(r["round_error"]) for r in rows if r.get("round_error") is not None]
    result = {"rows": rows}
    for key, xs in (("steady", scored), ("over the run", over_run), ("round", rounds)):
        if xs:
            xs = sorted(xs)
            result[key] = {"median": statistics.median(xs), "p90": xs[int(0.9 * (len(xs) - 1))],
                           "worst": xs[-1], "n": len(xs)}
            print(f"{key}: median {100 * result[key]['median']:.1f}%, 90th percentile "
                  f"{100 * result[key]['p90']:.1f}%, worst {100 * result[key]['worst']:.1f}% over {len(xs)}")
    worst = sorted((r for r in rows if r.get("error") is not None), key=lambda r: -abs(r["error"]))
    for r in worst[:5]:
        print(f"worst: {r['scenario']} {r['method']} {pct(r['error'])} "
              f"({r['clusters']} clusters of up to {r['stages']} stages)")
    with open(os.path.join(out, "planner_fidelity.json"), "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
