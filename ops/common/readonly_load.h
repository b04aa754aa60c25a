#pragma once
// load_readonly(p): on the device, a load through the read-only data cache (__ldg); on the host, a plain
// load. Only for memory that nothing writes while the kernel runs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/macros.h"

namespace detops {

template <typename T>
DETOPS_HD T load_readonly(const T* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(p);
#else
  return *p;
#endif
}

}  // namespace detops
