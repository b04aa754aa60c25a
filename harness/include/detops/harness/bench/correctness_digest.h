#pragma once
// The correctness section of the run record, digested from the correctness suite's GoogleTest JSON
// (--gtest_output=json). Pure C++ (nlohmann_json).
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace detops::harness::bench {

// Throws one std::runtime_error unless `gtest` is a GoogleTest JSON report as the digest reads it:
//   "--detops_correctness_json: '<label>': <JSON path>: expected <what>, got <JSON type>"
// e.g. "... 'x.json': testsuites[0].testsuite[2].name: expected a string, got number". Checked: the top
// level is an object with a "testsuites" array (else "not a GoogleTest JSON report", naming the top-level
// keys seen: a DetOps run record, {}); each suite an object with a string "name" and a "testsuite" array;
// each test an object with a string "name", "result" (when present) a string, "failures" (when present)
// an array of objects with a string "failure", and the properties read (outcome, message, dtype, device,
// max_abs_error, max_rel_error, output0) strings when present, as GoogleTest writes RecordProperty values;
// the top-level "tests" (when present) a non-negative integer, and not > 0 while the suites hold no test
// (a truncated or hand-edited report). Other keys are ignored. An empty "testsuites" array is valid.
void validate_gtest_json(const nlohmann::json& gtest, const std::string& label);

// One test per entry: {"name": "<op>.<check>.<case>.<dtype>.<device>", "op", "check", "case", "dtype",
// "device", "outcome", "message", "max_abs_error", "max_rel_error", "atol", "rtol"} (figures null when
// the test has none). The outcome is the test's "outcome" property; a test without one is "skipped"
// when GoogleTest skipped it, "error" when it failed, else "passed". Summary: passed; failed = mismatch;
// skipped = skipped + not_supported; errors = error. Validates first (validate_gtest_json, `label`
// naming the input in the error).
nlohmann::json digest_gtest_json(const nlohmann::json& gtest, const std::string& label = "<in-memory JSON>");

// Digests several files (e.g. the CPU and CUDA halves) into one section. Throws std::runtime_error
// naming the file when one cannot be read or parsed, or is not a GoogleTest JSON report
// (validate_gtest_json).
nlohmann::json digest_gtest_files(const std::vector<std::string>& paths);

}  // namespace detops::harness::bench
