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
# Environment: DETOPS_OPS=op1,op2 (the quick gate's scope, scripts/quick_gate.sh: only these ops' correctness
# tests, benchmarks and peer checks, compared with the baseline by the same rule; the unit tests always run),
# DETOPS_BENCH_ARGS (extra detops_bench flags, e.g. --benchmark_filter=...),
# DETOPS_SKIP_BENCH=1 (correctness only), DETOPS_SKIP_PEER_TIMING=1 (no torchvision timing table: the peer suite's
# checks still run; the record then has no peers entries), DETOPS_BASELINE=<record.json> (instead of the stored one),
# DETOPS_REFERENCE_CACHE=DIR (the suite's fp64 references kept between runs of one build; default: in the build
# folder; empty: off), DETOPS_REFERENCE_CACHE_GB (its size cap, default 20),
# DETOPS_SUITE_SHARDS=N (correctness processes; default: one per CPU, at most 16), DETOPS_PEER_PROCESSES=N (the
# torchvision peer suite's pytest processes beside them on one GPU; default one per four CPUs, 2..8; one per GPU with several), DETOPS_RUN_TAG (appended to
# the run folder's name), CUDA_VISIBLE_DEVICES (the GPUs used; several: the suite and the benchmarks are spread
# over them, and DETOPS_BENCH_ARGS may not hold a --benchmark_filter then).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
job_start=$(date +%s)
step_times=()  # "name N s" per step, for the closing line
detops_setup
detops_configure_and_build
step_times+=("setup and build $(( $(date +%s) - job_start )) s")

stamp=$(date -u +%Y%m%dT%H%M%SZ)
if detops_gpu_visible; then
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | tr -c 'A-Za-z0-9\n' '-' | tr -s '-' | sed 's/-$//')
  filter='*'
else
  gpu=no-gpu
  filter='*.cpu'
  detops_log "no CUDA GPU visible on this machine (nvidia-smi found none): running only the CPU checks"
fi
[[ "${DETOPS_RUN_TAG:-}" =~ ^[A-Za-z0-9_.-]*$ ]] || detops_die "DETOPS_RUN_TAG: '$DETOPS_RUN_TAG' (letters, digits, '.', '_', '-' only)"
run_id="${stamp}_${gpu}${DETOPS_RUN_TAG:+_$DETOPS_RUN_TAG}"  # DETOPS_RUN_TAG: e.g. the Slurm array task
out="$DETOPS_ROOT/results/runs/$run_id"
mkdir -p "$out"
# The quick gate's verdicts per changed file (scripts/quick_gate.sh), kept with the run.
if [ -n "${DETOPS_SCOPE_JSON:-}" ] && [ -f "$DETOPS_SCOPE_JSON" ]; then cp "$DETOPS_SCOPE_JSON" "$out/scope.json"; fi
# The quick gate's scope (DETOPS_OPS): GoogleTest filter, benchmark filter, pytest -k and compare --scope.
scope_ops=()
if [ -n "${DETOPS_OPS:-}" ]; then
  IFS=, read -r -a scope_ops <<<"$DETOPS_OPS"
  for op in "${scope_ops[@]}"; do
    [[ "$op" =~ ^[a-z0-9_]+$ ]] || detops_die "DETOPS_OPS: '$op' is not an op name (expected comma-separated names such as roi_align,nms)"
  done
  suffix=${filter#\*}  # '' with a GPU, '.cpu' without
  filter=$(printf "%s.*$suffix:" "${scope_ops[@]}"); filter=${filter%:}
  bench_scope=("--benchmark_filter=^($(IFS='|'; echo "calibration|${scope_ops[*]}"))/")
  peer_k=(-k "$(printf '%s or ' "${scope_ops[@]}" | sed 's/ or $//')")
  printf '%s\n' "${scope_ops[@]}" >"$out/scope.txt"
  detops_log "quick gate: scope ${DETOPS_OPS} (correctness filter $filter; benchmarks ${bench_scope[0]#--benchmark_filter=})"
else
  bench_scope=()
  peer_k=()
fi
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

# The torchvision peer suite (docs/peers.md): pytest on suites/peer ($1: what to say about the devices).
# Python's bytecode of torch and torchvision goes to the build folder (compiled once, not in every process);
# none is written into the source tree.
peer_available() {
  "$DETOPS_PYTHON" -c 'import torchvision' >/dev/null 2>&1
}
peer_env=(DETOPS_TORCH_LIBRARY="$DETOPS_BUILD_DIR/ops/libdetops_torch.so" PYTHONPYCACHEPREFIX="$DETOPS_BUILD_DIR/pycache")
run_peer_pytest() {
  detops_log "peer suite: pytest suites/peer ($1; log: ${out#$DETOPS_ROOT/}/peer_pytest.log)"
  set +e
  env "${peer_env[@]}" "$DETOPS_PYTHON" -m pytest -q -rs -p no:cacheprovider "${peer_k[@]}" "$DETOPS_ROOT/suites/peer" >"$out/peer_pytest.log" 2>&1
  local prc=$?
  set -e
  detops_log "peer suite: $(tail -n1 "$out/peer_pytest.log") (exit $prc)"
  [ $prc -ne 0 ] && status=1
  return 0
}

shards=$(detops_suite_shards)
# Several GPUs: the correctness shards and the large-index checks spread over them, the benchmarks split by op, one
# process per GPU (scripts/bench_shards.py), merged into one record. One GPU: exactly as before.
gpu_list=$([ "$gpu" != no-gpu ] && detops_gpu_list || true)
gpu_count=$(echo "$gpu_list" | tr ',' '\n' | grep -c . || true)
gpu_args=()
if [ "${gpu_count:-0}" -gt 1 ]; then
  gpu_args=(--gpus "$gpu_list")
  detops_log "$gpu_count GPUs ($gpu_list): the suite and the benchmarks are spread over them"
fi
# With a GPU, the peer suite (correctness against torchvision, no timing) runs beside the correctness shards;
# it writes peer_pytest.rc when it ends, and the large-index checks (tens of GB of GPU memory) wait for that, as
# does the end of the suite step (shard_suite --serial-after, which shows the peer suite's progress meanwhile).
peer_beside=0
after_args=()
if [ "$gpu" != no-gpu ] && peer_available; then
  peer_beside=1
  rm -f "$out/peer_pytest.rc"
  # Several pytest processes, each keeping the tests whose id hashes to its index (suites/peer/conftest.py,
  # DETOPS_PYTEST_SHARD): one per GPU with several GPUs, else detops_peer_processes (DETOPS_PEER_PROCESSES, default one
  # per four CPUs, 2..8) sharing the GPU. Their
  # logs are peer_pytest.log (the first) and peer_pytest-I.log (shard_suite's waiting line follows the one furthest
  # from its end); peer_pytest.rc is the worst exit status, written once all have ended.
  peer_gpus=()
  if [ "${gpu_count:-0}" -gt 1 ]; then
    IFS=, read -r -a peer_gpus <<<"$gpu_list"
  else
    n=$(detops_peer_processes)
    for ((i = 0; i < n; i++)); do peer_gpus+=(""); done  # "": the job's own GPU
  fi
  # The split is by each test's time in the newest earlier run on this GPU model (its peer_times-*.json, which every
  # process writes), for the tests it did not run by the committed times of this model
  # (results/suite-times/<gpu>.peer.json.gz, as the correctness shards use results/suite-times/<gpu>.json.gz), else by
  # a hash of the test id (suites/peer/pytest_split.py).
  peer_times=$(detops_peer_times "$gpu" "$run_id")
  # For the log line: the sources, the earlier run's (its peer_times-*.json as one) over the committed file.
  peer_sources=$(tr ':' '\n' <<<"$peer_times" | sed -e "s|^$DETOPS_ROOT/||" -e 's|/peer_times-[0-9]*\.json$|/peer_times-*.json|' |
    uniq | tac | paste -sd '|' | sed 's/|/ over /g')
  detops_log "peer suite: pytest suites/peer beside the correctness shards, ${#peer_gpus[@]} process(es)$([ "${gpu_count:-0}" -gt 1 ] && echo ', one per GPU'), split by $([ -n "$peer_times" ] && echo "the test times in $peer_sources" || echo 'a hash of the test id (no earlier test times)') (CPU and CUDA; logs: ${out#$DETOPS_ROOT/}/peer_pytest*.log)"
  (
    set +e
    pids=()
    for i in "${!peer_gpus[@]}"; do
      log="$out/peer_pytest.log"; [ "$i" -gt 0 ] && log="$out/peer_pytest-$i.log"
      env "${peer_env[@]}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" ${peer_gpus[$i]:+CUDA_VISIBLE_DEVICES="${peer_gpus[$i]}"} \
        DETOPS_PYTEST_SHARD="$i/${#peer_gpus[@]}" DETOPS_PYTEST_TIMES="$peer_times" \
        DETOPS_PYTEST_TIMES_OUT="$out/peer_times-$i.json" "$DETOPS_PYTHON" -m pytest -q -rs -p no:cacheprovider "${peer_k[@]}" \
        "$DETOPS_ROOT/suites/peer" >"$log" 2>&1 &
      pids+=($!)
    done
    worst=0
    for pid in "${pids[@]}"; do wait "$pid"; r=$?; [ $r -gt $worst ] && worst=$r; done
    echo $worst >"$out/peer_pytest.rc"
  ) &
  peer_pid=$!
  mapfile -t after_args < <(detops_peer_wait_args "$out" "${#peer_gpus[@]}")
fi
detops_log "[2/5] correctness suite (filter $filter, $shards processes); record: ${out#$DETOPS_ROOT/}"
start=$(date +%s)
set +e
# The shards share the GPU; the large-index checks (tens of GB of device memory each) run afterwards in one
# process. Progress with the time left every 20 s; a crashed shard is reported and the others' results kept.
# Shards of near-equal expected time: the committed times of this GPU model (results/suite-times/) under those of the
# newest earlier run on it (lib.sh detops_suite_times); without either, GoogleTest's round-robin split.
timings=$(detops_suite_times "$gpu" "$run_id")
# The fp64 references kept between runs of one build (harness/reference_cache.h: keyed by the build's bytes, the case and
# its inputs; DETOPS_REFERENCE_CACHE= (empty) turns it off), pruned to DETOPS_REFERENCE_CACHE_GB (default 20),
# least recently used first.
detops_use_reference_cache "$DETOPS_BUILD_DIR/reference-cache"
"$DETOPS_PYTHON" "$DETOPS_ROOT/scripts/shard_suite.py" --binary "$DETOPS_BUILD_DIR/suites/detops_correctness" \
  --shards "$shards" --filter "$filter" --serial "$DETOPS_SERIAL_TESTS" --out "$out/correctness.json" \
  --outputs "$out/outputs" --interval 20 ${timings:+--timings "$timings"} "${after_args[@]}" "${gpu_args[@]}"
rc=$?
set -e
elapsed=$(( $(date +%s) - start ))
step_times+=("correctness suite $elapsed s")
[ $rc -ne 0 ] && status=1
"$DETOPS_PYTHON" "$DETOPS_ROOT/scripts/summarize_correctness.py" "$out/correctness.json" --wall-seconds "$elapsed" \
  | tee "$out/summary.md" || { detops_log "no correctness summary (the line above says why)"; status=1; }

# The peer suite beside the shards has ended (shard_suite waited for its peer_pytest.rc, with its progress).
if [ $peer_beside = 1 ]; then
  wait "$peer_pid" 2>/dev/null || true
  prc=$(cat "$out/peer_pytest.rc" 2>/dev/null || echo "none (it wrote no exit status)")
  for log in "$out"/peer_pytest.log "$out"/peer_pytest-*.log; do
    [ -f "$log" ] && detops_log "peer suite ($(basename "$log")): $(tail -n1 "$log")"
  done
  detops_log "peer suite: exit $prc"
  [ "$prc" != 0 ] && status=1
fi

if [ "$gpu" = no-gpu ] || [ "${DETOPS_SKIP_BENCH:-0}" = 1 ]; then
  if ! peer_available; then
    detops_log "torchvision not installed: peer suite skipped"
  elif [ "$gpu" = no-gpu ]; then
    run_peer_pytest "CPU only: the peer timing needs a GPU"
  fi
  detops_log "no benchmarks: $([ "$gpu" = no-gpu ] && echo 'no GPU' || echo 'DETOPS_SKIP_BENCH=1'); results in ${out#$DETOPS_ROOT/}; $(( $(date +%s) - job_start )) s in all ($(IFS=";"; echo "${step_times[*]}" | sed "s/;/, /g"))"
  exit $status
fi

detops_log "[3/5] benchmarks (CUPTI kernel time; one progress line per benchmark)"
start=$(date +%s)
set +e
if [ "${gpu_count:-0}" -gt 1 ]; then
  # Per-op times for the split: the newest earlier record of this GPU model, else the stored baselines'.
  times=$(ls -t "$DETOPS_ROOT"/results/runs/*_"$gpu"/record.json 2>/dev/null | grep -v "/$run_id/" | head -n1 || true)
  [ -z "$times" ] && times=$(ls "$DETOPS_ROOT"/results/baselines/*/record.json.gz 2>/dev/null | head -n1 || true)
  # shellcheck disable=SC2086
  "$DETOPS_PYTHON" "$DETOPS_ROOT/scripts/bench_shards.py" --binary "$DETOPS_BUILD_DIR/suites/detops_bench" \
    --gpus "$gpu_list" --record "$out/record.json" ${times:+--times "$times"} ${DETOPS_OPS:+--ops "$DETOPS_OPS"} \
    -- --detops_correctness_json="$out/correctness.json" ${DETOPS_BENCH_ARGS:-} | tee "$out/bench.log"
  rc=${PIPESTATUS[0]}
else
  # shellcheck disable=SC2086
  "$DETOPS_BUILD_DIR/suites/detops_bench" --detops_record="$out/record.json" \
    --detops_correctness_json="$out/correctness.json" "${bench_scope[@]}" ${DETOPS_BENCH_ARGS:-} >"$out/bench.log"
  rc=$?
fi
set -e
step_times+=("benchmarks $(( $(date +%s) - start )) s")
detops_log "benchmarks: exit $rc, $(( $(date +%s) - start )) s (log: ${out#$DETOPS_ROOT/}/bench.log)"
[ $rc -ne 0 ] && status=1
[ -f "$out/record.json" ] || { detops_log "no record was written"; exit 1; }
# The record says where the output dumps are (relative to the record).
"$DETOPS_PYTHON" -c 'import sys; sys.path.insert(0, sys.argv[1]); import compare; compare.attach_output_dumps(sys.argv[2])' \
  "$DETOPS_ROOT/scripts" "$out/record.json"

if [ "${DETOPS_SKIP_PEER_TIMING:-0}" = 1 ]; then
  detops_log "peer timing skipped (DETOPS_SKIP_PEER_TIMING=1): the record has no peers entries"
elif peer_available; then
  peer_start=$(date +%s)
  detops_log "peer timing against torchvision: scripts/peer_bench.py (torch.profiler kernel time; log: ${out#$DETOPS_ROOT/}/peer_bench.log)"
  set +e
  if [ "${gpu_count:-0}" -gt 1 ]; then
    # One process per GPU, each timing a part of the table (--shard I/N, split by the previous record's peer times),
    # then one merge into the record; a part whose process died is reported and the others kept.
    IFS=, read -r -a peer_gpus <<<"$gpu_list"
    pids=()
    for i in "${!peer_gpus[@]}"; do
      rm -f "$out/peers-$i.json"
      env "${peer_env[@]}" CUDA_VISIBLE_DEVICES="${peer_gpus[$i]}" "$DETOPS_PYTHON" "$DETOPS_ROOT/scripts/peer_bench.py" \
        --shard "$i/${#peer_gpus[@]}" ${times:+--times "$times"} --json-out "$out/peers-$i.json" ${DETOPS_OPS:+--ops "$DETOPS_OPS"} \
        >/dev/null 2> >(tee "$out/peer_bench-$i.log" | grep --line-buffered -E '^peer_bench: \[[0-9]*0/' | sed -u "s/^peer_bench:/peer_bench (GPU ${peer_gpus[$i]}):/" >&2) &
      pids+=($!)
    done
    rc=0
    for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
    parts=(); for i in "${!peer_gpus[@]}"; do parts+=("$out/peers-$i.json"); done
    "$DETOPS_PYTHON" "$DETOPS_ROOT/scripts/peer_bench.py" --merge "${parts[@]}" --record "$out/record.json" >"$out/peers.md" || rc=1
  else
    env "${peer_env[@]}" "$DETOPS_PYTHON" "$DETOPS_ROOT/scripts/peer_bench.py" --record "$out/record.json" ${DETOPS_OPS:+--ops "$DETOPS_OPS"} \
      >"$out/peers.md" 2> >(tee "$out/peer_bench.log" | grep --line-buffered -E '^peer_bench: \[[0-9]*0/' >&2)
    rc=$?
  fi
  set -e
  cat "$out/peers.md"
  step_times+=("peer timing $(( $(date +%s) - peer_start )) s")
  detops_log "peer timing: exit $rc, $(( $(date +%s) - peer_start )) s"
  [ $rc -ne 0 ] && status=1
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
    ${DETOPS_OPS:+--scope "calibration,$DETOPS_OPS"} \
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
detops_log "done: ${out#$DETOPS_ROOT/}/report.html (exit $status); $(( $(date +%s) - job_start )) s in all ($(IFS=';'; echo "${step_times[*]}" | sed 's/;/, /g'))"
exit $status
