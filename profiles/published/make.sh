#!/usr/bin/env bash
# Regenerates the GPU profiles in profiles/ from the published kernel timings here (samples files
# transcribed by deepbench.py from Baidu DeepBench's training results) and each card's published
# peak and memory bandwidth (NVIDIA's product specifications: FP32 peak = CUDA cores x boost
# clock x 2; bandwidth = memory data rate x bus width / 8). Nothing here is measured on this host.
#
# Usage: profiles/published/make.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
scripts/build.sh ravnest >/dev/null
profile() {  # samples-file peak-tflops memory-gbps
  build/ravnest calibrate --from "profiles/published/$1.csv" --peak-tflops "$2" --memory-gbps "$3" \
    --out "profiles/$1.toml" >/dev/null
  echo "profiles/$1.toml"
}
# GeForce GTX 1080 Ti: 3584 CUDA cores at 1582 MHz boost; 11 Gbit/s GDDR5X on a 352-bit bus.
profile gtx-1080-ti 11.34 484
# TITAN Xp: 3840 CUDA cores at 1582 MHz boost; 11.4 Gbit/s GDDR5X on a 384-bit bus.
profile titan-xp 12.15 547.6
