#pragma once
// Every CUDA kernel an op launches registers its symbol here (from the op's .cu file), so the harness
// can report, per kernel, whether the device runs it from native SASS or from JIT-compiled PTX, or
// cannot run it at all ("no kernel image is available").
#include <string>
#include <vector>

namespace detops {

struct KernelEntry {
  std::string op;
  std::string name;
  const void* symbol = nullptr;
};

enum class KernelImageSource { kSass, kPtxJit, kUnavailable };
const char* kernel_image_source_name(KernelImageSource source);

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

void register_kernel(const char* op, const char* name, const void* symbol);
const std::vector<KernelEntry>& registered_kernels();

// The architectures this build carries SASS for (e.g. "90" or "75,80,...,120"), and all targets.
const char* built_sass_architectures();
const char* built_cuda_architectures();

// Queries cudaFuncGetAttributes for every registered kernel on `device`. A kernel runs from SASS when
// the build carries SASS of the device's major version with a minor version <= the device's.
std::vector<KernelImage> inspect_kernel_images(int device);

struct KernelRegistrar {
  KernelRegistrar(const char* op, const char* name, const void* symbol) { register_kernel(op, name, symbol); }
};

}  // namespace detops
