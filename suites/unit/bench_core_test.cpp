// The benchmark pieces that need no GPU: statistics, the stopping rule on synthetic sequences,
// repetition blocks, the record's layout and atomic writing, and the correctness digest.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "detops/harness/bench/correctness_digest.h"
#include "detops/harness/bench/record.h"
#include "detops/harness/bench/stats.h"
#include "detops/harness/bench/stopping.h"

namespace detops::harness::bench {
namespace {

using nlohmann::json;

TEST(BenchStats, QuantilesInterpolateLinearly) {
  // 1..5: q1 = 2, median = 3, q3 = 4 exactly; 1..4: positions 0.75, 1.5, 2.25.
  const SampleStats a = summarize_samples({5, 1, 4, 2, 3});
  EXPECT_DOUBLE_EQ(a.min, 1);
  EXPECT_DOUBLE_EQ(a.q1, 2);
  EXPECT_DOUBLE_EQ(a.median, 3);
  EXPECT_DOUBLE_EQ(a.q3, 4);
  EXPECT_DOUBLE_EQ(a.max, 5);
  EXPECT_DOUBLE_EQ(a.mean, 3);
  EXPECT_DOUBLE_EQ(a.stdev, std::sqrt(2.5));  // sum of squares 10 over n-1 = 4
  EXPECT_DOUBLE_EQ(a.rel_stdev, std::sqrt(2.5) / 3);
  EXPECT_EQ(a.count, 5);
  const SampleStats b = summarize_samples({4, 3, 2, 1});
  EXPECT_DOUBLE_EQ(b.q1, 1.75);
  EXPECT_DOUBLE_EQ(b.median, 2.5);
  EXPECT_DOUBLE_EQ(b.q3, 3.25);
}

TEST(BenchStats, EmptyAndSingle) {
  EXPECT_EQ(summarize_samples({}).count, 0);
  const SampleStats one = summarize_samples({7});
  EXPECT_DOUBLE_EQ(one.median, 7);
  EXPECT_DOUBLE_EQ(one.stdev, 0);
  EXPECT_THROW(median_of({}), std::invalid_argument);
}

TEST(BenchRepetitions, ContiguousBlocksDifferingByAtMostOne) {
  // 10 samples in 3 blocks: [0,3) [3,6) [6,10) -> medians of {1,2,3} {4,5,6} {7,8,9,10}.
  const std::vector<double> s = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const std::vector<double> m = repetition_medians(s, 3);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_DOUBLE_EQ(m[0], 2);
  EXPECT_DOUBLE_EQ(m[1], 5);
  EXPECT_DOUBLE_EQ(m[2], 8.5);
  // Order matters (blocks are in sampling order, not sorted): a slow tail shows in the last block.
  const std::vector<double> drift = {1, 1, 1, 1, 1, 1, 9, 9, 9};
  const std::vector<double> d = repetition_medians(drift, 3);
  EXPECT_DOUBLE_EQ(d[0], 1);
  EXPECT_DOUBLE_EQ(d[2], 9);
  // Fewer samples than repetitions: one block per sample.
  EXPECT_EQ(repetition_medians({3, 1}, 9), (std::vector<double>{3, 1}));
  EXPECT_THROW(repetition_medians(s, 0), std::invalid_argument);
}

TEST(BenchStopping, NeedsMinimumSamplesAndTime) {
  StoppingRule rule;  // 10 samples, 0.5 s, 0.5 %
  for (int i = 0; i < 9; ++i) {
    rule.add(1.0);  // 1 s each: time is met, samples are not
    EXPECT_FALSE(rule.decide(0.0).has_value()) << "after " << i + 1 << " samples";
  }
  rule.add(1.0);
  ASSERT_TRUE(rule.decide(0.0).has_value());
  EXPECT_EQ(*rule.decide(0.0), StopReason::kConverged);

  StoppingRule short_kernels;
  for (int i = 0; i < 100; ++i) short_kernels.add(1e-3);  // 0.1 s of GPU time in total
  EXPECT_FALSE(short_kernels.decide(1.0).has_value());
  for (int i = 0; i < 401; ++i) short_kernels.add(1e-3);
  EXPECT_EQ(short_kernels.decide(1.0), StopReason::kConverged);
}

TEST(BenchStopping, NoisySequenceStopsWhenNoiseStopsImproving) {
  // Alternating 1 and 1.2 ms: relative stdev ~9%, never under 0.5 %, and stable -> stops on the
  // noise check, which runs every 16th sample once more than 64 noise values are tracked.
  StoppingSettings settings;
  settings.min_gpu_time_s = 0.01;
  StoppingRule rule(settings);
  std::optional<StopReason> reason;
  int n = 0;
  while (!reason && n < 100000) {
    rule.add(n % 2 == 0 ? 1e-3 : 1.2e-3);
    ++n;
    reason = rule.decide(0.0);
  }
  ASSERT_TRUE(reason.has_value());
  EXPECT_EQ(*reason, StopReason::kNoiseStoppedImproving);
  EXPECT_EQ(n % 16, 0);
  EXPECT_GT(n, 64);
  EXPECT_GT(rule.rel_stdev(), settings.max_rel_stdev);
}

TEST(BenchStopping, TimeoutAndMaxSamples) {
  StoppingSettings settings;
  settings.timeout_s = 2.0;
  StoppingRule rule(settings);
  rule.add(1e-3);
  rule.add(5e-3);
  EXPECT_FALSE(rule.decide(1.9).has_value());
  EXPECT_EQ(rule.decide(2.1), StopReason::kTimeout);

  settings.max_samples = 5;
  StoppingRule capped(settings);
  for (int i = 0; i < 5; ++i) capped.add(i % 2 ? 1e-6 : 3e-6);
  EXPECT_EQ(capped.decide(0.0), StopReason::kMaxSamples);
}

TEST(BenchStopping, ThrottleRule) {
  EXPECT_TRUE(is_throttled(1400, 1980, 0.75));   // 1400 < 1485
  EXPECT_FALSE(is_throttled(1485, 1980, 0.75));
  EXPECT_FALSE(is_throttled(1980, 1980, 0.75));
  EXPECT_FALSE(is_throttled(-1, 1980, 0.75));    // unknown clock: keep the sample
  EXPECT_FALSE(is_throttled(100, -1, 0.75));     // unknown default: no check
  EXPECT_STREQ(stop_reason_name(StopReason::kNoiseStoppedImproving), "noise_stopped_improving");
}

BenchmarkResult sample_result() {
  BenchmarkResult r;
  r.op = "roi_align";
  r.case_name = "box_head_1000";
  r.dtype = "fp32";
  r.direction = "fwd";
  r.shape = "x[2,256,200,336]";
  r.timer = "cupti";
  r.repetitions = 3;
  r.samples_ms = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  r.span_samples_ms = r.samples_ms;
  r.sm_clocks_mhz = {1980, 1970, 1980};
  r.stop_reason = "converged";
  r.bytes_moved = 2000000;  // 2 MB in a median of 5 ms -> 4e8 B/s
  r.device_copy_bandwidth = 4e9;
  r.kernels_per_call = 1;
  r.kernel_names = {"k"};
  r.extra = {{"calibration_work", 1.1}};
  return r;
}

TEST(BenchRecord, GoogleBenchmarkLayoutWithRepetitionsAndAggregates) {
  const json e = benchmark_entries(sample_result());
  ASSERT_EQ(e.size(), 3u + 4u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(e[i]["run_type"], "iteration");
    EXPECT_EQ(e[i]["repetition_index"], i);
    EXPECT_EQ(e[i]["name"], "roi_align/box_head_1000/fp32/fwd");
    EXPECT_EQ(e[i]["run_name"], "roi_align/box_head_1000/fp32/fwd");
    EXPECT_EQ(e[i]["time_unit"], "ms");
    EXPECT_EQ(e[i]["repetitions"], 3);
  }
  // Blocks {1,2,3} {4,5,6} {7,8,9}: medians 2, 5, 8.
  EXPECT_DOUBLE_EQ(e[0]["real_time"].get<double>(), 2);
  EXPECT_DOUBLE_EQ(e[1]["real_time"].get<double>(), 5);
  EXPECT_DOUBLE_EQ(e[2]["real_time"].get<double>(), 8);
  EXPECT_EQ(e[3]["aggregate_name"], "mean");
  EXPECT_EQ(e[4]["aggregate_name"], "median");
  EXPECT_EQ(e[4]["name"], "roi_align/box_head_1000/fp32/fwd_median");
  EXPECT_DOUBLE_EQ(e[4]["real_time"].get<double>(), 5);
  EXPECT_DOUBLE_EQ(e[5]["real_time"].get<double>(), 3);  // stddev of {2,5,8}
  EXPECT_EQ(e[6]["aggregate_name"], "cv");
  EXPECT_DOUBLE_EQ(e[6]["real_time"].get<double>(), 3.0 / 5.0);
  EXPECT_FALSE(e[3].contains("detops"));
  const json& d = e[4]["detops"];
  EXPECT_EQ(d["op"], "roi_align");
  EXPECT_EQ(d["direction"], "fwd");
  EXPECT_EQ(d["samples_ms"].size(), 9u);
  EXPECT_EQ(d["repetition_medians_ms"], json({2.0, 5.0, 8.0}));
  EXPECT_DOUBLE_EQ(d["stats_ms"]["median"].get<double>(), 5);
  EXPECT_EQ(d["stats_ms"]["count"], 9);
  EXPECT_DOUBLE_EQ(d["achieved_bandwidth_bytes_per_second"].get<double>(), 4e8);
  EXPECT_DOUBLE_EQ(d["bandwidth_fraction"].get<double>(), 0.1);
  EXPECT_DOUBLE_EQ(d["sm_clock_mhz"]["min"].get<double>(), 1970);
  EXPECT_EQ(d["hardware_metrics"]["status"], "skipped");
  EXPECT_DOUBLE_EQ(d["calibration_work"].get<double>(), 1.1);
  EXPECT_DOUBLE_EQ(e[4]["bytes_per_second"].get<double>(), 4e8);
}

TEST(BenchRecord, FailedBenchmarkIsOneErrorEntry) {
  BenchmarkResult r = sample_result();
  r.error = "CUDA out of memory";
  const json e = benchmark_entries(r);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0]["error_occurred"], true);
  EXPECT_EQ(e[0]["error_message"], "CUDA out of memory");
  EXPECT_EQ(e[0]["detops"]["error"], "CUDA out of memory");
}

std::string temp_path(const std::string& tag) {
  return ::testing::TempDir() + "detops_bench_" + tag + "_" + std::to_string(::getpid()) + ".json";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(BenchRecord, RecordIsRewrittenAtomicallyAndMarkedComplete) {
  const std::string path = temp_path("record");
  RunRecord record(json{{"library_build_type", "release"}}, json{{"run_id", "x"}});
  record.write(path);
  json first = json::parse(read_file(path));
  EXPECT_EQ(first["context"]["detops_schema_version"], kRecordSchemaVersion);
  EXPECT_EQ(first["context"]["detops"]["complete"], false);
  EXPECT_EQ(first["context"]["library_build_type"], "release");
  EXPECT_TRUE(first["benchmarks"].empty());
  EXPECT_EQ(first["correctness"]["summary"]["passed"], 0);
  EXPECT_TRUE(first["peers"].is_array());

  record.add(sample_result());
  record.set_complete(true);
  record.write(path);
  json second = json::parse(read_file(path));
  EXPECT_EQ(second["context"]["detops"]["complete"], true);
  EXPECT_EQ(second["benchmarks"].size(), 7u);
  // No temporary file is left next to the record.
  EXPECT_FALSE(std::ifstream(path + ".tmp." + std::to_string(::getpid())).good());
  std::remove(path.c_str());
}

// The record's text is assembled from each entry's text as serialized when it was added (not re-serialized
// on every rewrite). At every stage of a run it must be what serializing the whole record writes: its own parse
// dumped again gives it back byte for byte (a key out of nlohmann's order, a missing comma or a stray space would
// not), and it holds the values put in — every entry of every benchmark added, the digest, the context and the
// current "complete" flag (a stale one would still be well-formed).
TEST(BenchRecord, TextIsTheWholeRecordSerializedAtEveryStage) {
  RunRecord record(json{{"library_build_type", "release"}, {"zz_last", 1}}, json{{"run_id", "x"}, {"git_sha", "abc"}});
  EXPECT_EQ(record.text(), record.to_json().dump());  // no benchmark, no correctness digest yet
  record.add(sample_result());
  EXPECT_EQ(record.text(), record.to_json().dump());  // one benchmark (7 entries)
  BenchmarkResult failed = sample_result();
  failed.error = "CUDA out of memory: \"quoted\" \xce\xbc";
  failed.case_name = "second";
  record.add(failed);
  BenchmarkResult odd = sample_result();
  odd.samples_ms = {1e-300, 0.1, 1.0 / 3.0, 12345.678901234567, 2.5e-7, 0.0, 3, 4, 5};
  odd.case_name = "third";
  record.add(odd);
  record.set_correctness(json{{"summary", {{"passed", 3}, {"failed", 1}, {"skipped", 0}, {"errors", 0}}},
                              {"tests", json::array({json{{"name", "a.b"}, {"max_abs_error", 1e-17}}})}});
  EXPECT_EQ(record.text(), record.to_json().dump());
  record.set_complete(true);
  const std::string text = record.text();
  EXPECT_EQ(text, record.to_json().dump());
  const json parsed = json::parse(text);
  EXPECT_EQ(parsed["benchmarks"].size(), 7u + 1u + 7u);
  json entries = json::array();
  for (const BenchmarkResult& r : {sample_result(), failed, odd}) {
    for (const json& e : benchmark_entries(r)) entries.push_back(e);
  }
  EXPECT_EQ(parsed["benchmarks"], entries);
  EXPECT_EQ(parsed["context"]["detops"]["complete"], true);
  EXPECT_EQ(parsed["context"]["detops"]["run_id"], "x");
  EXPECT_EQ(parsed["context"]["library_build_type"], "release");
  EXPECT_EQ(parsed["context"]["detops_schema_version"], kRecordSchemaVersion);
  EXPECT_EQ(parsed["correctness"]["summary"]["failed"], 1);
  EXPECT_EQ(parsed["correctness"]["tests"][0]["max_abs_error"], 1e-17);
  EXPECT_EQ(parsed["peers"], json::array());
  // A digest that is not an object is the empty one, as before.
  record.set_correctness(json::array());
  EXPECT_EQ(record.text(), record.to_json().dump());
  EXPECT_EQ(json::parse(record.text())["correctness"]["summary"]["passed"], 0);
  // write() puts the same text (and a newline) on disk.
  const std::string path = temp_path("record_text");
  record.write(path);
  EXPECT_EQ(read_file(path), record.text() + "\n");
  std::remove(path.c_str());
}

TEST(BenchRecord, AtomicWriteReportsAMissingFolder) {
  try {
    write_file_atomically("/nonexistent-detops-dir/record.json", "{}");
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-detops-dir/record.json.tmp."), std::string::npos) << e.what();
  }
}

json gtest_fixture() {
  return json::parse(R"({
    "tests": 4, "testsuites": [
      {"name": "roi_align.forward", "testsuite": [
        {"name": "tiny.fp32.cuda", "result": "COMPLETED", "outcome": "passed", "dtype": "fp32", "device": "cuda",
         "max_abs_error": "3.5e-07", "max_rel_error": "2e-06",
         "output0": "passed: Float [6, 3, 1, 1], max_abs_error=3.5e-07 (atol=0.0001, rtol=1e-05), worst element [1]"},
        {"name": "big.fp16.cuda", "result": "COMPLETED", "outcome": "mismatch", "message": "output 0: too far",
         "dtype": "fp16", "device": "cuda", "max_abs_error": "0.5", "max_rel_error": "0.1",
         "failures": [{"failure": "x", "type": ""}]},
        {"name": "tiny.bf16.cuda", "result": "SKIPPED", "outcome": "skipped", "message": "no GPU"}
      ]},
      {"name": "roi_align.bad_input", "testsuite": [
        {"name": "nan_rois.cuda", "result": "COMPLETED", "failures": [{"failure": "crashed", "type": ""}]}
      ]}
    ]})");
}

TEST(BenchBatches, NextBatchSizeFillsTheGpuTimeWithinItsBounds) {
  // 5 ms of kernel time: 100 us samples -> 50, 1 ms -> 5, 3.6 ms -> 1 (at least one).
  EXPECT_EQ(next_batch_size(64, 0.005, 50e-6, 100e-6, 0), 50);
  EXPECT_EQ(next_batch_size(64, 0.005, 50e-6, 1e-3, 0), 5);
  EXPECT_EQ(next_batch_size(64, 0.005, 50e-6, 3.6e-3, 0), 1);
  // Capped by max_batch, and by the samples max_samples still allows (when any are left to count).
  EXPECT_EQ(next_batch_size(64, 0.005, 50e-6, 60e-6, 0), 64);
  EXPECT_EQ(next_batch_size(64, 0.005, 50e-6, 60e-6, 7), 7);
  EXPECT_EQ(next_batch_size(64, 0.005, 50e-6, 60e-6, 200), 64);
  EXPECT_EQ(next_batch_size(8, 0.005, 50e-6, 60e-6, 0), 8);
}

// Synchronized batches (--detops_synchronized_short_batches) are for exactly the calls next_batch_size takes alone:
// off by default, only below the floor, never before a valid sample or under window attribution, capped by max_batch
// and the samples left. A rule that also caught calls at the floor would change how the longer calls (queued
// batches, compared with the baseline) are measured.
TEST(BenchBatches, SynchronizedBatchesOnlyForShortCallsAndOnlyWhenOn) {
  EXPECT_EQ(next_synchronized_batch_size(false, 64, 50e-6, 10e-6, 0), 0);  // off (the default): alone
  EXPECT_EQ(next_synchronized_batch_size(true, 64, 50e-6, 10e-6, 0), 64);
  EXPECT_EQ(next_synchronized_batch_size(true, 64, 50e-6, 49.9e-6, 0), 64);
  EXPECT_EQ(next_synchronized_batch_size(true, 64, 50e-6, 50e-6, 0), 0);  // at the floor: next_batch_size's
  EXPECT_EQ(next_synchronized_batch_size(true, 64, 50e-6, 3e-3, 0), 0);
  EXPECT_EQ(next_synchronized_batch_size(true, 64, 50e-6, -1.0, 0), 0);   // no valid sample / window attribution
  EXPECT_EQ(next_synchronized_batch_size(true, 64, 50e-6, std::nan(""), 0), 0);
  EXPECT_EQ(next_synchronized_batch_size(true, 64, 50e-6, 0.0, 0), 64);   // a zero-time sample is short
  EXPECT_EQ(next_synchronized_batch_size(true, 64, 50e-6, 10e-6, 7), 7);  // the samples max_samples still allows
  EXPECT_EQ(next_synchronized_batch_size(true, 64, 50e-6, 10e-6, 200), 64);
  EXPECT_EQ(next_synchronized_batch_size(true, 1, 50e-6, 10e-6, 0), 1);   // --detops_max_batch=1: one at a time
  EXPECT_EQ(next_synchronized_batch_size(true, 64, 0, 10e-6, 0), 0);      // no floor: nothing is short
  // Where it applies, next_batch_size would have taken the sample alone; where it does not, next_batch_size decides.
  for (double t : {0.0, 10e-6, 49.9e-6}) EXPECT_EQ(next_batch_size(64, 0.005, 50e-6, t, 0), 1) << t;
}

TEST(BenchBatches, ShortKernelsAndUnbatchableSamplesAreTakenAlone) {
  EXPECT_EQ(next_batch_size(64, 0.005, 50e-6, 49.9e-6, 0), 1);  // below the floor: alone
  EXPECT_EQ(next_batch_size(64, 0.005, 50e-6, 50e-6, 0), 64);   // at it: batched
  EXPECT_EQ(next_batch_size(64, 0.005, 0, 10e-6, 0), 64);       // no floor: a 10 us kernel batches
  EXPECT_EQ(next_batch_size(64, 0.005, 50e-6, -1.0, 0), 1);     // no valid sample / window attribution
  EXPECT_EQ(next_batch_size(64, 0.005, 50e-6, std::nan(""), 0), 1);
  EXPECT_EQ(next_batch_size(1, 0.005, 0, 100e-6, 0), 1);        // --detops_max_batch=1
  EXPECT_EQ(next_batch_size(64, 0.005, 0, 0.0, 0), 64);         // a zero-time sample cannot divide by zero
}

TEST(BenchCorrectness, DigestsGtestJson) {
  const json d = digest_gtest_json(gtest_fixture());
  EXPECT_EQ(d["summary"]["passed"], 1);
  EXPECT_EQ(d["summary"]["failed"], 1);
  EXPECT_EQ(d["summary"]["skipped"], 1);
  EXPECT_EQ(d["summary"]["errors"], 1);
  ASSERT_EQ(d["tests"].size(), 4u);
  const json& t = d["tests"][0];
  EXPECT_EQ(t["name"], "roi_align.forward.tiny.fp32.cuda");
  EXPECT_EQ(t["op"], "roi_align");
  EXPECT_EQ(t["check"], "forward");
  EXPECT_EQ(t["case"], "tiny");
  EXPECT_EQ(t["dtype"], "fp32");
  EXPECT_EQ(t["device"], "cuda");
  EXPECT_DOUBLE_EQ(t["max_abs_error"].get<double>(), 3.5e-7);
  EXPECT_DOUBLE_EQ(t["atol"].get<double>(), 1e-4);
  EXPECT_DOUBLE_EQ(t["rtol"].get<double>(), 1e-5);
  EXPECT_EQ(d["tests"][1]["outcome"], "mismatch");
  EXPECT_EQ(d["tests"][1]["message"], "output 0: too far");
  EXPECT_TRUE(d["tests"][1]["atol"].is_null());
  const json& bad = d["tests"][3];
  EXPECT_EQ(bad["case"], "nan_rois");
  EXPECT_EQ(bad["device"], "cuda");
  EXPECT_EQ(bad["dtype"], "");
  EXPECT_EQ(bad["outcome"], "error");  // no outcome property, a failure: error
  EXPECT_EQ(bad["message"], "crashed");
}

TEST(BenchCorrectness, MergesFilesAndNamesAnUnreadableOne) {
  const std::string a = temp_path("gtest_a"), b = temp_path("gtest_b");
  std::ofstream(a) << gtest_fixture().dump();
  std::ofstream(b) << gtest_fixture().dump();
  const json d = digest_gtest_files({a, b});
  EXPECT_EQ(d["summary"]["passed"], 2);
  EXPECT_EQ(d["tests"].size(), 8u);
  std::ofstream(b) << "not json";
  try {
    digest_gtest_files({a, b});
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(b), std::string::npos) << e.what();
  }
  EXPECT_THROW(digest_gtest_files({"/nonexistent-detops.json"}), std::runtime_error);
  std::remove(a.c_str());
  std::remove(b.c_str());
}

// Input that is not a GoogleTest JSON report is refused with one std::runtime_error naming the file, the
// JSON path of the offending field and what was expected (never an empty digest, never nlohmann's own
// type_error). The report is written to a file and digested as --detops_correctness_json does.
struct Refusal {
  std::string file;
  std::string message;  // the runtime_error's, else what happened instead
};

Refusal digest_file(const std::string& text, const std::string& tag) {
  Refusal r{temp_path("refused_" + tag), ""};
  std::ofstream(r.file) << text;
  try {
    const json d = digest_gtest_files({r.file});
    r.message = "<no exception; digested " + std::to_string(d["tests"].size()) + " tests>";
  } catch (const std::runtime_error& e) {
    r.message = e.what();
  } catch (const std::exception& e) {
    r.message = std::string("<not a std::runtime_error: ") + e.what() + ">";
  }
  std::remove(r.file.c_str());
  return r;
}

// `expected`: "<JSON path>: expected ..., got ..." (or the file-level reason), right after the file's name.
void expect_refused(const json& report, const std::string& tag, const std::string& expected) {
  const Refusal r = digest_file(report.dump(), tag);
  const std::string want = "--detops_correctness_json: '" + r.file + "': " + expected;
  EXPECT_NE(r.message.find(want), std::string::npos) << tag << ": wanted \"" << want << "\"\n got \"" << r.message
                                                      << "\"";
}

TEST(BenchCorrectness, RefusesARunRecordAsNotAGtestReport) {
  const json record = {{"context",
                        {{"detops_schema_version", kRecordSchemaVersion}, {"detops", {{"complete", true}}}}},
                       {"benchmarks", json::array()},
                       {"correctness", digest_gtest_json(gtest_fixture())},
                       {"peers", json::array()}};
  expect_refused(record, "record", "not a GoogleTest JSON report: no testsuites array");
  const Refusal r = digest_file(record.dump(), "record_keys");
  EXPECT_NE(r.message.find("context"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("benchmarks"), std::string::npos) << r.message;
  // At most a few of the keys are named.
  json many;
  for (int i = 0; i < 9; ++i) many["key" + std::to_string(i)] = i;
  const Refusal m = digest_file(many.dump(), "many_keys");
  EXPECT_NE(m.message.find("no testsuites array (top-level keys: key0, key1, key2, key3, key4, ... (9 in all))"),
            std::string::npos)
      << m.message;
}

TEST(BenchCorrectness, RefusesAnEmptyObjectAndANonObject) {
  expect_refused(json::object(), "empty_object", "not a GoogleTest JSON report: no testsuites array");
  expect_refused(json::array({gtest_fixture()}), "array",
                 "not a GoogleTest JSON report: expected an object at the top level, got array");
}

TEST(BenchCorrectness, RefusesTestsuitesThatAreNotAnArray) {
  json report = gtest_fixture();
  report["testsuites"] = report["testsuites"][0];
  expect_refused(report, "testsuites_object", "testsuites: expected an array, got object");
}

TEST(BenchCorrectness, RefusesAMalformedSuite) {
  json not_object = gtest_fixture();
  not_object["testsuites"][1] = "roi_align.bad_input";
  expect_refused(not_object, "suite_string", "testsuites[1]: expected an object, got string");
  json name_number = gtest_fixture();
  name_number["testsuites"][0]["name"] = 7;
  expect_refused(name_number, "suite_name", "testsuites[0].name: expected a string, got number");
  json no_name = gtest_fixture();
  no_name["testsuites"][1].erase("name");
  expect_refused(no_name, "suite_no_name", "testsuites[1].name: expected a string, got nothing");
  json no_tests = gtest_fixture();
  no_tests["testsuites"][1].erase("testsuite");
  expect_refused(no_tests, "suite_no_testsuite", "testsuites[1].testsuite: expected an array, got nothing");
  json tests_object = gtest_fixture();
  tests_object["testsuites"][1]["testsuite"] = tests_object["testsuites"][1]["testsuite"][0];
  expect_refused(tests_object, "suite_testsuite_object", "testsuites[1].testsuite: expected an array, got object");
}

TEST(BenchCorrectness, RefusesAMalformedTest) {
  json name_number = gtest_fixture();
  name_number["testsuites"][0]["testsuite"][2]["name"] = 17;
  expect_refused(name_number, "test_name", "testsuites[0].testsuite[2].name: expected a string, got number");
  json no_name = gtest_fixture();
  no_name["testsuites"][0]["testsuite"][1].erase("name");
  expect_refused(no_name, "test_no_name", "testsuites[0].testsuite[1].name: expected a string, got nothing");
  json not_object = gtest_fixture();
  not_object["testsuites"][0]["testsuite"][1] = "big.fp16.cuda";
  expect_refused(not_object, "test_string", "testsuites[0].testsuite[1]: expected an object, got string");
  json result = gtest_fixture();
  result["testsuites"][1]["testsuite"][0]["result"] = true;
  expect_refused(result, "test_result", "testsuites[1].testsuite[0].result: expected a string, got boolean");
}

TEST(BenchCorrectness, RefusesMalformedFailures) {
  json not_array = gtest_fixture();
  not_array["testsuites"][1]["testsuite"][0]["failures"] = "crashed";
  expect_refused(not_array, "failures_string", "testsuites[1].testsuite[0].failures: expected an array, got string");
  json not_objects = gtest_fixture();
  not_objects["testsuites"][1]["testsuite"][0]["failures"] = {"crashed"};
  expect_refused(not_objects, "failure_string",
                 "testsuites[1].testsuite[0].failures[0]: expected an object, got string");
  json failure_number = gtest_fixture();
  failure_number["testsuites"][0]["testsuite"][1]["failures"][0]["failure"] = 3;
  expect_refused(failure_number, "failure_number",
                 "testsuites[0].testsuite[1].failures[0].failure: expected a string, got number");
  json no_failure = gtest_fixture();
  no_failure["testsuites"][1]["testsuite"][0]["failures"][0].erase("failure");
  expect_refused(no_failure, "failure_missing",
                 "testsuites[1].testsuite[0].failures[0].failure: expected a string, got nothing");
}

TEST(BenchCorrectness, RefusesPropertiesThatAreNotStrings) {
  // GoogleTest writes RecordProperty values as strings; a number here is a hand-edited report.
  for (const char* key : {"outcome", "message", "dtype", "device", "max_abs_error", "max_rel_error", "output0"}) {
    json report = gtest_fixture();
    report["testsuites"][0]["testsuite"][0][key] = 1.5;
    expect_refused(report, std::string("property_") + key,
                   std::string("testsuites[0].testsuite[0].") + key + ": expected a string, got number");
  }
}

TEST(BenchCorrectness, RefusesACountOverNoTests) {
  expect_refused(json::parse(R"({"tests": 12, "name": "AllTests", "testsuites": []})"), "count_empty",
                 "tests says 12, the suites hold 0");
  expect_refused(json::parse(R"({"tests": 3, "testsuites": [{"name": "roi_align.forward", "testsuite": []}]})"),
                 "count_empty_suite", "tests says 3, the suites hold 0");
  expect_refused(json::parse(R"({"tests": "4", "testsuites": []})"), "count_string",
                 "tests: expected a non-negative integer, got string");
  // No tests and a count of none (or no count) is a valid report of zero tests.
  for (const char* text : {R"({"tests": 0, "testsuites": []})", R"({"testsuites": []})"}) {
    const Refusal r = digest_file(text, "count_zero");
    EXPECT_EQ(r.message, "<no exception; digested 0 tests>") << text;
  }
}

TEST(BenchCorrectness, IgnoresUnknownKeysButChecksTheOnesItReads) {
  // What GoogleTest and the suite add beyond what the digest reads, of any type, at every level.
  json report = gtest_fixture();
  report["detops_device_facts"] = R"({"gpu": {}})";
  report["random_seed"] = 7;
  report["testsuites"][0]["timestamp"] = "2026-01-01T00:00:00Z";
  report["testsuites"][0]["failures"] = 1;
  report["testsuites"][1]["extra"] = {{"nested", json::array({1, 2})}};
  json& tiny = report["testsuites"][0]["testsuite"][0];
  tiny["reference_reused"] = "true";
  tiny["time_reference_ms"] = "12.5";
  tiny["line"] = 42;
  tiny["unknown"] = json::object();
  report["testsuites"][1]["testsuite"][0]["failures"][0]["type"] = 0;
  const Refusal ok = digest_file(report.dump(), "extra_keys");
  EXPECT_EQ(ok.message, "<no exception; digested 4 tests>");
  const std::string file = temp_path("extra_keys_digest");
  std::ofstream(file) << report.dump();
  EXPECT_EQ(digest_gtest_files({file}), digest_gtest_json(gtest_fixture()));
  std::remove(file.c_str());
  // The same report with a field the digest reads of the wrong type is refused.
  tiny["dtype"] = 16;
  expect_refused(report, "extra_keys_bad_dtype", "testsuites[0].testsuite[0].dtype: expected a string, got number");
}

TEST(BenchCorrectness, ParsedJsonIsValidatedUnderItsLabel) {
  json bad = gtest_fixture();
  bad["testsuites"][0]["testsuite"][2]["name"] = 5;
  const std::string want =
      "--detops_correctness_json: 'merged.json': testsuites[0].testsuite[2].name: expected a string, got number";
  try {
    digest_gtest_json(bad, "merged.json");
    ADD_FAILURE() << "expected a std::runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), want);
  }
  try {
    validate_gtest_json(json::object(), "x.json");
    ADD_FAILURE() << "expected a std::runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "--detops_correctness_json: 'x.json': not a GoogleTest JSON report: no testsuites array "
              "(top-level keys: none (an empty object))");
  }
  EXPECT_NO_THROW(validate_gtest_json(gtest_fixture(), "x.json"));
  EXPECT_THROW(digest_gtest_json(json::object()), std::runtime_error);  // the default label
}

}  // namespace
}  // namespace detops::harness::bench
