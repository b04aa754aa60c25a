#include "detops/harness/checks.h"

#include "detops/harness/output_dump.h"
#include "detops/harness/reference_cache.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <utility>

namespace detops::harness {
namespace {

at::Device torch_device(Device d) { return d == Device::kCpu ? at::Device(at::kCPU) : at::Device(at::kCUDA, 0); }

std::string error_text(const std::exception& e) {
  if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) return ce->what_without_backtrace();
  return e.what();
}

std::string shape_text(const Tensors& ts) {
  std::ostringstream os;
  for (size_t i = 0; i < ts.size(); ++i) {
    os << (i ? " " : "") << '[';
    for (size_t d = 0; d < static_cast<size_t>(ts[i].dim()); ++d) os << (d ? "," : "") << ts[i].size(d);
    os << ']';
  }
  return os.str();
}

// Rounded inputs as the reference sees them: fp64 on the CPU (floating), as-is on the CPU (others).
Tensors reference_view(const Tensors& in) {
  Tensors out;
  for (const at::Tensor& t : in) {
    out.push_back(t.is_floating_point() ? t.to(at::kCPU).to(at::kDouble) : t.to(at::kCPU));
  }
  return out;
}

at::Tensor seeded_normal(const at::Tensor& like, std::uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(like.sizes(), gen, at::TensorOptions().dtype(at::kDouble));
}

Tensors grad_outputs_for(const CaseData& d, const Tensors& outputs, std::uint64_t seed) {
  Tensors grads;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::uint64_t s = seed + 1000003ull * (i + 1);
    grads.push_back(d.make_grad_output ? d.make_grad_output(outputs[i], s)
                                       : seeded_normal(outputs[i], s).to(outputs[i].options()));
  }
  return grads;
}

std::string skip_reason(const OpCase& c, Device device) {
  const auto it = c.skip_reason.find(device);
  if (it != c.skip_reason.end()) return it->second;
  if (device == Device::kCuda && !cuda_available()) return cuda_unavailable_reason();
  return {};
}

// An on/off environment setting: unset or empty gives `fallback`, "0" off, anything else on.
bool env_flag(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return std::string(v) != "0";
}

// With DETOPS_PHASE_TIMES set, where a check's wall time went: time_<phase>_ms properties (the case's inputs,
// the op under test, the reference, the comparison, finite differences). A CUDA check synchronizes the device
// at each mark, so the op's time is its own, not the next phase's.
class PhaseClock {
 public:
  PhaseClock(CheckResult& r, Device device) : r_(r), device_(device) {
    static const bool on = env_flag("DETOPS_PHASE_TIMES", false);
    enabled_ = on;
    last_ = std::chrono::steady_clock::now();
  }
  void mark(const char* phase) {
    if (!enabled_) return;
    if (device_ == Device::kCuda) cudaDeviceSynchronize();
    const auto now = std::chrono::steady_clock::now();
    spent_[phase] += std::chrono::duration<double, std::milli>(now - last_).count();
    last_ = now;
  }
  ~PhaseClock() {
    for (const auto& [phase, ms] : spent_) {
      std::ostringstream os;
      os.precision(4);
      os << ms;
      r_.properties[std::string("time_") + phase + "_ms"] = os.str();
    }
  }

 private:
  CheckResult& r_;
  Device device_;
  bool enabled_ = false;
  std::chrono::steady_clock::time_point last_;
  std::map<std::string, double> spent_;
};

// The last case's data and fp64 reference results, kept by the process: a case's checks run one after another
// (registration order: CPU then CUDA, each dtype, forward and backward), so the CUDA check of a dtype finds the
// reference its CPU check computed on the same rounded inputs (scripts/shard_suite.py keeps both in one process),
// and every check of the case shares one make(). A CPU check keeps its reference only when the case's CUDA checks
// can run here, and the CUDA check that reuses it lets it go (held for the whole case, the H200's CPU checks took
// 629 s together instead of 449: later checks allocated, and page-faulted, fresh memory). A reference is
// reused only for bitwise-identical inputs (and grad_outputs) with the same shapes and strides; anything else
// computes it anew.
struct CaseMemo {
  struct Reference {
    bool backward = false;
    DType dtype = DType::kFloat64;
    Tensors inputs, grads, outputs, magnitudes;
  };
  const OpCase* c = nullptr;
  std::shared_ptr<const CaseData> data;
  std::deque<Reference> references;  // kept by CPU checks until their CUDA twins take them
};

CaseMemo& case_memo() {
  static CaseMemo memo;
  return memo;
}

// DETOPS_CASE_MEMO=0: every check makes its case and computes its reference anew (to rule the memo out).
bool case_memo_enabled() {
  static const bool on = env_flag("DETOPS_CASE_MEMO", true);
  return on;
}

std::shared_ptr<const CaseData> case_data(const OpCase& c) {
  CaseMemo& m = case_memo();
  if (m.c != &c || !m.data || !case_memo_enabled()) {
    m.c = nullptr;
    m.data.reset();
    m.references.clear();
    m.data = std::make_shared<const CaseData>(c.make(c.seed));
    m.c = &c;
  }
  return m.data;
}

bool same_tensors(const Tensors& a, const Tensors& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].defined() != b[i].defined()) return false;
    if (!a[i].defined()) continue;
    if (a[i].strides() != b[i].strides() || !bitwise_equal(a[i], b[i])) return false;
  }
  return true;
}

// DETOPS_REFERENCE_CACHE=DIR: references kept on disk between runs of one build (reference_cache.h).
struct ReferenceCacheConfig {
  std::string dir;
  double min_ms = 50.0;
  bool verify = false;
};

const ReferenceCacheConfig& reference_cache_config() {
  static const ReferenceCacheConfig config = [] {
    ReferenceCacheConfig c;
    if (const char* dir = std::getenv("DETOPS_REFERENCE_CACHE")) c.dir = dir;
    if (const char* ms = std::getenv("DETOPS_REFERENCE_CACHE_MIN_MS")) {
      char* end = nullptr;
      const double v = std::strtod(ms, &end);
      if (end == ms || *end != '\0' || !(v >= 0.0))
        throw std::invalid_argument(std::string("DETOPS_REFERENCE_CACHE_MIN_MS: '") + ms +
                                    "' (expected a number of milliseconds >= 0)");
      c.min_ms = v;
    }
    c.verify = env_flag("DETOPS_REFERENCE_CACHE_VERIFY", false);
    return c;
  }();
  return config;
}

bool same_values(const Tensors& a, const Tensors& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].defined() != b[i].defined()) return false;
    if (a[i].defined() && !bitwise_equal(a[i], b[i])) return false;
  }
  return true;
}

// The reference's outputs (and magnitudes) on `inputs` (and `grads`) for the check of `device`: on CUDA the ones
// the case's CPU check of the same dtype and direction kept, if its inputs were the same; else the ones the
// reference cache holds for these inputs and this build (when DETOPS_REFERENCE_CACHE is set); else computed by
// `compute` (and stored in the cache when that took at least DETOPS_REFERENCE_CACHE_MIN_MS). Sets the properties
// reference_reused and, with the cache, reference_cache (hit, hit verified, stored, miss).
template <typename Compute>
CaseMemo::Reference memo_reference(CheckResult& r, const std::string& op, const OpCase& c, Device device, bool backward,
                                   DType dtype, const Tensors& inputs, const Tensors& grads, Compute&& compute) {
  if (case_memo().c != &c) case_data(c);
  CaseMemo& m = case_memo();
  if (case_memo_enabled() && device == Device::kCuda) {
    for (auto it = m.references.begin(); it != m.references.end(); ++it) {
      if (it->backward == backward && it->dtype == dtype && same_tensors(it->inputs, inputs) &&
          same_tensors(it->grads, grads)) {
        CaseMemo::Reference e = std::move(*it);
        m.references.erase(it);
        r.properties["reference_reused"] = "true";
        return e;
      }
    }
  }
  CaseMemo::Reference e;
  e.backward = backward;
  e.dtype = dtype;
  r.properties["reference_reused"] = "false";
  const ReferenceCacheConfig& cache = reference_cache_config();
  std::string path;
  bool done = false;
  if (!cache.dir.empty()) {
    ReferenceKeyParts parts{op, c.name, c.seed, backward, dtype_name(dtype), &inputs, &grads};
    const std::string key = reference_cache_key(process_build_identity(), parts);
    path = cache.dir + "/" + key.substr(0, 2) + "/" + key + ".ref";
    if (auto hit = load_reference(path)) {
      if (cache.verify) {
        compute(e.outputs, e.magnitudes);
        if (!same_values(e.outputs, hit->first) || !same_values(e.magnitudes, hit->second))
          throw std::runtime_error("reference cache: " + path + " differs from the reference computed now");
        r.properties["reference_cache"] = "hit verified";
      } else {
        e.outputs = std::move(hit->first);
        e.magnitudes = std::move(hit->second);
        r.properties["reference_cache"] = "hit";
      }
      touch_reference(path);  // in use: scripts/run.sh prunes the least recently used entries first
      done = true;
    }
  }
  if (!done) {
    const auto t0 = std::chrono::steady_clock::now();
    compute(e.outputs, e.magnitudes);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!path.empty()) {
      r.properties["reference_cache"] =
          ms < cache.min_ms ? "miss" : (save_reference(path, e.outputs, e.magnitudes) ? "stored" : "miss (not stored)");
    }
  }
  if (case_memo_enabled() && device == Device::kCpu && cuda_available() && c.skip_reason.count(Device::kCuda) == 0) {
    e.inputs = inputs;
    e.grads = grads;
    m.references.push_back(e);
  }
  return e;
}

void record_common(CheckResult& r, const OpCase& c, const char* dtype, Device device) {
  r.properties["seed"] = std::to_string(c.seed);
  r.properties["dtype"] = dtype;
  r.properties["device"] = device_name(device);
}

}  // namespace

void summarize(CheckResult& r) {
  double max_abs = 0, max_rel = 0;
  std::int64_t mismatches = 0;
  std::string worst;
  for (size_t i = 0; i < r.comparisons.size(); ++i) {
    const CompareResult& cr = r.comparisons[i];
    max_abs = std::max(max_abs, cr.max_abs_error);
    max_rel = std::max(max_rel, cr.max_rel_error);
    mismatches += cr.mismatches;
    r.properties["output" + std::to_string(i)] = cr.describe();
    if (cr.outcome != Outcome::kPassed && r.outcome == Outcome::kPassed) {
      r.outcome = cr.outcome;
      r.message = "output " + std::to_string(i) + ": " + cr.describe();
      worst = std::to_string(cr.worst_index);
    }
  }
  std::ostringstream a, b;
  a.precision(6);
  b.precision(6);
  a << max_abs;
  b << max_rel;
  r.properties["max_abs_error"] = a.str();
  r.properties["max_rel_error"] = b.str();
  r.properties["mismatches"] = std::to_string(mismatches);
  if (!worst.empty()) r.properties["worst_index"] = worst;
}

namespace {

template <typename Body>
CheckResult guarded(CheckResult r, Body&& body) {
  try {
    body(r);
  } catch (const std::exception& e) {
    r.outcome = Outcome::kError;
    r.message = error_text(e);
  }
  r.properties["outcome"] = outcome_name(r.outcome);
  if (!r.message.empty()) r.properties["message"] = r.message;
  return r;
}

// The common frame of a case check: the case's seed, dtype and device as properties; a skip (with
// the case's or CUDA's reason) when the case cannot run on `device`; else `body`, guarded.
template <typename Body>
CheckResult run_case_check(const OpCase& c, const char* dtype, Device device, Body&& body) {
  CheckResult r;
  record_common(r, c, dtype, device);
  if (const std::string why = skip_reason(c, device); !why.empty()) {
    r.outcome = Outcome::kSkipped;
    r.message = why;
    return guarded(r, [](CheckResult&) {});
  }
  return guarded(r, std::forward<Body>(body));
}

bool all_bitwise_equal(const Tensors& a, const Tensors& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!bitwise_equal(a[i], b[i])) return false;
  }
  return true;
}

void apply_determinism(CheckResult& r, const OpSpec& op, Device device, bool backward, bool reproducible) {
  const bool declared = op.declared_deterministic(device, backward);
  r.properties["bitwise_reproducible"] = reproducible ? "true" : "false";
  r.properties["declared_deterministic"] = declared ? "true" : "false";
  if (declared && !reproducible && r.outcome == Outcome::kPassed) {
    r.outcome = Outcome::kMismatch;
    r.message = "declared deterministic, but two runs on the same inputs differ bitwise";
  }
}

using ForwardFn = std::function<Tensors(const Tensors&)>;
using BackwardFn = std::function<Tensors(const Tensors&, const Tensors&)>;

using TargetFn = std::function<Tensors(const Tensors&, const Tensors&)>;

// The function whose derivative the backward computes at x0: the forward, or the case's gradient
// target with its held terms fixed at x0.
ForwardFn gradient_function(const ForwardFn& forward, const TargetFn& target, const Tensors& x0) {
  if (!target) return forward;
  return [target, x0](const Tensors& x) { return target(x, x0); };
}

// The property fd_function: which function the finite differences differentiate.
void record_fd_function(CheckResult& r, const TargetFn& target) {
  r.properties["fd_function"] = target ? "gradient_target" : "forward";
}

// sum_j <v_j, f(x)_j>: a 0-dim fp64 tensor on the outputs' device, read by the caller after every evaluation
// is queued (one synchronization per input instead of one per evaluation: with the suite's shards sharing a
// GPU, each synchronization waits for the other processes' time slices).
at::Tensor directional_value(const ForwardFn& f, const Tensors& x, const Tensors& v) {
  const Tensors out = f(x);
  at::Tensor total;
  for (size_t j = 0; j < out.size(); ++j) {
    const at::Tensor term = (out[j].to(at::kDouble) * v[j]).sum();
    total = total.defined() ? total + term : term;
  }
  return total.defined() ? total : at::zeros({}, at::TensorOptions().dtype(at::kDouble));
}

// The directional value of one CUDA function captured once into a CUDA graph and replayed for each perturbation
// of its input, on a stream of its own: one graph launch per evaluation instead of the function's launches and
// its host synchronizations (a RoI op reads its invalid-row flag after every call, and with the suite's processes
// sharing the GPU each synchronization waits for the others' time slices: 0.4-1.8 s per check, 45 times its
// time alone). The graph's first replay must equal an eager evaluation on the same stream bitwise, else (and
// when the function cannot be captured: a host synchronization, a data-dependent shape) the check runs eagerly.
class GraphedDirectional {
 public:
  GraphedDirectional() : stream_(at::cuda::getStreamFromPool()) {}

  // nullptr, with *why_not set, when the function cannot be replayed as a graph.
  static std::unique_ptr<GraphedDirectional> capture(const ForwardFn& f, const Tensors& x, const Tensors& v,
                                                     std::string* why_not) {
    auto g = std::make_unique<GraphedDirectional>();
    at::cuda::getCurrentCUDAStream().synchronize();  // x, v and the working copy are ready for the other stream
    c10::cuda::CUDAStreamGuard guard(g->stream_);
    try {
      const at::Tensor eager = directional_value(f, x, v);  // also the warm-up: handles, workspaces, caches
      g->graph_.capture_begin();
      try {
        g->value_ = directional_value(f, x, v);
      } catch (...) {
        try {
          g->graph_.capture_end();
        } catch (...) {
        }
        cudaGetLastError();
        throw;
      }
      g->graph_.capture_end();
      g->graph_.replay();
      if (!bitwise_equal(g->value_, eager)) {
        *why_not = "the graph's replay differs from an eager evaluation";
        return nullptr;
      }
    } catch (const std::exception& e) {
      cudaGetLastError();  // a refused capture leaves a (non-sticky) error behind
      *why_not = error_text(e).substr(0, 200);
      const c10::cuda::CUDAStream stream = g->stream_;
      g.reset();
      end_generator_capture(stream);
      return nullptr;
    }
    return g;
  }

  const c10::cuda::CUDAStream& stream() const { return stream_; }

  // A capture that failed part-way leaves the default CUDA generator in capture mode (CUDAGraph::capture_end
  // ends it only after cudaStreamEndCapture succeeds), and the process's next random tensor on the device then
  // throws ("Offset increment outside graph capture": 22 masked_conv2d bad-input checks failed so). A capture of
  // nothing, which succeeds, ends it.
  static void end_generator_capture(const c10::cuda::CUDAStream& stream) {
    try {
      c10::cuda::CUDAStreamGuard guard(stream);
      at::cuda::CUDAGraph empty;
      empty.capture_begin();
      empty.capture_end();
    } catch (const std::exception&) {
    }
    cudaGetLastError();
  }

  // The value at the input's current contents, queued on stream() (the caller's current stream).
  at::Tensor evaluate() {
    graph_.replay();
    return value_.clone();
  }

 private:
  c10::cuda::CUDAStream stream_;
  at::cuda::CUDAGraph graph_;
  at::Tensor value_;
};

bool fd_graphs_enabled() {
  static const bool on = env_flag("DETOPS_FD_GRAPHS", true);
  return on;
}

bool any_on_cuda(const Tensors& inputs) {
  return std::any_of(inputs.begin(), inputs.end(), [](const at::Tensor& t) { return t.defined() && t.is_cuda(); });
}

// Whether CaseData::fd_rows applies to the finite differences of input `idx` at these inputs and outputs (on the
// CPU, the input one of the listed ones, more than one row, every output N rows or 0-dim with a reduced_scale;
// DETOPS_FD_ROWS=0 turns it off, to rule it out).
bool by_rows(const CaseData& d, std::size_t idx, const Tensors& inputs, const Tensors& outputs) {
  static const bool enabled = env_flag("DETOPS_FD_ROWS", true);  // 0: every difference on the whole inputs
  if (!enabled || !d.fd_rows || d.fd_rows->inputs.empty() || any_on_cuda(inputs)) return false;
  const auto& listed = d.fd_rows->inputs;
  if (std::find(listed.begin(), listed.end(), idx) == listed.end()) return false;
  const at::Tensor& first = inputs.at(listed.front());
  if (first.dim() == 0 || first.size(0) < 2) return false;
  const std::int64_t rows = first.size(0);
  for (std::size_t k : listed) {
    if (inputs.at(k).dim() == 0 || inputs.at(k).size(0) != rows) return false;
  }
  for (const at::Tensor& o : outputs) {
    if (o.dim() == 0 ? !d.fd_rows->reduced_scale : o.size(0) != rows) return false;
  }
  return true;
}

// One row of a row-separable problem (CaseData::fd_rows): the listed inputs narrowed to `row` (copies: the caller
// perturbs them), the others as given, and v narrowed to the row or scaled for a 0-dim output.
struct RowProblem {
  Tensors inputs, v;
};
RowProblem row_problem(const CaseData& d, const Tensors& inputs, const Tensors& v, const Tensors& outputs,
                       std::int64_t row) {
  RowProblem p{inputs, {}};
  for (std::size_t k : d.fd_rows->inputs) p.inputs[k] = inputs[k].narrow(0, row, 1).clone(at::MemoryFormat::Contiguous);
  const std::int64_t rows = inputs.at(d.fd_rows->inputs.front()).size(0);
  for (std::size_t j = 0; j < v.size(); ++j) {
    p.v.push_back(outputs[j].dim() == 0 ? v[j] * d.fd_rows->reduced_scale(rows) : v[j].narrow(0, row, 1));
  }
  return p;
}

// Central finite differences of the function `function_at(inputs)` (fp64) at sampled elements of each
// differentiable input, compared with `backward`'s gradient of sum_j <v_j, f_j> at the same elements.
// function_at(x0): the function differentiated at x0 (the forward, or the gradient target held at x0).
//
// evaluate_on_host: `forward` is a host function of its inputs on any device (CaseData::op_gradient_target_on_host):
// the perturbations and evaluations then use CPU copies of the inputs and of v (the backward still gets the
// inputs as given).
void finite_difference_check(CheckResult& r, const CaseData& d, const std::function<ForwardFn(const Tensors&)>& function_at,
                             const BackwardFn& backward, const Tensors& inputs, std::uint64_t seed,
                             bool evaluate_on_host = false) {
  const ForwardFn forward = function_at(inputs);
  const Tensors outputs = forward(inputs);
  const Tensors v = grad_outputs_for(d, outputs, seed);
  const Tensors analytic = backward(inputs, v);
  constexpr std::int64_t kMaxSamples = 96;
  int points = 0;
  evaluate_on_host = evaluate_on_host && any_on_cuda(inputs);
  std::string evaluation = evaluate_on_host ? "cpu (host gradient target)" : any_on_cuda(inputs) ? "eager" : "cpu";
  std::string rows_inputs;  // the differentiable inputs whose differences were taken by rows
  const auto on_host = [](const Tensors& ts) {
    Tensors out;
    for (const at::Tensor& t : ts) out.push_back(t.defined() ? t.to(at::kCPU) : t);
    return out;
  };
  const Tensors eval_inputs = evaluate_on_host ? on_host(inputs) : inputs;
  const Tensors eval_v = evaluate_on_host ? on_host(v) : v;
  for (size_t k = 0; k < d.differentiable.size(); ++k) {
    const size_t idx = d.differentiable[k];
    const at::Tensor x = inputs[idx].contiguous();
    const at::Tensor grad = analytic.at(k).to(at::kCPU).to(at::kDouble).contiguous().view(-1);
    const std::int64_t n = x.numel();
    std::vector<std::int64_t> sample(static_cast<size_t>(n));
    std::iota(sample.begin(), sample.end(), 0);
    if (n > kMaxSamples) {
      // Half the points where the analytic gradient is largest, half seeded random.
      const at::Tensor order = grad.abs().argsort(/*stable=*/true, /*dim=*/0, /*descending=*/true);
      std::vector<std::int64_t> chosen;
      for (std::int64_t i = 0; i < kMaxSamples / 2; ++i) chosen.push_back(order[i].item<std::int64_t>());
      at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed + 17);
      const at::Tensor perm = at::randperm(n, gen, at::TensorOptions().dtype(at::kLong));
      for (std::int64_t i = 0; static_cast<std::int64_t>(chosen.size()) < kMaxSamples && i < n; ++i) {
        const std::int64_t e = perm[i].item<std::int64_t>();
        if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
      }
      sample = chosen;
    }
    const at::Tensor x_host = x.to(at::kCPU).to(at::kDouble).contiguous().view(-1);
    Tensors plus, minus;
    std::vector<double> an;
    if (by_rows(d, idx, inputs, outputs)) {
      // Each sampled element's difference on its own row (CaseData::fd_rows).
      evaluation = "cpu (by rows)";
      rows_inputs += (rows_inputs.empty() ? "" : ", ") + std::to_string(idx);
      const std::int64_t row_numel = n / x.size(0);
      for (std::int64_t e : sample) {
        const std::int64_t row = e / row_numel;
        RowProblem p = row_problem(d, inputs, v, outputs, row);
        p.inputs[idx] = x.narrow(0, row, 1).clone(at::MemoryFormat::Contiguous);
        Tensors x0 = p.inputs;
        x0[idx] = p.inputs[idx].clone();  // the held terms' x0 must not see the perturbations
        const ForwardFn f = function_at(x0);
        const double x_e = x_host[e].item<double>();
        at::Tensor slot = p.inputs[idx].view(-1)[e - row * row_numel];
        slot.fill_(x_e + kFiniteDifferenceEps);
        plus.push_back(directional_value(f, p.inputs, p.v));
        slot.fill_(x_e - kFiniteDifferenceEps);
        minus.push_back(directional_value(f, p.inputs, p.v));
        an.push_back(grad[e].item<double>());
        ++points;
      }
    } else {
      // One working copy of x, each sampled element set to x_e + eps, then x_e - eps, then back to x_e (exact: the
      // values are written, not added), so the loop allocates nothing the size of x (a copy per evaluation cost
      // more in page faults than the op: 8 million faults, 26 s of system time, for one 27x27 PS-RoIPool case).
      const at::Tensor work = eval_inputs[idx].contiguous().clone();
      const at::Tensor work_flat = work.view(-1);
      Tensors perturbed = eval_inputs;
      perturbed[idx] = work;
      std::unique_ptr<GraphedDirectional> graphed;
      if (work.is_cuda() && fd_graphs_enabled() && !sample.empty()) {
        std::string why_not;
        graphed = GraphedDirectional::capture(forward, perturbed, eval_v, &why_not);
        if (evaluation.rfind("eager (no graph", 0) != 0) {  // one input without a graph: the property says why
          evaluation = graphed ? "cuda_graph" : "eager (no graph: " + why_not + ")";
        }
      }
      // With a graph, every evaluation (the working copy's writes too) runs on its stream.
      std::optional<c10::cuda::CUDAStreamGuard> on_graph_stream;
      if (graphed) on_graph_stream.emplace(graphed->stream());
      for (std::int64_t e : sample) {
        const double x_e = x_host[e].item<double>();
        at::Tensor slot = work_flat[e];
        slot.fill_(x_e + kFiniteDifferenceEps);
        plus.push_back(graphed ? graphed->evaluate() : directional_value(forward, perturbed, eval_v));
        slot.fill_(x_e - kFiniteDifferenceEps);
        minus.push_back(graphed ? graphed->evaluate() : directional_value(forward, perturbed, eval_v));
        slot.fill_(x_e);
        an.push_back(grad[e].item<double>());
        ++points;
      }
    }
    std::vector<double> fd;
    if (!plus.empty()) {
      const at::Tensor p = at::stack(plus).to(at::kCPU).contiguous(), m = at::stack(minus).to(at::kCPU).contiguous();
      for (std::int64_t i = 0; i < p.numel(); ++i) {
        fd.push_back((p.data_ptr<double>()[i] - m.data_ptr<double>()[i]) / (2 * kFiniteDifferenceEps));
      }
    }
    const auto opts = at::TensorOptions().dtype(at::kDouble);
    const at::Tensor fd_t = at::from_blob(fd.data(), {static_cast<std::int64_t>(fd.size())}, opts).clone();
    const at::Tensor an_t = at::from_blob(an.data(), {static_cast<std::int64_t>(an.size())}, opts).clone();
    r.comparisons.push_back(compare_tensors(an_t, fd_t, kFiniteDifferenceTolerance));
  }
  r.properties["fd_points"] = std::to_string(points);
  r.properties["fd_evaluation"] = evaluation;
  if (!rows_inputs.empty()) r.properties["fd_rows_inputs"] = rows_inputs;  // the other inputs: evaluated whole
  summarize(r);
}

}  // namespace

bool cuda_available() {
  static const bool available = [] {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    cudaGetLastError();
    return err == cudaSuccess && count > 0;
  }();
  return available;
}

const std::string& cuda_unavailable_reason() {
  static const std::string reason = [] {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    cudaGetLastError();
    if (err != cudaSuccess) {
      return std::string("no usable CUDA device: cudaGetDeviceCount returned ") + cudaGetErrorName(err) + " (" +
             cudaGetErrorString(err) + "); this machine has no NVIDIA GPU or driver";
    }
    return count == 0 ? std::string("no CUDA device visible (cudaGetDeviceCount = 0)") : std::string();
  }();
  return reason;
}

at::ScalarType scalar_type_of(DType dtype) {
  switch (dtype) {
    case DType::kFloat64: return at::kDouble;
    case DType::kFloat32: return at::kFloat;
    case DType::kFloat16: return at::kHalf;
    case DType::kBFloat16: return at::kBFloat16;
  }
  throw std::invalid_argument("scalar_type_of: unknown dtype");
}

Tensors materialize_inputs(const Tensors& master, DType dtype, Device device) {
  Tensors out;
  for (const at::Tensor& t : master) {
    at::Tensor m = t.is_floating_point() ? t.to(torch_device(device), scalar_type_of(dtype)) : t.to(torch_device(device));
    // A copy where .to() returned the master itself (fp64 and index inputs on the CPU), strides kept: the case's
    // data serves all its checks (case_data), so an op that wrote into its input must not change the next check's.
    if (m.is_same(t) && t.is_non_overlapping_and_dense()) m = t.clone(at::MemoryFormat::Preserve);
    out.push_back(m);
  }
  return out;
}

CheckResult check_forward(const OpSpec& op, const OpCase& c, DType dtype, Device device) {
  return run_case_check(c, dtype_name(dtype), device, [&](CheckResult& res) {
    PhaseClock clock(res, device);
    const std::shared_ptr<const CaseData> data = case_data(c);
    const CaseData& d = *data;
    clock.mark("make");
    const Tensors in = materialize_inputs(d.inputs, dtype, device);
    const Tensors out1 = d.op_forward(in);
    const Tensors out2 = d.op_forward(in);
    clock.mark("op");
    const Tensors ref_in = reference_view(in);
    const CaseMemo::Reference reference =
        memo_reference(res, op.name, c, device, /*backward=*/false, dtype, ref_in, {}, [&](Tensors& outputs, Tensors& magnitudes) {
          outputs = d.reference_forward(ref_in);
          if (!d.judge_forward && d.reference_forward_magnitude) magnitudes = d.reference_forward_magnitude(ref_in);
        });
    const Tensors& ref = reference.outputs;
    clock.mark("reference");
    res.properties["input_shapes"] = shape_text(in);
    res.properties["output_shapes"] = shape_text(out1);
    if (!out1.empty() && output_dump_enabled()) {
      dump_output(op.name + ".forward." + c.name + "." + dtype_name(dtype) + "." + device_name(device), dtype_name(dtype),
                  out1[0]);
      clock.mark("dump");
    }
    if (out1.size() != ref.size()) throw std::runtime_error("op and reference return different numbers of outputs");
    if (d.judge_forward) {
      res.comparisons = d.judge_forward(ref_in, out1, ref, dtype);
    } else {
      const Tensors& mag = reference.magnitudes;
      for (size_t i = 0; i < out1.size(); ++i) {
        res.comparisons.push_back(
            compare_tensors(out1[i], ref[i], op.tolerance(dtype), i < mag.size() ? mag[i] : at::Tensor()));
      }
    }
    summarize(res);
    apply_determinism(res, op, device, /*backward=*/false, all_bitwise_equal(out1, out2));
    clock.mark("compare");
  });
}

CheckResult check_backward(const OpSpec& op, const OpCase& c, DType dtype, Device device) {
  return run_case_check(c, dtype_name(dtype), device, [&](CheckResult& res) {
    PhaseClock clock(res, device);
    const std::shared_ptr<const CaseData> data = case_data(c);
    const CaseData& d = *data;
    clock.mark("make");
    const Tensors in = materialize_inputs(d.inputs, dtype, device);
    const Tensors out = d.op_forward(in);
    const Tensors grads = grad_outputs_for(d, out, c.seed);
    const Tensors g1 = d.op_backward(in, grads);
    const Tensors g2 = d.op_backward(in, grads);
    clock.mark("op");
    const Tensors ref_in = reference_view(in), ref_grads = reference_view(grads);
    const CaseMemo::Reference reference =
        memo_reference(res, op.name, c, device, /*backward=*/true, dtype, ref_in, ref_grads, [&](Tensors& outputs, Tensors& magnitudes) {
          outputs = d.reference_backward(ref_in, ref_grads);
          if (d.reference_backward_magnitude) magnitudes = d.reference_backward_magnitude(ref_in, ref_grads);
        });
    const Tensors& ref = reference.outputs;
    const Tensors& mag = reference.magnitudes;
    res.properties["grad_output_strides"] = [&] {
      std::ostringstream os;
      for (const at::Tensor& g : grads) os << g.strides() << ' ';
      return os.str();
    }();
    if (g1.size() != ref.size()) throw std::runtime_error("op and reference backward return different numbers of grads");
    clock.mark("reference");
    for (size_t i = 0; i < g1.size(); ++i) {
      res.comparisons.push_back(compare_tensors(g1[i], ref[i], op.tolerance(dtype), i < mag.size() ? mag[i] : at::Tensor()));
    }
    summarize(res);
    apply_determinism(res, op, device, /*backward=*/true, all_bitwise_equal(g1, g2));
    clock.mark("compare");
  });
}

CheckResult check_gradient_finite_differences(const OpSpec& op, const OpCase& c, Device device) {
  return run_case_check(c, "fp64", device, [&](CheckResult& res) {
    PhaseClock clock(res, device);
    const std::shared_ptr<const CaseData> data = case_data(c);
    const CaseData& d = *data;
    clock.mark("make");
    if (!d.gradcheck_skip_reason.empty()) {
      res.outcome = Outcome::kSkipped;
      res.message = d.gradcheck_skip_reason;
      return;
    }
    const Tensors x0 = materialize_inputs(d.inputs, DType::kFloat64, device);
    record_fd_function(res, d.op_gradient_target);
    finite_difference_check(
        res, d, [&d](const Tensors& at) { return gradient_function(d.op_forward, d.op_gradient_target, at); },
        d.op_backward, x0, c.seed, d.op_gradient_target && d.op_gradient_target_on_host);
    clock.mark("fd");
  });
}

CheckResult check_reference_gradient(const OpSpec& op, const OpCase& c) {
  CheckResult r;
  record_common(r, c, "fp64", Device::kCpu);
  return guarded(r, [&](CheckResult& res) {
    PhaseClock clock(res, Device::kCpu);
    const std::shared_ptr<const CaseData> data = case_data(c);
    const CaseData& d = *data;
    clock.mark("make");
    if (!d.gradcheck_skip_reason.empty()) {
      res.outcome = Outcome::kSkipped;
      res.message = d.gradcheck_skip_reason;
      return;
    }
    const Tensors x0 = materialize_inputs(d.inputs, DType::kFloat64, Device::kCpu);
    record_fd_function(res, d.reference_gradient_target);
    finite_difference_check(
        res, d, [&d](const Tensors& at) { return gradient_function(d.reference_forward, d.reference_gradient_target, at); },
        d.reference_backward, x0, c.seed);
    clock.mark("fd");
  });
}

CheckResult run_extra_check(const ExtraCheck& e) {
  CheckResult r;
  r.properties["device"] = device_name(e.device);
  if (e.device == Device::kCuda && !cuda_available()) {
    r.outcome = Outcome::kSkipped;
    r.message = cuda_unavailable_reason();
    return guarded(r, [](CheckResult&) {});
  }
  return guarded(r, [&](CheckResult& res) {
    CheckResult inner = e.run();
    inner.properties.insert(res.properties.begin(), res.properties.end());
    res = std::move(inner);
  });
}

CheckResult check_bad_input(const OpSpec& op, const BadInputCase& b, Device device) {
  CheckResult r;
  r.properties["device"] = device_name(device);
  if (device == Device::kCuda && !cuda_available()) {
    r.outcome = Outcome::kSkipped;
    r.message = cuda_unavailable_reason();
    return guarded(r, [](CheckResult&) {});
  }
  return guarded(r, [&](CheckResult& res) {
    const at::Device dev = torch_device(device);
    std::string message;
    bool raised = false;
    try {
      b.call(dev);
    } catch (const std::exception& e) {
      raised = true;
      message = error_text(e);
    }
    res.properties["error_message"] = message;
    if (!raised) {
      res.outcome = Outcome::kMismatch;
      res.message = "expected an error, but the call returned normally";
      return;
    }
    for (const std::string& needle : b.message_must_contain) {
      if (message.find(needle) == std::string::npos) {
        res.outcome = Outcome::kMismatch;
        res.message = "the error message does not mention '" + needle + "': " + message;
        return;
      }
    }
    if (device == Device::kCuda) {
      const cudaError_t err = cudaDeviceSynchronize();
      if (err != cudaSuccess) {
        res.outcome = Outcome::kError;
        res.message = std::string("the CUDA context is broken after the bad call: ") + cudaGetErrorString(err);
        return;
      }
    }
    op.valid_call(dev);  // throws (-> error) if the process is no longer usable
  });
}

}  // namespace detops::harness
