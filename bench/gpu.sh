#!/usr/bin/env bash
# The GPU checks and figures (README, GPUs), on a machine with an NVIDIA GPU and a CUDA PyTorch:
#   1. builds ravnest against that PyTorch's LibTorch (scripts/build-gpu.sh);
#   2. runs the device tests by name, so that a GPU test that skipped itself shows;
#   3. bench_device_pipeline: scenarios/gpt-pipeline.toml's 4-stage pipeline on the GPU against
#      plain training of the same model on it, while nvidia-smi samples each process's GPU memory;
#   4. every test that builds without the simulator (ctest);
#   5. runs scenarios/gpt-sort.toml and scenarios/digits-cnn.toml (220 steps: 10 epochs) with
#      real.device = "cuda".
# Each step has a time limit and logs to OUT; a failed step does not stop the next.
#
#   bench/gpu.sh OUT [--debs DIR] [--digits FILE]
#     --debs    Debian packages for the build (scripts/gpu-deps.sh), where the machine lacks them
#     --digits  the 8x8 digits file (sklearn's digits.csv.gz), where Debian's path has none
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: bench/gpu.sh OUT [--debs DIR] [--digits FILE]" >&2; exit 2; }
out="$(mkdir -p "$1" && cd "$1" && pwd)"
shift
debs=() digits=()
while [ $# -gt 0 ]; do
  case "$1" in
    --debs) debs=(--debs "$2"); shift 2 ;;
    --digits) digits=(--set "data.path=\"$2\""); shift 2 ;;
    *) echo "bench/gpu.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
step() {  # step NAME SECONDS COMMAND...: runs COMMAND with a limit, logs to OUT/NAME.log
  local name="$1" limit="$2"
  shift 2
  local t0=$SECONDS
  timeout -k 10 "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "gpu.sh: $name: status $rc after $((SECONDS - t0)) s" | tee -a "$out/steps.txt"
  return $rc
}

{ nvidia-smi -L; g++ --version | head -1; cmake --version | head -1
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'; } > "$out/machine.txt" 2>&1
step build 420 scripts/build-gpu.sh "${debs[@]}" ravnest test_compute_device test_gloo_transport test_liveness \
  test_auth_store test_buffer_pool test_tasks bench_device_pipeline
if [ ${#debs[@]} -gt 0 ]; then
  export LD_LIBRARY_PATH="$PWD/build-gpu/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# PyTorch's wheels export copies of C++ library functions (std::filesystem::remove_all) that crash
# when a program's calls land in them: the C++ library is loaded first (README, GPUs).
export LD_PRELOAD="$(g++ -print-file-name=libstdc++.so.6)${LD_PRELOAD:+:$LD_PRELOAD}"
step device_tests 90 build-gpu/tests/test_compute_device -s -r compact
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader -lms 500 > "$out/smi.csv" 2>&1 &
smi=$!
step device_pipeline 200 build-gpu/bench/bench_device_pipeline --out "$out/device_pipeline.json"
kill $smi 2>/dev/null
# The peak per process that nvidia-smi saw (its figure includes the CUDA context).
awk -F', ' '{ sub(/ MiB/, "", $3); if ($3 + 0 > peak[$1 " " $2]) peak[$1 " " $2] = $3 + 0 }
  END { for (p in peak) print p, peak[p], "MiB" }' "$out/smi.csv" > "$out/smi_peaks.txt"
step ctest 200 ctest --test-dir build-gpu -j 8 --output-on-failure
rv=build-gpu/ravnest
step gpt_sort 120 $rv real scenarios/gpt-sort.toml --set 'real.device="cuda"' --run-dir "$out/gpt-sort" --progress off
step digits_cnn 120 $rv real scenarios/digits-cnn.toml --set 'real.device="cuda"' --set training.steps=220 \
  "${digits[@]}" --run-dir "$out/digits-cnn" --progress off
cat "$out/steps.txt"
