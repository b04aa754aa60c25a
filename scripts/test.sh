#!/usr/bin/env bash
# The test command: installs what is missing, configures, builds incrementally and runs every test
# (C++ unit tests, the correctness suite on CPU and CUDA, the Python parity test). Without a GPU the
# CUDA tests are reported as skipped with the reason. Preset: $DETOPS_PRESET, else ci under CI=true,
# else dev. Extra arguments go to ctest.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
detops_setup
detops_configure_and_build
# The correctness suite's fp64 references kept between runs of one build (docs/architecture.md; empty: off). Off
# by default under CI=true: a fresh clone never finds an entry, and would only write them.
detops_use_reference_cache "$([ "${CI:-}" = true ] || echo "$DETOPS_BUILD_DIR/reference-cache")"
detops_log "running the tests"
rm -rf "$DETOPS_BUILD_DIR/test-results"
# The long entries (the correctness suite, the Python tests) append their progress to this file; a line with the
# time left every 60 s (DETOPS_PROGRESS_S) while they run (lib.sh detops_watch_progress).
mkdir -p "$DETOPS_BUILD_DIR/test-results"
export DETOPS_PROGRESS_FILE="$DETOPS_BUILD_DIR/test-results/progress.log"
detops_watch_progress "$DETOPS_PROGRESS_FILE" &
watcher=$!
set +e
ctest --preset "$DETOPS_PRESET" "$@"
rc=$?
kill "$watcher" 2>/dev/null
wait "$watcher" 2>/dev/null
set -e
# CTest shows a skipped entry without its output: say here which CUDA tests were skipped and why.
cuda_record="$DETOPS_BUILD_DIR/test-results/correctness_cuda.json"
if [ -f "$cuda_record" ] && ! detops_gpu_visible; then
  detops_log "CUDA correctness tests on this machine:"
  "$DETOPS_PYTHON" "$DETOPS_ROOT/scripts/summarize_correctness.py" "$cuda_record" | sed -n '1,/^$/p;/^\*\*/p' \
    || detops_log "no summary of the CUDA correctness tests (the line above says why)"
fi
exit $rc
