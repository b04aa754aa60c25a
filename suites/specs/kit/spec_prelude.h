#pragma once
// What every op spec includes and names: ATen with the CPU generator, the harness's spec and benchmark
// types, the kit's case list, bad-input catalogue, benchmark builders and torch <-> Eigen copies, and the
// constants the case builders share. A spec includes this, then its op's headers and the kits it uses.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "detops/harness/bench_inputs.h"
#include "detops/harness/bench_spec.h"
#include "detops/harness/op_spec.h"
#include "kit/bad_inputs.h"
#include "kit/bench_cases.h"
#include "kit/case_list.h"
#include "kit/eigen_bridge.h"

namespace detops {

namespace kit {

inline const double kNaN = std::numeric_limits<double>::quiet_NaN();
inline const double kInf = std::numeric_limits<double>::infinity();

// fp64 on the CPU: what the case builders draw in.
inline at::TensorOptions f64() { return at::TensorOptions().dtype(at::kDouble); }

// A spec with its name, cases and bad inputs; the spec sets the rest.
inline harness::OpSpec op_spec(std::string name, std::vector<harness::OpCase> cases,
                               std::vector<harness::BadInputCase> bad_inputs) {
  harness::OpSpec spec;
  spec.name = std::move(name);
  spec.cases = std::move(cases);
  spec.bad_inputs = std::move(bad_inputs);
  return spec;
}

}  // namespace kit

using harness::BadInputCase;
using harness::CaseData;
using harness::Device;
using harness::OpCase;
using harness::OpSpec;
using harness::Tensors;
using kit::f64;
using kit::kInf;
using kit::kNaN;

}  // namespace detops
