# Finds nvcc, chooses the GPU architectures, enables CUDA and finds the toolkit (with CUPTI).
include_guard(GLOBAL)
include(CheckLanguage)

check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(FATAL_ERROR "DetOps: nvcc (CUDA Toolkit >= 12) not found. Install the CUDA Toolkit and put its bin/ on PATH, or pass -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc.")
endif()

# The compute capabilities of the visible GPUs ("9.0"), if any: for 'auto' and to name the SASS that
# 'native' builds carry.
execute_process(COMMAND nvidia-smi --query-gpu=compute_cap --format=csv,noheader
                OUTPUT_VARIABLE _detops_gpu_caps RESULT_VARIABLE _detops_smi_rc ERROR_QUIET
                OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _detops_smi_rc EQUAL 0)
  set(_detops_gpu_caps "")
endif()

# Resolve the architecture list before enable_language(CUDA) so that CMake never probes with a wrong one.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
  if(DETOPS_CUDA_ARCH STREQUAL "auto")
    if(_detops_gpu_caps MATCHES "[0-9]+\\.[0-9]+")
      set(CMAKE_CUDA_ARCHITECTURES native)
      message(STATUS "DetOps: GPU visible (compute capability ${_detops_gpu_caps}); building for 'native'")
    else()
      set(CMAKE_CUDA_ARCHITECTURES 90)
      message(STATUS "DetOps: no GPU visible; building for sm_90")
    endif()
  elseif(DETOPS_CUDA_ARCH STREQUAL "all-supported")
    execute_process(COMMAND "${CMAKE_CUDA_COMPILER}" --list-gpu-arch
                    OUTPUT_VARIABLE _detops_virtual RESULT_VARIABLE _detops_rc OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT _detops_rc EQUAL 0)
      message(FATAL_ERROR "DetOps: '${CMAKE_CUDA_COMPILER} --list-gpu-arch' failed; set CMAKE_CUDA_ARCHITECTURES by hand.")
    endif()
    string(REGEX MATCHALL "compute_[0-9]+\n|compute_[0-9]+$" _detops_plain "${_detops_virtual}")
    set(_detops_archs "")
    foreach(_a IN LISTS _detops_plain)
      string(REGEX REPLACE "compute_([0-9]+).*" "\\1" _n "${_a}")
      list(APPEND _detops_archs "${_n}")
    endforeach()
    list(REMOVE_DUPLICATES _detops_archs)
    list(SORT _detops_archs COMPARE NATURAL)
    list(POP_BACK _detops_archs _detops_newest)
    list(TRANSFORM _detops_archs APPEND "-real")
    # SASS for every arch, SASS + PTX for the newest so future GPUs can JIT it.
    set(CMAKE_CUDA_ARCHITECTURES ${_detops_archs} ${_detops_newest})
  else()
    set(CMAKE_CUDA_ARCHITECTURES ${DETOPS_CUDA_ARCH})
  endif()
endif()

enable_language(CUDA)
message(STATUS "DetOps: nvcc ${CMAKE_CUDA_COMPILER_VERSION}, CUDA architectures: ${CMAKE_CUDA_ARCHITECTURES}")

find_package(CUDAToolkit REQUIRED)
if(NOT TARGET CUDA::cupti)
  message(FATAL_ERROR "DetOps: CUPTI not found in the CUDA Toolkit at ${CUDAToolkit_LIBRARY_ROOT}. Install the toolkit's CUPTI component (e.g. apt-get install cuda-cupti-dev-13-0).")
endif()

# The architectures that carry SASS and those that carry PTX, as strings the kernels' image report and the
# kernel_images check compare against: "90" carries both, "90-real" SASS, "80-virtual" PTX, "native" the
# visible GPUs' SASS.
set(DETOPS_SASS_ARCHS "")
set(DETOPS_PTX_ARCHS "")
foreach(_a IN LISTS CMAKE_CUDA_ARCHITECTURES)
  if(_a STREQUAL "native")
    string(REPLACE "." "" _native "${_detops_gpu_caps}")
    string(REPLACE "\n" ";" _native "${_native}")
    list(APPEND DETOPS_SASS_ARCHS ${_native})
    continue()
  endif()
  string(REGEX REPLACE "^([0-9]+[af]?).*" "\\1" _n "${_a}")
  if(NOT _a MATCHES "-virtual$")
    list(APPEND DETOPS_SASS_ARCHS "${_n}")
  endif()
  if(NOT _a MATCHES "-real$")
    list(APPEND DETOPS_PTX_ARCHS "${_n}")
  endif()
endforeach()
list(REMOVE_DUPLICATES DETOPS_SASS_ARCHS)
list(REMOVE_DUPLICATES DETOPS_PTX_ARCHS)
list(JOIN DETOPS_SASS_ARCHS "," DETOPS_SASS_ARCHS_STRING)
list(JOIN DETOPS_PTX_ARCHS "," DETOPS_PTX_ARCHS_STRING)
list(JOIN CMAKE_CUDA_ARCHITECTURES "," DETOPS_CUDA_ARCHS_STRING)
