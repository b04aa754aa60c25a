#!/usr/bin/env bash
# The test command: installs what is missing, configures, builds incrementally and runs every test
# (C++ unit tests, the correctness suite on CPU and CUDA, the Python parity test). Without a GPU the
# CUDA tests are reported as skipped with the reason. Preset: $DETOPS_PRESET, else ci under CI=true,
# else dev.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
detops_setup
detops_configure_and_build
detops_log "running the tests"
ctest --preset "$DETOPS_PRESET" "$@"
