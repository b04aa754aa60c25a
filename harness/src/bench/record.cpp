#include "detops/harness/bench/record.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "detops/harness/bench/stats.h"

namespace detops::harness::bench {
namespace {

using nlohmann::json;

json stats_json(const SampleStats& s) {
  return {{"min", s.min}, {"q1", s.q1}, {"median", s.median}, {"q3", s.q3}, {"max", s.max},
          {"mean", s.mean}, {"stdev", s.stdev}, {"rel_stdev", s.rel_stdev}, {"count", s.count}};
}

json common_fields(const BenchmarkResult& r, const std::string& name, int repetitions) {
  return {{"name", name},
          {"family_index", r.family_index},
          {"per_family_instance_index", 0},
          {"run_name", benchmark_name(r)},
          {"repetitions", repetitions},
          {"threads", 1},
          {"time_unit", "ms"},
          {"label", r.shape}};
}

double bytes_per_second(std::int64_t bytes, double time_ms) {
  return time_ms > 0 ? static_cast<double>(bytes) / (time_ms * 1e-3) : 0.0;
}

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw std::runtime_error("run record: " + what + " '" + path + "': " + std::strerror(errno));
}

}  // namespace

std::string benchmark_name(const BenchmarkResult& r) {
  return r.op + "/" + r.case_name + "/" + r.dtype + "/" + r.direction;
}

json benchmark_entries(const BenchmarkResult& r) {
  const std::string name = benchmark_name(r);
  json identity = {{"op", r.op}, {"case", r.case_name}, {"dtype", r.dtype}, {"direction", r.direction},
                   {"shape", r.shape}};
  json entries = json::array();
  if (!r.error.empty() || r.samples_ms.empty()) {
    json e = common_fields(r, name, 1);
    const std::string message = r.error.empty() ? "no valid samples" : r.error;
    e.update({{"run_type", "iteration"}, {"repetition_index", 0}, {"iterations", 0}, {"real_time", 0.0},
              {"cpu_time", 0.0}, {"error_occurred", true}, {"error_message", message}});
    json detops = identity;
    detops["error"] = message;
    detops["timer"] = r.timer;
    detops["discarded_throttled"] = r.discarded_throttled;
    detops["discarded_dropped_records"] = r.discarded_dropped_records;
    detops.update(r.extra);
    e["detops"] = detops;
    entries.push_back(e);
    return entries;
  }

  const std::vector<double> medians = repetition_medians(r.samples_ms, r.repetitions);
  const int reps = static_cast<int>(medians.size());
  for (int i = 0; i < reps; ++i) {
    json e = common_fields(r, name, reps);
    e.update({{"run_type", "iteration"}, {"repetition_index", i}, {"iterations", 1}, {"real_time", medians[i]},
              {"cpu_time", medians[i]}, {"bytes_per_second", bytes_per_second(r.bytes_moved, medians[i])}});
    entries.push_back(e);
  }

  const SampleStats over_reps = summarize_samples(medians);
  const SampleStats over_samples = summarize_samples(r.samples_ms);
  const double median_of_reps = over_reps.median;
  const double achieved = bytes_per_second(r.bytes_moved, over_samples.median);
  json detops = identity;
  detops.update({{"timer", r.timer},
                 {"samples_ms", r.samples_ms},
                 {"span_samples_ms", r.span_samples_ms},
                 {"repetition_medians_ms", medians},
                 {"stats_ms", stats_json(over_samples)},
                 {"stop_reason", r.stop_reason},
                 {"gpu_time_s", r.gpu_time_s},
                 {"wall_time_s", r.wall_time_s},
                 {"kernels_per_call", r.kernels_per_call},
                 {"kernel_names", r.kernel_names},
                 {"bytes_moved", r.bytes_moved},
                 {"achieved_bandwidth_bytes_per_second", achieved},
                 {"bandwidth_fraction", r.device_copy_bandwidth > 0 ? json(achieved / r.device_copy_bandwidth) : json()},
                 {"discarded_throttled", r.discarded_throttled},
                 {"discarded_dropped_records", r.discarded_dropped_records},
                 {"hardware_metrics", r.hardware_metrics}});
  if (r.sm_clocks_mhz.empty()) {
    detops["sm_clock_mhz"] = nullptr;
  } else {
    const SampleStats c = summarize_samples(r.sm_clocks_mhz);
    detops["sm_clock_mhz"] = {{"min", c.min}, {"median", c.median}, {"max", c.max}};
  }
  detops.update(r.extra);

  struct Aggregate {
    const char* name;
    double value;
    const char* unit;
  };
  const Aggregate aggregates[] = {{"mean", over_reps.mean, "time"},
                                  {"median", median_of_reps, "time"},
                                  {"stddev", over_reps.stdev, "time"},
                                  {"cv", over_reps.rel_stdev, "percentage"}};
  for (const Aggregate& a : aggregates) {
    json e = common_fields(r, name + "_" + a.name, reps);
    e.update({{"run_type", "aggregate"}, {"aggregate_name", a.name}, {"aggregate_unit", a.unit},
              {"iterations", reps}, {"real_time", a.value}, {"cpu_time", a.value}});
    if (std::string(a.unit) == "time" && std::string(a.name) != "stddev") {
      e["bytes_per_second"] = bytes_per_second(r.bytes_moved, a.value);
    }
    if (std::string(a.name) == "median") e["detops"] = detops;
    entries.push_back(e);
  }
  return entries;
}

namespace {

// What a record holds as "correctness" before the suite's digest is set.
json empty_correctness() {
  return json{{"summary", {{"passed", 0}, {"failed", 0}, {"skipped", 0}, {"errors", 0}}}, {"tests", json::array()}};
}

}  // namespace

RunRecord::RunRecord(json gb_context, json detops_context)
    : gb_context_(std::move(gb_context)), detops_context_(std::move(detops_context)) {
  set_correctness(json());
}

void RunRecord::add(const BenchmarkResult& r) {
  for (const auto& e : benchmark_entries(r)) entry_texts_.push_back(e.dump());
}

void RunRecord::set_correctness(json correctness) {
  correctness_text_ = (correctness.is_object() ? correctness : empty_correctness()).dump();
}

json RunRecord::context_json() const {
  json context = gb_context_.is_object() ? gb_context_ : json::object();
  context["detops_schema_version"] = kRecordSchemaVersion;
  json detops = detops_context_.is_object() ? detops_context_ : json::object();
  detops["complete"] = complete_;
  context["detops"] = detops;
  return context;
}

// The record as a value (tests and tools); the bench itself only writes text().
json RunRecord::to_json() const { return json::parse(text()); }

std::string RunRecord::text() const {
  // The members in nlohmann::json's (sorted) order, compact as dump() writes them.
  const std::string context = context_json().dump();
  std::size_t size = context.size() + correctness_text_.size() + 64;
  for (const std::string& e : entry_texts_) size += e.size() + 1;
  std::string out;
  out.reserve(size);
  out += "{\"benchmarks\":[";
  for (std::size_t i = 0; i < entry_texts_.size(); ++i) {
    if (i > 0) out += ',';
    out += entry_texts_[i];
  }
  out += "],\"context\":";
  out += context;
  out += ",\"correctness\":";
  out += correctness_text_;
  out += ",\"peers\":[]}";
  return out;
}

// Compact JSON: the raw samples dominate the size.
void RunRecord::write(const std::string& path) const { write_file_atomically(path, text() + "\n"); }

void write_file_atomically(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create", tmp);
  std::size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail("cannot write", tmp);
    }
    done += static_cast<std::size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  const bool closed = ::close(fd) == 0;
  if (!synced || !closed) {
    ::unlink(tmp.c_str());
    fail("cannot flush", tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    fail("cannot rename onto", path);
  }
}

}  // namespace detops::harness::bench
