#pragma once
// Facts about the GPU and the build that every record carries.
#include <nlohmann/json.hpp>

#include <string>

#include "detops/core/kernel_facts.h"

namespace detops::harness {

// GPU name, UUID, compute capability, SM count, memory, L2, clocks, driver and runtime versions, the
// build's CUDA architectures, and for every registered kernel whether it runs from SASS or JIT PTX.
// Without a usable device: {"cuda_available": false, "reason": ...} plus the build facts.
nlohmann::json device_facts();

// The op library's build and kernel facts, handed in by whoever links both (the suites' spec kit does it
// at start-up): the harness does not link the op library. Until then the build's architectures read
// "unknown" and "kernels" is absent, with "kernels_reason" saying why.
void attach_kernel_facts(KernelFacts facts);

}  // namespace detops::harness
