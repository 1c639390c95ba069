#!/usr/bin/env bash
# The simulator against emulated real runs on this machine: `ravnest validate` on the shipped
# scenarios (ravnest, gpipe and sync-dp; memory-bound with 1, 2 and 4 clusters), then table.py
# writes table.md and results.json here. Each run keeps its scenario as shipped but for fewer
# steps (and one evaluation at the end), so that the whole table takes about an hour on two
# cores; nothing is tuned to the outcome. A case this host cannot keep up with even dilated 100
# times is refused by validate (exit 2), and the table lists it with validate's reason (sync-dp on
# the heterogeneous LAN has needed 40 to 140 on the VMs this ran on). Not part of the tests (CI
# runs the validate CLI tests).
#
# Usage: papers/validation/run.sh [RUNS_DIR [CASE...]]   (default: runs/validation, every case)
#   With CASEs, only those run, and table.py merges them into results.json's other rows (each row
#   names the commit it was measured at), so that the table can be completed a few cases at a time.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
runs=$(realpath -m "${1:-runs/validation}")
shift $(($# > 0 ? 1 : 0))
cases=("$@")
scripts/build.sh ravnest >/dev/null
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
# Uncommitted changes to anything but this folder's own outputs mark the rows.
[ -z "$(git status --porcelain --untracked-files=no -- . ':!papers/validation' 2>/dev/null)" ] || commit="$commit+changes"
if [ ${#cases[@]} -eq 0 ]; then rm -rf "$runs"; fi
mkdir -p "$runs"

validate() {  # name scenario steps [--set ...]
  local name=$1 scenario=$2 steps=$3
  shift 3
  if [ ${#cases[@]} -gt 0 ] && [[ " ${cases[*]} " != *" $name "* ]]; then return 0; fi
  echo "== $name" >&2
  rm -rf "$runs/$name"
  local status=0
  build/ravnest validate "$scenario" --agreement executors --set "training.steps=$steps" --set "training.eval_every=$steps" "$@" \
    --run-dir "$runs/$name" --progress off >"$runs/.$name.out" 2>"$runs/.$name.err" || status=$?
  tail -1 "$runs/.$name.out" >&2
  if [ $status -eq 2 ]; then  # refused (too large for this host even dilated 100 times): the table says so
    mkdir -p "$runs/$name"
    cat "$runs/.$name.err" >&2
    cp "$runs/.$name.err" "$runs/$name/refused.txt"
  elif [ $status -ne 0 ]; then
    cat "$runs/.$name.err" >&2
    exit $status
  fi
  rm -f "$runs/.$name.out" "$runs/.$name.err"
  printf '{"commit": "%s", "date": "%s"}\n' "$commit" "$(date -u +%Y-%m-%d)" > "$runs/$name/measured.json"
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
validate digits-cnn-sync-dp scenarios/digits-cnn.toml 60 --set 'training.algorithm="sync-dp"'
all=$(sed -n 's/^validate \([a-z0-9-]*\) .*/\1/p' "$0" | paste -sd, -)
if [ ${#cases[@]} -eq 0 ]; then
  /usr/bin/python3 "$here/table.py" --cases "$all" "$runs" "$here"
else
  /usr/bin/python3 "$here/table.py" --cases "$all" --merge "$runs" "$here"
fi
