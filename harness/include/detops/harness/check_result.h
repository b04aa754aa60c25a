#pragma once
#include <map>
#include <string>
#include <vector>

#include "detops/harness/compare.h"

namespace detops::harness {

// What one check found: an outcome, the comparison figures and the properties to attach to the
// test's JSON record.
struct CheckResult {
  Outcome outcome = Outcome::kPassed;
  std::string message;                     // reason for anything but passed
  std::vector<CompareResult> comparisons;  // one per output (or per differentiable input)
  std::map<std::string, std::string> properties;
};

}  // namespace detops::harness
