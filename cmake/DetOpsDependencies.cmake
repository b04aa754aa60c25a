# Every dependency is found on the machine; nothing is downloaded during the build.
# A missing package stops configuration with one line that says what to install and how.
include_guard(GLOBAL)

macro(detops_require_package name hint)
  find_package(${name} ${ARGN} QUIET)
  if(NOT ${name}_FOUND)
    message(FATAL_ERROR "DetOps: ${name} not found. ${hint}")
  endif()
  message(STATUS "DetOps: found ${name} ${${name}_VERSION}")
endmacro()

detops_require_package(GTest "Install it: apt-get install libgtest-dev (or run scripts/setup.sh)." CONFIG)
detops_require_package(benchmark "Install it: apt-get install libbenchmark-dev (or run scripts/setup.sh)." CONFIG)
detops_require_package(Eigen3 "Install it: apt-get install libeigen3-dev (or run scripts/setup.sh)." 3.3 CONFIG)
detops_require_package(nlohmann_json "Install it: apt-get install nlohmann-json3-dev (or run scripts/setup.sh)." 3 CONFIG)

# libtorch comes from the torch package of a Python environment (scripts/setup.sh makes .venv).
if(NOT DETOPS_PYTHON)
  if(EXISTS "${CMAKE_SOURCE_DIR}/.venv/bin/python")
    set(DETOPS_PYTHON "${CMAKE_SOURCE_DIR}/.venv/bin/python")
  else()
    find_program(DETOPS_PYTHON NAMES python3 python)
  endif()
endif()
set(DETOPS_TORCH_CUDA_VERSION "")
set(DETOPS_TORCH_VERSION "")
if(DETOPS_PYTHON)
  execute_process(
    COMMAND "${DETOPS_PYTHON}" -c "import torch; print(torch.utils.cmake_prefix_path); print(torch.__version__); print(torch.version.cuda or '')"
    OUTPUT_VARIABLE _detops_torch_info RESULT_VARIABLE _detops_torch_rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(_detops_torch_rc EQUAL 0)
    string(REPLACE "\n" ";" _detops_torch_info "${_detops_torch_info}")
    list(GET _detops_torch_info 0 _detops_torch_prefix)
    list(GET _detops_torch_info 1 DETOPS_TORCH_VERSION)
    list(LENGTH _detops_torch_info _n)
    if(_n GREATER 2)
      list(GET _detops_torch_info 2 DETOPS_TORCH_CUDA_VERSION)
    endif()
    list(APPEND CMAKE_PREFIX_PATH "${_detops_torch_prefix}")
  endif()
endif()
if(NOT DETOPS_TORCH_VERSION)
  # A libtorch found through CMAKE_PREFIX_PATH (e.g. an unpacked libtorch zip): read its version files.
  find_path(_detops_torch_root NAMES build-version PATHS ${CMAKE_PREFIX_PATH} PATH_SUFFIXES libtorch NO_DEFAULT_PATH)
  if(_detops_torch_root AND EXISTS "${_detops_torch_root}/build-version")
    file(READ "${_detops_torch_root}/build-version" DETOPS_TORCH_VERSION)
    string(STRIP "${DETOPS_TORCH_VERSION}" DETOPS_TORCH_VERSION)
    if(DETOPS_TORCH_VERSION MATCHES "\\+cu([0-9]+)([0-9])$")
      set(DETOPS_TORCH_CUDA_VERSION "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}")
    endif()
  endif()
endif()

# The CUDA major version libtorch was built for must match nvcc's: a mismatch builds, then fails at
# load time with undefined symbols or "no kernel image", which is the most common way extensions break.
if(DETOPS_TORCH_VERSION)
  if(NOT DETOPS_TORCH_CUDA_VERSION)
    message(FATAL_ERROR "DetOps: torch ${DETOPS_TORCH_VERSION} (from ${DETOPS_PYTHON}) is a CPU-only build; DetOps needs a CUDA build of torch whose CUDA major version matches nvcc ${CMAKE_CUDA_COMPILER_VERSION}. Install it: ${DETOPS_PYTHON} -m pip install torch==2.11.0 (the PyPI Linux wheel is built for CUDA 13.0).")
  endif()
  string(REGEX MATCH "^[0-9]+" _detops_torch_cuda_major "${DETOPS_TORCH_CUDA_VERSION}")
  string(REGEX MATCH "^[0-9]+" _detops_nvcc_major "${CMAKE_CUDA_COMPILER_VERSION}")
  if(NOT _detops_torch_cuda_major STREQUAL _detops_nvcc_major)
    message(FATAL_ERROR
      "DetOps: CUDA version mismatch. libtorch ${DETOPS_TORCH_VERSION} was built for CUDA ${DETOPS_TORCH_CUDA_VERSION}, "
      "but nvcc (${CMAKE_CUDA_COMPILER}) is CUDA ${CMAKE_CUDA_COMPILER_VERSION}. "
      "Kernels built by one CUDA major version and loaded next to a libtorch of another fail at load or launch time. "
      "Fix it one of two ways: (1) build against the matching toolkit: -DCMAKE_CUDA_COMPILER=/usr/local/cuda-${DETOPS_TORCH_CUDA_VERSION}/bin/nvcc; "
      "or (2) install the torch build for CUDA ${_detops_nvcc_major}: ${DETOPS_PYTHON} -m pip install torch==2.11.0 (PyPI's Linux wheel is CUDA 13.0) "
      "or the +cu${_detops_nvcc_major}x wheel from PyTorch's own index.")
  endif()
  message(STATUS "DetOps: torch ${DETOPS_TORCH_VERSION} (CUDA ${DETOPS_TORCH_CUDA_VERSION}) matches nvcc ${CMAKE_CUDA_COMPILER_VERSION}")
endif()

# Torch's CMake files append their own -gencode list (and other flags) to CMAKE_CUDA_FLAGS and set
# CMAKE_CUDA_ARCHITECTURES to OFF (which would leave nvcc at its default, sm_75, so an H200 would JIT
# every kernel from compute_75 PTX). Our architectures come from CMAKE_CUDA_ARCHITECTURES alone, so
# both are restored afterwards; the kernel_images test checks the built library.
set(_detops_saved_cuda_flags "${CMAKE_CUDA_FLAGS}")
set(_detops_saved_cuda_archs "${CMAKE_CUDA_ARCHITECTURES}")
unset(CMAKE_CUDA_ARCHITECTURES)  # torch warns that it ignores it; it is restored below
if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(ENV{TORCH_CUDA_ARCH_LIST} "9.0")  # only silences torch's GPU auto-detection; not used for our code
endif()
find_package(Torch CONFIG QUIET)
set(CMAKE_CUDA_FLAGS "${_detops_saved_cuda_flags}")
set(CMAKE_CUDA_ARCHITECTURES "${_detops_saved_cuda_archs}")
if(NOT Torch_FOUND)
  message(FATAL_ERROR "DetOps: libtorch (Torch) not found. Run scripts/setup.sh (installs torch==2.11.0 into .venv), or pass -DDETOPS_PYTHON=/path/to/python-with-torch or -DCMAKE_PREFIX_PATH=\"$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')\".")
endif()
message(STATUS "DetOps: found libtorch ${DETOPS_TORCH_VERSION} at ${TORCH_INSTALL_PREFIX}")

# One imported target for libtorch without torch's global CUDA flags leaking into our kernels.
add_library(detops_libtorch INTERFACE)
target_link_libraries(detops_libtorch INTERFACE ${TORCH_LIBRARIES})
target_include_directories(detops_libtorch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
