#!/usr/bin/env bash
# The main job: installs what is missing, builds, runs the correctness suite on the GPU and writes the
# record under results/runs/<UTC time>_<gpu>/ (correctness.json: GoogleTest's JSON with every case's
# figures and the device facts; summary.md: the counts). Without a GPU it says so, runs the CPU checks
# (the references' self-checks and the CPU implementations) and exits 0 when they pass.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
detops_setup
detops_configure_and_build

stamp=$(date -u +%Y%m%dT%H%M%SZ)
if detops_gpu_visible; then
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | tr -c 'A-Za-z0-9\n' '-' | tr -s '-')
  filter='*'
else
  gpu=no-gpu
  filter='*.cpu'
  detops_log "no CUDA GPU visible on this machine (nvidia-smi found none): running only the CPU checks"
fi
out="$DETOPS_ROOT/results/runs/${stamp}_${gpu}"
mkdir -p "$out"
partial="$out/correctness.json.partial"

detops_log "unit tests and reference self-checks"
"$DETOPS_BUILD_DIR/suites/detops_unit_tests" --gtest_brief=1 --gtest_output="json:$out/unit.json"

detops_log "correctness suite (filter $filter); record: $out"
start=$(date +%s)
set +e
"$DETOPS_BUILD_DIR/suites/detops_correctness" --gtest_filter="$filter" --gtest_brief=1 --gtest_output="json:$partial"
rc=$?
set -e
elapsed=$(( $(date +%s) - start ))
[ -f "$partial" ] && mv "$partial" "$out/correctness.json"
[ $rc -eq 77 ] && rc=0   # every selected test skipped: nothing failed
"$DETOPS_PYTHON" "$DETOPS_ROOT/scripts/summarize_correctness.py" "$out/correctness.json" --wall-seconds "$elapsed" \
  | tee "$out/summary.md"
detops_log "record written to ${out#$DETOPS_ROOT/}"
exit $rc
