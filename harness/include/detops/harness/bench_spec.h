#pragma once
// The benchmark cases an op spec declares: real-model shapes (docs/benchmarks.md), one instance per dtype.
// Plain C++: the timing library and the benchmark executable read these without seeing the op's types.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "detops/core/dtype.h"

namespace detops::harness {

// One benchmark-ready op call. The instance owns its CUDA inputs (built once, by `make`); `forward` and
// `backward` launch the op on the current CUDA stream and must be repeatable (each call does the same
// work). They do not synchronize more than the op itself does.
struct BenchInstance {
  std::function<void()> forward;
  std::function<void()> backward;  // empty: the op has no backward
  // The minimal DRAM traffic of one call: inputs read once plus outputs written once (for a backward
  // that scatters with atomics, the gradient buffer is counted read and written). The formula is in
  // bytes_note, per case.
  std::int64_t bytes_forward = 0;
  std::int64_t bytes_backward = 0;
};

struct BenchCase {
  std::string name;   // [A-Za-z0-9_]+, unique within the op; part of the benchmark name
  std::string shape;  // human-readable problem, e.g. "x[2,256,200,336] rois[1000,5] 7x7 sr2 aligned"
  std::string bytes_note;  // how bytes_forward / bytes_backward are counted
  std::vector<DType> dtypes;
  std::function<BenchInstance(DType)> make;  // builds inputs on CUDA device 0; throws on failure
};

}  // namespace detops::harness
