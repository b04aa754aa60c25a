#!/usr/bin/env bash
# Comparing builds (the third use of DetOps): the same source built with another nvcc, or for other GPU
# targets, run side by side on this machine's GPU, and compared (compare.py --cross-build): the speed of
# every benchmark and how far every op's outputs moved. docs/compare.md, "Two builds on one GPU".
#
#   scripts/cross_build.sh all [--toolkit VERSION] [--bench-filter REGEX]
#       one command: builds `system` (the nvcc on PATH, sm_90 SASS or this GPU's), builds `cuda-VERSION`
#       (nvcc VERSION from PyPI, same targets), runs both and compares them. VERSION defaults to 13.5.37.
#   scripts/cross_build.sh toolkit VERSION
#       installs nvcc VERSION from PyPI (nvidia-cuda-nvcc, nvidia-nvvm, nvidia-cuda-crt, nvidia-cuda-runtime;
#       about 125 MB) into build/toolkits/cuda-VERSION, a toolkit root whose compiler and compiler headers are
#       VERSION's and whose libraries (cudart, cuBLAS, CUPTI) and CCCL are the system toolkit's: a torch
#       extension uses the libraries torch already loaded, so only the compiler differs.
#   scripts/cross_build.sh build LABEL [--toolkit VERSION | --nvcc PATH] [--arch LIST]
#       configures and builds build/xb/LABEL (Release, tests on; LIST is CMAKE_CUDA_ARCHITECTURES, default
#       90, e.g. 80-virtual for a build that carries only compute_80 PTX), then writes its build facts
#       (build/xb/LABEL/build-facts.json: nvcc and ptxas versions, -gencode list, per-kernel registers,
#       spills and shared memory from ptxas).
#   scripts/cross_build.sh run BASE CAND [--bench-filter REGEX] [--suite-filter FILTER] [--shards N]
#       measure BASE and CAND into results/cross/<UTC time>_BASE_vs_CAND/, then compare them.
#   scripts/cross_build.sh measure LABEL DIR [same options] [--suite-only | --bench-only]
#       one build's side, into DIR/LABEL: checks its GPU code against this GPU (a build with SASS must carry
#       SASS for it; a PTX-only build must be JIT-compiled, and is said to be), runs the CUDA correctness suite
#       (N processes, default 4, outputs saved; the large-index cases, tens of GB each, afterwards in one
#       process) and the benchmarks (all, or REGEX), and writes record.json,
#       correctness.json, outputs/ and build-facts.json (with each kernel's SASS digest from cuobjdump).
#   scripts/cross_build.sh compare DIR BASE CAND
#       compare.py --cross-build on DIR/BASE and DIR/CAND (speed and output movement) and the build facts'
#       differences (versions, -gencode, registers, spills, identical SASS): DIR/compare.md, DIR/compare.json.
#   scripts/cross_build.sh pack LABEL OUT.tar.xz / unpack IN.tar.xz
#       the built binaries of build/xb/LABEL (library, suites, build facts) for another machine: a GPU
#       machine without network cannot install a second toolkit, so build it elsewhere and carry this.
#
# Exit status: non-zero when a build fails, a build's GPU code cannot run here, a correctness check fails,
# or compare.py finds a correctness change between the builds (slowdowns are reported, not gated: two
# builds are expected to differ in speed).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

XB_DEFAULT_TOOLKIT=13.5.37
XB_ROOT="$DETOPS_ROOT/build/xb"

xb_usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }

# The system toolkit's root: the directory above the bin/ of the nvcc on PATH (after detops_setup).
xb_system_root() { dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")"; }

xb_toolkit() {
  local ver=$1 root="$DETOPS_ROOT/build/toolkits/cuda-$1"
  if [ -x "$root/bin/nvcc" ]; then
    detops_log "toolkit $ver: $root (already installed)"
    return 0
  fi
  local sys tmp pipdir
  sys=$(xb_system_root)
  tmp="$root.partial"
  rm -rf "$tmp"
  mkdir -p "$tmp/pip" "$tmp/root"
  detops_log "toolkit $ver: installing nvcc $ver from PyPI into $root (compiler and its headers; libraries and CCCL from $sys)"
  "$DETOPS_PYTHON" -m pip install -q --disable-pip-version-check --no-deps --target "$tmp/pip" \
    "nvidia-cuda-nvcc==$ver" "nvidia-nvvm==$ver" "nvidia-cuda-crt==$ver" "nvidia-cuda-runtime==$ver" ||
    detops_die "pip could not install nvcc $ver (nvidia-cuda-nvcc==$ver and friends); this needs PyPI: on a machine without network, build there and carry the result (scripts/cross_build.sh pack)"
  pipdir="$tmp/pip/nvidia/cu13"
  [ -x "$pipdir/bin/nvcc" ] || detops_die "nvidia-cuda-nvcc==$ver has no bin/nvcc under nvidia/cu13"
  mv "$pipdir/bin" "$pipdir/nvvm" "$tmp/root/"
  # Headers: the system toolkit's (cuBLAS, CUPTI, CCCL, ...), with VERSION's compiler and runtime headers over them.
  mkdir -p "$tmp/root/include" "$tmp/root/lib"
  cp -rs "$sys/include/." "$tmp/root/include/"
  cp -rf --remove-destination "$pipdir/include/." "$tmp/root/include/"
  # Libraries: the system toolkit's (what torch loads), plus VERSION's libnvvm for its cicc.
  cp -rs "$(readlink -f "$sys/lib64" 2>/dev/null || echo "$sys/lib")/." "$tmp/root/lib/"
  cp -f --remove-destination "$pipdir"/lib/libnvvm.so* "$tmp/root/lib/"
  ln -s lib "$tmp/root/lib64"
  [ -d "$sys/extras" ] && ln -s "$sys/extras" "$tmp/root/extras"
  {
    echo "nvcc $ver from PyPI (nvidia-cuda-nvcc, nvidia-nvvm, nvidia-cuda-crt, nvidia-cuda-runtime headers)"
    echo "libraries, CCCL and other headers: $sys ($(nvcc --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p'))"
  } >"$tmp/root/TOOLKIT.txt"
  rm -rf "$root"
  mv "$tmp/root" "$root"
  rm -rf "$tmp"
  "$root/bin/nvcc" --version | tail -n 2
}

xb_build() {
  local label=$1; shift
  local nvcc="" toolkit="" arch=90
  while [ $# -gt 0 ]; do
    case $1 in
      --toolkit) toolkit=$2; shift 2 ;;
      --nvcc) nvcc=$2; shift 2 ;;
      --arch) arch=$2; shift 2 ;;
      *) detops_die "build: unknown argument '$1' (expected --toolkit VERSION, --nvcc PATH or --arch LIST)" ;;
    esac
  done
  [[ $label =~ ^[A-Za-z0-9._-]+$ ]] || detops_die "build: LABEL '$label' must be letters, digits, '.', '_' or '-'"
  if [ -n "$toolkit" ]; then
    xb_toolkit "$toolkit"
    nvcc="$DETOPS_ROOT/build/toolkits/cuda-$toolkit/bin/nvcc"
  fi
  [ -n "$nvcc" ] || nvcc=$(command -v nvcc)
  [ -x "$nvcc" ] || detops_die "build: nvcc '$nvcc' is not an executable"
  local root bdir
  root=$(dirname "$(dirname "$nvcc")")
  bdir="$XB_ROOT/$label"
  mkdir -p "$bdir"
  _detops_pick_cxx "$bdir"
  detops_log "build $label: nvcc $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\), V\([0-9.]*\).*/\2/p') ($nvcc), CMAKE_CUDA_ARCHITECTURES=$arch -> ${bdir#$DETOPS_ROOT/}"
  cmake -S "$DETOPS_ROOT" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDETOPS_BUILD_TESTS=ON \
    -DCMAKE_CUDA_COMPILER="$nvcc" -DCUDAToolkit_ROOT="$root" -DCMAKE_CUDA_ARCHITECTURES="$arch" \
    -DCMAKE_CUDA_FLAGS="-Xptxas=-v" -DDETOPS_PYTHON="$DETOPS_PYTHON" >"$bdir/configure.log" 2>&1 || {
    grep -E 'DetOps|Error' "$bdir/configure.log" >&2 || tail -n 30 "$bdir/configure.log" >&2
    detops_die "build $label: configuration failed (log: ${bdir#$DETOPS_ROOT/}/configure.log)"
  }
  # ptxas -v prints each kernel's registers, spills and shared memory: kept (appended) for the build facts.
  local rc=0
  cmake --build "$bdir" --target detops_torch detops_correctness detops_bench detops_unit_tests >>"$bdir/build.log" 2>&1 || rc=$?
  if [ $rc -ne 0 ]; then
    grep -E 'error|FAILED' "$bdir/build.log" | tail -n 20 >&2
    detops_die "build $label: failed (log: ${bdir#$DETOPS_ROOT/}/build.log)"
  fi
  "$DETOPS_PYTHON" "$DETOPS_ROOT/scripts/build_facts.py" collect "$bdir" --label "$label" -o "$bdir/build-facts.json"
}

xb_pack() {
  local label=$1 out=$2 bdir="$XB_ROOT/$1" lib path
  [ -f "$bdir/ops/libdetops_torch.so" ] || detops_die "pack: ${bdir#$DETOPS_ROOT/} has no built library (run: scripts/cross_build.sh build $label ...)"
  # Libraries the binaries need beyond torch's, the CUDA toolkit's and the C/C++ runtime (Debian's Google
  # Benchmark is libbenchmark.so.1debian; another distribution has another soname): bundled in lib/.
  rm -rf "$bdir/lib"
  mkdir -p "$bdir/lib"
  for path in $(ldd "$bdir/ops/libdetops_torch.so" "$bdir/suites/detops_correctness" "$bdir/suites/detops_bench" \
                  "$bdir/suites/detops_unit_tests" 2>/dev/null | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p' | sort -u); do
    lib=$(basename "$path")
    case $path in
      "$bdir"/*|*/torch/lib/*|*/cuda*/*|*/toolkits/*) continue ;;
    esac
    case $lib in
      libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libpthread.so*|libdl.so*|librt.so*|libutil.so*) continue ;;
    esac
    cp -L "$path" "$bdir/lib/$lib"
  done
  tar -C "$DETOPS_ROOT" -cJf "$out" "build/xb/$label/ops/libdetops_torch.so" "build/xb/$label/suites/detops_correctness" \
    "build/xb/$label/suites/detops_bench" "build/xb/$label/suites/detops_unit_tests" "build/xb/$label/build-facts.json" \
    "build/xb/$label/build.log" "build/xb/$label/configure.log" "build/xb/$label/lib"
  detops_log "pack $label: $out ($(du -h "$out" | cut -f1)); bundled: $(ls "$bdir/lib" | tr '\n' ' ')"
}

xb_unpack() {
  [ -f "$1" ] || detops_die "unpack: no file '$1'"
  tar -C "$DETOPS_ROOT" -xJf "$1"
  detops_log "unpack: $(tar -tJf "$1" | sed -n 's|^build/xb/\([^/]*\)/.*|\1|p' | sort -u | tr '\n' ' ')"
}

# The libraries a carried build needs at run time: its own folder, then torch's and the system toolkit's
# (the RUNPATH a build writes names the paths of the machine that built it).
xb_library_path() {
  local bdir=$1 torch_lib sys
  torch_lib=$("$DETOPS_PYTHON" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
  sys=$(xb_system_root)
  local p="$bdir/ops:$torch_lib:$sys/lib64:$sys/lib"
  [ -d "$bdir/lib" ] && p="$bdir/lib:$p"  # libraries bundled by pack
  [ -d "$sys/extras/CUPTI/lib64" ] && p="$p:$sys/extras/CUPTI/lib64"
  echo "$p${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# One build's side of a comparison, into DIR/LABEL: its GPU code checked against this GPU, the correctness
# suite (outputs saved) and the benchmarks. --suite-only / --bench-only split it over several sessions.
xb_measure() {
  local label=$1 dir=$2; shift 2
  local bench_filter="" suite_filter='*.cuda' shards=4 do_suite=1 do_bench=1
  while [ $# -gt 0 ]; do
    case $1 in
      --bench-filter) bench_filter=$2; shift 2 ;;
      --suite-filter) suite_filter=$2; shift 2 ;;
      --shards) shards=$2; shift 2 ;;
      --suite-only) do_bench=0; shift ;;
      --bench-only) do_suite=0; shift ;;
      *) detops_die "measure: unknown argument '$1' (expected --bench-filter, --suite-filter, --shards, --suite-only or --bench-only)" ;;
    esac
  done
  detops_gpu_visible || detops_die "measure: no CUDA GPU visible (nvidia-smi found none): builds are compared on a GPU"
  local bdir="$XB_ROOT/$label" out="$dir/$label" rc start libpath
  [ -x "$bdir/suites/detops_correctness" ] && [ -f "$bdir/ops/libdetops_torch.so" ] ||
    detops_die "measure: build '$label' not found in ${bdir#$DETOPS_ROOT/} (scripts/cross_build.sh build $label ..., or unpack a packed one)"
  mkdir -p "$out"
  detops_log "[$label] its GPU code against this GPU (scripts/doctor.py)"
  rc=0
  "$DETOPS_PYTHON" "$DETOPS_ROOT/scripts/doctor.py" --library "$bdir/ops/libdetops_torch.so" \
    --json "$out/doctor.json" >"$out/doctor.txt" 2>&1 || rc=$?
  "$DETOPS_PYTHON" "$DETOPS_ROOT/scripts/build_facts.py" check-image "$out/doctor.json" "$bdir/build-facts.json" ||
    detops_die "[$label] not measured: its GPU code is not what this GPU would run as built (${out#$DETOPS_ROOT/}/doctor.txt; doctor exit $rc)"
  libpath=$(xb_library_path "$bdir")
  local status=0
  if [ $do_suite = 1 ]; then
    detops_log "[$label] correctness suite ($suite_filter, $shards processes, outputs saved)"
    start=$(date +%s)
    rc=0
    # 1024 elements per output (a fixed-stride subsample past that) measure how far outputs moved and keep a
    # whole suite's dumps near 20 MB.
    LD_LIBRARY_PATH="$libpath" PYTHONUNBUFFERED=1 DETOPS_SAVE_OUTPUTS_MAX_ELEMENTS="${DETOPS_SAVE_OUTPUTS_MAX_ELEMENTS:-1024}" \
      "$DETOPS_PYTHON" "$DETOPS_ROOT/scripts/shard_suite.py" \
      --binary "$bdir/suites/detops_correctness" --filter "$suite_filter" --shards "$shards" --serial "$DETOPS_SERIAL_TESTS" \
      --out "$out/correctness.json" --outputs "$out/outputs" || rc=$?
    detops_log "[$label] correctness: exit $rc, $(( $(date +%s) - start )) s"
    [ $rc -ne 0 ] && status=1
  fi
  if [ $do_bench = 1 ]; then
    [ -f "$out/correctness.json" ] || detops_die "[$label] benchmarks: no ${out#$DETOPS_ROOT/}/correctness.json (run the suite first)"
    detops_log "[$label] benchmarks${bench_filter:+ (filter '$bench_filter')}; log ${out#$DETOPS_ROOT/}/bench.log"
    start=$(date +%s)
    rc=0
    LD_LIBRARY_PATH="$libpath" "$bdir/suites/detops_bench" ${bench_filter:+--benchmark_filter="$bench_filter"} \
      --detops_record="$out/record.json" --detops_correctness_json="$out/correctness.json" >"$out/bench.log" 2>&1 || rc=$?
    detops_log "[$label] benchmarks: exit $rc, $(( $(date +%s) - start )) s, $(grep -c '_median' "$out/bench.log" || true) medians"
    [ $rc -ne 0 ] && status=1
  fi
  "$DETOPS_PYTHON" "$DETOPS_ROOT/scripts/build_facts.py" finish "$out" --facts "$bdir/build-facts.json" \
    --library "$bdir/ops/libdetops_torch.so" || status=1
  return $status
}

# compare.py --cross-build on two measured sides of DIR, plus the build facts' differences: DIR/compare.md.
xb_compare() {
  local dir=$1 base=$2 cand=$3 crc=0
  detops_log "comparison: $base (baseline) vs $cand (candidate)"
  "$DETOPS_PYTHON" "$DETOPS_ROOT/scripts/compare.py" "$dir/$base/record.json" "$dir/$cand/record.json" --cross-build \
    --json-out "$dir/compare.json" >"$dir/compare.md" || crc=$?
  "$DETOPS_PYTHON" "$DETOPS_ROOT/scripts/build_facts.py" diff "$dir/$base/build-facts.json" "$dir/$cand/build-facts.json" \
    --base-correctness "$dir/$base/correctness.json" --cand-correctness "$dir/$cand/correctness.json" \
    >>"$dir/compare.md" || crc=$((crc ? crc : 2))
  cat "$dir/compare.md"
  # compare.py exits 1 for a confirmed slowdown or a correctness change: between builds only the latter fails.
  if [ $crc -eq 1 ]; then
    if "$DETOPS_PYTHON" - "$dir/compare.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
sys.exit(1 if c.get("gating_correctness_changes") else 0)
PY
    then
      detops_log "comparison: speed differences only (compare.py exit 1): reported, not gated between builds"
      crc=0
    fi
  fi
  detops_log "comparison: ${dir#$DETOPS_ROOT/}/compare.md (exit $crc)"
  return $crc
}

xb_run() {
  [ $# -ge 2 ] || xb_usage
  local base=$1 cand=$2 dir status=0
  shift 2
  dir="$DETOPS_ROOT/results/cross/$(date -u +%Y%m%dT%H%M%SZ)_${base}_vs_${cand}"
  xb_measure "$base" "$dir" "$@" || status=1
  xb_measure "$cand" "$dir" "$@" || status=1
  xb_compare "$dir" "$base" "$cand" || status=1
  detops_log "done: ${dir#$DETOPS_ROOT/} (exit $status)"
  return $status
}

cmd=${1:-}
[ -n "$cmd" ] || xb_usage
shift
case $cmd in
  -h|--help) xb_usage 0 ;;
  toolkit) [ $# -eq 1 ] || xb_usage; detops_setup >/dev/null; xb_toolkit "$1" ;;
  build) [ $# -ge 1 ] || xb_usage; detops_setup >/dev/null; xb_build "$@" ;;
  pack) [ $# -eq 2 ] || xb_usage; xb_pack "$1" "$2" ;;
  unpack) [ $# -eq 1 ] || xb_usage; xb_unpack "$1" ;;
  run) detops_setup >/dev/null; xb_run "$@" ;;
  measure) [ $# -ge 2 ] || xb_usage; detops_setup >/dev/null; xb_measure "$@" ;;
  compare) [ $# -eq 3 ] || xb_usage; detops_setup >/dev/null; xb_compare "$@" ;;
  all)
    ver=$XB_DEFAULT_TOOLKIT
    run_args=()
    while [ $# -gt 0 ]; do
      case $1 in
        --toolkit) ver=$2; shift 2 ;;
        *) run_args+=("$1"); shift ;;
      esac
    done
    detops_setup >/dev/null
    arch=90
    if detops_gpu_visible; then
      arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d '.[:space:]')
    fi
    xb_build system --arch "$arch"
    xb_build "cuda-$ver" --toolkit "$ver" --arch "$arch"
    xb_run system "cuda-$ver" "${run_args[@]}"
    ;;
  *) detops_die "unknown command '$cmd' (expected all, toolkit, build, measure, compare, run, pack or unpack; --help)" ;;
esac
