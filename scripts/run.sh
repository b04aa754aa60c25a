#!/usr/bin/env bash
# The main job (bring-up of a GPU, or a CI performance gate): installs what is missing, builds, runs
# the unit tests and the correctness suite, benchmarks every op (CUPTI kernel time), writes the run
# record, compares it with the stored baseline for this GPU and CUDA version when there is one, and
# writes an HTML report. Everything goes to results/runs/<UTC time>_<gpu>/:
#   unit.json          unit tests (GoogleTest JSON)
#   correctness.json   every correctness check with its figures (GoogleTest JSON)
#   summary.md         correctness counts, reproducibility, largest errors, failures
#   outputs/           every forward output (subsampled), for comparing builds (compare.py --cross-build)
#   record.json        the run record: benchmarks + correctness + provenance (docs/record-format.md)
#   peers.md, peer_bench.log, peer_pytest.log   the torchvision peer suite (docs/peers.md), when torchvision imports
#   compare.md         the comparison with the baseline (when one exists)
#   report.html        the readable report
# Without a GPU it says so, runs the CPU checks and exits 0 when they pass (no benchmarks, no record).
# Exit status: non-zero when a check fails, a benchmark fails, or the comparison finds a confirmed
# slowdown or a correctness change.
#
# Environment: DETOPS_BENCH_ARGS (extra detops_bench flags, e.g. --benchmark_filter=...),
# DETOPS_SKIP_BENCH=1 (correctness only), DETOPS_BASELINE=<record.json> (instead of the stored one),
# DETOPS_SUITE_SHARDS=N (correctness processes; default: one per CPU, at most 16).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
detops_setup
detops_configure_and_build

stamp=$(date -u +%Y%m%dT%H%M%SZ)
if detops_gpu_visible; then
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | tr -c 'A-Za-z0-9\n' '-' | tr -s '-' | sed 's/-$//')
  filter='*'
else
  gpu=no-gpu
  filter='*.cpu'
  detops_log "no CUDA GPU visible on this machine (nvidia-smi found none): running only the CPU checks"
fi
run_id="${stamp}_${gpu}"
out="$DETOPS_ROOT/results/runs/$run_id"
mkdir -p "$out"
export DETOPS_RUN_ID="$run_id"
# Provenance: the caller may set DETOPS_GIT_SHA / DETOPS_GIT_DIRTY (a copied tree without its .git).
if [ -z "${DETOPS_GIT_SHA:-}" ]; then
  DETOPS_GIT_SHA=$(git -C "$DETOPS_ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
  if [ -n "$(git -C "$DETOPS_ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    DETOPS_GIT_DIRTY=true
  else
    DETOPS_GIT_DIRTY=false
  fi
fi
export DETOPS_GIT_SHA DETOPS_GIT_DIRTY="${DETOPS_GIT_DIRTY:-false}"
status=0

detops_log "[1/5] unit tests and reference self-checks"
"$DETOPS_BUILD_DIR/suites/detops_unit_tests" --gtest_brief=1 --gtest_output="json:$out/unit.json" || status=1

shards=$(detops_suite_shards)
detops_log "[2/5] correctness suite (filter $filter, $shards processes); record: ${out#$DETOPS_ROOT/}"
start=$(date +%s)
set +e
# The shards share the GPU; the large-index checks (tens of GB of device memory each) run afterwards in one
# process. Progress with the time left every 20 s; a crashed shard is reported and the others' results kept.
# Shards of near-equal expected time: the times of the newest earlier run on this GPU model, else the
# committed ones (results/suite-times/); without either, GoogleTest's round-robin split.
timings=$(ls -t "$DETOPS_ROOT"/results/runs/*_"$gpu"/correctness.json 2>/dev/null | grep -v "/$run_id/" | head -n1 || true)
[ -z "$timings" ] && [ -f "$DETOPS_ROOT/results/suite-times/$gpu.json.gz" ] && timings="$DETOPS_ROOT/results/suite-times/$gpu.json.gz"
"$DETOPS_PYTHON" "$DETOPS_ROOT/scripts/shard_suite.py" --binary "$DETOPS_BUILD_DIR/suites/detops_correctness" \
  --shards "$shards" --filter "$filter" --serial "$DETOPS_SERIAL_TESTS" --out "$out/correctness.json" \
  --outputs "$out/outputs" --interval 20 ${timings:+--timings "$timings"}
rc=$?
set -e
elapsed=$(( $(date +%s) - start ))
[ $rc -ne 0 ] && status=1
"$DETOPS_PYTHON" "$DETOPS_ROOT/scripts/summarize_correctness.py" "$out/correctness.json" --wall-seconds "$elapsed" \
  | tee "$out/summary.md"

# The torchvision peer suite (docs/peers.md): pytest on suites/peer ($1: what to say about the devices).
peer_available() {
  "$DETOPS_PYTHON" -c 'import torchvision' >/dev/null 2>&1
}
run_peer_pytest() {
  detops_log "peer suite: pytest suites/peer ($1; log: ${out#$DETOPS_ROOT/}/peer_pytest.log)"
  set +e
  DETOPS_TORCH_LIBRARY="$DETOPS_BUILD_DIR/ops/libdetops_torch.so" PYTHONDONTWRITEBYTECODE=1 \
    "$DETOPS_PYTHON" -m pytest -q -rs -p no:cacheprovider "$DETOPS_ROOT/suites/peer" >"$out/peer_pytest.log" 2>&1
  local prc=$?
  set -e
  detops_log "peer suite: $(tail -n1 "$out/peer_pytest.log") (exit $prc)"
  [ $prc -ne 0 ] && status=1
  return 0
}

if [ "$gpu" = no-gpu ] || [ "${DETOPS_SKIP_BENCH:-0}" = 1 ]; then
  if ! peer_available; then
    detops_log "torchvision not installed: peer suite skipped"
  elif [ "$gpu" = no-gpu ]; then
    run_peer_pytest "CPU only: the peer timing needs a GPU"
  fi
  detops_log "no benchmarks: $([ "$gpu" = no-gpu ] && echo 'no GPU' || echo 'DETOPS_SKIP_BENCH=1'); results in ${out#$DETOPS_ROOT/}"
  exit $status
fi

detops_log "[3/5] benchmarks (CUPTI kernel time; one progress line per benchmark)"
start=$(date +%s)
set +e
# shellcheck disable=SC2086
"$DETOPS_BUILD_DIR/suites/detops_bench" --detops_record="$out/record.json" \
  --detops_correctness_json="$out/correctness.json" ${DETOPS_BENCH_ARGS:-} >"$out/bench.log"
rc=$?
set -e
detops_log "benchmarks: exit $rc, $(( $(date +%s) - start )) s (log: ${out#$DETOPS_ROOT/}/bench.log)"
[ $rc -ne 0 ] && status=1
[ -f "$out/record.json" ] || { detops_log "no record was written"; exit 1; }
# The record says where the output dumps are (relative to the record).
"$DETOPS_PYTHON" -c 'import sys; sys.path.insert(0, sys.argv[1]); import compare; compare.attach_output_dumps(sys.argv[2])' \
  "$DETOPS_ROOT/scripts" "$out/record.json"

if peer_available; then
  detops_log "peer timing against torchvision: scripts/peer_bench.py (torch.profiler kernel time; log: ${out#$DETOPS_ROOT/}/peer_bench.log)"
  set +e
  DETOPS_TORCH_LIBRARY="$DETOPS_BUILD_DIR/ops/libdetops_torch.so" PYTHONDONTWRITEBYTECODE=1 \
    "$DETOPS_PYTHON" "$DETOPS_ROOT/scripts/peer_bench.py" --record "$out/record.json" >"$out/peers.md" 2>"$out/peer_bench.log"
  rc=$?
  set -e
  cat "$out/peers.md"
  detops_log "peer timing: exit $rc"
  [ $rc -ne 0 ] && status=1
  run_peer_pytest "CPU and CUDA"
else
  detops_log "torchvision not installed: peer suite skipped"
fi

detops_log "[4/5] comparison with the baseline"
key=$("$DETOPS_PYTHON" "$DETOPS_ROOT/scripts/baseline_key.py" "$out/record.json")
# The stored baseline: record.json, or record.json.gz as committed (compare.py reads either).
baseline="${DETOPS_BASELINE:-$DETOPS_ROOT/results/baselines/$key/record.json}"
if [ -z "${DETOPS_BASELINE:-}" ] && [ ! -f "$baseline" ] && [ -f "$baseline.gz" ]; then baseline="$baseline.gz"; fi
report_args=()
if [ -f "$baseline" ]; then
  set +e
  "$DETOPS_PYTHON" "$DETOPS_ROOT/scripts/compare.py" "$baseline" "$out/record.json" --json-out "$out/compare.json" \
    | tee "$out/compare.md"
  rc=${PIPESTATUS[0]}
  set -e
  detops_log "comparison with ${baseline#$DETOPS_ROOT/}: exit $rc"
  [ $rc -ne 0 ] && status=1
  report_args=(--baseline "$baseline")
else
  detops_log "no baseline for $key (results/baselines/$key/record.json): nothing to compare; to make this run the baseline: mkdir -p results/baselines/$key && gzip -9 -c ${out#$DETOPS_ROOT/}/record.json > results/baselines/$key/record.json.gz"
fi

detops_log "[5/5] report"
"$DETOPS_PYTHON" "$DETOPS_ROOT/scripts/report.py" "$out/record.json" "${report_args[@]}" -o "$out/report.html"
detops_log "done: ${out#$DETOPS_ROOT/}/report.html (exit $status)"
exit $status
