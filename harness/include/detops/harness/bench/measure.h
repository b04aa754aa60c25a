#pragma once
// The sampling loop of one benchmark: warm-up, samples (before each, untimed: the L2 flushed, or for a warm
// case the op's input rewritten by its touch), the stopping rule, throttled and dropped-record samples
// discarded. Part of detops_bench_harness; no libtorch.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "detops/harness/bench/gpu_timer.h"
#include "detops/harness/bench/nvml_device.h"
#include "detops/harness/bench/stopping.h"

namespace detops::harness::bench {

struct MeasureSettings {
  StoppingSettings stopping;
  bool cold_l2 = true;  // false (--detops_warm): cases without a touch run with no flush
  int repetitions = 9;
  double throttle_fraction = 0.75;
  int warmup_calls = 3;  // untimed calls before sampling, each after the same L2 preparation as a sample
  int max_invalid_without_valid = 20;  // invalid samples in a row, before any valid one, that fail the benchmark
  // Batching (timers that can, i.e. CUPTI): after a first sample taken alone, up to max_batch samples are
  // queued between two synchronizations, as many as make about batch_gpu_s of the last sample's kernel time.
  // max_batch 1: every sample alone (the host synchronizes, flushes CUPTI and reads the clock after each).
  // Samples whose kernels took less than min_batched_kernel_s are taken alone (next_batch_size, stopping.h).
  int max_batch = 64;
  double batch_gpu_s = 0.005;
  double min_batched_kernel_s = 50e-6;
  // Samples of calls under min_batched_kernel_s in batches of up to max_batch, synchronized after each sample
  // (next_synchronized_batch_size, stopping.h); off: those samples are taken alone.
  bool synchronized_short_batches = false;
};

struct Measurement {
  std::vector<double> samples_ms, span_samples_ms, sm_clocks_mhz;
  std::string stop_reason;
  double gpu_time_s = 0, wall_time_s = 0;
  double warmup_s = 0;  // wall time of the warm-up calls, before the sampling loop (wall_time_s)
  int kernels_per_call = -1;
  std::vector<std::string> kernel_names;  // of the first valid sample
  bool kernels_per_call_varied = false;
  std::int64_t discarded_throttled = 0, discarded_dropped_records = 0, discarded_other = 0;
  std::int64_t window_attributed_samples = 0;
  std::int64_t batches = 0;           // CUPTI flushes (a sample taken alone is a batch of one)
  std::int64_t synchronized_batches = 0;  // of them, batches synchronized after every sample
  int largest_batch = 0;
  std::int64_t unused_after_stop = 0;  // samples of the last batch after the one that made the rule stop
};

// A device buffer of at least the L2 size (cudaDevAttrL2CacheSize, at least 1 MiB) that flush() clears
// with cudaMemsetAsync, evicting the op's inputs from L2.
class L2Flusher {
 public:
  explicit L2Flusher(int device);
  ~L2Flusher();
  L2Flusher(const L2Flusher&) = delete;
  L2Flusher& operator=(const L2Flusher&) = delete;
  void flush(cudaStream_t stream);
  std::size_t bytes() const { return bytes_; }

 private:
  void* buffer_ = nullptr;
  std::size_t bytes_ = 0;
};

// What runs before each warm-up call and sample (and each metrics replay), never timed: the touch when the
// case has one (then the stream is synchronized, so none of its kernels completes inside a sample), else the
// flush when settings.cold_l2, else nothing (an empty function). Throws std::runtime_error on a CUDA error.
std::function<void()> sample_preparation(const MeasureSettings& settings, L2Flusher& flusher,
                                         const std::function<void()>& touch, cudaStream_t stream);

// Samples `call` until the stopping rule says stop. Samples are taken in batches (settings.max_batch) when
// the timer batches; each is still one call after its own preparation, attributed by itself, and handed to
// the stopping rule in order; the rule stops at the same sample as it would one sample at a time, and the
// batch's later samples are not used. The SM clock is read once per batch and applies to its samples. default_sm_clock_mhz <= 0 or an unavailable NVML
// device: no throttle check. Before each warm-up call and each sample, outside the timed range: `touch`
// when it is given (a warm case: it rewrites the call's main input on `stream`; the stream is then
// synchronized, so no kernel of it can be attributed to the call), else the L2 flush when
// settings.cold_l2, else nothing. Throws std::runtime_error when the GPU work fails or no sample is valid.
Measurement measure_call(const std::function<void()>& call, cudaStream_t stream, GpuTimer& timer,
                         const NvmlDevice& nvml, double default_sm_clock_mhz, const MeasureSettings& settings,
                         L2Flusher& flusher, const std::function<void()>& touch = {});

// Device-to-device copy bandwidth in bytes/s (read + write bytes), median of `repeats` cudaMemcpyAsync
// of `bytes` each, timed with CUDA events. Throws std::runtime_error (e.g. not enough memory).
double measure_device_copy_bandwidth(std::size_t bytes, int repeats, cudaStream_t stream);

}  // namespace detops::harness::bench
