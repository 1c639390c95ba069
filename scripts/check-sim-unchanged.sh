#!/usr/bin/env bash
# Checks that a change leaves simulation results unchanged: runs every shipped scenario, and the
# variants their headers name, in simulation with BASE's build and with this tree's, and compares
# every output (metrics.csv or node_metrics.csv, eval.csv, summary.json, plan.json, trace.json)
# byte for byte. Each side runs its own scenarios/ files,
# so a key that moved is read where each revision expects it. Both sides run on this machine, so
# the comparison is exact (no float from another CPU's reduction order).
#
# Usage: scripts/check-sim-unchanged.sh BASE_REV [BASE_RAVNEST]
#   BASE_REV      the revision to compare with (e.g. origin/main, HEAD~3)
#   BASE_RAVNEST  an already built ravnest binary of BASE_REV; without it, BASE_REV is checked out
#                 into .check/base (a git worktree) and its ravnest is built there
# Exit status: 0 when every file of every case is identical, 1 otherwise, 2 on bad usage.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  sed -n '2,12p' "$0" >&2
  exit 2
fi
base_rev=$1
base_src="$root/.check/base"
if [ $# -eq 2 ]; then
  base_bin=$(realpath "$2")
  [ -x "$base_bin" ] || { echo "check-sim-unchanged: $2 is not an executable" >&2; exit 2; }
else
  git rev-parse --verify -q "$base_rev^{commit}" >/dev/null ||
    { echo "check-sim-unchanged: no revision '$base_rev'" >&2; exit 2; }
  if [ -d "$base_src" ]; then
    git -C "$base_src" checkout -q --detach "$base_rev"
  else
    mkdir -p "$root/.check"
    git worktree add -q --detach "$base_src" "$base_rev"
  fi
  cmake -S "$base_src" -B "$base_src/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DRV_BUILD_TESTS=OFF -DRV_BUILD_BENCH=OFF >/dev/null
  ninja -C "$base_src/build" -j 2 ravnest
  base_bin="$base_src/build/ravnest"
fi
# The base's scenario files sit beside its sources: the checkout the binary was built from.
base_root=$(git -C "$(dirname "$base_bin")" rev-parse --show-toplevel 2>/dev/null || true)
[ -n "$base_root" ] && [ -d "$base_root/scenarios" ] ||
  { echo "check-sim-unchanged: cannot find the scenarios of $base_bin's checkout" >&2; exit 2; }

scripts/build.sh ravnest >/dev/null
new_bin="$root/build/ravnest"

# Cases: a shipped scenario and its --set overrides (space-separated): every scenario as shipped,
# then the variants their headers name (shortened: the synchronous baselines simulate slowly).
cases=()
for f in scenarios/*.toml; do cases+=("$(basename "$f" .toml)|"); done
cases+=(
  "heterogeneous|training.algorithm=gpipe planner.clusters=1 training.steps=100"
  "heterogeneous|training.algorithm=sync-dp training.steps=60"
  "quickstart|sim.mode=timing"
  "memory-bound|training.averaging=overlapped training.allreduce=single-ring"
  "quickstart|training.algorithm=gpipe training.steps=200"
)

out="$root/.check/runs"
rm -rf "$out"
mkdir -p "$out"
failed=0
run_side() {  # side binary scenario_root name overrides...
  local side=$1 bin=$2 sroot=$3 name=$4 dir=$5
  shift 5
  local sets=()
  for o in "$@"; do sets+=(--set "$o"); done
  (cd "$sroot" && "$bin" sim "scenarios/$name.toml" "${sets[@]}" --run-dir "$dir/$side" \
     --progress off >"$dir/$side.log" 2>&1)
}
i=0
for c in "${cases[@]}"; do
  name=${c%%|*}
  read -r -a sets <<<"${c#*|}"
  i=$((i + 1))
  dir="$out/$i-$name"
  mkdir -p "$dir"
  if [ ! -f "$base_root/scenarios/$name.toml" ]; then
    printf '%-16s %-60s new scenario (no base to compare)\n' "$name" "${c#*|}"
    continue
  fi
  status="identical"
  run_side base "$base_bin" "$base_root" "$name" "$dir" "${sets[@]}" || status="base run failed"
  run_side new "$new_bin" "$root" "$name" "$dir" "${sets[@]}" || status="${status/identical/}new run failed"
  if [ "$status" = identical ]; then
    # Every output either side wrote (a scenario with output.metrics = "summary" writes
    # node_metrics.csv instead of metrics.csv): both sides must write it, byte for byte.
    for file in metrics.csv node_metrics.csv eval.csv summary.json plan.json trace.json; do
      [ -e "$dir/base/$file" ] || [ -e "$dir/new/$file" ] || continue
      cmp -s "$dir/base/$file" "$dir/new/$file" || status="differs: $file"
    done
  fi
  [ "$status" = identical ] || failed=1
  printf '%-16s %-60s %s\n' "$name" "${c#*|}" "$status"
done
if [ $failed -ne 0 ]; then
  echo "check-sim-unchanged: simulation outputs changed (runs and logs in $out)"
  exit 1
fi
echo "check-sim-unchanged: every case identical to $base_rev"
