#pragma once
// The benchmark cases an op spec declares: real-model shapes (docs/benchmarks.md), one instance per dtype.
// Plain C++: the timing library and the benchmark executable read these without seeing the op's types.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "detops/core/dtype.h"

namespace detops::harness {

// Where the op's inputs are before each warm-up call and each sample (docs/benchmarks.md, "L2 state").
// kCold: evicted from L2 by a flush (a model reads inputs written long before, from DRAM); kWarm: just
// rewritten in place by BenchInstance::touch_forward / touch_backward, as a model's previous layer has just
// written the map the op reads (what of it fits in L2 is there).
enum class L2State { kCold, kWarm };
inline const char* l2_state_name(L2State s) { return s == L2State::kWarm ? "warm" : "cold"; }

// One benchmark-ready op call. The instance owns its CUDA inputs (built once, by `make`); `forward` and
// `backward` launch the op on the current CUDA stream and must be repeatable (each call does the same
// work). They do not synchronize more than the op itself does.
struct BenchInstance {
  std::function<void()> forward;
  std::function<void()> backward;  // empty: the op has no backward
  // Warm cases only (BenchCase::l2 == kWarm; empty otherwise): rewrite the call's main input in place on the
  // current CUDA stream, value-exact (e.g. x.mul_(1)), so that the inputs stand in L2 as a tensor a model has
  // just written. Run untimed before each warm-up call and each sample of forward / backward, where a cold
  // case flushes L2. BenchCase::touch_note says what each one rewrites.
  std::function<void()> touch_forward;
  std::function<void()> touch_backward;
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
  // kWarm: the case is timed with its instance's touches instead of the L2 flush; its name ends in "_warm"
  // (a separate case, so records compare by name) and touch_note says what the touches rewrite.
  L2State l2 = L2State::kCold;
  std::string touch_note;
};

}  // namespace detops::harness
