#!/usr/bin/env bash
# Builds ravnest in build-gpu/ against the LibTorch inside this machine's PyTorch (a CUDA one on a
# GPU machine; README, GPUs): the simulator left out (-DRAVNEST_SIM=OFF: no SimGrid there), toml++,
# fmt and the tests' main from their headers (-DRV_HEADER_ONLY_DEPS=ON: whatever C++ ABI that
# LibTorch has). Where the machine lacks the other libraries and cannot install them, give the
# folder of Debian packages that scripts/gpu-deps.sh made: they are unpacked (dpkg -x, nothing is
# installed) into build-gpu/deps and found there. Prints the environment the built programs need:
# the C++ library preloaded (PyTorch's wheels export copies of some of its functions that crash
# when called from a program; README, GPUs) and, with --debs, the LD_LIBRARY_PATH.
#
#   scripts/build-gpu.sh [--debs DIR] [NINJA TARGET...]     (no target: everything)
set -euo pipefail
cd "$(dirname "$0")/.."
debs=""
if [ "${1:-}" = "--debs" ]; then
  [ $# -ge 2 ] || { echo "build-gpu: --debs needs a folder" >&2; exit 2; }
  debs="$2"
  shift 2
fi
torch_prefix="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')"
prefixes="$torch_prefix"
extra=()
if [ -n "$debs" ]; then
  deps="$PWD/build-gpu/deps"
  mkdir -p "$deps"
  n=0
  for f in "$debs"/*.deb; do
    dpkg -x "$f" "$deps"
    n=$((n + 1))
  done
  [ "$n" -gt 0 ] || { echo "build-gpu: no .deb in $debs" >&2; exit 2; }
  prefixes="$deps/usr;$prefixes"
  extra+=(-DOPENSSL_ROOT_DIR="$deps/usr")
  export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
cmake -S . -B build-gpu -G Ninja -DRAVNEST_SIM=OFF -DRV_HEADER_ONLY_DEPS=ON \
      -DCMAKE_PREFIX_PATH="$prefixes" "${extra[@]}"
ninja -C build-gpu "$@"
env="LD_PRELOAD=$(g++ -print-file-name=libstdc++.so.6)"
[ -z "$debs" ] || env="$env LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
echo "build-gpu: run the programs with $env"
