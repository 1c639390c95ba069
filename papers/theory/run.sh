#!/usr/bin/env bash
# The convergence bounds measured where they can fail (non-iid data, negative controls): builds
# ravnest, then papers/theory/run.py (about 830 simulated runs, about 30 minutes on 2 cores; see
# its docstring) writes results.json, table.md and the figures here, naming the commit. Not part
# of the tests (CI runs the theory CLI tests and the negative controls).
# Usage: papers/theory/run.sh [RUNS_DIR] [--jobs N] [--only a,b,c,d,e,f]   (default runs/theory)
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/build.sh ravnest >/dev/null
exec /usr/bin/python3 papers/theory/run.py "$@"
