#!/usr/bin/env bash
# The merge command of the Slurm template (and of any set of records of one build measured in parts):
#   scripts/slurm/merge_nodes.sh OUT_DIR RECORD [RECORD ...]
# writes OUT_DIR/record.json (scripts/merge_records.py --replace: every node measures the calibration benchmark, the
# last one's is kept), OUT_DIR/compare.md against the stored baseline of that GPU and CUDA version when there is one,
# and OUT_DIR/report.html. A task that wrote no record is named and left out; the merged record is then marked
# incomplete. Exit: compare.py's (0 no regression, 1 a regression) or 1 when a task is missing, 2 when nothing can
# be merged.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: merge_nodes.sh OUT_DIR RECORD [RECORD ...]}; shift
py=${DETOPS_PYTHON:-python3}
parts=(); missing=0
for r in "$@"; do
  if [ -f "$r" ]; then parts+=("$r"); else echo "merge_nodes: no record at $r (its task failed before writing one)" >&2; missing=1; fi
done
[ ${#parts[@]} -gt 0 ] || { echo "merge_nodes: error: no record to merge" >&2; exit 2; }
mkdir -p "$out"
"$py" "$root/scripts/merge_records.py" "$out/record.json" "${parts[@]}" --replace --drop-outputs || exit 2
status=$missing
key=$("$py" "$root/scripts/baseline_key.py" "$out/record.json") || exit 2
baseline=${DETOPS_BASELINE:-$root/results/baselines/$key/record.json}  # DETOPS_BASELINE: another baseline
[ -n "${DETOPS_BASELINE:-}" ] || [ -f "$baseline" ] || baseline="$baseline.gz"
report_args=()
if [ -f "$baseline" ]; then
  "$py" "$root/scripts/compare.py" "$baseline" "$out/record.json" --json-out "$out/compare.json" > "$out/compare.md"
  rc=$?
  tail -n1 "$out/compare.md"
  [ $rc -eq 2 ] && exit 2
  [ $rc -ne 0 ] && status=1
  report_args=(--baseline "$baseline")
else
  echo "merge_nodes: no stored baseline for $key: nothing compared"
fi
"$py" "$root/scripts/report.py" "$out/record.json" "${report_args[@]}" -o "$out/report.html" || exit 2
echo "merge_nodes: $out/record.json from ${#parts[@]} records (exit $status)"
exit $status
