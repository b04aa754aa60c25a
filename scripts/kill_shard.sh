#!/usr/bin/env bash
# Kills one shard of a running main job, as a crash would (SIGKILL), to show that the others' results are kept:
#   scripts/kill_shard.sh NAME GPU [WAIT_S [AFTER_S]]
# waits (up to WAIT_S seconds, default 600) for a process whose executable is named NAME (detops_correctness,
# detops_bench, ...) running with CUDA_VISIBLE_DEVICES=GPU, lets it run AFTER_S seconds more (default 0: midway
# through its work), then kills it with SIGKILL and prints what it killed.
# Matches the executable's path (/proc/PID/exe), never a command line, so it cannot hit the shell that runs it.
set -uo pipefail
name=${1:?usage: kill_shard.sh NAME GPU [WAIT_S]} gpu=${2:?usage: kill_shard.sh NAME GPU [WAIT_S]}
deadline=$(( $(date +%s) + ${3:-600} ))
while [ "$(date +%s)" -lt "$deadline" ]; do
  for d in /proc/[0-9]*; do
    exe=$(readlink "$d/exe" 2>/dev/null) || continue
    [ "$(basename "$exe")" = "$name" ] || continue
    tr '\0' '\n' <"$d/environ" 2>/dev/null | grep -qx "CUDA_VISIBLE_DEVICES=$gpu" || continue
    pid=${d#/proc/}
    sleep "${4:-0}"
    kill -KILL "$pid" && echo "kill_shard: killed $name (pid $pid, CUDA_VISIBLE_DEVICES=$gpu) at $(date -u +%T)"
    exit 0
  done
  sleep 0.5
done
echo "kill_shard: no $name on GPU $gpu within ${3:-600} s" >&2
exit 1
