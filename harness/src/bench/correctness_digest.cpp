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

void add_to_summary(json& summary, const std::string& outcome) {
  const char* key = outcome == "passed"     ? "passed"
                    : outcome == "mismatch" ? "failed"
                    : outcome == "error"    ? "errors"
                                            : "skipped";
  summary[key] = summary[key].get<long long>() + 1;
}

}  // namespace

json digest_gtest_json(const json& gtest) {
  json summary = {{"passed", 0}, {"failed", 0}, {"skipped", 0}, {"errors", 0}};
  json tests = json::array();
  if (gtest.contains("testsuites") && gtest["testsuites"].is_array()) {
    for (const json& suite : gtest["testsuites"]) {
      const std::string suite_name = suite.value("name", std::string());
      if (!suite.contains("testsuite")) continue;
      for (const json& test : suite["testsuite"]) {
        json t = digest_test(suite_name, test);
        add_to_summary(summary, t["outcome"].get<std::string>());
        tests.push_back(std::move(t));
      }
    }
  }
  return {{"summary", summary}, {"tests", tests}};
}

json digest_gtest_files(const std::vector<std::string>& paths) {
  json merged = digest_gtest_json(json::object());
  for (const std::string& path : paths) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("--detops_correctness_json: cannot open '" + path + "'");
    json parsed;
    try {
      in >> parsed;
    } catch (const std::exception& e) {
      throw std::runtime_error("--detops_correctness_json: '" + path + "' is not JSON: " + e.what());
    }
    const json d = digest_gtest_json(parsed);
    for (const auto& [key, value] : d["summary"].items()) {
      merged["summary"][key] = merged["summary"][key].get<long long>() + value.get<long long>();
    }
    for (const json& t : d["tests"]) merged["tests"].push_back(t);
  }
  return merged;
}

}  // namespace detops::harness::bench
