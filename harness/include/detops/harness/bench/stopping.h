#pragma once
// When to stop sampling one benchmark: nvbench's "stdrel" criterion with its defaults. Pure C++, fed
// one valid sample at a time, so it is unit-tested on synthetic sequences.
#include <cstdint>
#include <deque>
#include <optional>

namespace detops::harness::bench {

struct StoppingSettings {
  std::int64_t min_samples = 10;
  double min_gpu_time_s = 0.5;    // accumulated kernel time of the valid samples
  double max_rel_stdev = 0.005;   // 0.5 %
  double timeout_s = 15.0;        // wall time of the sampling loop
  std::int64_t max_samples = 1000000;  // memory bound; stops very short kernels before the timeout
};

enum class StopReason { kConverged, kNoiseStoppedImproving, kTimeout, kMaxSamples };
const char* stop_reason_name(StopReason reason);

// Decision order (as nvbench's measure_cold): with at least min_samples and more than min_gpu_time_s
// of GPU time, stop when the relative stdev of all samples is below max_rel_stdev ("converged"); or,
// every 16th sample once more than 64 noise values are tracked, when the RMS deviation of the last 512
// relative-stdev values from the current one is below 5% of it ("noise_stopped_improving"); then
// max_samples; then the timeout.
class StoppingRule {
 public:
  explicit StoppingRule(StoppingSettings settings = {});
  void add(double sample_s);
  std::optional<StopReason> decide(double elapsed_wall_s) const;

  std::int64_t count() const { return count_; }
  double total_s() const { return total_; }
  double rel_stdev() const;  // of every sample so far; 0 before two samples

  static constexpr std::size_t kNoiseWindow = 512;
  static constexpr std::size_t kNoiseMinTracked = 64;
  static constexpr std::int64_t kNoiseCheckEvery = 16;
  static constexpr double kNoiseStableFraction = 0.05;

 private:
  StoppingSettings settings_;
  std::int64_t count_ = 0;
  double total_ = 0, mean_ = 0, m2_ = 0;  // Welford
  std::deque<double> noise_;              // relative stdev after each sample (finite values only)
};

// How many samples the sampling loop queues before its next synchronization (docs/benchmarks.md, "Batches"):
// as many as make about batch_gpu_s of the last valid sample's kernel time, at least 1, at most max_batch
// and at most samples_left (when > 0). One (the sample alone) when last_kernel_s < 0 (no valid sample yet,
// a window-attributed sample, a timer that cannot batch) or below min_batched_kernel_s: on the H200, kernels
// under 30 us measured 2-9 % longer when queued back to back behind the L2 flush than taken alone, while
// kernels of 30 us to 1 ms measured the same (docs/benchmarks.md).
int next_batch_size(int max_batch, double batch_gpu_s, double min_batched_kernel_s, double last_kernel_s,
                    std::int64_t samples_left);

// Calls shorter than min_batched_kernel_s when synchronized batches are on (--detops_synchronized_short_batches,
// off by default): up to max_batch samples (at most samples_left, when > 0) per CUPTI flush and clock read, each
// launched only once the one before it has completed, so the GPU runs every sample after an idle device as it does
// a sample taken alone, and only the host's bookkeeping (the CUPTI flush, the clock read: most of the ~0.9 ms a
// sample alone costs) is shared. 0 where this does not apply: off, no valid sample yet (last_kernel_s < 0), or a
// call of min_batched_kernel_s or more (next_batch_size's batches). Not yet compared with samples taken alone on a
// GPU (docs/benchmarks.md, "Batches"): hence off by default.
int next_synchronized_batch_size(bool enabled, int max_batch, double min_batched_kernel_s, double last_kernel_s,
                                 std::int64_t samples_left);

// nvbench's throttle rule: a sample taken at an SM clock below fraction * default clock is discarded.
// Unknown clocks (<= 0) never discard.
bool is_throttled(double sm_clock_mhz, double default_sm_clock_mhz, double fraction);

}  // namespace detops::harness::bench
