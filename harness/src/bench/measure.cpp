#include "detops/harness/bench/measure.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <stdexcept>

#include "detops/harness/bench/stats.h"

#include "detops/core/cuda_check.h"

namespace detops::harness::bench {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

L2Flusher::L2Flusher(int device) {
  int l2 = 0;
  DETOPS_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  bytes_ = std::max<std::size_t>(static_cast<std::size_t>(l2) * 2, std::size_t{1} << 20);
  DETOPS_CUDA_CHECK(cudaMalloc(&buffer_, bytes_));
}

L2Flusher::~L2Flusher() {
  if (buffer_ != nullptr) DETOPS_CUDA_CHECK_NOTHROW(cudaFree(buffer_));
}

void L2Flusher::flush(cudaStream_t stream) {
  DETOPS_CUDA_CHECK(cudaMemsetAsync(buffer_, 0, bytes_, stream));
}

std::function<void()> sample_preparation(const MeasureSettings& settings, L2Flusher& flusher,
                                         const std::function<void()>& touch, cudaStream_t stream) {
  // The touch launches kernels (a flush is a memset, none), so the stream is synchronized after it: under
  // window attribution (gpu_timer.cpp) every kernel that completes between the timer's two synchronizations
  // counts, and the touch's must have completed before the first.
  if (touch) {
    return [touch, stream] {
      touch();
      DETOPS_CUDA_CHECK(cudaStreamSynchronize(stream));
    };
  }
  if (settings.cold_l2) {
    L2Flusher* f = &flusher;
    return [f, stream] { f->flush(stream); };
  }
  return {};
}

Measurement measure_call(const std::function<void()>& call, cudaStream_t stream, GpuTimer& timer,
                         const NvmlDevice& nvml, double default_sm_clock_mhz, const MeasureSettings& settings,
                         L2Flusher& flusher, const std::function<void()>& touch) {
  const std::function<void()> before = sample_preparation(settings, flusher, touch, stream);
  Measurement m;
  const auto warmup_start = std::chrono::steady_clock::now();
  for (int i = 0; i < settings.warmup_calls; ++i) {
    if (before) before();
    call();
    DETOPS_CUDA_CHECK(cudaDeviceSynchronize());
  }
  m.warmup_s = seconds_since(warmup_start);

  StoppingRule rule(settings.stopping);
  const auto t0 = std::chrono::steady_clock::now();
  std::int64_t invalid_in_a_row = 0;
  std::string last_invalid;
  int batch = 1;  // the first sample alone: its kernel time sizes the batches, its names are kept
  bool synchronize_each = false;
  for (;;) {
    const std::vector<KernelSample> samples =
        timer.time_calls(call, before, stream, batch, m.samples_ms.empty(), synchronize_each);
    const int clock = nvml.sm_clock_mhz();  // after the batch's synchronization
    ++m.batches;
    if (synchronize_each && batch > 1) ++m.synchronized_batches;
    m.largest_batch = std::max(m.largest_batch, static_cast<int>(samples.size()));
    const KernelSample* last_valid = nullptr;
    std::optional<StopReason> reason;
    for (std::size_t i = 0; i < samples.size(); ++i) {
      const KernelSample& s = samples[i];
      if (!s.valid) {
        if (s.dropped_records) {
          ++m.discarded_dropped_records;
        } else {
          ++m.discarded_other;
        }
        last_invalid = s.invalid_reason;
        if (m.samples_ms.empty() && ++invalid_in_a_row >= settings.max_invalid_without_valid) {
          throw std::runtime_error("no valid sample in " + std::to_string(invalid_in_a_row) + " tries: " + last_invalid);
        }
      } else if (is_throttled(clock, default_sm_clock_mhz, settings.throttle_fraction)) {
        ++m.discarded_throttled;
      } else {
        if (m.samples_ms.empty()) {
          m.kernels_per_call = s.kernels;
          m.kernel_names = s.names;
        } else if (s.kernels != m.kernels_per_call) {
          m.kernels_per_call_varied = true;
        }
        if (s.window_attribution) ++m.window_attributed_samples;
        m.samples_ms.push_back(s.sum_ms);
        m.span_samples_ms.push_back(s.span_ms);
        if (clock > 0) m.sm_clocks_mhz.push_back(clock);
        rule.add(s.sum_ms * 1e-3);
        last_valid = &s;
      }
      reason = rule.decide(seconds_since(t0));
      if (reason) {
        m.unused_after_stop += static_cast<std::int64_t>(samples.size() - i - 1);
        break;
      }
    }
    if (reason) {
      m.stop_reason = stop_reason_name(*reason);
      break;
    }
    // The next batch (next_batch_size, stopping.h): one sample when the timer cannot batch, the last sample
    // needed window attribution (which a batch cannot do) or its kernels were too short to batch.
    const bool can_batch = timer.batches() && last_valid != nullptr && !last_valid->window_attribution;
    const double last_kernel_s = can_batch ? last_valid->sum_ms * 1e-3 : -1.0;
    const std::int64_t samples_left = settings.stopping.max_samples - static_cast<std::int64_t>(m.samples_ms.size());
    // Short calls: synchronized batches when enabled (else alone); longer ones: queued batches.
    const int synchronized = next_synchronized_batch_size(settings.synchronized_short_batches, settings.max_batch,
                                                          settings.min_batched_kernel_s, last_kernel_s, samples_left);
    synchronize_each = synchronized > 0;
    batch = synchronize_each ? synchronized
                             : next_batch_size(settings.max_batch, settings.batch_gpu_s, settings.min_batched_kernel_s,
                                               last_kernel_s, samples_left);
  }
  m.wall_time_s = seconds_since(t0);
  m.gpu_time_s = rule.total_s();
  if (m.samples_ms.empty()) {
    throw std::runtime_error("no valid sample before the stop (" + m.stop_reason + "): " +
                             std::to_string(m.discarded_throttled) + " throttled, " +
                             std::to_string(m.discarded_dropped_records) + " with dropped records" +
                             (last_invalid.empty() ? std::string() : ", last invalid: " + last_invalid));
  }
  return m;
}

double measure_device_copy_bandwidth(std::size_t bytes, int repeats, cudaStream_t stream) {
  void* src = nullptr;
  void* dst = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  auto release = [&] {
    if (src) DETOPS_CUDA_CHECK_NOTHROW(cudaFree(src));
    if (dst) DETOPS_CUDA_CHECK_NOTHROW(cudaFree(dst));
    if (start) DETOPS_CUDA_CHECK_NOTHROW(cudaEventDestroy(start));
    if (stop) DETOPS_CUDA_CHECK_NOTHROW(cudaEventDestroy(stop));
  };
  try {
    DETOPS_CUDA_CHECK(cudaMalloc(&src, bytes));
    DETOPS_CUDA_CHECK(cudaMalloc(&dst, bytes));
    DETOPS_CUDA_CHECK(cudaMemsetAsync(src, 1, bytes, stream));
    DETOPS_CUDA_CHECK(cudaEventCreate(&start));
    DETOPS_CUDA_CHECK(cudaEventCreate(&stop));
    std::vector<double> rates;
    for (int i = 0; i < repeats + 2; ++i) {  // the first two are warm-up
      DETOPS_CUDA_CHECK(cudaEventRecord(start, stream));
      DETOPS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
      DETOPS_CUDA_CHECK(cudaEventRecord(stop, stream));
      DETOPS_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      DETOPS_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      if (i >= 2 && ms > 0) rates.push_back(2.0 * static_cast<double>(bytes) / (ms * 1e-3));
    }
    release();
    if (rates.empty()) throw std::runtime_error("device copy bandwidth: no timed copy");
    return median_of(rates);
  } catch (...) {
    release();
    throw;
  }
}

}  // namespace detops::harness::bench
