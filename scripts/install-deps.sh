#!/usr/bin/env bash
# Installs the Debian 12 packages the project needs, if any is missing. Idempotent; needs root
# (or sudo). Every dependency comes from Debian's own archive.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  clang-format-14                                 # scripts/check-format.sh (a ctest test)
  libtorch-dev libgloo-dev libopenblas0-pthread   # LibTorch 1.13 (CPU) with c10d/Gloo; fast BLAS
  libsimgrid-dev                                  # SimGrid 3.32
  libeigen3-dev libboost-graph-dev
  catch2 libtomlplusplus-dev nlohmann-json3-dev libcli11-dev libfmt-dev zlib1g-dev
  python3 python3-matplotlib python3-numpy        # reports
  python3-pandas                                  # analysis/runs.py: run tables as DataFrames
  iproute2                                        # real.shaper = "kernel": ip netns, tc htb
  libnetfilter-queue-dev libmnl-dev iptables      # its delay lines (emu/delay_line/): NFQUEUE
  iputils-ping                                    # the delay line's root test
  libssl-dev                                      # HMAC-SHA256: real runs' authentication
  libglpk-dev                                     # GLPK: dedloc's load-balancing linear programme
  dataset-fashion-mnist python3-sklearn           # Fashion-MNIST; the 8x8 digits
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
