#!/usr/bin/env bash
# One call on a lent GPU machine: the main job (build + correctness record), the test command's
# Python parity test, and compute-sanitizer memcheck over the CUDA correctness tests. Logs and the
# record go to $1 (default: results/device-session).
set -uo pipefail
out=${1:-results/device-session}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
{ nvidia-smi; nvcc --version | tail -2; cmake --version | head -1; /usr/bin/g++ --version | head -1; } >"$out/machine.txt" 2>&1
t0=$(date +%s)
# The benchmarks take ~5 minutes more than one 10-minute device call allows with the build and the
# correctness suite: off by default here (DETOPS_SKIP_BENCH=0 turns them on).
DETOPS_SKIP_BENCH=${DETOPS_SKIP_BENCH:-1} scripts/run.sh 2>&1 | tee "$out/run.log"
echo "main job exit: ${PIPESTATUS[0]}, $(( $(date +%s) - t0 )) s" | tee -a "$out/run.log"
last=$(ls -d results/runs/*/ | tail -n1)
cp "$last"/*.json "$last"/summary.md "$out/" 2>/dev/null
source scripts/lib.sh >/dev/null
DETOPS_PRESET=dev ctest --test-dir build/dev -R "unit|python|kernel_images" --output-on-failure >"$out/ctest.log" 2>&1; tail -8 "$out/ctest.log"
if command -v compute-sanitizer >/dev/null; then
  t1=$(date +%s)
  timeout "${DETOPS_MEMCHECK_SECONDS:-240}" compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
    build/dev/suites/detops_correctness --gtest_filter='*.cuda:-*more_than_65535*:*gradcheck_fd*:*large_index*' --gtest_brief=1 \
    >"$out/memcheck.log" 2>&1
  echo "memcheck exit: $? ($(( $(date +%s) - t1 )) s)" | tee -a "$out/memcheck.log"
  tail -5 "$out/memcheck.log"
  # The 2^31-element cases, in one dtype (each fills a 4 GiB map that memcheck instruments).
  timeout 180 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
    build/dev/suites/detops_correctness --gtest_filter='*large_index*.fp16.cuda' --gtest_brief=1 \
    >"$out/memcheck_large.log" 2>&1
  echo "memcheck (2^31 elements, fp16) exit: $?" | tee -a "$out/memcheck_large.log"
  tail -4 "$out/memcheck_large.log"
fi
