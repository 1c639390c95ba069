#!/usr/bin/env bash
# The simulator against emulated real runs on this machine: `ravnest validate` on the shipped
# scenarios (ravnest, gpipe and sync-dp; memory-bound with 1, 2 and 4 clusters), then table.py
# writes table.md and results.json here. Each run keeps its scenario as shipped but for fewer
# steps (and one evaluation at the end), so that the whole table takes about an hour on two
# cores (sync-dp on the heterogeneous LAN needs a dilation of about 40); nothing is tuned to the
# outcome. Not part of the tests (CI runs the validate CLI tests).
#
# Usage: papers/validation/run.sh [RUNS_DIR]   (default: runs/validation; the table lands here)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
runs=$(realpath -m "${1:-runs/validation}")
scripts/build.sh ravnest >/dev/null
rm -rf "$runs" && mkdir -p "$runs"

validate() {  # name scenario steps [--set ...]
  local name=$1 scenario=$2 steps=$3
  shift 3
  echo "== $name" >&2
  build/ravnest validate "$scenario" --set "training.steps=$steps" --set "training.eval_every=$steps" "$@" \
    --run-dir "$runs/$name" --progress off | tail -1 >&2
}
validate quickstart scenarios/quickstart.toml 400
validate quickstart-gpipe scenarios/quickstart.toml 200 --set 'training.algorithm="gpipe"'
validate heterogeneous scenarios/heterogeneous.toml 400
validate heterogeneous-sync-dp scenarios/heterogeneous.toml 10 --set 'training.algorithm="sync-dp"'
validate memory-bound-c1 scenarios/memory-bound.toml 60 --set planner.clusters=1
validate memory-bound-c2 scenarios/memory-bound.toml 60 --set planner.clusters=2
validate memory-bound-c4 scenarios/memory-bound.toml 60 --set planner.clusters=4
validate digits-cnn scenarios/digits-cnn.toml 200
validate digits-cnn-gpipe scenarios/digits-cnn.toml 60 --set 'training.algorithm="gpipe"'
/usr/bin/python3 "$here/table.py" "$runs" "$here"
