#!/usr/bin/env bash
# The quick gate for pull requests: the main job (scripts/run.sh) over the ops a change touches plus a fixed
# smoke set, decided against the stored baseline by the full gate's rule (compare.py --scope: the same
# repetitions, threshold, Mann-Whitney test and separation, per benchmark; every correctness test of those ops).
#
#   scripts/quick_gate.sh [BASE]          the change: the working tree against BASE (default: the merge base
#                                         with origin/main when there is one, else HEAD~1)
#   scripts/quick_gate.sh --files F ...   the change: these files (a checkout without git history)
#
# scripts/gate_scope.py says which ops each changed file reaches (through the #include graph) and why; a change
# to the harness, the build, the gate's scripts or anything it cannot attribute runs the full gate (every op).
# The scope and the verdict per file are written to the run folder (scope.json). Exit status: run.sh's.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
scope_json=$(mktemp)
trap 'rm -f "$scope_json"' EXIT
if [ "${1:-}" = --files ]; then
  shift
  [ $# -gt 0 ] || { echo "quick_gate: error: --files needs at least one path" >&2; exit 2; }
  scope=$(python3 "$root/scripts/gate_scope.py" --files "$@" --json "$scope_json")
else
  base=${1:-}
  if [ -z "$base" ]; then
    base=$(git -C "$root" merge-base HEAD origin/main 2>/dev/null || true)
    [ -n "$base" ] && [ "$base" != "$(git -C "$root" rev-parse HEAD)" ] || base=HEAD~1
  fi
  scope=$(python3 "$root/scripts/gate_scope.py" --base "$base" --json "$scope_json") || exit 2
fi
if [ "$scope" = all ]; then
  echo "[detops] quick gate: the change reaches shared code (see the lines above): running the full gate" >&2
  DETOPS_SCOPE_JSON="$scope_json" "$root/scripts/run.sh" && rc=0 || rc=$?
else
  ops=$(echo "$scope" | paste -sd, -)
  DETOPS_SCOPE_JSON="$scope_json" DETOPS_OPS="$ops" "$root/scripts/run.sh" && rc=0 || rc=$?
fi
exit $rc
