#!/usr/bin/env bash
# The main job: install what is missing, build, run scenarios/quickstart.toml in simulation and
# write its report (plots under the run folder's report/).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh ravnest
run_dir="runs/quickstart/sim-quickstart-$(date +%Y%m%d-%H%M%S)"
./build/ravnest sim scenarios/quickstart.toml --run-dir "$run_dir"
./build/ravnest report "$run_dir"
echo "quickstart: report in $run_dir/report/"
