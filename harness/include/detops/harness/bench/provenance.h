#pragma once
// The "detops" object of the record's context: where and how the run was made (MEASURE.md's list).
#include <nlohmann/json.hpp>

#include <string>

#include "detops/harness/bench/nvml_device.h"

namespace detops::harness::bench {

struct ProvenanceInputs {
  std::string timer, timer_note;
  double device_copy_bandwidth = 0;  // bytes/s; 0: not measured
  nlohmann::json settings;
};

// GPU facts and kernel images come from device_facts(); clocks, power limit and driver version from
// NVML; git from DETOPS_GIT_SHA / DETOPS_GIT_DIRTY, else `git` in the source tree; run_id from
// DETOPS_RUN_ID, else "<UTC yyyymmddThhmmssZ>_<gpu slug>".
nlohmann::json run_provenance(const ProvenanceInputs& in, const NvmlDevice& nvml);

// "NVIDIA H200" -> "NVIDIA-H200" (every non-alphanumeric character becomes '-', as scripts/run.sh does).
std::string gpu_slug(const std::string& name);

}  // namespace detops::harness::bench
