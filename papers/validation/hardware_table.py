"""The model-against-hardware table: one row per case of hardware.sh, over its repeats.

    hardware_table.py --kinds KINDS RUNS_DIR OUT_DIR
        reads RUNS_DIR/<case>/r<i>/validate.json (its "model_against_hardware") and
        RUNS_DIR/<case>/measured.json; KINDS lists "case kind" lines (shipped, network, compute).
        For the network-bound cases it simulates the median repeat again with twice the latency
        and with half the bandwidth (the negative control; RUNS_DIR/<case>/r<i>/control-*), with
        build/ravnest. Writes OUT_DIR/hardware.md and OUT_DIR/hardware.json; rows of cases not in
        RUNS_DIR are kept from an earlier hardware.json.

Each case's figure is the median over its repeats whose host kept its speed over the run (the
calibration after the real run within 10% of the one before, on the run's own spans: validate's
host_drift), with the spread (lowest and highest) of those; the flagged repeats are listed with
their own errors. The real spans' time against the calibration before (compute_ratio) is shown,
not judged: it holds the model's error on them. A repeat measured before validate had the drift
check (no host_drift) is judged by its compute_ratio, as it was then, and marked so. A case whose every repeat was flagged is scored on them all, marked so. Targets over the cases: steady samples/s within 5% geometric mean and 10% worst;
averaging rounds within 10%. The control (twice the latency, or half the bandwidth) must miss the
10% target on every network-bound case.
"""
import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import tomllib

TARGET_GEOMEAN, TARGET_WORST, TARGET_ROUND, TOLERANCE = 0.05, 0.10, 0.10, 0.10


def figure(v, name):
    for f in v.get("figures", []):
        if f["figure"] == name:
            return f
    return {}


def ratio_error(a, b):
    if not a or not b or a <= 0 or b <= 0:
        return math.nan
    return math.exp(abs(math.log(a / b))) - 1


def control(repeat_dir, real_steady, how):
    """The repeat's simulation again with twice every latency ("latency") or half every bandwidth
    ("bandwidth"): its steady samples/s error against the real run's."""
    sim_dir = os.path.join(repeat_dir, "hardware", "sim")
    with open(os.path.join(sim_dir, "scenario.toml"), "rb") as f:
        scenario = tomllib.load(f)
    sets = []
    for i, d in enumerate(scenario["devices"]):
        sets += ["--set", f"devices.{i}.profile=\"{os.path.abspath(os.path.join(repeat_dir, 'hardware', 'host.toml'))}\""]
        if how == "latency":
            sets += ["--set", f"devices.{i}.latency_ms={2 * d['latency_ms']!r}"]
        else:
            sets += ["--set", f"devices.{i}.up_mbps={d['up_mbps'] / 2!r}",
                     "--set", f"devices.{i}.down_mbps={d['down_mbps'] / 2!r}"]
    out = os.path.join(repeat_dir, f"control-{how}")
    if not os.path.isfile(os.path.join(out, "summary.json")):
        subprocess.run(["build/ravnest", "sim", os.path.join(sim_dir, "scenario.toml"), *sets,
                        "--run-dir", out, "--progress", "off"], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "summary.json")) as f:
        return ratio_error(json.load(f).get("steady_samples_per_s"), real_steady)


def case_row(runs_dir, name, kind):
    case = os.path.join(runs_dir, name)
    repeats = []
    for r in sorted((d for d in os.listdir(case) if d.startswith("r") and d[1:].isdigit()),
                    key=lambda d: int(d[1:])):
        path = os.path.join(case, r, "validate.json")
        if not os.path.isfile(path):
            continue
        with open(path) as f:
            hw = json.load(f)["model_against_hardware"]
        if not hw.get("measured"):
            repeats.append({"repeat": r, "measured": False, "why": hw.get("why")})
            continue
        s = figure(hw, "steady_samples_per_s")
        rnd = figure(hw, "averaging/mean_round_s")
        ratio = hw.get("compute_ratio")
        # The drift check where the repeat has it; before it, the spans' ratio was the flag.
        flag_by = "host_drift" if "host_drift" in hw else "compute_ratio"
        judged = hw.get(flag_by)
        repeats.append({"repeat": r, "measured": True, "steady_sim": s.get("sim"), "steady_real": s.get("real"),
                        "steady_error": s.get("error"),
                        # a run without averaging rounds has none to compare (0 in both)
                        "round_error": rnd.get("error") if rnd.get("sim") and rnd.get("real") else None,
                        "compute_ratio": ratio, "host_drift": hw.get("host_drift"), "flag_by": flag_by,
                        "flagged": judged is None or abs(judged - 1) > TOLERANCE,
                        "notes": hw.get("notes", [])})
    if os.path.isfile(os.path.join(case, "failed.txt")):
        with open(os.path.join(case, "failed.txt")) as f:
            failed = " ".join(f.read().split())[-300:]
        return {"case": name, "kind": kind, "repeats": repeats, "kept": 0, "failed": failed,
                "steady_error": math.nan, "steady_error_low": math.nan, "steady_error_high": math.nan}
    kept = [r for r in repeats if r["measured"] and not r["flagged"] and r["steady_error"] is not None]
    # Where every repeat left its calibration (the same way each time: the calibration, not noise),
    # the case is scored on them all and marked, never left out of the targets.
    all_flagged = not kept
    if all_flagged:
        kept = [r for r in repeats if r["measured"] and r["steady_error"] is not None]
    errors = [r["steady_error"] for r in kept]
    row = {"case": name, "kind": kind, "repeats": repeats, "kept": 0 if all_flagged else len(kept),
           "all_flagged": all_flagged,
           "steady_error": statistics.median(errors) if errors else math.nan,
           "steady_error_low": min(errors) if errors else math.nan,
           "steady_error_high": max(errors) if errors else math.nan}
    rounds = [r["round_error"] for r in kept if r["round_error"] is not None]
    row["round_error"] = statistics.median(rounds) if rounds else None
    if kind == "network" and kept:
        median = sorted(kept, key=lambda r: r["steady_error"])[len(kept) // 2]
        d = os.path.join(case, median["repeat"])
        row["control_latency_error"] = control(d, median["steady_real"], "latency")
        row["control_bandwidth_error"] = control(d, median["steady_real"], "bandwidth")
    if os.path.isfile(os.path.join(case, "measured.json")):
        with open(os.path.join(case, "measured.json")) as f:
            row.update({k: v for k, v in json.load(f).items() if k in ("commit", "date")})
    return row


def main(kinds_file, runs_dir, out_dir):
    kinds = {}
    with open(kinds_file) as f:
        for line in f:
            if line.strip():
                name, kind = line.split()
                kinds[name] = kind
    rows = {name: case_row(runs_dir, name, kind) for name, kind in kinds.items()
            if os.path.isdir(os.path.join(runs_dir, name))}
    old_path = os.path.join(out_dir, "hardware.json")
    if os.path.isfile(old_path):
        with open(old_path) as f:
            for r in json.load(f)["rows"]:
                if r["case"] not in rows and r["case"] in kinds:
                    rows[r["case"]] = r
    rows = [rows[n] for n in kinds if n in rows]
    errors = [r["steady_error"] for r in rows if not math.isnan(r["steady_error"])]
    geomean = math.exp(sum(math.log1p(e) for e in errors) / len(errors)) - 1 if errors else math.nan
    worst = max(errors) if errors else math.nan
    rounds = [r["round_error"] for r in rows if r.get("round_error") is not None]
    round_worst = max(rounds) if rounds else math.nan
    controls = [r for r in rows if r["kind"] == "network" and "control_latency_error" in r]
    # The network must be visible: twice the latency or half the bandwidth (whichever binds: a
    # latency-bound case hardly moves with bandwidth) puts the simulation beyond the target.
    control_seen = all(max(r["control_latency_error"], r["control_bandwidth_error"]) > TARGET_WORST
                       for r in controls) if controls else None
    missing = [n for n in kinds if n not in {r["case"] for r in rows}]
    summary = {"cases": len(rows), "not_measured": missing, "steady_error_geomean": geomean,
               "steady_error_worst": worst, "round_error_worst": round_worst,
               "control_misses_target": control_seen,
               "targets": {"steady_error_geomean": TARGET_GEOMEAN, "steady_error_worst": TARGET_WORST,
                           "round_error_worst": TARGET_ROUND},
               "host": {"machine": platform.machine(), "cores": os.cpu_count()}}

    def pct(x):
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"

    def ok(flag):
        return "-" if flag is None else ("met" if flag else "**missed**")

    lines = ["# The model against hardware", "",
             f"`papers/validation/hardware.sh` on a {summary['host']['cores']}-core {summary['host']['machine']} host "
             "(root): each repeat is `ravnest validate --agreement hardware`, a calibration of this host, a real run "
             "with nothing taken from the model (this host's compute; real TCP through the kernel shaper, the links' "
             "latency on the packet path) and its simulation under the calibration. Error: exp(|ln(sim/real)|) - 1; "
             "per case the median over the repeats whose host kept its speed over the run (a second calibration "
             "after the real run within 10% of the first on the run's own spans: host drift), with their spread. "
             "Spans / model: the real compute spans' time over their modeled time under the first calibration "
             "(median), the model's error on them with any drift, shown, not judged; rows measured before the drift "
             "check (host drift -) were flagged by it. Control: the median repeat simulated again with twice the "
             "latency and with half the bandwidth.", "",
             "| case | kind | repeats kept | steady samples/s error, median | spread | averaging round error "
             "| host drift | spans / model | flagged repeats | control: 2x latency | control: bandwidth / 2 | commit, date |",
             "|---|---|---:|---:|---|---:|---|---|---|---:|---:|---|"]

    def joined(r, key):
        return ", ".join(f"{x[key]:.2f}" for x in r["repeats"] if x.get(key)) or "-"

    def flagged_by(x):
        """A flagged repeat's judged figure, named (rows from before the drift check lack flag_by)."""
        key = x.get("flag_by", "compute_ratio")
        return f"{'drift' if key == 'host_drift' else 'spans / model'} {x[key]:.2f}x" if x.get(key) else None

    for r in rows:
        flagged = "; ".join(f"{x['repeat']}: {pct(x['steady_error'])} at {flagged_by(x)}"
                            for x in r["repeats"] if x.get("flagged") and flagged_by(x))
        flag = " (all flagged: median of them all)" if r.get("all_flagged") else ""
        lines.append(f"| {r['case']} | {r['kind']} | {r['kept']} of {len(r['repeats'])} | {pct(r['steady_error'])}{flag} "
                     f"| {pct(r['steady_error_low'])} - {pct(r['steady_error_high'])} | {pct(r.get('round_error'))} "
                     f"| {joined(r, 'host_drift')} | {joined(r, 'compute_ratio')} | {flagged or '-'} "
                     f"| {pct(r.get('control_latency_error'))} "
                     f"| {pct(r.get('control_bandwidth_error'))} | {r.get('commit', '-')}, {r.get('date', '-')} |")
    failed = [r for r in rows if r.get("failed")]
    if failed:
        lines += ["", "Failed (the case could not run as written; `RUNS_DIR/<case>/failed.txt`):"]
        lines += [f"- {r['case']}: {r['failed']}" for r in failed]
    if missing:
        lines += ["", "Not measured yet (`papers/validation/hardware.sh RUNS_DIR CASE...` adds them): " +
                  ", ".join(missing) + ". The targets below are over the rows above only."]
    lines += ["", "| target | measured | goal | |", "|---|---:|---:|---|",
              f"| steady samples/s, geometric mean error | {pct(geomean)} | 5% | {ok(geomean <= TARGET_GEOMEAN if errors else None)} |",
              f"| steady samples/s, worst error | {pct(worst)} | 10% | {ok(worst <= TARGET_WORST if errors else None)} |",
              f"| averaging round, worst error | {pct(round_worst)} | 10% | {ok(round_worst <= TARGET_ROUND if rounds else None)} |",
              f"| control (2x latency or bandwidth / 2) misses 10% on every network-bound case | | | {ok(control_seen)} |", ""]
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "hardware.md"), "w") as f:
        f.write("\n".join(lines))
    with open(os.path.join(out_dir, "hardware.json"), "w") as f:
        json.dump({"summary": summary, "rows": rows}, f, indent=1, allow_nan=True)
    print("\n".join(lines))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kinds", required=True, help="a file of 'case kind' lines")
    ap.add_argument("runs_dir")
    ap.add_argument("out_dir")
    a = ap.parse_args()
    main(a.kinds, a.runs_dir, a.out_dir)
