#!/usr/bin/env bash
# Runs every benchmark that needs no GPU and writes its figures to bench/results/*.json. Not part of
# the tests. The GPU ones (bench_device_pipeline) run on a GPU machine: bench/gpu.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh bench_sim_speed bench_numeric_overhead bench_real_digits bench_allreduce ravnest
mkdir -p bench/results
# About 40,000 micro-batch events per size: 2 * nodes * steps.
for n in 10 100 1000; do
  build/bench/bench_sim_speed --nodes "$n" --steps $((20000 / n)) --repeats 5 --out "bench/results/sim_speed_$n.json"
done
build/bench/bench_numeric_overhead --out bench/results/numeric_overhead.json
for e in 10 100; do
  build/bench/bench_real_digits --epochs "$e" --out "bench/results/real_digits_$e.json"
done
# Planner: ga against the exhaustive optimum (50 random pools of 4-12 nodes), against ravnest-ga
# and greedy (16-1000 nodes), on the CNN (also with averaging every 500 updates, which makes
# several clusters worth it) and the small MLP; then planning time and memory up to 10,000 nodes.
scripts/build.sh bench_planner
for v in cnn cnn_avg500 mlp; do
  args=(--model "${v%%_*}")
  if [ "$v" = cnn_avg500 ]; then args+=(--set training.average_every=500); fi
  build/bench/bench_planner "${args[@]}" --part quality --pools 50 --out "bench/results/planner_quality_$v.json"
  build/bench/bench_planner "${args[@]}" --part compare --simulate-up-to 64 --out "bench/results/planner_compare_$v.json"
done
build/bench/bench_planner --part scale --out bench/results/planner_scale.json
build/bench/bench_allreduce --out bench/results/allreduce.json
# The compute model against real compute (issue 11), and what layers owe to their values and shapes.
bench/compute_model.sh bench/results/compute_model
scripts/build.sh bench_layer_cost
build/bench/bench_layer_cost --out bench/results/layer_cost.json
# What an idle wait costs the work after it (the wake-up and cooling curves' evidence).
scripts/build.sh bench_wake
build/bench/bench_wake --out bench/results/wake.json
# The network emulator end to end (EmulatorServer, clients, ShapedTransport over Gloo): bandwidth,
# latency and fairness against the configured links (~2 minutes).
scripts/build.sh bench_emulator
build/bench/bench_emulator --out bench/results/emulator.json
# Hardening (issue 15): killed and stopped ranks at random moments of 200 real runs (detection time,
# the rank named; ~25 minutes), and what a stray process gets from a running real run's store.
bench/peer_loss.py --runs 200 --timeout 2 --out bench/results/peer_loss.json
bench/attacks.py --out bench/results/attacks.json
# Churn (issue 17): accuracy against the departure rate in simulation (~12 minutes), and a real run
# that loses a random rank at a random moment against 3 seeds untouched (~5 minutes).
bench/churn.sh bench/results/churn
bench/recover.py --out bench/results/recover.json
