// detops_bench: one Google Benchmark per (op, benchmark case, dtype, direction) from the op-spec
// registry, plus the calibration benchmark. Each benchmark runs once (Iterations(1), manual time): the
// DetOps sampling loop inside it takes CUPTI kernel-time samples until the stopping rule says stop, and
// Google Benchmark reports the median. The run record (docs/record-format.md) is rewritten atomically
// after every benchmark. Exit 77 without a usable GPU, 2 on bad flags, 1 when a benchmark failed.
#include <benchmark/benchmark.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "detops/harness/bench/calibration.h"
#include "detops/harness/bench/correctness_digest.h"
#include "detops/harness/bench/gpu_timer.h"
#include "detops/harness/bench/hw_metrics.h"
#include "detops/harness/bench/measure.h"
#include "detops/harness/bench/provenance.h"
#include "detops/harness/bench/record.h"
#include "detops/harness/bench/stats.h"
#include "detops/harness/checks.h"
#include "detops/harness/device_facts.h"
#include "detops/harness/op_spec.h"

namespace detops::harness::bench {
namespace {

using nlohmann::json;

constexpr const char* kCalibrationCase = "fma_chain";

struct Flags {
  std::string record;
  std::vector<std::string> correctness_json;
  bool warm = false;
  double min_time_s = 0.5;
  int repetitions = 9;
  double timeout_s = 15.0;
  std::int64_t max_samples = 3000;
  int max_batch = 64;
  double min_batched_kernel_us = 50;
  bool synchronized_short_batches = false;
  double calibration_work = 1.0;
  bool metrics = false;
  std::string filter;  // Google Benchmark's --benchmark_filter, applied here to our names
};

double parse_number(const std::string& flag, const std::string& text) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) throw std::invalid_argument(flag + " expects a number; got '" + text + "'");
  return v;
}

// An integer flag in [lo, hi] (range_text: how the message writes the range).
std::int64_t parse_integer(const std::string& flag, const std::string& text, double lo, double hi,
                           const std::string& range_text) {
  const double v = parse_number(flag, text);
  if (!(v >= lo && v <= hi && v == static_cast<double>(static_cast<std::int64_t>(v)))) {
    throw std::invalid_argument(flag + " must be an integer in " + range_text + "; got " + text);
  }
  return static_cast<std::int64_t>(v);
}

// Takes the --detops_* flags and --benchmark_filter out of argv; the rest is for Google Benchmark.
Flags parse_flags(int& argc, char** argv) {
  Flags f;
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value_of = [&](const std::string& name) -> std::optional<std::string> {
      const std::string prefix = "--" + name + "=";
      if (a.rfind(prefix, 0) == 0) return a.substr(prefix.size());
      return std::nullopt;
    };
    if (auto v = value_of("detops_record")) {
      f.record = *v;
    } else if (auto v2 = value_of("detops_correctness_json")) {
      f.correctness_json.push_back(*v2);
    } else if (a == "--detops_warm" || a == "--detops_warm=true") {
      f.warm = true;
    } else if (a == "--detops_metrics" || a == "--detops_metrics=true") {
      f.metrics = true;
    } else if (a == "--detops_synchronized_short_batches" || a == "--detops_synchronized_short_batches=true") {
      f.synchronized_short_batches = true;
    } else if (a == "--detops_synchronized_short_batches=false") {
      f.synchronized_short_batches = false;
    } else if (auto v3 = value_of("detops_min_time_s")) {
      f.min_time_s = parse_number("--detops_min_time_s", *v3);
      if (!(f.min_time_s >= 0)) throw std::invalid_argument("--detops_min_time_s must be >= 0; got " + *v3);
    } else if (auto v4 = value_of("detops_repetitions")) {
      f.repetitions = static_cast<int>(parse_integer("--detops_repetitions", *v4, 1, 1000, "[1, 1000]"));
    } else if (auto v5 = value_of("detops_timeout_s")) {
      f.timeout_s = parse_number("--detops_timeout_s", *v5);
      if (!(f.timeout_s > 0)) throw std::invalid_argument("--detops_timeout_s must be > 0; got " + *v5);
    } else if (auto v8 = value_of("detops_max_samples")) {
      f.max_samples = parse_integer("--detops_max_samples", *v8, 10, 1e7, "[10, 1e7]");
    } else if (auto v9 = value_of("detops_max_batch")) {
      f.max_batch = static_cast<int>(parse_integer("--detops_max_batch", *v9, 1, 1024, "[1, 1024]"));
    } else if (auto v10 = value_of("detops_min_batched_kernel_us")) {
      f.min_batched_kernel_us = parse_number("--detops_min_batched_kernel_us", *v10);
      if (!(f.min_batched_kernel_us >= 0 && f.min_batched_kernel_us <= 1e6)) {
        throw std::invalid_argument("--detops_min_batched_kernel_us must be a number in [0, 1e6]; got " + *v10);
      }
    } else if (auto v6 = value_of("detops_calibration_work")) {
      f.calibration_work = parse_number("--detops_calibration_work", *v6);
      if (!(f.calibration_work > 0 && f.calibration_work <= 100)) {
        throw std::invalid_argument("--detops_calibration_work must be in (0, 100]; got " + *v6);
      }
    } else if (auto v7 = value_of("benchmark_filter")) {
      f.filter = *v7;
    } else if (a.rfind("--detops_", 0) == 0) {
      throw std::invalid_argument("unknown flag " + a +
                                  " (known: --detops_record, --detops_correctness_json, --detops_warm, "
                                  "--detops_min_time_s, --detops_repetitions, --detops_timeout_s, --detops_max_samples, --detops_max_batch, "
                                  "--detops_min_batched_kernel_us, --detops_synchronized_short_batches, "
                                  "--detops_calibration_work, --detops_metrics)");
    } else {
      argv[out++] = argv[i];
    }
  }
  argc = out;
  argv[argc] = nullptr;
  return f;
}

// Google Benchmark's filter semantics: a regex searched in the name; a leading '-' negates it.
class NameFilter {
 public:
  explicit NameFilter(std::string spec) {
    if (!spec.empty() && spec[0] == '-') {
      negate_ = true;
      spec.erase(0, 1);
    }
    if (spec.empty() || spec == "all" || spec == ".") return;
    regex_ = std::regex(spec);
  }
  bool matches(const std::string& name) const {
    const bool hit = !regex_ || std::regex_search(name, *regex_);
    return negate_ ? !hit : hit;
  }

 private:
  std::optional<std::regex> regex_;
  bool negate_ = false;
};

struct Job {
  std::string name;
  const OpSpec* op = nullptr;  // null: the calibration benchmark
  const BenchCase* bench_case = nullptr;
  DType dtype = DType::kFloat32;
  bool backward = false;
  int family_index = 0;
};

class Runner {
 public:
  Runner(Flags flags, cudaStream_t stream) : flags_(std::move(flags)), stream_(stream) {}

  void init(std::ostream& log) {
    timer_ = make_gpu_timer(&timer_note_);
    if (std::string(timer_->name()) != "cupti") {
      log << "detops_bench: CUPTI unavailable, timing with CUDA events: " << timer_note_ << "\n";
    }
    const json facts = device_facts();
    nvml_ = std::make_unique<NvmlDevice>(facts["gpu"].value("uuid", std::string()));
    default_clock_mhz_ = nvml_->default_sm_clock_mhz();
    if (default_clock_mhz_ <= 0) {
      int khz = 0;
      if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0) == cudaSuccess && khz > 0) default_clock_mhz_ = khz / 1000.0;
      cudaGetLastError();
    }
    if (!nvml_->available()) log << "detops_bench: NVML unavailable (SM clock not observed, no throttle check): " << nvml_->reason() << "\n";
    flusher_ = std::make_unique<L2Flusher>(0);
    try {
      copy_bandwidth_ = measure_device_copy_bandwidth(std::size_t{1} << 30, 10, stream_);
    } catch (const std::exception& e) {
      copy_bandwidth_ = 0;
      copy_bandwidth_note_ = e.what();
      log << "detops_bench: device copy bandwidth not measured: " << e.what() << "\n";
    }
    settings_.stopping.min_gpu_time_s = flags_.min_time_s;
    settings_.stopping.timeout_s = flags_.timeout_s;
    settings_.stopping.max_samples = flags_.max_samples;
    settings_.cold_l2 = !flags_.warm;
    settings_.repetitions = flags_.repetitions;
    settings_.max_batch = flags_.max_batch;
    settings_.min_batched_kernel_s = flags_.min_batched_kernel_us * 1e-6;
    settings_.synchronized_short_batches = flags_.synchronized_short_batches;
    if (flags_.metrics) {
      hw_ = std::make_unique<HwMetricsProfiler>(0);
      if (!hw_->available()) log << "detops_bench: hardware metrics skipped: " << hw_->reason() << "\n";
    }
  }

  json provenance() const {
    ProvenanceInputs in;
    in.timer = timer_->name();
    in.timer_note = timer_note_;
    in.device_copy_bandwidth = copy_bandwidth_;
    in.settings = {{"cold_l2", settings_.cold_l2},
                   {"l2_per_case",
                    "warm cases (names ending in _warm) run their touch before each call instead of the flush, "
                    "whatever cold_l2 says; each entry's l2 and l2_note say what ran (docs/benchmarks.md)"},
                   {"l2_flush_bytes", flusher_->bytes()},
                   {"min_samples", settings_.stopping.min_samples},
                   {"min_gpu_time_s", settings_.stopping.min_gpu_time_s},
                   {"max_rel_stdev", settings_.stopping.max_rel_stdev},
                   {"timeout_s", settings_.stopping.timeout_s},
                   {"max_samples", settings_.stopping.max_samples},
                   {"repetitions", settings_.repetitions},
                   {"max_batch", settings_.max_batch},
                   {"batch_gpu_s", settings_.batch_gpu_s},
                   {"min_batched_kernel_s", settings_.min_batched_kernel_s},
                   {"batching",
                    timer_->batches()
                        ? "after a first sample alone, up to max_batch samples (each after its own flush or touch) "
                          "queued between two synchronizations, as many as make batch_gpu_s of the last sample's "
                          "kernel time, when that is at least min_batched_kernel_s (shorter calls alone); each sample attributed by its own external correlation id; the SM clock "
                          "read once per batch (docs/benchmarks.md)"
                        : std::string("none: every sample alone (") + timer_->name() + " timer)"},
                   {"throttle_fraction", settings_.throttle_fraction},
                   {"default_sm_clock_mhz_used", default_clock_mhz_ > 0 ? json(default_clock_mhz_) : json()},
                   {"warmup", std::to_string(settings_.warmup_calls) + " untimed calls before sampling" +
                                  ", each after the same L2 preparation as a sample (cold cases: " +
                                  (settings_.cold_l2 ? "an L2 flush" : "none, --detops_warm") +
                                  "; warm cases: their touch)"},
                   {"calibration_work", flags_.calibration_work},
                   {"hardware_metrics_requested", flags_.metrics}};
    if (!copy_bandwidth_note_.empty()) in.settings["device_copy_bandwidth_error"] = copy_bandwidth_note_;
    // Recorded only when on, so records of the default measurement keep the settings of earlier ones (compare.py
    // warns on every setting that differs).
    if (settings_.synchronized_short_batches) {
      in.settings["synchronized_short_batches"] =
          "on: calls under min_batched_kernel_s sampled in batches of up to max_batch, the device synchronized after "
          "every sample and CUPTI flushed and the clock read once per batch (docs/benchmarks.md)";
    }
    if (hw_) in.settings["hardware_metrics_profiler"] = hw_->description();
    return run_provenance(in, *nvml_);
  }

  BenchmarkResult run(const Job& job) {
    const auto started = std::chrono::steady_clock::now();
    BenchmarkResult r;
    r.direction = job.backward ? "bwd" : "fwd";
    r.timer = timer_->name();
    r.family_index = job.family_index;
    r.repetitions = settings_.repetitions;
    r.device_copy_bandwidth = copy_bandwidth_;
    r.hardware_metrics = hw_metrics_not_measured(
        "skipped", flags_.metrics ? "the benchmark failed before the metrics pass" : "not requested");
    try {
      std::function<void()> call;
      std::function<void()> touch;  // warm cases: run instead of the L2 flush
      if (job.op == nullptr) {
        r.op = "calibration";
        r.case_name = kCalibrationCase;
        r.dtype = "fp32";
        calibration_ = std::make_unique<CalibrationKernel>(0, flags_.calibration_work);
        r.shape = calibration_->shape();
        r.bytes_moved = calibration_->bytes();
        r.extra = {{"calibration_work", flags_.calibration_work}, {"chain_length", calibration_->chain_length()}};
        r.extra.update(l2_extra(job));
        CalibrationKernel* k = calibration_.get();
        cudaStream_t s = stream_;
        call = [k, s] { k->launch(s); };
      } else {
        r.op = job.op->name;
        r.case_name = job.bench_case->name;
        r.dtype = dtype_name(job.dtype);
        r.shape = job.bench_case->shape;
        r.extra = {{"bytes_note", job.bench_case->bytes_note}};
        r.extra.update(l2_extra(job));
        const auto build_start = std::chrono::steady_clock::now();
        const BenchInstance& inst = instance(job);
        // Building the inputs (once per op, case and dtype: 0 for the bwd benchmark that reuses them).
        r.extra["inputs_build_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - build_start).count();
        call = job.backward ? inst.backward : inst.forward;
        r.bytes_moved = job.backward ? inst.bytes_backward : inst.bytes_forward;
        if (!call) throw std::runtime_error("the benchmark case declares no " + r.direction + " call");
        if (job.bench_case->l2 == L2State::kWarm) {
          touch = job.backward ? inst.touch_backward : inst.touch_forward;
          if (!touch) throw std::runtime_error("the warm benchmark case declares no " + r.direction + " touch");
        }
      }
      const Measurement m =
          measure_call(call, stream_, *timer_, *nvml_, default_clock_mhz_, settings_, *flusher_, touch);
      r.samples_ms = m.samples_ms;
      r.span_samples_ms = m.span_samples_ms;
      r.sm_clocks_mhz = m.sm_clocks_mhz;
      r.stop_reason = m.stop_reason;
      r.gpu_time_s = m.gpu_time_s;
      r.wall_time_s = m.wall_time_s;
      r.kernels_per_call = m.kernels_per_call;
      r.kernel_names = m.kernel_names;
      r.discarded_throttled = m.discarded_throttled;
      r.discarded_dropped_records = m.discarded_dropped_records;
      r.extra["discarded_invalid_other"] = m.discarded_other;
      r.extra["kernels_per_call_varied"] = m.kernels_per_call_varied;
      r.extra["window_attributed_samples"] = m.window_attributed_samples;
      r.extra["batches"] = m.batches;
      r.extra["largest_batch"] = m.largest_batch;
      if (settings_.synchronized_short_batches) r.extra["synchronized_batches"] = m.synchronized_batches;
      r.extra["unused_after_stop"] = m.unused_after_stop;
      r.extra["warmup_s"] = m.warmup_s;
      if (hw_) r.hardware_metrics = metrics_pass(call, touch, r);
    } catch (const std::exception& e) {
      r.error = e.what();
      cudaGetLastError();
    }
    if (job.op == nullptr) calibration_.reset();
    // Everything this benchmark took (inputs, warm-up, sampling loop, metrics pass), without the record's rewrite
    // after it: where a benchmark step's wall time goes, next to wall_time_s (the sampling loop alone).
    r.extra["benchmark_wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return r;
  }

 private:
  // The hardware-metrics pass of one benchmark, after its timed samples (docs/benchmarks.md, "Hardware
  // metrics"): the same op call in one CUPTI user range, replayed as often as the metrics need, each
  // replay after the same L2 preparation as a sample (sample_preparation, measure.h). Its failures are
  // recorded, never thrown.
  json metrics_pass(const std::function<void()>& call, const std::function<void()>& touch, const BenchmarkResult& r) {
    const std::function<void()> prepare = sample_preparation(settings_, *flusher_, touch, stream_);
    try {
      const HwMetricsOutcome o = hw_->measure(call, prepare);
      const double median_ms = r.samples_ms.empty() ? 0.0 : median_of(repetition_medians(r.samples_ms, r.repetitions));
      return hw_metrics_json(o, median_ms, !touch && settings_.cold_l2);
    } catch (const std::exception& e) {  // never lose the timings over the metrics
      cudaGetLastError();
      return hw_metrics_not_measured("error", e.what());
    }
  }

  // The entry's L2 state: what ran before each warm-up call and sample (docs/benchmarks.md, "L2 state").
  json l2_extra(const Job& job) const {
    if (job.op != nullptr && job.bench_case->l2 == L2State::kWarm) {
      return {{"l2", "warm"}, {"l2_note", "touch: " + job.bench_case->touch_note}};
    }
    if (settings_.cold_l2) {
      return {{"l2", "cold"},
              {"l2_note", "flush: cudaMemsetAsync over " + std::to_string(flusher_->bytes()) +
                              " bytes (twice the L2 size, at least 1 MiB)"}};
    }
    return {{"l2", "warm"}, {"l2_note", "none (--detops_warm): the inputs as the previous call left them"}};
  }

  // The instance of the job's (op, case, dtype), built once and shared by its fwd and bwd benchmarks.
  const BenchInstance& instance(const Job& job) {
    const std::string key = job.op->name + "/" + job.bench_case->name + "/" + dtype_name(job.dtype);
    if (key != instance_key_ || !instance_) {
      instance_.reset();  // free the previous inputs first
      instance_key_.clear();
      instance_ = std::make_unique<BenchInstance>(job.bench_case->make(job.dtype));
      instance_key_ = key;
      const cudaError_t e = cudaDeviceSynchronize();
      if (e != cudaSuccess) {
        cudaGetLastError();
        throw std::runtime_error(std::string("building the inputs failed: ") + cudaGetErrorString(e));
      }
    }
    return *instance_;
  }

  Flags flags_;
  cudaStream_t stream_;
  std::unique_ptr<GpuTimer> timer_;
  std::string timer_note_;
  std::unique_ptr<NvmlDevice> nvml_;
  double default_clock_mhz_ = -1;
  std::unique_ptr<L2Flusher> flusher_;
  double copy_bandwidth_ = 0;
  std::string copy_bandwidth_note_;
  MeasureSettings settings_;
  std::unique_ptr<BenchInstance> instance_;
  std::string instance_key_;
  std::unique_ptr<CalibrationKernel> calibration_;
  std::unique_ptr<HwMetricsProfiler> hw_;  // --detops_metrics only
};

// Google Benchmark's own context fields, as its JSON reporter writes them.
json google_benchmark_context(const benchmark::BenchmarkReporter::Context& context) {
  std::ostringstream out, err;
  benchmark::JSONReporter json_reporter;
  json_reporter.SetOutputStream(&out);
  json_reporter.SetErrorStream(&err);
  json_reporter.ReportContext(context);
  try {
    const json j = json::parse(out.str() + "]}");
    return j.value("context", json::object());
  } catch (const std::exception& e) {
    return {{"detops_note", std::string("Google Benchmark's context could not be read: ") + e.what()}};
  }
}

// Console output as usual, plus the record: rewritten after every benchmark, complete at the end.
class RecordReporter : public benchmark::ConsoleReporter {
 public:
  RecordReporter(std::string path, json detops_context, json correctness, std::vector<BenchmarkResult>* pending)
      : path_(std::move(path)), detops_context_(std::move(detops_context)), correctness_(std::move(correctness)),
        pending_(pending) {}

  bool ReportContext(const Context& context) override {
    record_ = std::make_unique<RunRecord>(google_benchmark_context(context), detops_context_);
    record_->set_correctness(correctness_);
    write();
    return ConsoleReporter::ReportContext(context);
  }

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const BenchmarkResult& r : *pending_) {
      if (record_) record_->add(r);
    }
    pending_->clear();
    write();
  }

  void Finalize() override {
    if (record_) record_->set_complete(true);
    write();
    if (writes_ > 0) {
      std::ostringstream line;
      line << "detops_bench: the record written " << writes_ << " times in " << std::fixed << std::setprecision(1)
           << write_s_ << " s\n";
      std::cerr << line.str();
    }
    ConsoleReporter::Finalize();
  }

  bool write_failed() const { return write_failed_; }

 private:
  void write() {
    if (path_.empty() || !record_) return;
    const auto start = std::chrono::steady_clock::now();
    try {
      ++writes_;
      record_->write(path_);
      write_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } catch (const std::exception& e) {
      write_failed_ = true;
      std::cerr << "detops_bench: " << e.what() << "\n";
    }
  }

  std::string path_;
  json detops_context_, correctness_;
  std::vector<BenchmarkResult>* pending_;
  std::unique_ptr<RunRecord> record_;
  bool write_failed_ = false;
  int writes_ = 0;
  double write_s_ = 0;  // the rewrites' wall time, said at the end
};

// "12m05s" / "48s".
std::string minutes_seconds(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  std::ostringstream o;
  if (s >= 60) {
    o << s / 60 << "m" << std::setw(2) << std::setfill('0') << s % 60 << "s";
  } else {
    o << s << "s";
  }
  return o.str();
}

// "[i/N] name median ms (...); <elapsed>, about <left> left" (the time left at the run's mean pace so far).
std::string progress_line(std::size_t index, std::size_t total, const BenchmarkResult& r, double elapsed_s) {
  std::ostringstream s;
  const std::string pace = "; " + minutes_seconds(elapsed_s) + ", about " +
                           minutes_seconds(elapsed_s / static_cast<double>(std::max<std::size_t>(index, 1)) *
                                           static_cast<double>(total - std::min(index, total))) +
                           " left";
  s << "[" << index << "/" << total << "] " << benchmark_name(r) << " ";
  if (!r.error.empty()) {
    s << "ERROR: " << r.error << pace;
    return s.str();
  }
  const SampleStats st = summarize_samples(r.samples_ms);
  s << std::fixed << std::setprecision(3) << median_of(repetition_medians(r.samples_ms, r.repetitions)) << " ms (rel stdev "
    << std::setprecision(1) << st.rel_stdev * 100 << "%, " << st.count << " samples, " << r.stop_reason;
  if (r.discarded_throttled > 0) s << ", " << r.discarded_throttled << " throttled";
  if (r.discarded_dropped_records > 0) s << ", " << r.discarded_dropped_records << " dropped";
  s << ")" << pace;
  return s.str();
}

int run_main(int argc, char** argv) {
  Flags flags;
  try {
    flags = parse_flags(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "detops_bench: " << e.what() << "\n";
    return 2;
  }
  std::optional<NameFilter> filter;
  try {
    filter.emplace(flags.filter);
  } catch (const std::regex_error& e) {
    std::cerr << "detops_bench: --benchmark_filter is not a valid regular expression: " << e.what() << "\n";
    return 2;
  }
  json correctness;
  try {
    correctness = digest_gtest_files(flags.correctness_json);
  } catch (const std::exception& e) {
    std::cerr << "detops_bench: " << e.what() << "\n";
    return 2;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;

  if (!cuda_available()) {
    std::cerr << "detops_bench: skipped: " << cuda_unavailable_reason() << "\n";
    return 77;
  }

  // The jobs, in registry order: per op, per case, per dtype, fwd then bwd; the calibration last.
  std::vector<Job> jobs;
  int family = 0;
  for (const OpSpec& op : OpRegistry::instance().ops()) {
    for (const BenchCase& bc : op.benchmarks) {
      for (DType dt : bc.dtypes) {
        for (bool bwd : {false, true}) {
          if (bwd && !op.has_backward) continue;
          Job j;
          j.op = &op;
          j.bench_case = &bc;
          j.dtype = dt;
          j.backward = bwd;
          j.name = op.name + "/" + bc.name + "/" + dtype_name(dt) + "/" + (bwd ? "bwd" : "fwd");
          if (filter->matches(j.name)) jobs.push_back(j);
        }
      }
    }
  }
  {
    Job j;
    j.name = std::string("calibration/") + kCalibrationCase + "/fp32/fwd";
    if (filter->matches(j.name)) jobs.push_back(j);
  }
  for (Job& j : jobs) j.family_index = family++;
  if (jobs.empty()) {
    std::cerr << "detops_bench: no benchmark matches --benchmark_filter=" << flags.filter << "\n";
    return 2;
  }

  if (cudaSetDevice(0) != cudaSuccess) {
    std::cerr << "detops_bench: cudaSetDevice(0) failed\n";
    return 1;
  }
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(0).stream();
  Runner runner(flags, stream);
  try {
    runner.init(std::cerr);
  } catch (const std::exception& e) {
    std::cerr << "detops_bench: cannot set up the measurement: " << e.what() << "\n";
    return 1;
  }
  const json detops_context = runner.provenance();
  std::cerr << "detops_bench: timer " << detops_context["timer"].get<std::string>() << ", device copy bandwidth "
            << detops_context["device_copy_bandwidth_bytes_per_second"].dump() << " B/s, " << jobs.size()
            << " benchmarks\n";

  std::vector<BenchmarkResult> pending;
  std::size_t done = 0, failed = 0;
  const std::size_t total = jobs.size();
  const auto started = std::chrono::steady_clock::now();
  const auto elapsed_s = [&started] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };
  for (const Job& job : jobs) {
    const Job* jp = &job;
    benchmark::RegisterBenchmark(job.name.c_str(), [&, jp](benchmark::State& state) {
      for (auto _ : state) {
        BenchmarkResult r = runner.run(*jp);
        std::cerr << progress_line(++done, total, r, elapsed_s()) << "\n";
        if (!r.error.empty()) {
          ++failed;
          state.SkipWithError(r.error.c_str());
          pending.push_back(std::move(r));
          break;
        }
        const double median_ms = median_of(repetition_medians(r.samples_ms, r.repetitions));
        state.SetIterationTime(median_ms * 1e-3);
        state.SetBytesProcessed(r.bytes_moved);
        const SampleStats st = summarize_samples(r.samples_ms);
        state.counters["samples"] = static_cast<double>(st.count);
        state.counters["rel_stdev"] = st.rel_stdev;
        if (r.device_copy_bandwidth > 0 && median_ms > 0) {
          state.counters["bw_fraction"] = static_cast<double>(r.bytes_moved) / (median_ms * 1e-3) / r.device_copy_bandwidth;
        }
        pending.push_back(std::move(r));
      }
    })
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }

  RecordReporter reporter(flags.record, detops_context, correctness, &pending);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  if (reporter.write_failed()) return 1;
  return failed > 0 ? 1 : 0;
}

}  // namespace
}  // namespace detops::harness::bench

int main(int argc, char** argv) { return detops::harness::bench::run_main(argc, argv); }
