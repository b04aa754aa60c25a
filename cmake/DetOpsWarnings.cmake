include_guard(GLOBAL)
add_library(detops_warnings INTERFACE)
target_compile_options(detops_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-unused-parameter>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall -Xcompiler=-Wextra --Werror=cross-execution-space-call>)
if(DETOPS_WARNINGS_AS_ERRORS)
  target_compile_options(detops_warnings INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-Werror>
    $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Werror>)
endif()
