#!/usr/bin/env bash
# Averaging and throughput at scale, simulated against the planner and a lower bound (not a test:
# figures). scenarios/consumer-pool-1024.toml's three kinds of PC at 64, 256 and 1,024 nodes, with
# the ideal and the default (tcp) network models: each planned, then simulated in timing mode.
# At 64 nodes the planner alone makes one pipeline of 7 (no averaging), so that case asks for 16
# clusters, which the greedy planner cuts at different layers; at 256 and 1,024 it chooses.
# bench/scale_fidelity.py then prints, per case: the averaging round (simulated, predicted, and
# the lower bound: the bytes the busiest link carries over its bandwidth plus the ring steps'
# latency), the samples/s over the run (simulated, predicted) and each run's wall time and
# peak memory.
# Usage: bench/scale_fidelity.sh [OUT_DIR]   (default bench/results/scale_fidelity)
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-bench/results/scale_fidelity}")
scripts/build.sh ravnest >/dev/null
rm -rf "$out" && mkdir -p "$out"
python3 bench/scale_fidelity.py --run "$out" | tee "$out/summary.txt"
