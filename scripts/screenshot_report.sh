#!/usr/bin/env bash
# Renders an HTML report to a PNG with headless Chromium, to check how it looks.
#
#   scripts/screenshot_report.sh [--install] [REPORT.html] [OUT.png]
#
# Without REPORT.html it writes a demo pair of synthetic records (suites/python/synthetic_records.py) under
# /tmp/detops-report-demo, makes their report with scripts/report.py and renders that. --install installs
# Debian's chromium package with apt-get when no chromium is on PATH.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${DETOPS_PYTHON:-$root/.venv/bin/python}
[ -x "$python" ] || python=python3

install=0
if [ "${1:-}" = --install ]; then install=1; shift; fi
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  if [ $install -eq 1 ]; then
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
    $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
    browser=$(command -v chromium)
  else
    echo "chromium not found: run with --install, or apt-get install chromium" >&2
    exit 2
  fi
fi

report=${1:-}
if [ -z "$report" ]; then
  demo=/tmp/detops-report-demo
  rm -rf "$demo"
  "$python" "$root/suites/python/synthetic_records.py" "$demo" >/dev/null
  report=$demo/report.html
  "$python" "$root/scripts/report.py" "$demo/candidate/record.json" --baseline "$demo/baseline/record.json" -o "$report" >/dev/null
fi
out=${2:-${report%.html}.png}
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,2400 \
  --screenshot="$out" "file://$(readlink -f "$report")" >/dev/null 2>&1
echo "$out"
