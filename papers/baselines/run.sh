#!/usr/bin/env bash
# One comparison of the six algorithms (issue 18): time to a target test accuracy and throughput,
# in simulation on scenarios/heterogeneous.toml and scenarios/memory-bound.toml (seeds 1-3), and
# as real processes on scenarios/digits-cnn.toml (seed 1); then report.py writes table.md,
# results.json and the figures here. Each run keeps its scenario as shipped (its own steps: each
# algorithm's meaning of a step, its samples in the table) but for more frequent evaluations, on
# 2,000 test samples each (the whole test set every 50 steps would cost more simulated time than
# the training between, and more to the algorithms whose every cluster evaluates), and diloco's
# inner optimizer (AdamW, at the scenario's learning rate). The targets are fixed in
# report.py before any run. A plan the planner refuses (sync-dp and dedloc where no PC holds the
# model) is kept as refused.txt and listed with its reason. Not part of the tests.
#
# The real runs take 600 steps (digits-cnn ships 2,200: about 12 minutes each at its emulated
# speed).
#
# Usage: papers/baselines/run.sh [RUNS_DIR]   (default: runs/baselines)
#   QUICK=1: 3 evaluations of 30 steps, seed 1 only, to check the pipeline (its table is no result).
#   SEEDS="1 3", REAL=0: a share of the runs (two shares at once on two cores; runs already in
#   RUNS_DIR are kept), then the report of whatever is there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
runs=$(realpath -m "${1:-runs/baselines}")
scripts/build.sh ravnest >/dev/null
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -z "$(git status --porcelain --untracked-files=no -- . ':!papers/baselines' 2>/dev/null)" ] || commit="$commit+changes"
mkdir -p "$runs"
algorithms=(ravnest gpipe sync-dp dedloc pipedream diloco)
read -r -a seeds <<< "${SEEDS:-1 2 3}"
quick=()
if [ "${QUICK:-0}" = 1 ]; then
  seeds=(1)
  quick=(--set training.steps=30 --set training.eval_every=10)
fi

one() {  # executor scenario algorithm seed eval_every [--set ...]
  local executor=$1 scenario=$2 algorithm=$3 seed=$4 every=$5
  shift 5
  local name
  name="$(basename "$scenario" .toml)-$algorithm-s$seed-$executor"
  local dir="$runs/$name"
  if [ -f "$dir/summary.json" ] || [ -f "$dir/refused.txt" ]; then return 0; fi  # done before
  rm -rf "$dir"
  local sets=(--set "training.algorithm=\"$algorithm\"" --set "seed=$seed" --set "training.eval_every=$every"
              --set training.eval_samples=2000)
  [ "$algorithm" = diloco ] && sets+=(--set 'training.optimizer="adamw"')
  sets+=("$@")
  echo "== $name" >&2
  local status=0
  build/ravnest "$executor" "$scenario" "${sets[@]}" "${quick[@]}" --run-dir "$dir" --progress off \
    >"$runs/.$name.out" 2>"$runs/.$name.err" || status=$?
  if [ $status -eq 2 ]; then  # refused: the plan cannot run it
    mkdir -p "$dir"
    cp "$runs/.$name.err" "$dir/refused.txt"
  elif [ $status -ne 0 ]; then
    cat "$runs/.$name.err" >&2
    exit $status
  fi
  tail -1 "$runs/.$name.out" >&2 || true
  rm -f "$runs/.$name.out" "$runs/.$name.err"
  printf '{"commit": "%s", "date": "%s"}\n' "$commit" "$(date -u +%Y-%m-%d)" > "$dir/measured.json"
}

for seed in "${seeds[@]}"; do
  for a in "${algorithms[@]}"; do
    one sim scenarios/heterogeneous.toml "$a" "$seed" 50
    one sim scenarios/memory-bound.toml "$a" "$seed" 50
  done
done
if [ "${REAL:-1}" = 1 ]; then
  for a in "${algorithms[@]}"; do
    one real scenarios/digits-cnn.toml "$a" 1 50 --set training.steps=600
  done
fi
/usr/bin/python3 "$here/report.py" "$runs" "$here"
