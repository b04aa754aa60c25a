#pragma once
// Kernel time of one op call: CUPTI's Activity API (CONCURRENT_KERNEL records), or CUDA events when
// CUPTI cannot be used. Part of detops_bench_harness (links CUPTI); no libtorch.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace detops::harness::bench {

struct KernelSample {
  bool valid = false;
  std::string invalid_reason;   // when !valid
  bool dropped_records = false;  // invalid because CUPTI dropped activity records
  double sum_ms = 0;             // sum of the kernels' durations
  double span_ms = 0;            // first kernel start .. last kernel end
  int kernels = -1;              // kernels attributed to the call; -1 unknown (events)
  std::vector<std::string> names;  // filled when asked for
  bool window_attribution = false;  // CUPTI gave no external correlation: every kernel between the syncs
};

class GpuTimer {
 public:
  virtual ~GpuTimer() = default;
  virtual const char* name() const = 0;  // "cupti" or "cuda_events"
  // Runs `call` once and times the GPU work it issues. Work queued on `stream` before (the L2 flush) is
  // not counted. The device is synchronized before this returns. Throws std::runtime_error on a
  // CUDA/CUPTI failure, and rethrows what `call` throws.
  virtual KernelSample time_call(const std::function<void()>& call, cudaStream_t stream, bool want_names) = 0;

  // `count` samples back to back: before each, `prepare` (untimed; may be empty: the L2 flush or a warm
  // case's touch), then `call`. Sample i holds the kernels call i launched, exactly as time_call would
  // attribute them; a batching timer synchronizes and flushes its records once for the whole batch
  // instead of once per sample, which is where a sample's host time goes. Names are taken for the first
  // sample when want_names_first. synchronize_each: the device is synchronized after every call, so each
  // sample's prepare and call start on an idle device as a sample taken alone does, and only the records'
  // flush is shared (stopping.h, next_synchronized_batch_size). The default (and any timer that cannot batch)
  // runs prepare and time_call once per sample.
  virtual std::vector<KernelSample> time_calls(const std::function<void()>& call, const std::function<void()>& prepare,
                                               cudaStream_t stream, int count, bool want_names_first,
                                               bool synchronize_each = false);

  // Whether time_calls with count > 1 saves anything (and still attributes each sample by itself): true for
  // CUPTI while its external-correlation records arrive; false for CUDA events.
  virtual bool batches() const { return false; }
};

// CUPTI when it initializes (activity buffers registered, CONCURRENT_KERNEL and EXTERNAL_CORRELATION
// enabled); otherwise CUDA events, with *why_not_cupti set to CUPTI's error. DETOPS_BENCH_TIMER=events
// forces events.
std::unique_ptr<GpuTimer> make_gpu_timer(std::string* why_not_cupti);

// CUPTI's version (cuptiGetVersion), or -1.
int cupti_version();

}  // namespace detops::harness::bench
