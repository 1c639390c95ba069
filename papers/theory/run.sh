#!/usr/bin/env bash
# The convergence bound measured on a problem with known constants: builds ravnest, then
# papers/theory/run.py (512 simulated runs; see its docstring) writes results.json,
# table.md and the figures here. Not part of the tests (CI runs the theory CLI tests).
# Usage: papers/theory/run.sh [RUNS_DIR] [--jobs N] [--only a,b,c,d]   (default runs/theory)
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/build.sh ravnest >/dev/null
exec /usr/bin/python3 papers/theory/run.py "$@"
