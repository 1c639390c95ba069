#!/usr/bin/env bash
# Runs every benchmark and writes its figures to bench/results/*.json. Not part of the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh bench_sim_speed bench_numeric_overhead bench_real_digits ravnest
mkdir -p bench/results
# About 40,000 micro-batch events per size: 2 * nodes * steps.
for n in 10 100 1000; do
  build/bench/bench_sim_speed --nodes "$n" --steps $((20000 / n)) --out "bench/results/sim_speed_$n.json"
done
build/bench/bench_numeric_overhead --out bench/results/numeric_overhead.json
for e in 10 100; do
  build/bench/bench_real_digits --epochs "$e" --out "bench/results/real_digits_$e.json"
done
