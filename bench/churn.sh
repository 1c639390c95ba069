#!/usr/bin/env bash
# Accuracy against churn (issue 17; not a test: figures). scenarios/churn-sweep.toml's twelve PCs
# with 0, 5, 10 and 20% departures per node per hour, three seeds each, in one `ravnest sweep`
# (numeric simulation: about 50 s per run here), then `ravnest report`, whose churn_rate.json this
# script prints as a table: final test accuracy (mean, min, max over the seeds) and the share of
# the planned samples trained, per rate. The timing scenario scenarios/churn.toml is timed once too.
# Usage: bench/churn.sh [OUT_DIR]   (default bench/results/churn)
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-bench/results/churn}")
scripts/build.sh ravnest >/dev/null
rm -rf "$out" && mkdir -p "$out"
build/ravnest sweep scenarios/churn-sweep.toml --set churn.leave_per_hour=0,0.05,0.1,0.2 --set seed=1,2,3 \
  --out "$out/sweep" --progress off >"$out/sweep.log" 2>&1
build/ravnest report "$out"/sweep/*/ --out "$out/report" >"$out/report.log" 2>&1
{
  python3 - "$out/report/churn_rate.json" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
acc, kept = data["series"][0], data["series"][1]
print("departures/h (%) | runs | accuracy mean | min | max | planned samples trained")
for i, x in enumerate(acc["x"]):
    runs = next((n for k, n in acc["runs"].items() if float(k) == float(x)), 0)
    print(f"{x:16.0f} | {runs:4} | {acc['y'][i]:13.4f} | {acc['min'][i]:.4f} | {acc['max'][i]:.4f} "
          f"| {kept['y'][i]:.3f}")
PY
  /usr/bin/time -f "scenarios/churn.toml: %e s wall, %M KB peak" build/ravnest sim scenarios/churn.toml \
    --run-dir "$out/churn-timing" --progress off 2>&1 | tail -2
  python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print('  simulated', round(s['time_s'], 1), 's;', s['churn'])" \
    "$out/churn-timing/summary.json"
} | tee "$out/summary.txt"
