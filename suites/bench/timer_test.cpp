// GPU tests of the benchmark timer and sampling loop (docs/benchmarks.md, "Batches"): a batch of samples
// must give each call its own kernels, exactly as samples taken one at a time do, and the loop must stop at
// the sample the stopping rule names. Skipped, with the reason, without a GPU or without CUPTI.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "detops/harness/bench/calibration.h"
#include "detops/harness/bench/gpu_timer.h"
#include "detops/harness/bench/measure.h"
#include "detops/harness/bench/nvml_device.h"
#include "detops/harness/bench/stats.h"

namespace detops::harness::bench {
namespace {

std::string no_gpu_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("no usable CUDA device: ") + cudaGetErrorString(e);
  }
  return n > 0 ? std::string() : std::string("no CUDA device");
}

// Two calls that differ in kernel count and time: even calls one long kernel, odd calls two short ones
// (a tenth of the long one's chain each). A wrong attribution (a sample given its neighbour's kernels, the
// preparation's kernel counted, two samples merged) changes a sample's kernel count or its time class.
class BatchedTimer : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = no_gpu_reason();
    if (!why.empty()) GTEST_SKIP() << "the timer tests need a GPU: " << why;
    std::string why_not_cupti;
    timer_ = make_gpu_timer(&why_not_cupti);
    if (std::string(timer_->name()) != "cupti") GTEST_SKIP() << "CUPTI unavailable: " << why_not_cupti;
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
    long_ = std::make_unique<CalibrationKernel>(0, 0.4);
    short_ = std::make_unique<CalibrationKernel>(0, 0.04);
    prep_ = std::make_unique<CalibrationKernel>(0, 0.2);
    call_ = [this] {
      if (calls_++ % 2 == 0) {
        long_->launch(stream_);
      } else {
        short_->launch(stream_);
        short_->launch(stream_);
      }
    };
    // A kernel before every call, launched under no correlation id and not synchronized: in no sample.
    prepare_ = [this] { prep_->launch(stream_); };
  }
  void TearDown() override {
    long_.reset();
    short_.reset();
    prep_.reset();
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  std::unique_ptr<GpuTimer> timer_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CalibrationKernel> long_, short_, prep_;
  int calls_ = 0;
  std::function<void()> call_, prepare_;
};

// Lone samples, then the same calls in two batches of 16 (queued, or synchronized after each sample): each sample
// of a batch must hold its own call's kernels and time them as the lone samples do.
void expect_batches_attribute_each_sample(GpuTimer& timer, cudaStream_t stream, const std::function<void()>& call,
                                          const std::function<void()>& prepare, int& calls, bool synchronize_each) {
  ASSERT_TRUE(timer.batches());
  for (int i = 0; i < 3; ++i) {  // warm-up: module loading, first launches
    prepare();
    call();
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  calls = 0;
  // Lone samples first (the reference), then the same calls in two batches of 16.
  std::vector<double> lone_long, lone_short;
  for (int i = 0; i < 8; ++i) {
    const std::vector<KernelSample> one = timer.time_calls(call, prepare, stream, 1, false);
    ASSERT_EQ(one.size(), 1u);
    ASSERT_TRUE(one[0].valid) << one[0].invalid_reason;
    ASSERT_EQ(one[0].kernels, i % 2 == 0 ? 1 : 2);
    (i % 2 == 0 ? lone_long : lone_short).push_back(one[0].sum_ms);
  }
  std::vector<double> batched_long, batched_short;
  for (int b = 0; b < 2; ++b) {
    const std::vector<KernelSample> batch = timer.time_calls(call, prepare, stream, 16, b == 0, synchronize_each);
    ASSERT_EQ(batch.size(), 16u);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const KernelSample& s = batch[i];
      ASSERT_TRUE(s.valid) << "sample " << i << ": " << s.invalid_reason;
      EXPECT_FALSE(s.window_attribution);
      EXPECT_EQ(s.kernels, i % 2 == 0 ? 1 : 2) << "sample " << i << " of batch " << b;
      EXPECT_GE(s.span_ms, s.sum_ms * 0.999) << "kernels of one stream cannot overlap";
      (i % 2 == 0 ? batched_long : batched_short).push_back(s.sum_ms);
    }
    if (b == 0) {
      ASSERT_EQ(batch[0].names.size(), 1u);
      EXPECT_TRUE(batch[1].names.empty());
    }
  }
  // The long kernel has ten times the short one's chain: a long sample is about 5x a short sample (two short
  // kernels); a sample that took the preparation's kernel (half the long one) or a neighbour's would not sit
  // within 25 % of the lone samples' median.
  const double lone_l = median_of(lone_long), lone_s = median_of(lone_short);
  const double batch_l = median_of(batched_long), batch_s = median_of(batched_short);
  EXPECT_GT(lone_l, 2.5 * lone_s);
  EXPECT_NEAR(batch_l, lone_l, 0.25 * lone_l);
  EXPECT_NEAR(batch_s, lone_s, 0.25 * lone_s);
  for (double v : batched_long) EXPECT_GT(v, 2.5 * batch_s);
  for (double v : batched_short) EXPECT_LT(v, batch_l / 2.5);
}

TEST_F(BatchedTimer, EachSampleOfABatchHoldsItsOwnCallsKernels) {
  expect_batches_attribute_each_sample(*timer_, stream_, call_, prepare_, calls_, false);
}

// --detops_synchronized_short_batches: the same attribution with the device synchronized after every sample.
TEST_F(BatchedTimer, EachSampleOfASynchronizedBatchHoldsItsOwnCallsKernels) {
  expect_batches_attribute_each_sample(*timer_, stream_, call_, prepare_, calls_, true);
}

TEST_F(BatchedTimer, TheLoopStopsAtTheSampleTheRuleNames) {
  NvmlDevice no_clock("");  // unavailable: no throttle check
  L2Flusher flusher(0);
  MeasureSettings settings;
  settings.batch_gpu_s = 1.0;  // every later batch as large as max_batch allows
  settings.min_batched_kernel_s = 0;  // the short calls (two ~12 us kernels) batch too
  settings.max_batch = 32;
  // Converges at the 10th sample (any noise is below 100 %): one lone sample, then a batch of 32 of which
  // 9 are used.
  settings.stopping.max_rel_stdev = 1.0;
  settings.stopping.min_gpu_time_s = 0;
  Measurement m = measure_call(call_, stream_, *timer_, no_clock, 0, settings, flusher);
  EXPECT_EQ(m.stop_reason, "converged");
  EXPECT_EQ(m.samples_ms.size(), 10u);
  EXPECT_EQ(m.batches, 2);
  EXPECT_EQ(m.largest_batch, 32);
  EXPECT_EQ(m.unused_after_stop, 32 - 9);
  EXPECT_EQ(m.discarded_other, 0);
  EXPECT_TRUE(m.kernels_per_call_varied);  // the calls alternate between one and two kernels

  // max_samples caps a batch: 100 samples exactly, none unused, in far fewer synchronizations.
  settings.stopping.min_gpu_time_s = 1e9;  // neither converges nor stops on noise
  settings.stopping.max_samples = 100;
  settings.stopping.timeout_s = 60;
  m = measure_call(call_, stream_, *timer_, no_clock, 0, settings, flusher);
  EXPECT_EQ(m.stop_reason, "max_samples");
  EXPECT_EQ(m.samples_ms.size(), 100u);
  EXPECT_EQ(m.unused_after_stop, 0);
  EXPECT_EQ(m.batches, 1 + 3 + 1);  // 1, 32, 32, 32, then the 3 left
  EXPECT_EQ(m.largest_batch, 32);

  // Every sample alone, in 100 synchronizations: calls shorter than min_batched_kernel_s (the loop starts on a
  // short call, two short kernels, far below 1 s, so no batch ever forms), and max_batch 1 (as before batching).
  for (const auto& [max_batch, min_kernel_s] : {std::pair<int, double>{32, 1.0}, std::pair<int, double>{1, 0.0}}) {
    settings.max_batch = max_batch;
    settings.min_batched_kernel_s = min_kernel_s;
    m = measure_call(call_, stream_, *timer_, no_clock, 0, settings, flusher);
    EXPECT_EQ(m.samples_ms.size(), 100u) << "max_batch " << max_batch;
    EXPECT_EQ(m.batches, 100) << "max_batch " << max_batch;
    EXPECT_EQ(m.largest_batch, 1) << "max_batch " << max_batch;
  }
}

}  // namespace
}  // namespace detops::harness::bench

// Exit 77 (CTest's skip) when every test skipped (no GPU, no CUPTI), so CI reports them as skipped, with the
// reason in the output, rather than passed.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const ::testing::UnitTest& ut = *::testing::UnitTest::GetInstance();
  if (rc == 0 && ut.test_to_run_count() > 0 && ut.skipped_test_count() == ut.test_to_run_count()) return 77;
  return rc;
}
