cmake_minimum_required(VERSION 3.25)
# ctest -P script: checks that LIB carries SASS for every architecture in SASS_ARCHS and PTX for every one
# in PTX_ARCHS (comma separated; either may be empty) and nothing else, as cuobjdump sees it, and prints the
# SASS and PTX it found. Catches a build that silently fell back to nvcc's default architecture, and a
# release build that lost the PTX newer GPUs JIT-compile.
#   cmake -DLIB=... -DCUOBJDUMP=... -DSASS_ARCHS=90,100 -DPTX_ARCHS=100 -P CheckKernelImages.cmake
execute_process(COMMAND "${CUOBJDUMP}" --list-elf "${LIB}" OUTPUT_VARIABLE elf RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cuobjdump --list-elf ${LIB} failed: ${err}")
endif()
execute_process(COMMAND "${CUOBJDUMP}" --list-ptx "${LIB}" OUTPUT_VARIABLE ptx ERROR_QUIET)
string(REGEX MATCHALL "sm_[0-9]+[af]?" found_sass "${elf}")
list(REMOVE_DUPLICATES found_sass)
string(REGEX MATCHALL "sm_[0-9]+[af]?" found_ptx "${ptx}")
list(REMOVE_DUPLICATES found_ptx)
message(STATUS "SASS in ${LIB}: ${found_sass}; PTX: ${found_ptx}")

# Fails unless FOUND (sm_NN names) is exactly the comma-separated CONFIGURED list, for one KIND of code.
function(check_exactly kind found configured)
  string(REPLACE "," ";" expected "${configured}")
  list(TRANSFORM expected PREPEND "sm_")
  foreach(arch IN LISTS expected)
    if(NOT arch IN_LIST found)
      message(FATAL_ERROR "expected ${kind} for ${arch} (the configured architectures) but ${LIB} has ${kind}: ${found}")
    endif()
  endforeach()
  foreach(arch IN LISTS found)
    if(NOT arch IN_LIST expected)
      message(FATAL_ERROR "${LIB} carries ${kind} for ${arch}, which was not configured (${configured})")
    endif()
  endforeach()
endfunction()

check_exactly(SASS "${found_sass}" "${SASS_ARCHS}")
if(DEFINED PTX_ARCHS)
  check_exactly(PTX "${found_ptx}" "${PTX_ARCHS}")
endif()
