#!/usr/bin/env bash
# The network model measured against real TCP (the figures of docs/network-model.md). Needs root
# (the kernel shaper's network namespaces); not a test.
#
# 1. Probe: two nodes pass 2 MiB activations and gradients one at a time (max_in_flight = 1) over
#    links of 10, 50 and 200 Mbit/s, with 0 and 20 ms of one-way latency, for real through the
#    kernel shaper (real TCP through htb; each receiver adds the latency after a message's
#    arrival), and at 50 Mbit/s through the user-space shaper (the model itself: a check). Each message's
#    effective bandwidth factor: bytes / ((transfer time - route latency) * link rate).
# 2. Scenarios: each shipped scenario (steps cut, network.model = "ideal"), run by
#    `ravnest validate --set real.shaper="kernel"` (the real side through the kernel shaper,
#    dilated so that this host keeps up), then its real run through the user-space shaper and its
#    simulation under each model (lv08, ideal, ideal with the measured bandwidth factor), at the
#    same dilation: steady samples/s, each model's error against each real run.
#
# Usage: bench/network_model.sh [OUT_DIR [probe|scenarios|all [CASE...]]]
#   (default bench/results/network_model, all; "scenarios" reuses OUT_DIR/probe.txt's factor;
#   CASE names the scenario cases to run, default all: quickstart heterogeneous digits-cnn
#   memory-bound-c2)
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-bench/results/network_model}")
part=${2:-all}
shift $(($# > 2 ? 2 : $#))
cases=("$@")
scripts/build.sh ravnest >/dev/null
rv=$PWD/build/ravnest

# ---- 1. probe ----
if [ "$part" != scenarios ]; then
rm -rf "$out" && mkdir -p "$out/probe"
for shaper in kernel user; do
  rates="10 50 200"
  [ $shaper = user ] && rates=50  # the user-space shaper is the model itself: a check
  for mbps in $rates; do
    for lat in 0 20; do
      # About 30 s per run: a message of 2.1 MB takes 16.8 / mbps seconds.
      steps=$(python3 -c "print(max(8, int(30 / (2 * 16.8 / $mbps + 0.002 * $lat))))")
      cat > "$out/probe/probe.toml" <<TOML
name = "probe"
seed = 1
[model]
kind = "mlp"
hidden = [2048]
head = "linear"
[data]
kind = "synthetic"
side = 28
classes = 10
batch_size = 256
[training]
steps = $steps
eval_every = 0
max_in_flight = 1
[planner]
method = "manual"
[network]
model = "ideal"
[real]
timeout_s = 300
shaper = "$shaper"
[[devices]]
count = 2
tflops = 10
up_mbps = $mbps
down_mbps = $mbps
latency_ms = $lat
TOML
      "$rv" real "$out/probe/probe.toml" --run-dir "$out/probe/$shaper-${mbps}mbps-${lat}ms" --progress off >/dev/null
    done
  done
done
python3 bench/network_model.py probe "$out"/probe/*-*mbps-*ms | tee "$out/probe.txt"
fi
[ "$part" = probe ] && exit 0
factor=$(sed -n 's/^measured bandwidth factor.*: //p' "$out/probe.txt")
[ ${#cases[@]} -gt 0 ] || rm -rf "$out/scenarios"

# ---- 2. scenarios ----
run_case() {  # name scenario steps [--set ...]
  local name=$1 scenario=$2 steps=$3
  shift 3
  if [ ${#cases[@]} -gt 0 ] && [[ " ${cases[*]} " != *" $name "* ]]; then return 0; fi
  rm -rf "$out/scenarios/$name"
  local base="$out/scenarios/$name"
  mkdir -p "$(dirname "$base")"
  local sets=(--set "training.steps=$steps" --set 'network.model="ideal"' "$@")
  "$rv" validate "$scenario" --agreement executors "${sets[@]}" --set 'real.shaper="kernel"' --run-dir "$base" --progress off >/dev/null
  local k
  k=$(python3 -c "import json; print(json.load(open('$base/validate.json'))['dilation'])")
  mv "$base/real" "$base/real-kernel"
  mv "$base/sim" "$base/sim-ideal"
  "$rv" real "$scenario" "${sets[@]}" --set "dilation=$k" --set real.emulate_speed=true \
    --run-dir "$base/real-user" --progress off >/dev/null
  "$rv" sim "$scenario" "${sets[@]}" --set "dilation=$k" --set 'network.model="lv08"' \
    --run-dir "$base/sim-lv08" --progress off >/dev/null
  "$rv" sim "$scenario" "${sets[@]}" --set "dilation=$k" --set "network.bandwidth_factor=$factor" \
    --run-dir "$base/sim-ideal-b$factor" --progress off >/dev/null
}
run_case quickstart scenarios/quickstart.toml 200 --set training.eval_every=0
run_case heterogeneous scenarios/heterogeneous.toml 200 --set training.eval_every=0
run_case digits-cnn scenarios/digits-cnn.toml 200 --set training.eval_every=0
run_case memory-bound-c2 scenarios/memory-bound.toml 100 --set planner.clusters=2 --set training.eval_every=0
python3 bench/network_model.py compare "$out/scenarios" | tee "$out/scenarios.txt"
