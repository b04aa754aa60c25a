#pragma once
// The hardware-metrics pass (detops_bench --detops_metrics, docs/benchmarks.md "Hardware metrics"): the
// DRAM bytes read and written by ONE op call, the GPU duration of that call's range and the DRAM
// throughput, collected with CUPTI's Profiler Host and Range Profiler APIs (user range, user replay) in a
// pass of its own after the timed samples.
//
// Two halves: HwMetricsProfiler talks to CUPTI (harness/src/bench/hw_metrics.cpp, in
// detops_bench_harness); hw_metrics_json turns what it collected into the record's `hardware_metrics`
// object (harness/src/bench/hw_metrics_record.cpp, plain C++ in detops_bench_core, unit-tested in
// suites/unit/hw_metrics_test.cpp). No CUDA, CUPTI or libtorch header here.
#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace detops::harness::bench {

// The metrics asked for. The first three are required (without them nothing is recorded as measured);
// the last two are recorded when the chip's CUPTI knows them, null otherwise.
inline constexpr const char* kMetricDramBytesRead = "dram__bytes_read.sum";
inline constexpr const char* kMetricDramBytesWrite = "dram__bytes_write.sum";
inline constexpr const char* kMetricDuration = "gpu__time_duration.sum";  // ns
inline constexpr const char* kMetricDramPctOfPeak = "dram__throughput.avg.pct_of_peak_sustained_elapsed";
inline constexpr const char* kMetricL2Bytes = "lts__t_bytes.sum";

// What one pass gave.
struct HwMetricsOutcome {
  enum class Status { kMeasured, kSkipped, kError };
  Status status = Status::kSkipped;
  std::string reason;                    // kSkipped / kError: why, with what to do
  std::map<std::string, double> values;  // kMeasured: metric name -> value, as CUPTI evaluated it
  int passes = 0;                        // calls made (replays); 0 when the pass never started
};

// The record's `hardware_metrics` object (docs/record-format.md). `timed_median_ms` is the benchmark's
// reported median kernel time (<= 0: unknown); `cold_l2` says whether the L2 was flushed before each
// replay. A "measured" outcome that lacks a required metric, or has one that is negative or not finite,
// becomes {"status": "error"} naming it.
nlohmann::json hw_metrics_json(const HwMetricsOutcome& outcome, double timed_median_ms, bool cold_l2);

// {"status": status, "reason": reason}: for benchmarks the pass did not run on.
nlohmann::json hw_metrics_not_measured(const std::string& status, const std::string& reason);

// CUPTI's range profiler on one device's primary context. Set up once per process; measure() runs one
// pass per benchmark. Nothing here throws or ends the run: a CUPTI failure becomes a "skipped" outcome
// (the machine cannot profile: no counter permission, counters held by another profiler, device not
// supported; remembered, so later benchmarks skip at once with the same reason) or an "error" outcome
// (this benchmark's pass failed).
class HwMetricsProfiler {
 public:
  // The device must be current (cudaSetDevice) on the calling thread.
  explicit HwMetricsProfiler(int device);
  ~HwMetricsProfiler();
  HwMetricsProfiler(const HwMetricsProfiler&) = delete;
  HwMetricsProfiler& operator=(const HwMetricsProfiler&) = delete;

  bool available() const;
  const std::string& reason() const;  // why not available (or why a later pass disabled it)
  // For the record's provenance: {"available", "chip", "metrics", "config_passes"} or
  // {"available": false, "reason"}.
  nlohmann::json description() const;

  // Profiles `call` inside one user range, replaying it as often as CUPTI's configuration needs. Before
  // each replay, outside the range, runs `before_each_pass` (the timing loop's pre-sample step: the L2
  // flush in cold mode) and synchronizes the device. `call` must be repeatable and leave the GPU in the
  // state it found it (the op calls of the benchmarks are).
  HwMetricsOutcome measure(const std::function<void()>& call, const std::function<void()>& before_each_pass);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace detops::harness::bench
