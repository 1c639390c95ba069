#!/usr/bin/env bash
# The model against hardware (cli/validate_hardware.h): `ravnest validate --agreement hardware` on
# every shipped scenario of 8 nodes or fewer, plus network-bound variants (home links, round trips
# of 50-250 ms, multi-cluster averaging) and compute-bound ones (LAN links), each repeated (3 by
# default). Each repeat calibrates this host in its own run, runs the scenario for real with
# nothing taken from the model (this host's compute, real TCP through the kernel shaper with the
# links' latency on the packet path), calibrates the host again, and simulates the run with the
# first calibration. A repeat whose host drifted by more than 10% between the two calibrations
# (on the run's own spans) is kept, flagged, and one more repeat is made (at most two more a
# case). Then hardware_table.py writes hardware.md and hardware.json here: each
# case's median error with its spread, the targets over the cases, and the negative control (the
# network-bound cases simulated again with twice the latency and with half the bandwidth, which
# must miss the target, or the check cannot see the network). Nothing is fitted: the simulation
# knows this host only through the calibration of the same run. Root (the kernel shaper); not part
# of the tests.
#
# Usage: papers/validation/hardware.sh [RUNS_DIR [CASE...]]   (default: runs/hardware, every case)
#   REPEATS=N sets the repeats (default 3). With CASEs, only those run, and their rows replace
#   theirs in hardware.json (each row names the commit it was measured at).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
[ "$(id -u)" -eq 0 ] || { echo "hardware.sh: needs root (the kernel shaper)" >&2; exit 2; }
runs=$(realpath -m "${1:-runs/hardware}")
shift $(($# > 0 ? 1 : 0))
cases=("$@")
repeats=${REPEATS:-3}
scripts/build.sh ravnest >/dev/null
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -z "$(git status --porcelain --untracked-files=no -- . ':!papers/validation' 2>/dev/null)" ] || commit="$commit+changes"
if [ ${#cases[@]} -eq 0 ]; then rm -rf "$runs"; fi
mkdir -p "$runs"
: > "$runs/.kinds"

# links GROUPS UP DOWN LATENCY: --set lines giving every device group these links.
links() {
  local g
  for ((g = 0; g < $1; g++)); do
    printf -- '--set\ndevices.%d.up_mbps=%s\n--set\ndevices.%d.down_mbps=%s\n--set\ndevices.%d.latency_ms=%s\n' \
      "$g" "$2" "$g" "$3" "$g" "$4"
  done
}

# hardware NAME KIND SCENARIO STEPS [--set ...]: KIND is shipped, network or compute.
hardware() {
  local name=$1 kind=$2 scenario=$3 steps=$4
  shift 4
  echo "$name $kind" >> "$runs/.kinds"
  if [ ${#cases[@]} -gt 0 ] && [[ " ${cases[*]} " != *" $name "* ]]; then return 0; fi
  local made=0 flagged=0 r=0
  rm -rf "$runs/$name"
  mkdir -p "$runs/$name"
  while [ $made -lt $((repeats + flagged)) ] && [ $flagged -le 2 ]; do
    r=$((r + 1))
    echo "== $name, repeat $r" >&2
    build/ravnest validate "$scenario" --agreement hardware --set "training.steps=$steps" \
      --set "training.eval_every=$steps" "$@" --run-dir "$runs/$name/r$r" --progress off \
      > "$runs/$name/r$r.out" 2>&1 || {
      # A case that cannot run (refused, failed) is reported, and the others go on.
      tail -3 "$runs/$name/r$r.out" >&2
      cp "$runs/$name/r$r.out" "$runs/$name/failed.txt"
      return 0
    }
    tail -1 "$runs/$name/r$r.out" >&2
    made=$((made + 1))
    drift=$(/usr/bin/python3 -c "import json; print(json.load(open('$runs/$name/r$r/validate.json'))['model_against_hardware'].get('host_drift') or 0)")
    if ! awk -v x="$drift" 'BEGIN {exit !(x >= 0.9 && x <= 1.1)}'; then
      echo "   the host's calibration after the run at ${drift}x the one before: flagged, one more repeat" >&2
      flagged=$((flagged + 1))
    fi
  done
  printf '{"commit": "%s", "date": "%s", "kind": "%s"}\n' "$commit" "$(date -u +%Y-%m-%d)" "$kind" \
    > "$runs/$name/measured.json"
}

# Shipped scenarios of 8 nodes or fewer, as they are (fewer steps).
hardware quickstart shipped scenarios/quickstart.toml 150
hardware digits-cnn shipped scenarios/digits-cnn.toml 100
hardware heterogeneous shipped scenarios/heterogeneous.toml 100
hardware real-recover shipped scenarios/real-recover.toml 150
hardware theory-logistic shipped scenarios/theory-logistic.toml 200
hardware theory-quadratic shipped scenarios/theory-quadratic.toml 200
hardware gpt-sort shipped scenarios/gpt-sort.toml 40
# Network-bound: home links (20 up, 100 down), round trips of 100 and 250 ms, two clusters of
# four stages averaging over home links with 50 ms round trips (theory-quadratic: 8 nodes).
mapfile -t home < <(links 2 20 100 25)
hardware quickstart-home network scenarios/quickstart.toml 150 "${home[@]}"
mapfile -t far < <(links 2 50 200 62.5)
hardware quickstart-rtt250 network scenarios/quickstart.toml 150 "${far[@]}"
mapfile -t avg < <(links 1 20 100 12.5)
hardware theory-quadratic-home network scenarios/theory-quadratic.toml 200 "${avg[@]}"
mapfile -t cnn_home < <(links 1 10 50 25)
hardware digits-cnn-home network scenarios/digits-cnn.toml 100 "${cnn_home[@]}"
# Compute-bound: LAN links (1 Gbit/s, 0.5 ms).
mapfile -t lan < <(links 2 1000 1000 0.5)
hardware quickstart-lan compute scenarios/quickstart.toml 150 "${lan[@]}"
mapfile -t cnn_lan < <(links 1 1000 1000 0.5)
hardware digits-cnn-lan compute scenarios/digits-cnn.toml 100 "${cnn_lan[@]}"
mapfile -t het_lan < <(links 3 1000 1000 0.5)
hardware heterogeneous-lan compute scenarios/heterogeneous.toml 100 "${het_lan[@]}"

/usr/bin/python3 "$here/hardware_table.py" --kinds "$runs/.kinds" "$runs" "$here"
