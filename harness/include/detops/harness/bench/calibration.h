#pragma once
// The calibration benchmark: a kernel whose GPU time is proportional to a work factor, so a run with
// --detops_calibration_work=1.1 must be reported SLOWER than one with 1.0 by the compare tool. Each
// thread runs one dependent chain of round(kBaseChain * work) FMAs; the grid is fixed (4 blocks of 256
// threads per SM), so only the chain length changes. Its name does not depend on the factor.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace detops::harness::bench {

class CalibrationKernel {
 public:
  static constexpr std::int64_t kBaseChain = 32768;
  static constexpr int kThreads = 256;
  static constexpr int kBlocksPerSm = 4;

  // Throws std::invalid_argument for a work factor outside (0, 100], std::runtime_error on CUDA errors.
  CalibrationKernel(int device, double work);
  ~CalibrationKernel();
  CalibrationKernel(const CalibrationKernel&) = delete;
  CalibrationKernel& operator=(const CalibrationKernel&) = delete;

  void launch(cudaStream_t stream);
  std::int64_t chain_length() const { return chain_; }
  std::int64_t threads_total() const { return static_cast<std::int64_t>(blocks_) * kThreads; }
  std::int64_t bytes() const { return threads_total() * 4; }  // one float written per thread
  std::string shape() const;

 private:
  float* out_ = nullptr;
  int blocks_ = 0;
  std::int64_t chain_ = 0;
};

}  // namespace detops::harness::bench
