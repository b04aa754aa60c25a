#pragma once
// Facts about the GPU and the build that every record carries.
#include <nlohmann/json.hpp>

#include <string>

namespace detops::harness {

// GPU name, UUID, compute capability, SM count, memory, L2, clocks, driver and runtime versions, the
// build's CUDA architectures, and for every registered kernel whether it runs from SASS or JIT PTX.
// Without a usable device: {"cuda_available": false, "reason": ...} plus the build facts.
nlohmann::json device_facts();

}  // namespace detops::harness
