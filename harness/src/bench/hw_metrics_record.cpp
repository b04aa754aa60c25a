// The record half of the hardware-metrics pass: raw CUPTI metric values -> the `hardware_metrics`
// object of docs/record-format.md. Plain C++ (detops_bench_core).
#include <cmath>
#include <cstdint>
#include <optional>
#include <sstream>

#include "detops/harness/bench/hw_metrics.h"

namespace detops::harness::bench {
namespace {

using nlohmann::json;

std::optional<double> value_of(const HwMetricsOutcome& o, const char* name) {
  const auto it = o.values.find(name);
  if (it == o.values.end()) return std::nullopt;
  return it->second;
}

// A value the record can hold: finite and not negative (counters and durations are never negative).
bool usable(double v) { return std::isfinite(v) && v >= 0; }

json number_or_null(std::optional<double> v) { return v && usable(*v) ? json(*v) : json(); }

std::string text_of(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

json hw_metrics_not_measured(const std::string& status, const std::string& reason) {
  return {{"status", status}, {"reason", reason.empty() ? std::string("no reason given") : reason}};
}

json hw_metrics_json(const HwMetricsOutcome& o, double timed_median_ms, bool cold_l2) {
  if (o.status == HwMetricsOutcome::Status::kSkipped) return hw_metrics_not_measured("skipped", o.reason);
  if (o.status == HwMetricsOutcome::Status::kError) {
    json j = hw_metrics_not_measured("error", o.reason);
    j["passes"] = o.passes;
    return j;
  }
  for (const char* required : {kMetricDramBytesRead, kMetricDramBytesWrite, kMetricDuration}) {
    const std::optional<double> v = value_of(o, required);
    if (!v) {
      json j = hw_metrics_not_measured("error", std::string("CUPTI returned no value for ") + required);
      j["passes"] = o.passes;
      return j;
    }
    if (!usable(*v)) {
      json j = hw_metrics_not_measured("error", std::string("CUPTI returned ") + required + " = " + text_of(*v) +
                                                    " (not a finite, non-negative number)");
      j["passes"] = o.passes;
      return j;
    }
  }
  const double read = *value_of(o, kMetricDramBytesRead);
  const double written = *value_of(o, kMetricDramBytesWrite);
  const double duration_ns = *value_of(o, kMetricDuration);
  const double total = read + written;

  json metrics = json::object();
  for (const auto& [name, v] : o.values) metrics[name] = std::isfinite(v) ? json(v) : json();
  return {{"status", "measured"},
          {"dram_bytes_read", static_cast<std::int64_t>(std::llround(read))},
          {"dram_bytes_write", static_cast<std::int64_t>(std::llround(written))},
          {"duration_ns", duration_ns},
          {"dram_throughput_bytes_per_second", duration_ns > 0 ? json(total / (duration_ns * 1e-9)) : json()},
          {"dram_throughput_at_median_bytes_per_second",
           timed_median_ms > 0 && std::isfinite(timed_median_ms) ? json(total / (timed_median_ms * 1e-3)) : json()},
          {"dram_pct_of_peak", number_or_null(value_of(o, kMetricDramPctOfPeak))},
          {"l2_bytes", number_or_null(value_of(o, kMetricL2Bytes))},
          {"passes", o.passes},
          {"l2", cold_l2 ? "cold" : "warm"},
          {"metrics", metrics}};
}

}  // namespace detops::harness::bench
