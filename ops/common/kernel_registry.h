#pragma once
// Every CUDA kernel an op launches registers its symbol here (from the op's .cu file), so the harness
// can report, per kernel, whether the device runs it from native SASS or from JIT-compiled PTX, or
// cannot run it at all ("no kernel image is available").
#include <string>
#include <vector>

#include "detops/core/kernel_facts.h"

namespace detops {

struct KernelEntry {
  std::string op;
  std::string name;
  const void* symbol = nullptr;
};

void register_kernel(const char* op, const char* name, const void* symbol);
const std::vector<KernelEntry>& registered_kernels();

// The architectures this build carries SASS for (e.g. "90" or "75,80,...,120"), and all targets.
const char* built_sass_architectures();
const char* built_cuda_architectures();

// Queries cudaFuncGetAttributes for every registered kernel on `device`. A kernel runs from SASS when
// the build carries SASS of the device's major version with a minor version <= the device's.
std::vector<KernelImage> inspect_kernel_images(int device);

// The above, for the harness (attach_kernel_facts).
KernelFacts kernel_facts();

struct KernelRegistrar {
  KernelRegistrar(const char* op, const char* name, const void* symbol) { register_kernel(op, name, symbol); }
};

}  // namespace detops
