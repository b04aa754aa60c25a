#!/bin/sh
# bench_smoke: runs the calibration benchmark briefly and checks the record's layout.
# Usage: bench_smoke.sh <detops_bench> <record.json> <cmake> <CheckBenchRecord.cmake>
bench=$1 record=$2 cmake=$3 check=$4
mkdir -p "$(dirname "$record")" && rm -f "$record"
"$bench" --benchmark_filter='^calibration/' --detops_min_time_s=0.01 --detops_timeout_s=5 --detops_record="$record"
rc=$?
if [ "$rc" -eq 77 ]; then
  echo "bench_smoke: skipped (detops_bench found no usable GPU)"
  exit 77
fi
if [ "$rc" -ne 0 ]; then
  echo "bench_smoke: detops_bench exited $rc"
  exit "$rc"
fi
exec "$cmake" -DRECORD="$record" -P "$check"
