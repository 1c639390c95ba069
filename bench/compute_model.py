"""Compares each stage's median compute time per micro-batch, real against simulated, for the run
pairs bench/compute_model.sh wrote (<case>-real, <case>-sim). Prints a table and writes
compute_model.json beside the runs."""
import csv
import json
import os
import statistics
import sys


def spans(run):
    """Median duration of forward and backward spans per stage (training micro-batches only)."""
    by = {}
    with open(os.path.join(run, "metrics.csv")) as f:
        for row in csv.DictReader(f):
            if row["kind"] not in ("forward", "backward") or int(row["micro_batch"]) < 0:
                continue
            key = (row["kind"], int(row["stage"]))
            by.setdefault(key, []).append(float(row["end_s"]) - float(row["start_s"]))
    return {k: statistics.median(v) for k, v in by.items()}


def main(out):
    rows = []
    cases = sorted(d[: -len("-real")] for d in os.listdir(out) if d.endswith("-real"))
    print(f"{'case':<10} {'span':<9} {'stage':>5} {'real ms':>9} {'sim ms':>9} {'sim/real':>9}")
    for case in cases:
        real, sim = spans(os.path.join(out, case + "-real")), spans(os.path.join(out, case + "-sim"))
        for key in sorted(real):
            r, s = real[key], sim.get(key, float("nan"))
            rows.append({"case": case, "span": key[0], "stage": key[1], "real_s": r, "sim_s": s,
                         "ratio": s / r, "within_10pct": abs(s / r - 1) <= 0.10})
            print(f"{case:<10} {key[0]:<9} {key[1]:>5} {r * 1e3:>9.3f} {s * 1e3:>9.3f} {s / r:>9.3f}")
    within = sum(r["within_10pct"] for r in rows)
    print(f"{within} of {len(rows)} within 10%")
    with open(os.path.join(out, "compute_model.json"), "w") as f:
        json.dump({"rows": rows, "within_10pct": within, "count": len(rows)}, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1])
