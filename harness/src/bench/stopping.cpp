#include "detops/harness/bench/stopping.h"

#include <algorithm>
#include <cmath>

namespace detops::harness::bench {

const char* stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::kConverged: return "converged";
    case StopReason::kNoiseStoppedImproving: return "noise_stopped_improving";
    case StopReason::kTimeout: return "timeout";
    case StopReason::kMaxSamples: return "max_samples";
  }
  return "unknown";
}

StoppingRule::StoppingRule(StoppingSettings settings) : settings_(settings) {}

double StoppingRule::rel_stdev() const {
  if (count_ < 2 || mean_ == 0) return 0;
  return std::sqrt(m2_ / static_cast<double>(count_ - 1)) / mean_;
}

void StoppingRule::add(double sample_s) {
  ++count_;
  total_ += sample_s;
  const double delta = sample_s - mean_;
  mean_ += delta / static_cast<double>(count_);
  m2_ += delta * (sample_s - mean_);
  if (count_ >= 2 && mean_ != 0) {
    const double noise = rel_stdev();
    if (std::isfinite(noise)) {
      noise_.push_back(noise);
      if (noise_.size() > kNoiseWindow) noise_.pop_front();
    }
  }
}

std::optional<StopReason> StoppingRule::decide(double elapsed_wall_s) const {
  if (count_ >= settings_.min_samples && total_ > settings_.min_gpu_time_s && !noise_.empty()) {
    const double current = noise_.back();
    if (current < settings_.max_rel_stdev) return StopReason::kConverged;
    if (noise_.size() > kNoiseMinTracked && count_ % kNoiseCheckEvery == 0 && current > 0) {
      double ss = 0;
      for (double v : noise_) ss += (v - current) * (v - current);
      const double spread = std::sqrt(ss / static_cast<double>(noise_.size() - 1));
      if (spread / current < kNoiseStableFraction) return StopReason::kNoiseStoppedImproving;
    }
  }
  if (count_ >= settings_.max_samples) return StopReason::kMaxSamples;
  if (elapsed_wall_s > settings_.timeout_s) return StopReason::kTimeout;
  return std::nullopt;
}

int next_batch_size(int max_batch, double batch_gpu_s, double min_batched_kernel_s, double last_kernel_s,
                    std::int64_t samples_left) {
  if (max_batch <= 1 || !(last_kernel_s >= 0) || last_kernel_s < min_batched_kernel_s) return 1;
  const double fit = std::floor(batch_gpu_s / std::max(last_kernel_s, 1e-7));
  int batch = static_cast<int>(std::clamp(fit, 1.0, static_cast<double>(max_batch)));
  if (samples_left >= 1 && samples_left < batch) batch = static_cast<int>(samples_left);
  return batch;
}

int next_synchronized_batch_size(bool enabled, int max_batch, double min_batched_kernel_s, double last_kernel_s,
                                 std::int64_t samples_left) {
  if (!enabled || !(last_kernel_s >= 0) || !(last_kernel_s < min_batched_kernel_s)) return 0;
  int batch = std::max(max_batch, 1);
  if (samples_left >= 1 && samples_left < batch) batch = static_cast<int>(samples_left);
  return batch;
}

bool is_throttled(double sm_clock_mhz, double default_sm_clock_mhz, double fraction) {
  if (!(sm_clock_mhz > 0) || !(default_sm_clock_mhz > 0)) return false;
  return sm_clock_mhz < fraction * default_sm_clock_mhz;
}

}  // namespace detops::harness::bench
