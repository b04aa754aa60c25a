#include "detops/harness/bench/correctness_digest.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace detops::harness::bench {
namespace {

using nlohmann::json;

std::vector<std::string> split_dots(const std::string& s) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, '.')) parts.push_back(part);
  return parts;
}

std::string property(const json& test, const char* key) {
  const auto it = test.find(key);
  return it != test.end() && it->is_string() ? it->get<std::string>() : std::string();
}

json number_or_null(const std::string& text) {
  if (text.empty()) return nullptr;
  try {
    std::size_t used = 0;
    const double v = std::stod(text, &used);
    return used == text.size() ? json(v) : json();
  } catch (const std::exception&) {
    return nullptr;
  }
}

// "(atol=0.0001, rtol=1e-05)" inside an output<i> description.
json tolerance_from(const json& test, const char* key) {
  const std::string description = property(test, "output0");
  const std::string tag = std::string(key) + "=";
  const auto at = description.find(tag);
  if (at == std::string::npos) return nullptr;
  const auto begin = at + tag.size();
  const auto end = description.find_first_of(",)", begin);
  return number_or_null(description.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
}

json digest_test(const std::string& suite, const json& test) {
  const std::string name = suite + "." + test.value("name", std::string());
  const std::vector<std::string> parts = split_dots(name);
  json t = {{"name", name}};
  t["op"] = parts.size() > 0 ? parts[0] : "";
  t["check"] = parts.size() > 1 ? parts[1] : "";
  t["case"] = parts.size() > 2 ? parts[2] : "";
  t["device"] = parts.size() > 3 ? parts.back() : property(test, "device");
  std::string dtype = property(test, "dtype");
  if (dtype.empty() && parts.size() == 5) dtype = parts[3];
  t["dtype"] = dtype;

  std::string outcome = property(test, "outcome");
  std::string message = property(test, "message");
  if (outcome.empty()) {
    const bool failed = test.contains("failures") && !test["failures"].empty();
    if (test.value("result", std::string()) == "SKIPPED") {
      outcome = "skipped";
    } else if (failed) {
      outcome = "error";
      if (message.empty()) message = test["failures"][0].value("failure", std::string());
    } else {
      outcome = "passed";
    }
  }
  t["outcome"] = outcome;
  t["message"] = message;
  t["max_abs_error"] = number_or_null(property(test, "max_abs_error"));
  t["max_rel_error"] = number_or_null(property(test, "max_rel_error"));
  t["atol"] = tolerance_from(test, "atol");
  t["rtol"] = tolerance_from(test, "rtol");
  return t;
}

// The GoogleTest JSON report's shape, checked before anything is read (validate_gtest_json).
const char* const kTestProperties[] = {"outcome",       "message",       "dtype",  "device",
                                       "max_abs_error", "max_rel_error", "output0"};

[[noreturn]] void refuse(const std::string& label, const std::string& what) {
  throw std::runtime_error("--detops_correctness_json: '" + label + "': " + what);
}

std::string at_index(const std::string& path, std::size_t i) { return path + "[" + std::to_string(i) + "]"; }

// `object[key]` must be a string; `required`: also present.
void check_string(const std::string& label, const json& object, const char* key, const std::string& path,
                  bool required) {
  const auto it = object.find(key);
  const std::string where = path + "." + key;
  if (it == object.end()) {
    if (required) refuse(label, where + ": expected a string, got nothing (no such key)");
    return;
  }
  if (!it->is_string()) refuse(label, where + ": expected a string, got " + it->type_name());
}

void check_test(const std::string& label, const json& test, const std::string& path) {
  if (!test.is_object()) refuse(label, path + ": expected an object, got " + test.type_name());
  check_string(label, test, "name", path, true);
  check_string(label, test, "result", path, false);
  for (const char* key : kTestProperties) check_string(label, test, key, path, false);
  const auto failures = test.find("failures");
  if (failures == test.end()) return;
  const std::string where = path + ".failures";
  if (!failures->is_array()) refuse(label, where + ": expected an array, got " + failures->type_name());
  for (std::size_t i = 0; i < failures->size(); ++i) {
    const json& failure = (*failures)[i];
    if (!failure.is_object()) {
      refuse(label, at_index(where, i) + ": expected an object, got " + failure.type_name());
    }
    check_string(label, failure, "failure", at_index(where, i), true);
  }
}

// The first few keys of an object, for "not a GoogleTest JSON report".
std::string some_keys(const json& object) {
  if (object.empty()) return "none (an empty object)";
  constexpr std::size_t kShown = 5;
  std::string keys;
  std::size_t n = 0;
  for (const auto& item : object.items()) {
    if (n == kShown) {
      keys += ", ... (" + std::to_string(object.size()) + " in all)";
      break;
    }
    keys += (n++ ? ", " : "") + item.key();
  }
  return keys;
}

json empty_digest() {
  return {{"summary", {{"passed", 0}, {"failed", 0}, {"skipped", 0}, {"errors", 0}}},
          {"tests", json::array()}};
}

void add_to_summary(json& summary, const std::string& outcome) {
  const char* key = outcome == "passed"     ? "passed"
                    : outcome == "mismatch" ? "failed"
                    : outcome == "error"    ? "errors"
                                            : "skipped";
  summary[key] = summary[key].get<long long>() + 1;
}

}  // namespace

void validate_gtest_json(const json& gtest, const std::string& label) {
  if (!gtest.is_object()) {
    refuse(label, std::string("not a GoogleTest JSON report: expected an object at the top level, got ") +
                      gtest.type_name());
  }
  const auto suites = gtest.find("testsuites");
  if (suites == gtest.end()) {
    refuse(label,
           "not a GoogleTest JSON report: no testsuites array (top-level keys: " + some_keys(gtest) + ")");
  }
  if (!suites->is_array()) {
    refuse(label, std::string("testsuites: expected an array, got ") + suites->type_name());
  }
  std::size_t held = 0;
  for (std::size_t s = 0; s < suites->size(); ++s) {
    const json& suite = (*suites)[s];
    const std::string path = at_index("testsuites", s);
    if (!suite.is_object()) refuse(label, path + ": expected an object, got " + suite.type_name());
    check_string(label, suite, "name", path, true);
    const auto tests = suite.find("testsuite");
    const std::string where = path + ".testsuite";
    if (tests == suite.end()) refuse(label, where + ": expected an array, got nothing (no such key)");
    if (!tests->is_array()) refuse(label, where + ": expected an array, got " + tests->type_name());
    for (std::size_t t = 0; t < tests->size(); ++t) check_test(label, (*tests)[t], at_index(where, t));
    held += tests->size();
  }
  // The report's own count: GoogleTest writes every test it counts (plus, beyond the count, the
  // NonTestSuiteFailure of a failed environment), so a count over no test at all is a cut or edited file.
  const auto count = gtest.find("tests");
  if (count == gtest.end()) return;
  const bool non_negative =
      count->is_number_unsigned() || (count->is_number_integer() && count->get<long long>() >= 0);
  if (!non_negative) {
    refuse(label, "tests: expected a non-negative integer, got " +
                      (count->is_number() ? "number " + count->dump() : std::string(count->type_name())));
  }
  if (held == 0 && count->get<unsigned long long>() > 0) {
    refuse(label, "tests says " + count->dump() +
                      ", the suites hold 0: a truncated or hand-edited GoogleTest JSON report");
  }
}

json digest_gtest_json(const json& gtest, const std::string& label) {
  validate_gtest_json(gtest, label);
  json digest = empty_digest();
  json& summary = digest["summary"];
  json& tests = digest["tests"];
  for (const json& suite : gtest["testsuites"]) {
    const std::string suite_name = suite["name"].get<std::string>();
    for (const json& test : suite["testsuite"]) {
      json t = digest_test(suite_name, test);
      add_to_summary(summary, t["outcome"].get<std::string>());
      tests.push_back(std::move(t));
    }
  }
  return digest;
}

json digest_gtest_files(const std::vector<std::string>& paths) {
  json merged = empty_digest();
  for (const std::string& path : paths) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("--detops_correctness_json: cannot open '" + path + "'");
    json parsed;
    try {
      in >> parsed;
    } catch (const std::exception& e) {
      throw std::runtime_error("--detops_correctness_json: '" + path + "' is not JSON: " + e.what());
    }
    const json d = digest_gtest_json(parsed, path);
    for (const auto& [key, value] : d["summary"].items()) {
      merged["summary"][key] = merged["summary"][key].get<long long>() + value.get<long long>();
    }
    for (const json& t : d["tests"]) merged["tests"].push_back(t);
  }
  return merged;
}

}  // namespace detops::harness::bench
