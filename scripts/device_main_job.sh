#!/usr/bin/env bash
# The whole main job on a lent GPU machine whose calls are limited to 10 minutes (the main job takes ~20 on an
# H200): started detached so it outlives one call, waited for across calls, its results packed for the way back.
#
#   scripts/device_main_job.sh start [SECONDS]   start scripts/run.sh detached (setsid), then wait up to SECONDS
#   scripts/device_main_job.sh wait [SECONDS]    wait up to SECONDS more (the next call, while the machine is warm)
#   scripts/device_main_job.sh pack DIR          the run folder's files (not the output dumps) and the log, as
#                                                DIR/run.tar.gz
# Each prints the main job's [detops] lines so far and whether it has ended (with its exit status). Extra
# environment (DETOPS_OPS, DETOPS_BENCH_ARGS, DETOPS_GIT_SHA, ...) is passed to run.sh by `start`.
set -uo pipefail
cd "$(dirname "$0")/.."
state=${DETOPS_DEVICE_STATE:-/tmp/detops-main-job}
mkdir -p "$state"
say() {
  grep -E '^\[detops\]|^\[shard_suite\] [0-9]+ tests|^\[bench_shards\]' "$state/log" 2>/dev/null | tail -n 30
  if [ -f "$state/rc" ]; then echo "main job ended: exit $(cat "$state/rc"), $(( $(stat -c %Y "$state/rc") - $(cat "$state/started") )) s"
  else echo "main job running for $(( $(date +%s) - $(cat "$state/started" 2>/dev/null || date +%s) )) s"; fi
}
wait_up_to() {
  local t0; t0=$(date +%s)
  while [ ! -f "$state/rc" ] && [ $(( $(date +%s) - t0 )) -lt "${1:-540}" ]; do sleep 3; done
}
case "${1:-}" in
  start)
    if [ -f "$state/started" ] && [ ! -f "$state/rc" ]; then echo "a main job is already running"; else
      rm -f "$state/rc"; date +%s > "$state/started"
      setsid bash -c 'scripts/run.sh > "$1/log" 2>&1; echo $? > "$1/rc"' _ "$state" < /dev/null > /dev/null 2>&1 &
    fi
    wait_up_to "${2:-540}"; say ;;
  wait) wait_up_to "${2:-540}"; say ;;
  pack)
    dir=${2:?usage: device_main_job.sh pack DIR}; mkdir -p "$dir"
    run=$(ls -td results/runs/*/ 2>/dev/null | head -n1)
    tar -czf "$dir/run.tar.gz" -C "$state" log -C "$(pwd)/$run" $(cd "$run" && ls | grep -v '^outputs$')
    ls -la "$dir" ;;
  *) echo "usage: device_main_job.sh start|wait [SECONDS] | pack DIR" >&2; exit 2 ;;
esac
