#!/usr/bin/env bash
# Installs what DetOps needs and is missing (Debian packages; torch and torchvision into .venv) without
# building. scripts/run.sh and scripts/test.sh run this step themselves.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
detops_setup
