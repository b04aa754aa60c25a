#pragma once
// The op-spec registry. Each op declares, from its own file, its seeded cases, how to run the op and its
// reference, which inputs are differentiable, its determinism and any tolerance scaling. Suites iterate
// the registry; they never name an op.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "detops/core/dtype.h"
#include "detops/harness/bench_spec.h"
#include "detops/harness/check_result.h"
#include "detops/harness/outcome.h"
#include "detops/harness/tolerance.h"

namespace detops::harness {

using Tensors = std::vector<at::Tensor>;

// One instantiated case. Closures capture the op's own parameter struct, so the harness never sees it.
struct CaseData {
  // Master input values: fp64 on the CPU for floating inputs; other dtypes (indices) are kept as given.
  // The harness rounds floating inputs to the dtype under test, moves them to the device, and hands the
  // reference the rounded values in fp64, so both see exactly the same numbers.
  Tensors inputs;
  std::vector<std::size_t> differentiable;  // indices into inputs that have gradients

  std::function<Tensors(const Tensors&)> op_forward;                          // op under test
  std::function<Tensors(const Tensors&, const Tensors&)> op_backward;         // (inputs, grad_outputs) -> grads
  std::function<Tensors(const Tensors&)> reference_forward;                   // fp64 CPU
  std::function<Tensors(const Tensors&, const Tensors&)> reference_backward;  // fp64 CPU

  // Optional: per output, the sum of |terms| behind each reference element (see compare_tensors), for
  // the forward and the backward. An op whose outputs are sums with nonnegative weights gets them by
  // running its reference on |inputs| (|grad_outputs|).
  std::function<Tensors(const Tensors&)> reference_forward_magnitude;
  std::function<Tensors(const Tensors&, const Tensors&)> reference_backward_magnitude;

  // Optional: the grad_output to feed the backward, given a forward output (in the dtype/device under
  // test); by default a seeded N(0, 1) tensor. A case may return e.g. an expanded stride-0 tensor.
  std::function<at::Tensor(const at::Tensor& output, std::uint64_t seed)> make_grad_output;

  // Optional: what the backward differentiates, when that is not the forward itself. An op may hold a
  // term constant in its backward (CIoU's alpha, which torchvision computes under no_grad); the
  // finite-difference checks then differentiate f(x; held at x0), called as (x, x0), instead of the
  // forward. f(x0; x0) must equal the forward at x0.
  std::function<Tensors(const Tensors& x, const Tensors& x0)> op_gradient_target;
  std::function<Tensors(const Tensors& x, const Tensors& x0)> reference_gradient_target;
  // True when op_gradient_target computes on the CPU whatever its inputs' device (it copies them to the host and
  // its outputs back): a CUDA check's finite differences then perturb and evaluate it on CPU copies of the inputs
  // (the same fp64 function, without two device round trips and a host synchronization per evaluation); only the
  // backward under test runs on the device.
  bool op_gradient_target_on_host = false;

  std::string gradcheck_skip_reason;  // non-empty: finite differences do not apply to this case

  // Optional: the function the finite differences differentiate is separable by rows: every input listed in
  // `inputs` has the same N rows (dimension 0), row i of each output with N rows depends only on row i of
  // those inputs (the others are shared whole), and a 0-dim output is a sum of such per-row terms times a factor
  // F(rows) of the row count (reduced_scale(N) = F(N) / F(1): 1 / N for a mean, 1 for a sum). The CPU checks
  // then take each sampled element's central difference on its row alone (the listed inputs narrowed to that
  // row, v narrowed to it or, for a 0-dim output, scaled by reduced_scale(N)): the same derivative in exact
  // arithmetic, one row's work per evaluation instead of N rows' (and no cancellation between two sums of N
  // terms). The analytic side is unchanged (the backward on the whole inputs), as are the CUDA checks.
  struct FdRows {
    std::vector<std::size_t> inputs;
    std::function<double(std::int64_t rows)> reduced_scale;
  };
  std::optional<FdRows> fd_rows;

  // Optional: judges the op's forward outputs instead of comparing them element-wise with the
  // reference's, for discrete outputs (NMS keep lists: exact where the case guarantees it, else a
  // validity check). Called with the inputs as the reference sees them (fp64 on the CPU), the op's
  // outputs and the reference's, and the dtype under test; returns one CompareResult per output.
  std::function<std::vector<CompareResult>(const Tensors& inputs, const Tensors& outputs, const Tensors& reference,
                                           DType dtype)>
      judge_forward;
};

struct OpCase {
  std::string name;  // unique within the op; [A-Za-z0-9_]
  std::uint64_t seed = 0;
  std::function<CaseData(std::uint64_t seed)> make;
  std::map<Device, std::string> skip_reason;  // a device this case does not run on, and why
};

// Bad input must raise a clear error naming the argument; the process stays usable afterwards.
struct BadInputCase {
  std::string name;
  std::function<void(const at::Device&)> call;  // must throw
  std::vector<std::string> message_must_contain;
};

// A check that does not fit the case model: for instance inputs past 2^31 elements, which are built
// on the device and checked on crops, because fp64 host copies of them would not fit. Registered as
// the test `<op>.<check>.<variant>.<device>`.
struct ExtraCheck {
  std::string check;    // e.g. "large_index_forward"
  std::string variant;  // e.g. "fp16"
  Device device = Device::kCuda;
  std::function<CheckResult()> run;
};

struct Determinism {
  bool forward_cpu = true, forward_cuda = true, backward_cpu = true, backward_cuda = false;
  std::string note;  // what makes a declared-nondeterministic path so
};

struct OpSpec {
  std::string name;
  std::vector<DType> dtypes{std::begin(kAllDTypes), std::end(kAllDTypes)};
  std::vector<OpCase> cases;
  std::vector<BadInputCase> bad_inputs;
  std::vector<ExtraCheck> extra_checks;
  std::function<void(const at::Device&)> valid_call;  // runs after each bad input: the process must still work
  std::map<DType, ToleranceScale> tolerance_scales;
  Determinism determinism;
  bool has_backward = true;
  std::vector<BenchCase> benchmarks;  // timed by suites/bench (docs/benchmarks.md)

  Tolerance tolerance(DType dtype) const;
  bool declared_deterministic(Device device, bool backward) const;
};

class OpRegistry {
 public:
  static OpRegistry& instance();
  void add(std::function<OpSpec()> factory);
  const std::vector<OpSpec>& ops();  // built on first use, in registration order

 private:
  std::vector<std::function<OpSpec()>> factories_;
  std::vector<OpSpec> ops_;
  bool built_ = false;
};

// DETOPS_REGISTER_OP_SPEC(factory): registers an OpSpec factory at static-initialization time.
struct OpSpecRegistrar {
  explicit OpSpecRegistrar(std::function<OpSpec()> factory) { OpRegistry::instance().add(std::move(factory)); }
};

}  // namespace detops::harness

#define DETOPS_OP_SPEC_CONCAT_(a, b) a##b
#define DETOPS_OP_SPEC_CONCAT(a, b) DETOPS_OP_SPEC_CONCAT_(a, b)
#define DETOPS_REGISTER_OP_SPEC(factory) \
  static const ::detops::harness::OpSpecRegistrar DETOPS_OP_SPEC_CONCAT(detops_op_spec_registrar_, __LINE__)(factory)
