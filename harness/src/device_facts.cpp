#include "detops/harness/device_facts.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <utility>

#include "detops/harness/checks.h"

#ifndef DETOPS_NVCC_VERSION
#define DETOPS_NVCC_VERSION "unknown"
#endif
#ifndef DETOPS_TORCH_VERSION
#define DETOPS_TORCH_VERSION "unknown"
#endif
#ifndef DETOPS_TORCH_CUDA_VERSION
#define DETOPS_TORCH_CUDA_VERSION "unknown"
#endif

namespace detops::harness {
namespace {

std::string version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

std::string uuid_text(const cudaUUID_t& u) {
  char buf[64];
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  std::snprintf(buf, sizeof(buf), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return buf;
}

int attribute(cudaDeviceAttr attr, int device) {
  int v = 0;
  if (cudaDeviceGetAttribute(&v, attr, device) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return v;
}

KernelFacts& attached() {
  static KernelFacts facts;
  return facts;
}

}  // namespace

void attach_kernel_facts(KernelFacts facts) { attached() = std::move(facts); }

nlohmann::json device_facts() {
  const KernelFacts& kf = attached();
  nlohmann::json j;
  j["build"] = {{"nvcc_version", DETOPS_NVCC_VERSION},
                {"cuda_architectures", kf.inspect ? kf.cuda_architectures : "unknown"},
                {"sass_architectures", kf.inspect ? kf.sass_architectures : "unknown"},
                {"libtorch_version", DETOPS_TORCH_VERSION},
                {"libtorch_cuda_version", DETOPS_TORCH_CUDA_VERSION}};
  int runtime = 0, driver = 0;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) j["cuda_runtime_version"] = version_text(runtime);
  if (cudaDriverGetVersion(&driver) == cudaSuccess) j["cuda_driver_api_version"] = driver ? version_text(driver) : "none";
  cudaGetLastError();
  j["cuda_available"] = cuda_available();
  if (!cuda_available()) {
    j["reason"] = cuda_unavailable_reason();
    return j;
  }
  const int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    j["reason"] = "cudaGetDeviceProperties failed";
    return j;
  }
  j["gpu"] = {{"name", prop.name},
              {"uuid", uuid_text(prop.uuid)},
              {"compute_capability", std::to_string(prop.major) + "." + std::to_string(prop.minor)},
              {"sm_count", prop.multiProcessorCount},
              {"total_memory_bytes", prop.totalGlobalMem},
              {"l2_cache_bytes", prop.l2CacheSize},
              {"ecc_enabled", prop.ECCEnabled != 0},
              {"default_sm_clock_khz", attribute(cudaDevAttrClockRate, device)},
              {"memory_clock_khz", attribute(cudaDevAttrMemoryClockRate, device)},
              {"memory_bus_width_bits", attribute(cudaDevAttrGlobalMemoryBusWidth, device)}};
  if (kf.inspect == nullptr) {
    j["kernels_reason"] = "no op library attached (attach_kernel_facts was not called)";
    return j;
  }
  nlohmann::json kernels = nlohmann::json::array();
  for (const KernelImage& k : kf.inspect(device)) {
    nlohmann::json e = {{"op", k.op},
                        {"kernel", k.name},
                        {"runs_from", kernel_image_source_name(k.source)},
                        {"binary_version", k.binary_version},
                        {"ptx_version", k.ptx_version},
                        {"registers", k.num_regs},
                        {"local_bytes", k.local_bytes}};
    if (!k.error.empty()) e["error"] = k.error;
    kernels.push_back(e);
  }
  j["kernels"] = kernels;
  return j;
}

}  // namespace detops::harness
