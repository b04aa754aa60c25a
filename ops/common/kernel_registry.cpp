#include "common/kernel_registry.h"

#include <cuda_runtime_api.h>

#include <mutex>
#include <sstream>

#ifndef DETOPS_SASS_ARCHS
#error "DETOPS_SASS_ARCHS must be defined by the build (the architectures that carry SASS)"
#endif
#ifndef DETOPS_CUDA_ARCHS
#error "DETOPS_CUDA_ARCHS must be defined by the build (CMAKE_CUDA_ARCHITECTURES)"
#endif

namespace detops {
namespace {

std::vector<KernelEntry>& registry() {
  static std::vector<KernelEntry> entries;
  return entries;
}

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

// True when one of the SASS architectures in `list` ("90,100a") runs on a device of major.minor.
bool has_compatible_sass(const std::string& list, int major, int minor) {
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const bool arch_specific = item.back() == 'a' || item.back() == 'f';
    const int value = std::stoi(arch_specific ? item.substr(0, item.size() - 1) : item);
    const int sass_major = value / 10, sass_minor = value % 10;
    if (sass_major != major) continue;
    if (arch_specific ? sass_minor == minor : sass_minor <= minor) return true;
  }
  return false;
}

}  // namespace

void register_kernel(const char* op, const char* name, const void* symbol) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().push_back(KernelEntry{op, name, symbol});
}

const std::vector<KernelEntry>& registered_kernels() { return registry(); }

const char* built_sass_architectures() { return DETOPS_SASS_ARCHS; }
const char* built_cuda_architectures() { return DETOPS_CUDA_ARCHS; }

std::vector<KernelImage> inspect_kernel_images(int device) {
  int major = 0, minor = 0;
  std::vector<KernelImage> images;
  const bool device_ok = cudaSetDevice(device) == cudaSuccess &&
                         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                         cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess;
  const bool sass = device_ok && has_compatible_sass(DETOPS_SASS_ARCHS, major, minor);
  for (const KernelEntry& k : registered_kernels()) {
    KernelImage img;
    img.op = k.op;
    img.name = k.name;
    cudaFuncAttributes attr{};
    const cudaError_t err = device_ok ? cudaFuncGetAttributes(&attr, k.symbol) : cudaErrorNoDevice;
    if (err != cudaSuccess) {
      img.error = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
      cudaGetLastError();  // not sticky; clear it so later calls are unaffected
    } else {
      img.binary_version = attr.binaryVersion;
      img.ptx_version = attr.ptxVersion;
      img.num_regs = attr.numRegs;
      img.local_bytes = static_cast<long long>(attr.localSizeBytes);
      img.source = sass ? KernelImageSource::kSass : KernelImageSource::kPtxJit;
    }
    images.push_back(std::move(img));
  }
  return images;
}

KernelFacts kernel_facts() { return KernelFacts{DETOPS_SASS_ARCHS, DETOPS_CUDA_ARCHS, &inspect_kernel_images}; }

}  // namespace detops
