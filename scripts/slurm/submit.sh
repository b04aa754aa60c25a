#!/usr/bin/env bash
# The main job over N nodes of a Slurm cluster (docs/compare.md, "Several nodes"): a build job, a job array of N
# tasks (one node each: scripts/run.sh over its group of ops, on every GPU of the node), and a merge job that runs
# when every task has ended, failed ones included (afterany), so what the others measured is kept.
#
#   scripts/slurm/submit.sh N [sbatch options for every job, e.g. --partition=gpu --account=me]
#
# The repository must be on a file system every node sees; each task writes results/runs/<stamp>_<gpu>/ there and
# the merge writes results/runs/slurm-<array job id>/ (record.json, compare.md, report.html).
set -euo pipefail
n=${1:?usage: submit.sh N [sbatch options]}; shift
[[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "submit.sh: N must be a positive integer, got '$n'" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
build=$(sbatch --parsable "$@" "$here/build.sbatch")
array=$(sbatch --parsable "$@" --dependency="afterok:$build" --array="0-$((n - 1))" "$here/node.sbatch")
merge=$(sbatch --parsable "$@" --dependency="afterany:$array" --export="ALL,DETOPS_SLURM_ARRAY=$array" "$here/merge.sbatch")
echo "build job $build, node array $array (N=$n), merge job $merge"
