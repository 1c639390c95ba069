"""Compares each stage's median compute time per micro-batch (its forward, backward and optimizer
step spans, and their sum), real against simulated, for the runs bench/compute_model.sh wrote
(<case>-sim, and the real repeats <case>-real, <case>-real.2, ...).
The real figure of a span is the median over the repeats of each repeat's median; beside it, the
repeats' spread (largest over smallest): where the same real run moves more than 10% from one
repeat to the next, the host, not the model, decides whether a 10% check passes. Where the runs
were also simulated with a calibration taken after them (<case>-sim-after), it says how far
the two calibrations' predictions lie apart: the host's speed drifting over the bench's minutes,
which no single calibration can follow. Where rounds of repeats after the first were calibrated
again just before their real runs (<case>-sim.2, ... beside <case>-real.2, ...), each real repeat
is also compared with the simulation of its own round's calibration (the first repeat with the
first calibration), and the median of those ratios ("paired", where a span has two or more) is a
second check: a calibration next to each run, as a researcher would take one on a host whose speed
drifts; the same pairing is made of each stage's compute per micro-batch (forward + backward +
optimizer step, each repeat's medians summed). Prints a table and writes compute_model.json
beside the runs.

A real span's wall time counts the moments the host gave the node's core to something else (on a
host with no spare core: the other nodes' transport threads); its CPU time (cpu_s) does not. The
model describes a device computing alone, so the check compares the simulated span with the real
CPU time, and shows the wall time beside it."""
import csv
import json
import math
import os
import statistics
import sys


SPANS = ("forward", "backward", "update")


def spans(run):
    """Median duration (wall, cpu) of forward, backward and update (optimizer step) spans per stage
    (training only)."""
    by = {}
    with open(os.path.join(run, "metrics.csv")) as f:
        for row in csv.DictReader(f):
            if row["kind"] not in SPANS or int(row["micro_batch"]) < 0:
                continue
            key = (row["kind"], int(row["stage"]))
            cpu = float(row["cpu_s"]) if row.get("cpu_s") else math.nan
            by.setdefault(key, []).append((float(row["end_s"]) - float(row["start_s"]), cpu))
    return {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in by.items()}


def isolated(out, case):
    """{(span, stage): seconds} of the stage run alone (bench_stage_compute), if it ran."""
    path = os.path.join(out, case + "-isolated.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        j = json.load(f)
    got = {}
    for s in j["stages"]:
        got[("forward", s["stage"])] = s["forward_ms"] / 1e3
        got[("backward", s["stage"])] = s["backward_ms"] / 1e3
        if "update_ms" in s:
            got[("update", s["stage"])] = s["update_ms"] / 1e3
    return got


def repeats(out, case):
    """The real repeats' run folders of `case`, in order (<case>-real, <case>-real.2, ...)."""
    found = []
    for d in os.listdir(out):
        if d == case + "-real":
            found.append((1, d))
        elif d.startswith(case + "-real.") and d[len(case) + 6:].isdigit():
            found.append((int(d[len(case) + 6:]), d))
    return [os.path.join(out, d) for _, d in sorted(found)]


def rounds(out, case, real_spans):
    """[(real spans, simulated spans)] of each repeat whose round was simulated with its own
    calibration (<case>-sim for the first repeat, <case>-sim.N for <case>-real.N), each read once."""
    got = []
    for run, real in zip(repeats(out, case), real_spans):
        suffix = run[len(os.path.join(out, case + "-real")):]
        sim_dir = os.path.join(out, case + "-sim" + suffix)
        if os.path.exists(sim_dir):
            got.append((real, spans(sim_dir)))
    return got


def paired_ratios(pairs):
    """{span: [(simulated / real CPU) per repeat]}, each repeat of `pairs` (rounds()) against its
    own round's simulation."""
    got = {}
    for real, sim in pairs:
        for key, (_, cpu) in real.items():
            if key in sim and math.isfinite(cpu) and cpu > 0:
                got.setdefault(key, []).append(sim[key][0] / cpu)
    return got


def stage_totals(rows, paired_totals):
    """Per case and stage, the compute of one micro-batch (its forward, backward and optimizer
    step, where all three were measured), simulated against the real CPU time; beside it the
    median of each repeat's total against its round's simulation (`paired_totals`: {(case,
    stage): [ratios]}, NaN with fewer than two)."""
    by = {}
    for r in rows:
        by.setdefault((r["case"], r["stage"]), {})[r["span"]] = r
    got = []
    for (case, stage), s in sorted(by.items()):
        if not all(k in s for k in SPANS):
            continue
        cpu = sum(s[k]["real_cpu_s"] for k in SPANS)
        sim = sum(s[k]["sim_s"] for k in SPANS)
        pairs = paired_totals.get((case, stage), [])
        got.append({"case": case, "stage": stage, "real_cpu_s": cpu, "sim_s": sim, "ratio_cpu": sim / cpu,
                    "paired_ratios": pairs, "paired_ratio": statistics.median(pairs) if len(pairs) > 1 else math.nan})
    return got


def paired_total_ratios(pairs):
    """{stage: [(simulated / real CPU) of the stage's forward + backward + optimizer step, per
    repeat]}, each repeat of `pairs` (rounds()) against its own round's simulation."""
    got = {}
    for real, sim in pairs:
        for stage in sorted({k[1] for k in real}):
            keys = [(span, stage) for span in SPANS]
            if not all(k in real and k in sim and math.isfinite(real[k][1]) for k in keys):
                continue
            cpu = sum(real[k][1] for k in keys)
            if cpu > 0:
                got.setdefault(stage, []).append(sum(sim[k][0] for k in keys) / cpu)
    return got


def main(out):
    rows = []
    paired_totals = {}
    cases = sorted(d[: -len("-real")] for d in os.listdir(out) if d.endswith("-real"))
    print(f"{'case':<10} {'span':<9} {'stage':>5} {'real cpu ms':>12} {'spread':>7} {'real wall ms':>13}"
          f" {'alone ms':>9} {'sim ms':>9} {'sim/cpu':>8} {'sim/wall':>9} {'sim/alone':>10} {'paired':>7}")
    for case in cases:
        reals = [spans(r) for r in repeats(out, case)]
        sim = spans(os.path.join(out, case + "-sim"))
        after_dir = os.path.join(out, case + "-sim-after")
        sim_after = spans(after_dir) if os.path.exists(after_dir) else {}
        alone = isolated(out, case)
        by_round = rounds(out, case, reals)
        pairs = paired_ratios(by_round)
        for stage, ratios in paired_total_ratios(by_round).items():
            paired_totals[(case, stage)] = ratios
        for key in sorted(reals[0]):
            cpus = [r[key][1] for r in reals if key in r]
            walls = [r[key][0] for r in reals if key in r]
            cpu, wall = statistics.median(cpus), statistics.median(walls)
            spread = max(cpus) / min(cpus)
            s = sim.get(key, (math.nan, math.nan))[0]
            s_after = sim_after.get(key, (math.nan, math.nan))[0]
            a = alone.get(key, math.nan)
            paired = statistics.median(pairs[key]) if len(pairs.get(key, [])) > 1 else math.nan
            rows.append({"case": case, "span": key[0], "stage": key[1], "real_cpu_s": cpu, "real_wall_s": wall,
                         "real_cpu_s_repeats": cpus, "repeat_spread": spread,
                         "alone_s": a, "sim_s": s, "ratio_cpu": s / cpu, "ratio_wall": s / wall,
                         "ratio_alone": s / a, "within_10pct": abs(s / cpu - 1) <= 0.10,
                         "repeats_within_10pct": all(abs(c / cpu - 1) <= 0.10 for c in cpus),
                         "sim_after_s": s_after, "calibration_drift": s_after / s,
                         "paired_ratios": pairs.get(key, []), "paired_ratio": paired})
            print(f"{case:<10} {key[0]:<9} {key[1]:>5} {cpu * 1e3:>12.3f} {spread:>7.3f} {wall * 1e3:>13.3f}"
                  f" {a * 1e3:>9.3f} {s * 1e3:>9.3f} {s / cpu:>8.3f} {s / wall:>9.3f} {s / a:>10.3f} {paired:>7.3f}")
    totals = stage_totals(rows, paired_totals)
    updates = [r for r in rows if r["span"] == "update"]
    rows = [r for r in rows if r["span"] != "update"]  # the forward and backward spans, as before
    within = sum(r["within_10pct"] for r in rows)
    within_wall = sum(abs(r["ratio_wall"] - 1) <= 0.10 for r in rows)
    within_alone = sum(abs(r["ratio_alone"] - 1) <= 0.10 for r in rows)
    steady = sum(r["repeats_within_10pct"] for r in rows)
    n_repeats = min(len(r["real_cpu_s_repeats"]) for r in rows) if rows else 0
    print(f"{within} of {len(rows)} forward and backward spans within 10% of the real CPU time ({within_wall} of "
          f"the wall time, {within_alone} of the stage run alone)")
    if updates:
        print(f"{sum(r['within_10pct'] for r in updates)} of {len(updates)} optimizer steps within 10% of the real "
              f"CPU time (sim/cpu {min(r['ratio_cpu'] for r in updates):.3f}-"
              f"{max(r['ratio_cpu'] for r in updates):.3f})")
    if totals:
        print(f"{sum(abs(t['ratio_cpu'] - 1) <= 0.10 for t in totals)} of {len(totals)} stages' compute per "
              f"micro-batch (forward + backward + optimizer step) within 10% of the real CPU time (sim/cpu "
              f"{min(t['ratio_cpu'] for t in totals):.3f}-{max(t['ratio_cpu'] for t in totals):.3f})")
        paired = [t["paired_ratio"] for t in totals if not math.isnan(t["paired_ratio"])]
        if paired:
            print(f"{sum(abs(r - 1) <= 0.10 for r in paired)} of {len(paired)} stages' compute per micro-batch within "
                  f"10% paired: each real repeat against its round's calibration (sim/cpu {min(paired):.3f}-"
                  f"{max(paired):.3f})")
    print(f"the host: {steady} of {len(rows)} spans have every one of their {n_repeats} real repeats within 10% "
          f"of the repeats' median")
    paired_rows = [r for r in rows if not math.isnan(r["paired_ratio"])]
    paired_within = sum(abs(r["paired_ratio"] - 1) <= 0.10 for r in paired_rows)
    counts = [len(r["paired_ratios"]) for r in paired_rows]
    n_pairs = min(counts) if counts else 0
    if paired_rows:
        pairs_text = f"{n_pairs}" if n_pairs == max(counts) else f"{n_pairs}-{max(counts)}"
        print(f"{paired_within} of {len(paired_rows)} within 10% paired: each real repeat against its round's "
              f"calibration ({pairs_text} pairs a span, their median)")
    drifts = [r["calibration_drift"] for r in rows if not math.isnan(r["calibration_drift"])]
    calibration_steady = sum(abs(d - 1) <= 0.10 for d in drifts)
    if drifts:
        print(f"the calibration: {calibration_steady} of {len(drifts)} spans' simulated times within 10% between a "
              f"calibration before the real runs and one after (after/before {min(drifts):.3f}-{max(drifts):.3f})")
    with open(os.path.join(out, "compute_model.json"), "w") as f:
        json.dump({"rows": rows, "within_10pct": within, "within_10pct_wall": within_wall,
                   "within_10pct_alone": within_alone, "repeats_within_10pct": steady, "repeats": n_repeats,
                   "within_10pct_paired": paired_within if paired_rows else None, "pairs": n_pairs,
                   "calibration_within_10pct": calibration_steady if drifts else None, "count": len(rows),
                  "updates": updates, "stage_totals": totals},
                  f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1])
