#pragma once
// What the op library knows about its own GPU code, in the shape the harness reports it. The op library
// fills a KernelFacts (ops/common/kernel_registry.h: kernel_facts()); the harness never links the op
// library and receives it through attach_kernel_facts (detops/harness/device_facts.h).
#include <string>
#include <vector>

namespace detops {

enum class KernelImageSource { kSass, kPtxJit, kUnavailable };

inline const char* kernel_image_source_name(KernelImageSource source) {
  switch (source) {
    case KernelImageSource::kSass: return "sass";
    case KernelImageSource::kPtxJit: return "ptx-jit";
    case KernelImageSource::kUnavailable: return "unavailable";
  }
  return "unknown";
}

struct KernelImage {
  std::string op;
  std::string name;
  KernelImageSource source = KernelImageSource::kUnavailable;
  int binary_version = 0;  // cudaFuncAttributes::binaryVersion (major*10+minor)
  int ptx_version = 0;     // cudaFuncAttributes::ptxVersion
  int num_regs = 0;
  long long local_bytes = 0;
  std::string error;       // CUDA's error when the kernel cannot be loaded on this device
};

struct KernelFacts {
  std::string sass_architectures;  // e.g. "90" or "75,80,...,120"
  std::string cuda_architectures;  // CMAKE_CUDA_ARCHITECTURES as built
  std::vector<KernelImage> (*inspect)(int device) = nullptr;  // one entry per registered kernel
};

}  // namespace detops
