#pragma once
#include <string>

namespace detops::harness {

// The result of one check. Never a bool: a check that could not run says why.
enum class Outcome { kPassed, kMismatch, kError, kNotSupported, kSkipped };

inline const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kPassed: return "passed";
    case Outcome::kMismatch: return "mismatch";
    case Outcome::kError: return "error";
    case Outcome::kNotSupported: return "not_supported";
    case Outcome::kSkipped: return "skipped";
  }
  return "unknown";
}

enum class Device { kCpu, kCuda };

inline const char* device_name(Device d) { return d == Device::kCpu ? "cpu" : "cuda"; }

}  // namespace detops::harness
