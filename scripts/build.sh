#!/usr/bin/env bash
# Configures (once) and builds the project with Ninja into build/. Extra arguments go to ninja.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
# Two parallel LibTorch compiles already fill 2 cores and ~2.5 GB; more only thrash.
jobs=$(nproc)
[ "$jobs" -gt 4 ] && jobs=4
ninja -C build -j "$jobs" "$@"
