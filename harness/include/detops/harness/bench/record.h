#pragma once
// The run record (docs/record-format.md, schema version 1): Google Benchmark's JSON layout with the
// DetOps measurement in extra fields. Pure C++ (nlohmann_json), so its layout is unit-tested.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace detops::harness::bench {

inline constexpr int kRecordSchemaVersion = 1;

// What one benchmark measured. Times in milliseconds.
struct BenchmarkResult {
  std::string op, case_name, dtype, direction, shape;  // direction: "fwd" or "bwd"
  std::string error;   // non-empty: the benchmark failed; the entry records the message
  std::string timer;   // "cupti" or "cuda_events"
  int family_index = 0;
  int repetitions = 9;
  std::vector<double> samples_ms;       // kernel-time sum per op call, valid samples in order
  std::vector<double> span_samples_ms;  // first kernel start .. last kernel end
  std::vector<double> sm_clocks_mhz;    // observed after each valid sample (empty when unknown)
  std::string stop_reason;
  double gpu_time_s = 0, wall_time_s = 0;
  int kernels_per_call = -1;  // -1: unknown (CUDA events)
  std::vector<std::string> kernel_names;
  std::int64_t bytes_moved = 0;
  double device_copy_bandwidth = 0;  // bytes/s measured at start; 0 when unknown
  std::int64_t discarded_throttled = 0, discarded_dropped_records = 0;
  nlohmann::json hardware_metrics = {{"status", "skipped"}, {"reason", "not requested"}};
  nlohmann::json extra = nlohmann::json::object();  // merged into the entry's "detops" object
};

// "<op>/<case>/<dtype>/<direction>"
std::string benchmark_name(const BenchmarkResult& r);

// The Google Benchmark entries of one benchmark: one "iteration" entry per repetition (real_time = that
// repetition's median) and the aggregates mean, median, stddev and cv over the repetition medians; the
// median aggregate carries the "detops" object. A failed benchmark is one entry with error_occurred.
nlohmann::json benchmark_entries(const BenchmarkResult& r);

// The record: context (Google Benchmark's own fields plus "detops"), benchmarks, correctness, peers.
class RunRecord {
 public:
  RunRecord(nlohmann::json gb_context, nlohmann::json detops_context);
  void add(const BenchmarkResult& r);
  void set_correctness(nlohmann::json correctness);
  void set_complete(bool complete) { complete_ = complete; }
  // The record's compact JSON text (nlohmann's dump() of the whole record, keys in its sorted order), built from
  // each entry's and the correctness section's text as serialized once when they were added: the record is
  // rewritten after every benchmark, and re-serializing every earlier entry each time made the rewrites grow
  // with the square of the entries (tens of MB of samples and correctness digest, ~0.3 s a rewrite half-way
  // through a full run). Only the texts are kept.
  std::string text() const;
  nlohmann::json to_json() const;  // text(), parsed
  // Writes text() atomically (temporary file in the same folder, then rename).
  void write(const std::string& path) const;

 private:
  nlohmann::json context_json() const;
  nlohmann::json gb_context_, detops_context_;
  std::vector<std::string> entry_texts_;  // each benchmark entry's dump(), in order
  std::string correctness_text_;          // the "correctness" value's dump()
  bool complete_ = false;
};

// Writes `contents` to `<path>.tmp.<pid>` in the same folder, flushes it to disk and renames it over
// `path`, so a reader sees the old file or the new one, never a partial one. Throws std::runtime_error
// naming the path and errno's text.
void write_file_atomically(const std::string& path, const std::string& contents);

}  // namespace detops::harness::bench
