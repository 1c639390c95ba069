#!/usr/bin/env bash
# The calibrated compute model against real compute (not a test: wall-clock figures).
#
# 1. `ravnest calibrate` measures this host (LibTorch microbenchmark only) as one of the 2 devices
#    of a 2-node real run: with the threads each node gets (cores / 2), the other device's load
#    running beside it (--share 2).
# 2. For the MLP and the CNN, at two batch sizes, a 2-node scenario whose devices are this host
#    (tflops = the profile's peak, devices.profile = the profile) runs in the simulator, and for
#    real with emulate_speed = false and no network emulation REPEATS times (<case>-real,
#    <case>-real.2, ...): the repeats go round the cases (case 1..4, then 1..4 again), so that a
#    stretch of a slow host lands on different cases in different rounds. The simulated devices'
#    links are this host's loopback as bench/loopback.py measures it (the real run's transport,
#    without network emulation): a stage's idle waits for its messages decide what the model's
#    cooling and wake-up terms charge, and a slower simulated link made a first stage wait 4.5 ms
#    for each gradient where the real one waited 0.85 ms.
# 3. bench_stage_compute runs each stage alone in one process (no pipeline, no other node), on the
#    activations the stages before it make of the data.
# 4. bench/compute_model.py compares each stage's median forward, backward and optimizer-step time
#    per micro-batch (each, and their sum):
#    simulated, real (CPU and wall time; the median over the repeats), and alone; and it says how
#    far the real repeats lie from each other (the host's own spread, which bounds what any
#    model can be checked to). Each round of repeats after the first is calibrated again right
#    before its real runs: beside the first calibration's prediction against the repeats' median,
#    each real repeat against the simulation with its round's calibration (the first round's is
#    the first calibration, a few minutes before it: the simulations and the stage runs alone come
#    between), the median of those ratios, which a host whose speed drifts over the bench's
#    minutes blurs less.
#
# Nothing is fitted to these scenarios: the profile comes from the microbenchmark alone.
# Usage: bench/compute_model.sh [OUT_DIR] [REPEATS]   (default bench/results/compute_model, 3)
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-bench/results/compute_model}")
repeats=${2:-3}
[[ "$repeats" =~ ^[1-9][0-9]*$ ]] || { echo "REPEATS must be a positive integer, not '$repeats'" >&2; exit 2; }
scripts/build.sh ravnest bench_stage_compute >/dev/null
rm -rf "$out" && mkdir -p "$out"
cores=$(nproc)
threads=$(( cores / 2 > 0 ? cores / 2 : 1 ))
build/ravnest calibrate --threads "$threads" --share 2 --out "$out/host.toml" > "$out/calibrate.txt"
peak=$(sed -n 's/^peak_tflops = //p' "$out/host.toml")
read -r loopback_mbps loopback_ms < <(python3 bench/loopback.py)
echo "loopback: $loopback_mbps Mbit/s, $loopback_ms ms" > "$out/loopback.txt"

cases=()  # written once here; the real repeats and the later calibrations go over the same list
for model in mlp cnn; do
  for batch in 32 128; do
    case=$model-$batch
    cases+=("$case")
    if [ $model = mlp ]; then
      model_toml=$'kind = "mlp"\nhidden = [512, 256]\n[data]\nkind = "fashion-mnist"'
    else
      model_toml=$'kind = "cnn"\nchannels = [16, 32]\nhidden = [64]\n[data]\nkind = "fashion-mnist"'
    fi
    cat > "$out/$case.toml" <<TOML
name = "$case"
seed = 3
[model]
head = "linear"
$model_toml
batch_size = $batch
[training]
algorithm = "ravnest"
steps = 120
eval_every = 0
[planner]
method = "manual"
clusters = 1
[network]
model = "ideal"
[real]
emulate_network = false
emulate_speed = false
[[devices]]
name = "host"
count = 2
tflops = $peak
profile = "$out/host.toml"
up_mbps = $loopback_mbps
down_mbps = $loopback_mbps
latency_ms = $loopback_ms
TOML
    build/ravnest sim "$out/$case.toml" --run-dir "$out/$case-sim" --progress off > /dev/null
    build/bench/bench_stage_compute --scenario "$out/$case.toml" --out "$out/$case-isolated.json" > /dev/null
  done
done
# Each round of repeats after the first is calibrated again just before its real runs, and each
# case simulated with that calibration (<case>-sim.2, ...): the pairs compared in step 4.
# simulate_with PROFILE NAME SUFFIX: every case with its devices' profile PROFILE (<case>-NAME.toml),
# simulated into <case>-simSUFFIX.
simulate_with() {
  local peak_p case
  peak_p=$(sed -n 's/^peak_tflops = //p' "$1")
  for case in "${cases[@]}"; do
    sed -e "s|^tflops = .*|tflops = $peak_p|" -e "s|^profile = .*|profile = \"$1\"|" \
      "$out/$case.toml" > "$out/$case-$2.toml"
    build/ravnest sim "$out/$case-$2.toml" --run-dir "$out/$case-sim$3" --progress off > /dev/null
  done
}
for rep in $(seq 1 "$repeats"); do
  suffix=$([ "$rep" = 1 ] && echo "" || echo ".$rep")
  if [ "$rep" != 1 ]; then
    build/ravnest calibrate --threads "$threads" --share 2 --out "$out/host$suffix.toml" > "$out/calibrate$suffix.txt"
    simulate_with "$out/host$suffix.toml" "round$rep" "$suffix"
  fi
  for case in "${cases[@]}"; do
    build/ravnest real "$out/$case.toml" --run-dir "$out/$case-real$suffix" --progress off > /dev/null
  done
done
# 5. One more calibration after the real runs, and each case simulated again with it
#    (<case>-sim-after): how far the host's own speed moved while the bench ran, which is how much
#    of the first calibration's check is the host's.
build/ravnest calibrate --threads "$threads" --share 2 --out "$out/host-after.toml" > "$out/calibrate-after.txt"
simulate_with "$out/host-after.toml" after -after
python3 bench/compute_model.py "$out" | tee "$out/summary.txt"
