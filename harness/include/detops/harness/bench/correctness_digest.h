#pragma once
// The correctness section of the run record, digested from the correctness suite's GoogleTest JSON
// (--gtest_output=json). Pure C++ (nlohmann_json).
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace detops::harness::bench {

// One test per entry: {"name": "<op>.<check>.<case>.<dtype>.<device>", "op", "check", "case", "dtype",
// "device", "outcome", "message", "max_abs_error", "max_rel_error", "atol", "rtol"} (figures null when
// the test has none). The outcome is the test's "outcome" property; a test without one is "skipped"
// when GoogleTest skipped it, "error" when it failed, else "passed". Summary: passed; failed = mismatch;
// skipped = skipped + not_supported; errors = error.
nlohmann::json digest_gtest_json(const nlohmann::json& gtest);

// Digests several files (e.g. the CPU and CUDA halves) into one section. Throws std::runtime_error
// naming the file when one cannot be read or parsed.
nlohmann::json digest_gtest_files(const std::vector<std::string>& paths);

}  // namespace detops::harness::bench
