#include "detops/harness/bench/calibration.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "detops/core/cuda_check.h"

namespace detops::harness::bench {
namespace {

// One dependent FMA chain per thread; a and b are runtime values, so the chain cannot be folded.
__global__ void calibration_fma_chain(float* out, std::int64_t chain, float a, float b) {
  float x = static_cast<float>(threadIdx.x) * 1e-3f;
  for (std::int64_t i = 0; i < chain; ++i) x = fmaf(x, a, b);
  out[static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x] = x;
}

}  // namespace

CalibrationKernel::CalibrationKernel(int device, double work) {
  if (!(work > 0.0 && work <= 100.0)) {
    throw std::invalid_argument("--detops_calibration_work must be in (0, 100]; got " + std::to_string(work));
  }
  int sms = 0;
  DETOPS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  blocks_ = std::max(1, sms) * kBlocksPerSm;
  chain_ = std::max<std::int64_t>(1, std::llround(static_cast<double>(kBaseChain) * work));
  DETOPS_CUDA_CHECK(cudaMalloc(&out_, static_cast<std::size_t>(threads_total()) * sizeof(float)));
}

CalibrationKernel::~CalibrationKernel() {
  if (out_ != nullptr) DETOPS_CUDA_CHECK_NOTHROW(cudaFree(out_));
}

void CalibrationKernel::launch(cudaStream_t stream) {
  calibration_fma_chain<<<blocks_, kThreads, 0, stream>>>(out_, chain_, 0.999f, 1e-3f);
  DETOPS_CUDA_CHECK(cudaGetLastError());
}

std::string CalibrationKernel::shape() const {
  return std::to_string(blocks_) + "x" + std::to_string(kThreads) + " threads, dependent fp32 FMA chain";
}

}  // namespace detops::harness::bench
