// The record half of the hardware-metrics pass (hw_metrics_json): raw CUPTI metric values -> the
// record's `hardware_metrics` object. No GPU, no CUPTI.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "detops/harness/bench/hw_metrics.h"

namespace detops::harness::bench {
namespace {

using nlohmann::json;

HwMetricsOutcome measured(double read, double written, double duration_ns) {
  HwMetricsOutcome o;
  o.status = HwMetricsOutcome::Status::kMeasured;
  o.passes = 3;
  o.values[kMetricDramBytesRead] = read;
  o.values[kMetricDramBytesWrite] = written;
  o.values[kMetricDuration] = duration_ns;
  return o;
}

TEST(HwMetricsRecord, MeasuredDerivesThroughputFromTheRangeAndFromTheTimedMedian) {
  HwMetricsOutcome o = measured(3.0e8, 1.0e8, 2.0e5);  // 400 MB in 200 us
  o.values[kMetricDramPctOfPeak] = 41.5;
  o.values[kMetricL2Bytes] = 9.0e8;
  const json j = hw_metrics_json(o, 0.125, true);  // timed median 0.125 ms
  EXPECT_EQ(j["status"], "measured");
  EXPECT_EQ(j["dram_bytes_read"].get<std::int64_t>(), 300000000);
  EXPECT_EQ(j["dram_bytes_write"].get<std::int64_t>(), 100000000);
  EXPECT_TRUE(j["dram_bytes_read"].is_number_integer());
  EXPECT_DOUBLE_EQ(j["duration_ns"].get<double>(), 2.0e5);
  EXPECT_DOUBLE_EQ(j["dram_throughput_bytes_per_second"].get<double>(), 4.0e8 / 2.0e-4);  // 2 TB/s
  EXPECT_DOUBLE_EQ(j["dram_throughput_at_median_bytes_per_second"].get<double>(), 4.0e8 / 1.25e-4);  // 3.2 TB/s
  EXPECT_DOUBLE_EQ(j["dram_pct_of_peak"].get<double>(), 41.5);
  EXPECT_DOUBLE_EQ(j["l2_bytes"].get<double>(), 9.0e8);
  EXPECT_EQ(j["passes"], 3);
  EXPECT_EQ(j["l2"], "cold");
  EXPECT_DOUBLE_EQ(j["metrics"][kMetricDramBytesRead].get<double>(), 3.0e8);
  EXPECT_DOUBLE_EQ(j["metrics"][kMetricDramPctOfPeak].get<double>(), 41.5);
  EXPECT_EQ(j["metrics"].size(), 5u);
  EXPECT_FALSE(j.contains("reason"));
}

TEST(HwMetricsRecord, BytesAreRoundedToWholeBytes) {
  const json j = hw_metrics_json(measured(1234.6, 0.4, 10), 0, false);
  EXPECT_EQ(j["dram_bytes_read"].get<std::int64_t>(), 1235);
  EXPECT_EQ(j["dram_bytes_write"].get<std::int64_t>(), 0);
  EXPECT_EQ(j["l2"], "warm");
}

TEST(HwMetricsRecord, OptionalMetricsMissingOrNotFiniteAreNull) {
  HwMetricsOutcome o = measured(1e6, 1e6, 1e4);
  o.values[kMetricDramPctOfPeak] = std::numeric_limits<double>::quiet_NaN();
  const json j = hw_metrics_json(o, 0.01, true);
  EXPECT_EQ(j["status"], "measured");
  EXPECT_TRUE(j["dram_pct_of_peak"].is_null());
  EXPECT_TRUE(j["l2_bytes"].is_null());
  EXPECT_TRUE(j["metrics"][kMetricDramPctOfPeak].is_null());  // raw values stay, NaN as null
  EXPECT_FALSE(j["metrics"].contains(kMetricL2Bytes));
}

TEST(HwMetricsRecord, UnknownTimesGiveNullThroughputs) {
  const json j = hw_metrics_json(measured(1e6, 0, 0), -1, true);
  EXPECT_EQ(j["status"], "measured");
  EXPECT_TRUE(j["dram_throughput_bytes_per_second"].is_null());
  EXPECT_TRUE(j["dram_throughput_at_median_bytes_per_second"].is_null());
  const json k = hw_metrics_json(measured(1e6, 0, 0), std::numeric_limits<double>::infinity(), true);
  EXPECT_TRUE(k["dram_throughput_at_median_bytes_per_second"].is_null());
}

TEST(HwMetricsRecord, MissingRequiredMetricIsAnErrorNamingIt) {
  HwMetricsOutcome o = measured(1e6, 1e6, 1e4);
  o.values.erase(kMetricDramBytesWrite);
  const json j = hw_metrics_json(o, 0.01, true);
  EXPECT_EQ(j["status"], "error");
  EXPECT_NE(j["reason"].get<std::string>().find(kMetricDramBytesWrite), std::string::npos);
  EXPECT_FALSE(j.contains("dram_bytes_read"));
  EXPECT_EQ(j["passes"], 3);
}

TEST(HwMetricsRecord, NegativeOrNanRequiredMetricIsAnError) {
  const json neg = hw_metrics_json(measured(-5, 1e6, 1e4), 0.01, true);
  EXPECT_EQ(neg["status"], "error");
  EXPECT_NE(neg["reason"].get<std::string>().find(std::string(kMetricDramBytesRead) + " = -5"), std::string::npos);
  const json nan = hw_metrics_json(measured(1e6, 1e6, std::nan("")), 0.01, true);
  EXPECT_EQ(nan["status"], "error");
  EXPECT_NE(nan["reason"].get<std::string>().find(kMetricDuration), std::string::npos);
}

TEST(HwMetricsRecord, SkippedAndErrorOutcomesCarryTheirReason) {
  HwMetricsOutcome s;
  s.status = HwMetricsOutcome::Status::kSkipped;
  s.reason = "cuptiProfilerGetCounterAvailability failed: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES; run as root";
  EXPECT_EQ(hw_metrics_json(s, 0.1, true), json({{"status", "skipped"}, {"reason", s.reason}}));
  HwMetricsOutcome e;
  e.status = HwMetricsOutcome::Status::kError;
  e.reason = "the op call failed during the metrics pass: out of memory";
  e.passes = 1;
  EXPECT_EQ(hw_metrics_json(e, 0.1, true), json({{"status", "error"}, {"reason", e.reason}, {"passes", 1}}));
  // A skipped outcome without a reason still says something.
  EXPECT_EQ(hw_metrics_json(HwMetricsOutcome{}, 0.1, true)["reason"], "no reason given");
  EXPECT_EQ(hw_metrics_not_measured("skipped", "not requested"),
            json({{"status", "skipped"}, {"reason", "not requested"}}));
}

}  // namespace
}  // namespace detops::harness::bench
