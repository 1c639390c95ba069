#!/usr/bin/env bash
# The whole test suite: install what is missing, build everything, run every test with ctest
# (Catch2 unit, analytic, oracle, conformance and integration tests, and the report's Python tests).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd build
ctest --output-on-failure -j 2 "$@"
