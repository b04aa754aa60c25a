# Shared by scripts/run.sh and scripts/test.sh: installs what is missing, then configures and builds.
# Source it; it defines detops_setup, detops_configure_and_build and sets DETOPS_ROOT, DETOPS_PYTHON,
# DETOPS_PRESET, DETOPS_BUILD_DIR.

DETOPS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DETOPS_TORCH_VERSION=2.11.0        # PyPI's Linux wheel is built for CUDA 13.0
DETOPS_TORCHVISION_VERSION=0.26.0

detops_log() { printf '[detops] %s\n' "$*"; }
detops_die() { printf '[detops] error: %s\n' "$*" >&2; exit 1; }

_detops_have_header() {
  local d
  for d in /usr/include /usr/local/include; do [ -e "$d/$1" ] && return 0; done
  return 1
}

_detops_apt_install() {
  [ $# -eq 0 ] && return 0
  command -v apt-get >/dev/null || detops_die "missing: $* (no apt-get here: install them with your package manager)"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  detops_log "installing Debian packages: $*"
  # A failure here is not fatal: the package may live where these probes do not look, and CMake's
  # configuration names precisely what is still missing.
  { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null; } ||
    detops_log "warning: could not install $* with apt-get; configuration will say if anything is really missing"
}

_detops_torch_report() {  # prints "version cuda" of the torch in python $1, or nothing
  "$1" -c 'import torch; print(torch.__version__.split("+")[0], torch.version.cuda or "cpu")' 2>/dev/null || true
}

detops_setup() {
  cd "$DETOPS_ROOT"
  # CUDA toolkit: not in Debian's archive in a usable version, so it is found, not installed.
  if ! command -v nvcc >/dev/null; then
    [ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
  fi
  command -v nvcc >/dev/null ||
    detops_die "nvcc not found: install the CUDA Toolkit 13.0 (NVIDIA's cuda-toolkit-13-0 package) and put its bin/ on PATH"
  local nvcc_major
  nvcc_major=$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')

  local pkgs=()
  command -v cmake >/dev/null || pkgs+=(cmake)
  command -v ninja >/dev/null || pkgs+=(ninja-build)
  command -v g++ >/dev/null || pkgs+=(g++)
  _detops_have_header gtest/gtest.h || pkgs+=(libgtest-dev)
  _detops_have_header benchmark/benchmark.h || pkgs+=(libbenchmark-dev)
  _detops_have_header eigen3/Eigen/Core || pkgs+=(libeigen3-dev)
  _detops_have_header nlohmann/json.hpp || pkgs+=(nlohmann-json3-dev)
  command -v python3 >/dev/null || pkgs+=(python3 python3-venv)
  _detops_apt_install "${pkgs[@]}"

  # Python with torch (libtorch) and torchvision: an explicit DETOPS_PYTHON, else the project's .venv,
  # else a system python3 that already has the matching torch (machines without network access),
  # else a new .venv with torch from PyPI.
  local candidate report
  if [ -n "${DETOPS_PYTHON:-}" ]; then
    report=$(_detops_torch_report "$DETOPS_PYTHON")
    [ -n "$report" ] || detops_die "DETOPS_PYTHON=$DETOPS_PYTHON cannot import torch"
  else
    for candidate in "$DETOPS_ROOT/.venv/bin/python" "$(command -v python3 || true)"; do
      [ -n "$candidate" ] && [ -x "$candidate" ] || continue
      report=$(_detops_torch_report "$candidate")
      local cuda=${report#* }
      if [ "${report%% *}" = "$DETOPS_TORCH_VERSION" ] && [ "${cuda%%.*}" = "$nvcc_major" ]; then
        DETOPS_PYTHON=$candidate
        break
      fi
    done
    if [ -z "${DETOPS_PYTHON:-}" ]; then
      if [ ! -x "$DETOPS_ROOT/.venv/bin/python" ]; then
        detops_log "creating the project's Python environment in .venv"
        python3 -m venv "$DETOPS_ROOT/.venv" 2>/dev/null || {
          _detops_apt_install python3-venv
          python3 -m venv "$DETOPS_ROOT/.venv"
        } || detops_die "could not create .venv (python3 -m venv)"
      fi
      DETOPS_PYTHON="$DETOPS_ROOT/.venv/bin/python"
      detops_log "installing torch==$DETOPS_TORCH_VERSION (CUDA 13.0 wheel) and torchvision==$DETOPS_TORCHVISION_VERSION from PyPI into .venv"
      "$DETOPS_PYTHON" -m pip install -q --disable-pip-version-check --progress-bar off \
        "torch==$DETOPS_TORCH_VERSION" "torchvision==$DETOPS_TORCHVISION_VERSION" numpy pytest jsonschema ||
        detops_die "pip install of torch==$DETOPS_TORCH_VERSION failed"
    fi
  fi
  "$DETOPS_PYTHON" -c 'import pytest' 2>/dev/null || "$DETOPS_PYTHON" -m pip install -q pytest ||
    detops_log "pytest unavailable for $DETOPS_PYTHON: the Python parity test will fail to start"
  # jsonschema validates run records against docs/record.schema.json; without it (no network) the record
  # tools and their tests say "skipped: jsonschema not installed".
  "$DETOPS_PYTHON" -c 'import jsonschema' 2>/dev/null || "$DETOPS_PYTHON" -m pip install -q --disable-pip-version-check --retries 1 --timeout 10 jsonschema >/dev/null 2>&1 ||
    detops_log "jsonschema unavailable for $DETOPS_PYTHON: record schema validation will be skipped"
  # atheris (libFuzzer for Python) fuzzes the record readers in suites/python/test_fuzz_records.py; without it
  # (no network, no wheel for this Python) that test says "skipped: atheris not installed".
  "$DETOPS_PYTHON" -c 'import atheris' 2>/dev/null || "$DETOPS_PYTHON" -m pip install -q --disable-pip-version-check --retries 1 --timeout 10 atheris >/dev/null 2>&1 ||
    detops_log "atheris unavailable for $DETOPS_PYTHON: the record readers' fuzz test will be skipped"
  export DETOPS_PYTHON
  detops_log "python: $DETOPS_PYTHON (torch $(_detops_torch_report "$DETOPS_PYTHON"))"
}

# The C++ compiler must link libstdc++ as a shared library: a toolchain that links it statically into
# libdetops_torch.so puts a second C++ runtime into the Python process next to libtorch's, and the
# first error message formatted there crashes Python (seen with a wrapper g++ whose -B directory holds
# only libstdc++.a). $CXX (or g++) is probed with a one-line shared library; if it links libstdc++
# statically and the distribution's /usr/bin/g++ does not, that one is used instead, and the log says so.
_detops_links_shared_libstdcxx() {
  local dir rc=1
  dir=$(mktemp -d)
  printf '#include <sstream>\nstd::string f(long v) { std::ostringstream s; s << v; return s.str(); }\n' >"$dir/p.cpp"
  if "$1" -shared -fPIC -o "$dir/p.so" "$dir/p.cpp" 2>/dev/null; then
    readelf -d "$dir/p.so" 2>/dev/null | grep -q 'NEEDED.*libstdc++' && rc=0
  fi
  rm -rf "$dir"
  return $rc
}

_detops_pick_cxx() {  # [BUILD_DIR]: the folder to start afresh if its compiler differs (default $DETOPS_BUILD_DIR)
  local build_dir=${1:-$DETOPS_BUILD_DIR}
  local cxx=${CXX:-$(command -v g++ || true)}
  [ -n "$cxx" ] || return 0
  if ! _detops_links_shared_libstdcxx "$cxx"; then
    if [ "$cxx" != /usr/bin/g++ ] && [ -x /usr/bin/g++ ] && _detops_links_shared_libstdcxx /usr/bin/g++; then
      detops_log "$cxx links libstdc++ statically, which breaks loading DetOps into Python next to libtorch; using /usr/bin/g++"
      cxx=/usr/bin/g++
    else
      detops_log "warning: $cxx links libstdc++ statically; torch.ops.load_library of DetOps may crash Python"
    fi
  fi
  export CXX=$cxx
  export CUDAHOSTCXX=$cxx
  # CMake fixes the compiler at first configuration: start that build folder afresh if it differs.
  local cache="$build_dir/CMakeCache.txt" cached
  cached=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$cache" 2>/dev/null || true)
  if [ -n "$cached" ] && [ "$(readlink -f "$cached")" != "$(readlink -f "$cxx")" ]; then
    detops_log "compiler changed to $cxx: reconfiguring $build_dir from scratch"
    rm -rf "$build_dir"
  fi
}

detops_configure_and_build() {
  if [ -z "${DETOPS_PRESET:-}" ]; then
    if [ "${CI:-}" = true ]; then DETOPS_PRESET=ci; else DETOPS_PRESET=dev; fi
  fi
  DETOPS_BUILD_DIR="$DETOPS_ROOT/build/$DETOPS_PRESET"
  export DETOPS_PRESET DETOPS_BUILD_DIR
  _detops_pick_cxx
  mkdir -p "$DETOPS_ROOT/build"
  detops_log "configuring (preset $DETOPS_PRESET)"
  cmake --preset "$DETOPS_PRESET" -DDETOPS_PYTHON="$DETOPS_PYTHON" >"$DETOPS_ROOT/build/configure-$DETOPS_PRESET.log" 2>&1 || {
    grep -E 'DetOps|Error' "$DETOPS_ROOT/build/configure-$DETOPS_PRESET.log" >&2 || cat "$DETOPS_ROOT/build/configure-$DETOPS_PRESET.log" >&2
    detops_die "configuration failed (full log: build/configure-$DETOPS_PRESET.log)"
  }
  detops_log "building"
  cmake --build --preset "$DETOPS_PRESET" 2>&1 | detops_build_progress || detops_die "build failed"
}

# Passes a ninja build's output through and, every DETOPS_PROGRESS_S seconds (default 20; 0: after every step), adds
# a line with the steps done, the time so far and the time left at the mean pace per step so far (steps differ:
# a CUDA object takes minutes here where a small C++ one takes seconds, so it is an estimate). Its exit status is
# 0; the caller's pipefail gives the build's.
detops_build_progress() {
  local start now last line finished total elapsed every=${DETOPS_PROGRESS_S:-20}
  printf -v start '%(%s)T' -1
  last=$start
  while IFS= read -r line || [ -n "$line" ]; do
    printf '%s\n' "$line"
    [[ "$line" =~ ^\[([0-9]+)/([0-9]+)\] ]] || continue
    finished=${BASH_REMATCH[1]}
    total=${BASH_REMATCH[2]}
    printf -v now '%(%s)T' -1
    if [ "$finished" -gt 0 ] && [ "$finished" -lt "$total" ] && [ $((now - last)) -ge "$every" ]; then
      last=$now
      elapsed=$((now - start))
      detops_log "build: $(_detops_progress_text "$finished" "$total" "$elapsed" " steps")"
    fi
  done
  return 0
}

# The test command's progress (scripts/test.sh, in the background while ctest runs): every DETOPS_PROGRESS_S seconds
# (default 60), the newest '[<tag> <done>/<total> <elapsed>s]' line of FILE, which the long test entries append when
# DETOPS_PROGRESS_FILE names it (the correctness binary, shard_suite.py, the pytest entries through
# suites/progress_file.py), as '[detops] tests: <tag> <done>/<total>, <elapsed>, about <left> left' (the time left at
# that entry's pace so far); nothing while that line is unchanged. Runs until it is sent TERM, which also ends its
# sleep (an orphaned sleep would hold the caller's output open for up to a minute).
detops_watch_progress() {
  local file=$1 every=${DETOPS_PROGRESS_S:-60} line shown="" sleeper=""
  trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
  while :; do
    sleep "$every" &
    sleeper=$!
    wait "$sleeper" || true
    [ -f "$file" ] || continue
    line=$(tail -n 1 "$file" 2>/dev/null) || continue
    [ "$line" = "$shown" ] && continue
    [[ "$line" =~ ^\[([A-Za-z0-9_]+)\ ([0-9]+)/([0-9]+)\ ([0-9]+)s\]$ ]] || continue
    shown=$line
    local tag=${BASH_REMATCH[1]} finished=${BASH_REMATCH[2]} total=${BASH_REMATCH[3]} elapsed=${BASH_REMATCH[4]}
    detops_log "tests: $tag $(_detops_progress_text "$finished" "$total" "$elapsed")"
  done
}

_detops_fmt_s() {
  if [ "$1" -ge 60 ]; then printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); else printf '%ds' "$1"; fi
}

# DONE TOTAL ELAPSED_S [UNIT] -> "DONE/TOTAL[UNIT], <elapsed>, about <left> left", the time left at the mean pace so
# far (no estimate before the first step or after the last).
_detops_progress_text() {
  local head="$1/$2${4:-}, $(_detops_fmt_s "$3")"
  if [ "$1" -gt 0 ] && [ "$1" -lt "$2" ]; then
    printf '%s, about %s left' "$head" "$(_detops_fmt_s $(($3 * ($2 - $1) / $1)))"
  else
    printf '%s' "$head"
  fi
}

detops_gpu_visible() {
  command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1
}

# The correctness suite's tests that must not share the GPU with other processes: the large-index checks
# (inputs past 2^31 elements, tens of GB of device memory each; eight at once ran out of memory on an H200).
# shard_suite.py --serial runs them after the shards, in one process.
DETOPS_SERIAL_TESTS='*.large_index_*:*.large_output_*'

# Processes for the correctness suite (scripts/shard_suite.py): DETOPS_SUITE_SHARDS, else one per CPU this
# process may use, at most 16 (each process holds a CUDA context and the fp64 copies of its current case).
detops_gpu_list() {  # the GPUs this job may use, comma-separated: CUDA_VISIBLE_DEVICES when set (empty: none), else
  # nvidia-smi's; shard_suite.visible_gpus states the rule (one place for run.sh and the shards)
  "${DETOPS_PYTHON:-python3}" "$DETOPS_ROOT/scripts/shard_suite.py" --list-gpus || true
}

# shard_suite.py's arguments that make the suite step wait for the peer suite beside it (run.sh), one per line:
# --serial-after OUT/peer_pytest.rc, then --serial-after-log and each of the N processes' logs (peer_pytest.log,
# peer_pytest-1.log, ...), whose progress the waiting line follows. (Its own function, tested under set -euo pipefail:
# the inline loop it replaces built each name with "$([ "$i" -gt 0 ] && echo "-$i")" inside an array assignment,
# which takes the substitution's status, so set -e ended run.sh at process 0 on every machine with a GPU.)
detops_peer_wait_args() {  # OUT N
  local out=$1 n=$2 i
  printf '%s\n' --serial-after "$out/peer_pytest.rc"
  for ((i = 0; i < n; i++)); do
    if [ "$i" -eq 0 ]; then
      printf '%s\n' --serial-after-log "$out/peer_pytest.log"
    else
      printf '%s\n' --serial-after-log "$out/peer_pytest-$i.log"
    fi
  done
}

detops_use_reference_cache() {  # DEFAULT_DIR: export DETOPS_REFERENCE_CACHE (the caller's value wins; empty: off),
  export DETOPS_REFERENCE_CACHE="${DETOPS_REFERENCE_CACHE-$1}"  # pruned to DETOPS_REFERENCE_CACHE_GB (default 20)
  [ -z "$DETOPS_REFERENCE_CACHE" ] || detops_prune_reference_cache "$DETOPS_REFERENCE_CACHE" "${DETOPS_REFERENCE_CACHE_GB:-20}"
}

# Earlier test times for a split, colon-separated and merged in that order by their reader (a later file's time of a
# test wins): the committed results/suite-times/<GPU><SUFFIX>, then the files FILES (a glob) of the newest earlier run
# of this GPU model under results/runs/ that holds NEWEST (not RUN_ID's own); either alone when the other is missing;
# nothing: the reader's fallback. The committed times come first so that a test the earlier run did not hold (a quick
# gate's: only its ops) keeps a time.
_detops_earlier_times() {  # GPU RUN_ID SUFFIX NEWEST FILES
  local prev files=()
  [ -f "$DETOPS_ROOT/results/suite-times/$1$3" ] && files+=("$DETOPS_ROOT/results/suite-times/$1$3")
  prev=$(ls -t "$DETOPS_ROOT"/results/runs/*_"$1"/"$4" 2>/dev/null | grep -v "/$2/" | head -n1 || true)
  # FILES unquoted: a glob, expanded here
  [ -n "$prev" ] && files+=("${prev%"$4"}"$5)
  [ ${#files[@]} -eq 0 ] || (IFS=:; echo "${files[*]}")
  return 0
}

# GPU RUN_ID: the torchvision peer suite's earlier test times (suites/peer/pytest_split.py): <GPU>.peer.json.gz, then
# every peer_times-*.json of the newest earlier run; nothing: a split by hash.
detops_peer_times() { _detops_earlier_times "$1" "$2" .peer.json.gz peer_times-0.json 'peer_times-*.json'; }

# GPU RUN_ID: the correctness shards' earlier test times (scripts/shard_suite.py --timings): <GPU>.json.gz, then the
# newest earlier run's correctness.json; nothing: GoogleTest's round-robin split.
detops_suite_times() { _detops_earlier_times "$1" "$2" .json.gz correctness.json correctness.json; }

detops_prune_reference_cache() {  # DIR GB: the oldest entries (by modification time: a hit touches its file) removed
  local dir=$1 cap=$2                # until the cache holds at most GB gibibytes; leftover temporary files too
  [[ "$cap" =~ ^[0-9]+$ ]] || detops_die "DETOPS_REFERENCE_CACHE_GB: '$cap' (expected a whole number of GiB)"
  [ -d "$dir" ] || return 0
  find "$dir" -name '*.ref.tmp.*' -mmin +60 -delete 2>/dev/null || true
  local limit=$(( cap * 1024 * 1024 * 1024 )) total removed=0
  total=$(find "$dir" -type f -name '*.ref' -printf '%s\n' | awk '{s += $1} END {print s + 0}')
  [ "$total" -le "$limit" ] && return 0
  while read -r _ size path; do
    [ "$total" -le "$limit" ] && break
    rm -f "$path" && total=$(( total - size )) && removed=$(( removed + 1 ))
  done < <(find "$dir" -type f -name '*.ref' -printf '%T@ %s %p\n' | sort -n)
  detops_log "reference cache: removed the $removed least recently used entries (over ${cap} GiB)"
}

# The pytest processes of the peer suite beside the correctness shards on one GPU: DETOPS_PEER_PROCESSES when set
# (a positive number), else one per four CPUs, at least 2 and at most 8 (4 on the H200's 16 cores). With 2 the peer
# suite was the suite step's longest part (177 s and 163 s beside the 16 shards on the H200, which had ended by then);
# with 4, 89-108 s (c91487a), each test releasing its cached GPU memory (suites/peer/conftest.py: four processes'
# caches of 14-21 GB each left a shard without memory).
detops_peer_processes() {
  local n
  if [ -n "${DETOPS_PEER_PROCESSES:-}" ]; then
    n=$DETOPS_PEER_PROCESSES
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || detops_die "DETOPS_PEER_PROCESSES: '$n' (expected a positive number of processes)"
    echo "$n"
    return
  fi
  n=$(( $(nproc 2>/dev/null || echo 1) / 4 ))
  [ "$n" -lt 2 ] && n=2
  [ "$n" -gt 8 ] && n=8
  echo "$n"
}

detops_suite_shards() {
  if [ -n "${DETOPS_SUITE_SHARDS:-}" ]; then
    echo "$DETOPS_SUITE_SHARDS"
    return
  fi
  local n
  n=$(nproc 2>/dev/null || echo 1)
  [ "$n" -gt 16 ] && n=16
  echo "$n"
}
