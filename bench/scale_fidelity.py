"""Runs and compares the cases of bench/scale_fidelity.sh: simulated averaging rounds against the
planner's prediction and a lower bound, simulated steady samples/s against the prediction, and
each run's wall time and peak memory. Prints a table; writes scale_fidelity.json beside the runs.

Lower bound of a multi-ring round (computed here from plan.json and the scenario, not by the
planner): every ring of C owners moves 2(C-1)/C of its chunk out of each owner and into the next;
a node's link carries the sum over its rings. The round takes at least the busiest link's bytes
over its bandwidth (at the network model's goodput) plus the latency of the 2(C-1) ring steps,
each a hop between consecutive owners (the cheapest chain of consecutive hops)."""
import csv
import json
import os
import statistics
import subprocess
import sys
import time
import tomllib

GOODPUT = {"ideal": 1.0, "tcp": 0.962, "lv08": 0.97}  # docs/network-model.md
LATENCY = {"ideal": 1.0, "tcp": 1.0, "lv08": 13.01}


SCENARIO = "scenarios/consumer-pool-1024.toml"


def run(cmd):
    """Wall seconds and peak resident MB of one command (its own rusage, not its siblings')."""
    t = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit status {p.returncode}")
    return time.monotonic() - t, usage.ru_maxrss / 1024.0


def run_cases(out):
    """The cases of bench/scale_fidelity.sh, each planned and simulated into OUT/<case>."""
    for net in ("ideal", "tcp"):
        for n in (64, 256, 1024):
            case = f"n{n}-{net}"
            sets = [f'network.model="{net}"', "output.trace=false", "output.metrics=events", f"devices.0.count={n // 2}",
                    f"devices.1.count={n * 3 // 8}", f"devices.2.count={n // 8}"]
            if n == 64:
                sets.append("planner.clusters=16")
            cmd = ["build/ravnest", "sim", SCENARIO, "--run-dir", os.path.join(out, case), "--progress", "off"]
            for kv in sets:
                cmd += ["--set", kv]
            wall, peak = run(cmd)
            with open(os.path.join(out, case + ".time"), "w") as f:
                f.write(f"{wall} {peak}\n")


def nodes_of(scenario):
    out = []
    for d in scenario["devices"]:
        out += [d] * int(d.get("count", 1))
    return out


def lower_bound(plan, scenario):
    net = scenario.get("network", {}).get("model", "tcp")
    nodes = nodes_of(scenario)
    rows = 1
    tr = scenario.get("training", {})
    if tr.get("average_optimizer_state", False) and tr.get("optimizer") == "adam":
        rows = 3
    up, down = {}, {}
    latency = 0.0
    for ring in plan["rings"]:
        owners = ring["owners"]
        c = len(owners)
        chunk = 4.0 * rows * (ring["state"][1] - ring["state"][0])
        if c < 2 or chunk <= 0:
            continue
        moved = 2.0 * (c - 1) / c * chunk
        hops = []
        for i, o in enumerate(owners):
            nxt = owners[(i + 1) % c]
            up[o] = up.get(o, 0.0) + moved
            down[nxt] = down.get(nxt, 0.0) + moved
            hops.append((nodes[o]["latency_ms"] + nodes[nxt]["latency_ms"]) * 1e-3 * LATENCY[net])
        steps = 2 * (c - 1)
        twice = hops * (steps // c + 2)
        chain = min(sum(twice[s:s + steps]) for s in range(c))
        latency = max(latency, chain)
    rate = lambda mbps: mbps * 1e6 / 8 * GOODPUT[net]
    busiest = max([b / rate(nodes[n]["up_mbps"]) for n, b in up.items()] +
                  [b / rate(nodes[n]["down_mbps"]) for n, b in down.items()] + [0.0])
    return busiest + latency, busiest, latency


def rounds(run_dir):
    spans = {}
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        for row in csv.DictReader(f):
            if row["kind"] == "average":
                spans.setdefault(row["step"], []).append(float(row["end_s"]) - float(row["start_s"]))
    return [max(v) for v in spans.values()]


def main(out):
    cases = sorted((d for d in os.listdir(out) if os.path.isdir(os.path.join(out, d))),
                   key=lambda d: (d.split("-")[1], int(d.split("-")[0][1:])))
    rows = []
    print(f"{'case':<12} {'clusters':>8} {'rings':>5} {'avg sim s':>10} {'predicted':>10} {'bound':>10}"
          f" {'sim/pred':>9} {'sim/bound':>10} {'samples/s':>10} {'predicted':>10} {'sim/pred':>9}"
          f" {'wall s':>7} {'peak MB':>8}")
    for case in cases:
        d = os.path.join(out, case)
        plan = json.load(open(os.path.join(d, "plan.json")))
        summary = json.load(open(os.path.join(d, "summary.json")))
        with open(os.path.join(d, "scenario.toml"), "rb") as f:
            scenario = tomllib.load(f)
        sim_rounds = rounds(d)
        sim_avg = statistics.median(sim_rounds) if sim_rounds else 0.0
        bound, bw, lat = lower_bound(plan, scenario)
        pred_avg = plan["predicted_averaging_s"]
        # Samples/s over the run (its updates and its averagings, as the planner's prediction
        # counts them: every cluster gated by the slowest, plus the averaging per update). The
        # summary's steady window (from the median completion on) does not fit bulk-synchronous
        # clusters of different speeds: the fast ones finish their period at its start.
        run_pred = plan["predicted_samples_per_s"]
        run_sim = summary["samples_per_s"]
        wall, peak = (float(x) for x in open(os.path.join(out, case + ".time")).read().split())
        r = {"case": case, "clusters": len(plan["clusters"]), "rings": len(plan["rings"]),
             "averaging_sim_s": sim_avg, "averaging_predicted_s": pred_avg, "averaging_bound_s": bound,
             "bound_bandwidth_s": bw, "bound_latency_s": lat,
             "samples_per_s_sim": run_sim, "samples_per_s_predicted": run_pred,
             "wall_s": wall, "peak_mb": peak}
        rows.append(r)
        ratio = lambda a, b: a / b if b > 0 else float("nan")
        print(f"{case:<12} {r['clusters']:>8} {r['rings']:>5} {sim_avg:>10.1f} {pred_avg:>10.1f} {bound:>10.1f}"
              f" {ratio(sim_avg, pred_avg):>9.3f} {ratio(sim_avg, bound):>10.3f} {run_sim:>10.1f}"
              f" {run_pred:>10.1f} {ratio(run_sim, run_pred):>9.3f} {wall:>7.1f} {peak:>8.0f}")
    json.dump(rows, open(os.path.join(out, "scale_fidelity.json"), "w"), indent=1)


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "--run":
        run_cases(args[1])
        args = args[1:]
    main(args[0] if args else "bench/results/scale_fidelity")
