#!/usr/bin/env bash
# Downloads into DIR the Debian 12 packages that a GPU build (scripts/build-gpu.sh) needs besides
# LibTorch, for a GPU machine that has a CUDA PyTorch but cannot install packages itself (no
# network): the headers of toml++, nlohmann-json, CLI11, fmt, Catch2, Boost and Eigen, and zlib,
# OpenSSL and GLPK with the libraries they load, and Gloo's headers, which PyTorch's wheels lack
# (c10d's ProcessGroupGloo.hpp includes them). Run it on a Debian machine with network access; copy
# DIR to the GPU machine. Nothing is installed here. Gloo's headers must match the Gloo inside that
# LibTorch closely enough: LibTorch 2.11 was built against Debian 13's libgloo-dev
# (0.0~git20231202); Debian 12's (0.0~git20220518) is not verified.
#
#   scripts/gpu-deps.sh DIR
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: scripts/gpu-deps.sh DIR" >&2; exit 2; }
mkdir -p "$1"
cd "$1"
apt-get download \
  libtomlplusplus-dev libtomlplusplus3 nlohmann-json3-dev libcli11-dev libfmt-dev libfmt9 catch2 \
  libboost1.74-dev libeigen3-dev zlib1g-dev libssl-dev libssl3 libgloo-dev \
  libglpk-dev libglpk40 libamd2 libcolamd2 libsuitesparseconfig5 libltdl7 libgmp10
echo "gpu-deps: $(ls ./*.deb | wc -l) packages in $PWD"
