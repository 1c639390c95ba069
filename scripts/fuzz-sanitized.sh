#!/usr/bin/env bash
# The fuzzer (fuzz/, bench/bench_fuzz.cc) under AddressSanitizer and UndefinedBehaviorSanitizer:
# builds bench_fuzz alone into build-asan/ (the project's code instrumented, LibTorch as Debian
# ships it) and runs it; its counts go to bench/results/fuzz-sanitized.json. Any sanitizer report
# aborts the run with the report and exit status 1. Arguments go to bench_fuzz (default: 10^5
# scenario cases and 10^5 frames, one worker per core). The counts file is rewritten every 30 s
# while the run goes ("complete": false until it ends); Ctrl-C stops it with the counts so far.
#
#   scripts/fuzz-sanitized.sh [--scenarios N] [--frames N] [--seed S] [--jobs J]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build-asan/build.ninja ]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRV_SANITIZE=ON -DRV_BUILD_TESTS=OFF
fi
jobs=$(nproc)
[ "$jobs" -gt 4 ] && jobs=4
ninja -C build-asan -j "$jobs" bench/bench_fuzz
mkdir -p bench/results
# LibTorch is not instrumented: leaks it keeps for the process's life are not the project's.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:detect_odr_violation=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--scenarios 100000 --frames 100000 --jobs "$(nproc)")
build-asan/bench/bench_fuzz "${args[@]}" --out bench/results/fuzz-sanitized.json
