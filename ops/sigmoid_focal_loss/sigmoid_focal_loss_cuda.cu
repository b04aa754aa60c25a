// Sigmoid focal loss CUDA kernels. 'none' and the backward: one thread per element, grid-stride, 64-bit
// indices. 'mean' / 'sum': the chunk kernel reduces fixed chunks of kFocalLossChunk elements (one chunk per
// block iteration, a fixed-order block sum) into acc_t<T> partial sums; chunked_sum_finish_kernel (one block,
// common/chunked_sum.cuh) adds the partial sums in a fixed order and writes the scaled total. No atomics on values:
// deterministic.
// The torchvision form with 16-byte-aligned tensors (what PyTorch allocates) takes vectorized kernels: each
// thread loads 16 bytes of logits and of targets at a time (4 fp32, 8 fp16/bf16, 2 fp64), which keeps
// enough bytes in flight to approach DRAM bandwidth; the chunked reduction keeps its chunks and its order.
// Those kernels are compiled for gamma = 2 (RetinaNet's default, q * q) and for any gamma: the per-element
// math, not memory, bounds the fp32 forward, so the branch and the unused pow path are worth removing.
// The mmcv form ([N, C] logits, an int64 class index per row) takes the same 16-byte loads when its logits (and
// output) are aligned and C >= the Pack's width: a Pack then spans at most two rows, whose targets (and class
// weights) are read once per Pack; the row of a Pack's first element comes from a double-precision product instead
// of a 64-bit division (mmcv_row_col). The scalar kernels, a 64-bit division and a target load per element, ran the
// mmcv form's 'none' at 16-33% of the DRAM floor on the H200.
#include <cstdint>
#include <string>

#include "common/block_reduce.cuh"
#include "common/chunked_sum.cuh"
#include "common/int_dispatch.h"
#include "common/kernel_launch.cuh"
#include "common/vector_pack.cuh"
#include "sigmoid_focal_loss/sigmoid_focal_loss_kernel.cuh"

namespace detops {
namespace {

constexpr int kThreads = 256;
constexpr int kFinishThreads = 1024;
constexpr int kPerThread = static_cast<int>(kFocalLossChunk / kThreads);
static_assert(kFocalLossChunk % kThreads == 0, "a chunk is a whole number of block strides");

template <typename T>
__device__ __forceinline__ acc_t<T> element_loss(FocalLossForm form, const FocalCoeffs<acc_t<T>>& k, std::int64_t i,
                                                 std::int64_t num_classes, const T* inputs, const void* targets,
                                                 const T* weight, unsigned long long* first_invalid_row) {
  using Acc = acc_t<T>;
  const FocalElement<Acc> el = load_focal_element<T, Acc>(form, i, num_classes, inputs, targets, weight);
  if (!el.valid) {
    if (first_invalid_row != nullptr) atomicMin(first_invalid_row, static_cast<unsigned long long>(i / num_classes));
    return Acc(0);
  }
  return el.w * focal_loss_value(el.x, el.t, k);
}

template <typename T>
__global__ void sigmoid_focal_loss_forward_kernel(FocalLossForm form, FocalCoeffs<acc_t<T>> k, std::int64_t numel,
                                                  std::int64_t num_classes, const T* __restrict__ inputs,
                                                  const void* __restrict__ targets, const T* __restrict__ weight,
                                                  T* __restrict__ out, unsigned long long* first_invalid_row) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel; i += stride) {
    out[i] = from_acc<T>(element_loss<T>(form, k, i, num_classes, inputs, targets, weight, first_invalid_row));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    sigmoid_focal_loss_chunk_kernel(FocalLossForm form, FocalCoeffs<acc_t<T>> k, std::int64_t numel,
                                    std::int64_t num_classes, const T* __restrict__ inputs,
                                    const void* __restrict__ targets, const T* __restrict__ weight,
                                    acc_t<T>* __restrict__ partials, unsigned long long* first_invalid_row) {
  using Acc = acc_t<T>;
  __shared__ Acc shared[kThreads];
  const std::int64_t chunks = sigmoid_focal_loss_chunk_count(numel);
  // The loop bounds depend only on blockIdx / gridDim, so every thread of a block reaches each barrier.
  for (std::int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    Acc sum = Acc(0);
    const std::int64_t first = c * kFocalLossChunk + threadIdx.x;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const std::int64_t i = first + static_cast<std::int64_t>(j) * kThreads;
      if (i < numel) sum += element_loss<T>(form, k, i, num_classes, inputs, targets, weight, first_invalid_row);
    }
    const Acc total = block_sum<Acc, kThreads>(sum, shared);
    if (threadIdx.x == 0) partials[c] = total;
  }
}

template <typename T>
__global__ void sigmoid_focal_loss_backward_kernel(FocalLossForm form, FocalCoeffs<acc_t<T>> k, std::int64_t numel,
                                                   std::int64_t num_classes, const T* __restrict__ grad,
                                                   std::int64_t grad_stride, acc_t<T> grad_scale,
                                                   const T* __restrict__ inputs, const void* __restrict__ targets,
                                                   const T* __restrict__ weight, T* __restrict__ grad_inputs,
                                                   unsigned long long* first_invalid_row) {
  using Acc = acc_t<T>;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel; i += stride) {
    const FocalElement<Acc> el = load_focal_element<T, Acc>(form, i, num_classes, inputs, targets, weight);
    Acc g = Acc(0);
    if (el.valid) {
      g = to_acc<Acc>(grad[i * grad_stride]) * grad_scale * el.w * focal_loss_grad(el.x, el.t, k);
    } else if (first_invalid_row != nullptr) {
      atomicMin(first_invalid_row, static_cast<unsigned long long>(i / num_classes));
    }
    grad_inputs[i] = from_acc<T>(g);
  }
}

// Torchvision form, 'none': out[i] = loss(x[i], t[i]), a Pack per thread per step, then the tail.
template <typename T, int Gamma>
__global__ void sigmoid_focal_loss_forward_vec_kernel(FocalCoeffs<acc_t<T>> k, std::int64_t numel,
                                                      const T* __restrict__ inputs, const T* __restrict__ targets,
                                                      T* __restrict__ out) {
  using Acc = acc_t<T>;
  constexpr int N = Pack<T>::kN;
  const std::int64_t packs = numel / N;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t v = first; v < packs; v += stride) {
    const Pack<T> x = load_pack(inputs, v), t = load_pack(targets, v);
    Pack<T> o;
#pragma unroll
    for (int j = 0; j < N; ++j) o.v[j] = from_acc<T>(focal_loss_value<Acc, Gamma>(to_acc<Acc>(x.v[j]), to_acc<Acc>(t.v[j]), k));
    store_pack(out, v, o);
  }
  for (std::int64_t i = packs * N + first; i < numel; i += stride) {
    out[i] = from_acc<T>(focal_loss_value<Acc, Gamma>(to_acc<Acc>(inputs[i]), to_acc<Acc>(targets[i]), k));
  }
}

// Torchvision form, 'mean' / 'sum': the same chunks of kFocalLossChunk elements as the scalar kernel, each
// thread summing kPerThread / N Packs (a partial Pack at the end of the last chunk element by element),
// then the same block tree. Deterministic; the order within a thread differs from the scalar kernel's.
template <typename T, int Gamma>
__global__ void __launch_bounds__(kThreads)
    sigmoid_focal_loss_chunk_vec_kernel(FocalCoeffs<acc_t<T>> k, std::int64_t numel, const T* __restrict__ inputs,
                                        const T* __restrict__ targets, acc_t<T>* __restrict__ partials) {
  using Acc = acc_t<T>;
  constexpr int N = Pack<T>::kN;
  constexpr int kPacksPerThread = kPerThread / N;
  static_assert(kPerThread % N == 0, "a thread's share of a chunk is whole Packs");
  __shared__ Acc shared[kThreads];
  const std::int64_t chunks = sigmoid_focal_loss_chunk_count(numel);
  for (std::int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    Acc sum = Acc(0);
#pragma unroll
    for (int r = 0; r < kPacksPerThread; ++r) {
      const std::int64_t e0 = c * kFocalLossChunk + (static_cast<std::int64_t>(r) * kThreads + threadIdx.x) * N;
      if (e0 + N <= numel) {
        const Pack<T> x = load_pack(inputs + e0, 0), t = load_pack(targets + e0, 0);
#pragma unroll
        for (int j = 0; j < N; ++j) sum += focal_loss_value<Acc, Gamma>(to_acc<Acc>(x.v[j]), to_acc<Acc>(t.v[j]), k);
      } else {
        for (std::int64_t i = e0; i < numel; ++i) {
          sum += focal_loss_value<Acc, Gamma>(to_acc<Acc>(inputs[i]), to_acc<Acc>(targets[i]), k);
        }
      }
    }
    const Acc total = block_sum<Acc, kThreads>(sum, shared);
    if (threadIdx.x == 0) partials[c] = total;
  }
}

// Torchvision form, backward: grad_stride 0 (mean / sum: one upstream value) or 1 (none, Pack-loaded).
template <typename T, int Gamma>
__global__ void sigmoid_focal_loss_backward_vec_kernel(FocalCoeffs<acc_t<T>> k, std::int64_t numel,
                                                       const T* __restrict__ grad, std::int64_t grad_stride,
                                                       acc_t<T> grad_scale, const T* __restrict__ inputs,
                                                       const T* __restrict__ targets, T* __restrict__ grad_inputs) {
  using Acc = acc_t<T>;
  constexpr int N = Pack<T>::kN;
  const std::int64_t packs = numel / N;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  const Acc g0 = grad_stride == 0 ? to_acc<Acc>(grad[0]) * grad_scale : Acc(0);
  for (std::int64_t v = first; v < packs; v += stride) {
    const Pack<T> x = load_pack(inputs, v), t = load_pack(targets, v);
    Pack<T> up;
    if (grad_stride != 0) up = load_pack(grad, v);
    Pack<T> o;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const Acc g = grad_stride == 0 ? g0 : to_acc<Acc>(up.v[j]) * grad_scale;
      o.v[j] = from_acc<T>(g * focal_loss_grad<Acc, Gamma>(to_acc<Acc>(x.v[j]), to_acc<Acc>(t.v[j]), k));
    }
    store_pack(grad_inputs, v, o);
  }
  for (std::int64_t i = packs * N + first; i < numel; i += stride) {
    const Acc g = grad_stride == 0 ? g0 : to_acc<Acc>(grad[i]) * grad_scale;
    grad_inputs[i] = from_acc<T>(g * focal_loss_grad<Acc, Gamma>(to_acc<Acc>(inputs[i]), to_acc<Acc>(targets[i]), k));
  }
}

// The mmcv form's vectorized kernels. Element e of the [N, C] logits is (row, col) = (e / C, e % C): the quotient
// from e * (1 / C) in double, then one correction. For e < 2^52 (kMmcvVecMaxElements, checked by the launchers)
// e is exact in double and the product is within e / C * 2^-52 <= 1 / C of e / C, so the truncated quotient is
// the row or the row before it.
constexpr std::int64_t kMmcvVecMaxElements = std::int64_t{1} << 52;

struct RowCol {
  std::int64_t row, col;
};

__device__ __forceinline__ RowCol mmcv_row_col(std::int64_t e, std::int64_t classes, double inv_classes) {
  std::int64_t q = __double2ll_rz(static_cast<double>(e) * inv_classes);
  std::int64_t r = e - q * classes;
  if (r < 0) {
    --q;
    r += classes;
  } else if (r >= classes) {
    ++q;
    r -= classes;
  }
  return {q, r};
}

// One row's target, its class weight (weight[target] when given and target < C, else 1) and whether the target is
// in [0, C]; an invalid row is recorded (atomicMin) and its elements contribute 0, as in the scalar kernels.
template <typename Acc>
struct MmcvRow {
  std::int64_t target;
  Acc w;
  bool valid;
};

template <typename T, typename Acc>
__device__ __forceinline__ MmcvRow<Acc> mmcv_row(std::int64_t row, std::int64_t classes,
                                                 const std::int64_t* __restrict__ targets, const T* __restrict__ weight,
                                                 unsigned long long* first_invalid_row) {
  const std::int64_t t = targets[row];
  MmcvRow<Acc> r{t, Acc(1), t >= 0 && t <= classes};
  if (!r.valid) {
    if (first_invalid_row != nullptr) atomicMin(first_invalid_row, static_cast<unsigned long long>(row));
  } else if (weight != nullptr && t < classes) {
    r.w = to_acc<Acc>(weight[t]);
  }
  return r;
}

// fn(j, t, w, valid) for the N elements of the Pack whose first element is e0 (e0 + N <= numel, C >= N: the Pack
// lies in row e0 / C and, when it crosses its end, the next row).
template <int N, typename T, typename Acc, typename Fn>
__device__ __forceinline__ void for_mmcv_pack(std::int64_t e0, std::int64_t classes, double inv_classes,
                                              const std::int64_t* __restrict__ targets, const T* __restrict__ weight,
                                              unsigned long long* first_invalid_row, Fn&& fn) {
  const RowCol rc = mmcv_row_col(e0, classes, inv_classes);
  const MmcvRow<Acc> first = mmcv_row<T, Acc>(rc.row, classes, targets, weight, first_invalid_row);
  MmcvRow<Acc> next = first;
  if (rc.col + N > classes) next = mmcv_row<T, Acc>(rc.row + 1, classes, targets, weight, first_invalid_row);
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const std::int64_t c = rc.col + j;
    const bool second = c >= classes;
    const MmcvRow<Acc>& r = second ? next : first;
    fn(j, r.target == (second ? c - classes : c) ? Acc(1) : Acc(0), r.w, r.valid);
  }
}

// mmcv form, 'none': out[i] = w * loss(x[i], t[i]), a Pack per thread per step, then the tail (scalar).
template <typename T, int Gamma>
__global__ void sigmoid_focal_loss_mmcv_forward_vec_kernel(FocalCoeffs<acc_t<T>> k, std::int64_t numel,
                                                           std::int64_t classes, double inv_classes,
                                                           const T* __restrict__ inputs,
                                                           const std::int64_t* __restrict__ targets,
                                                           const T* __restrict__ weight, T* __restrict__ out,
                                                           unsigned long long* first_invalid_row) {
  using Acc = acc_t<T>;
  constexpr int N = Pack<T>::kN;
  const std::int64_t packs = numel / N;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t v = first; v < packs; v += stride) {
    const Pack<T> x = load_pack(inputs, v);
    Pack<T> o;
    for_mmcv_pack<N, T, Acc>(v * N, classes, inv_classes, targets, weight, first_invalid_row,
                             [&](int j, Acc t, Acc w, bool valid) {
                               o.v[j] = from_acc<T>(valid ? w * focal_loss_value<Acc, Gamma>(to_acc<Acc>(x.v[j]), t, k)
                                                          : Acc(0));
                             });
    store_pack(out, v, o);
  }
  for (std::int64_t i = packs * N + first; i < numel; i += stride) {
    out[i] = from_acc<T>(element_loss<T>(FocalLossForm::kMmcv, k, i, classes, inputs, targets, weight,
                                         first_invalid_row));
  }
}

// mmcv form, 'mean' / 'sum': the chunks of kFocalLossChunk elements and the block tree of the other chunk kernels.
template <typename T, int Gamma>
__global__ void __launch_bounds__(kThreads)
    sigmoid_focal_loss_mmcv_chunk_vec_kernel(FocalCoeffs<acc_t<T>> k, std::int64_t numel, std::int64_t classes,
                                             double inv_classes, const T* __restrict__ inputs,
                                             const std::int64_t* __restrict__ targets, const T* __restrict__ weight,
                                             acc_t<T>* __restrict__ partials, unsigned long long* first_invalid_row) {
  using Acc = acc_t<T>;
  constexpr int N = Pack<T>::kN;
  constexpr int kPacksPerThread = kPerThread / N;
  static_assert(kPerThread % N == 0, "a thread's share of a chunk is whole Packs");
  __shared__ Acc shared[kThreads];
  const std::int64_t chunks = sigmoid_focal_loss_chunk_count(numel);
  for (std::int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    Acc sum = Acc(0);
#pragma unroll
    for (int r = 0; r < kPacksPerThread; ++r) {
      const std::int64_t e0 = c * kFocalLossChunk + (static_cast<std::int64_t>(r) * kThreads + threadIdx.x) * N;
      if (e0 + N <= numel) {
        const Pack<T> x = load_pack(inputs + e0, 0);
        for_mmcv_pack<N, T, Acc>(e0, classes, inv_classes, targets, weight, first_invalid_row,
                                 [&](int j, Acc t, Acc w, bool valid) {
                                   if (valid) sum += w * focal_loss_value<Acc, Gamma>(to_acc<Acc>(x.v[j]), t, k);
                                 });
      } else {
        for (std::int64_t i = e0; i < numel; ++i) {
          sum += element_loss<T>(FocalLossForm::kMmcv, k, i, classes, inputs, targets, weight, first_invalid_row);
        }
      }
    }
    const Acc total = block_sum<Acc, kThreads>(sum, shared);
    if (threadIdx.x == 0) partials[c] = total;
  }
}

// mmcv form, backward: grad_stride 0 (mean / sum: one upstream value) or 1 (none, Pack-loaded).
template <typename T, int Gamma>
__global__ void sigmoid_focal_loss_mmcv_backward_vec_kernel(FocalCoeffs<acc_t<T>> k, std::int64_t numel,
                                                            std::int64_t classes, double inv_classes,
                                                            const T* __restrict__ grad, std::int64_t grad_stride,
                                                            acc_t<T> grad_scale, const T* __restrict__ inputs,
                                                            const std::int64_t* __restrict__ targets,
                                                            const T* __restrict__ weight, T* __restrict__ grad_inputs,
                                                            unsigned long long* first_invalid_row) {
  using Acc = acc_t<T>;
  constexpr int N = Pack<T>::kN;
  const std::int64_t packs = numel / N;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  const Acc g0 = grad_stride == 0 ? to_acc<Acc>(grad[0]) * grad_scale : Acc(0);
  for (std::int64_t v = first; v < packs; v += stride) {
    const Pack<T> x = load_pack(inputs, v);
    Pack<T> up;
    if (grad_stride != 0) up = load_pack(grad, v);
    Pack<T> o;
    for_mmcv_pack<N, T, Acc>(v * N, classes, inv_classes, targets, weight, first_invalid_row,
                             [&](int j, Acc t, Acc w, bool valid) {
                               const Acc g = grad_stride == 0 ? g0 : to_acc<Acc>(up.v[j]) * grad_scale;
                               o.v[j] = from_acc<T>(
                                   valid ? g * w * focal_loss_grad<Acc, Gamma>(to_acc<Acc>(x.v[j]), t, k) : Acc(0));
                             });
    store_pack(grad_inputs, v, o);
  }
  for (std::int64_t i = packs * N + first; i < numel; i += stride) {
    const FocalElement<Acc> el = load_focal_element<T, Acc>(FocalLossForm::kMmcv, i, classes, inputs, targets, weight);
    Acc g = Acc(0);
    if (el.valid) {
      g = (grad_stride == 0 ? g0 : to_acc<Acc>(grad[i]) * grad_scale) * el.w * focal_loss_grad<Acc, Gamma>(el.x, el.t, k);
    } else if (first_invalid_row != nullptr) {
      atomicMin(first_invalid_row, static_cast<unsigned long long>(i / classes));
    }
    grad_inputs[i] = from_acc<T>(g);
  }
}

// Both forms run the scalar kernels, and each its vectorized ones, for gamma = 2 and any gamma.
const bool kRegistered = for_each_floating_type([](auto tag, const char* type) {
  using T = typename decltype(tag)::type;
  for (const FocalLossForm form : {FocalLossForm::kTorchvision, FocalLossForm::kMmcv}) {
    const char* op = sigmoid_focal_loss_op_name(form);
    register_instantiation(op, "sigmoid_focal_loss_forward_kernel", type, &sigmoid_focal_loss_forward_kernel<T>);
    register_instantiation(op, "sigmoid_focal_loss_chunk_kernel", type, &sigmoid_focal_loss_chunk_kernel<T>);
    register_instantiation(op, "chunked_sum_finish_kernel", std::string(type) + ", " + std::to_string(kFinishThreads),
                           &chunked_sum_finish_kernel<T, kFinishThreads>);
    register_instantiation(op, "sigmoid_focal_loss_backward_kernel", type, &sigmoid_focal_loss_backward_kernel<T>);
  }
  const char* tv = sigmoid_focal_loss_op_name(FocalLossForm::kTorchvision);
  const char* mmcv = sigmoid_focal_loss_op_name(FocalLossForm::kMmcv);
  for_each_int<kGammaTwo, kGammaAny>([&](auto gamma) {
    constexpr int G = decltype(gamma)::value;
    const std::string args = std::string(type) + (G == kGammaTwo ? ", 2" : ", any");
    register_instantiation(tv, "sigmoid_focal_loss_forward_vec_kernel", args,
                           &sigmoid_focal_loss_forward_vec_kernel<T, G>);
    register_instantiation(tv, "sigmoid_focal_loss_chunk_vec_kernel", args, &sigmoid_focal_loss_chunk_vec_kernel<T, G>);
    register_instantiation(tv, "sigmoid_focal_loss_backward_vec_kernel", args,
                           &sigmoid_focal_loss_backward_vec_kernel<T, G>);
    register_instantiation(mmcv, "sigmoid_focal_loss_mmcv_forward_vec_kernel", args,
                           &sigmoid_focal_loss_mmcv_forward_vec_kernel<T, G>);
    register_instantiation(mmcv, "sigmoid_focal_loss_mmcv_chunk_vec_kernel", args,
                           &sigmoid_focal_loss_mmcv_chunk_vec_kernel<T, G>);
    register_instantiation(mmcv, "sigmoid_focal_loss_mmcv_backward_vec_kernel", args,
                           &sigmoid_focal_loss_mmcv_backward_vec_kernel<T, G>);
  });
});

// The call's coefficients in the accumulation type of T (dispatch_logit_loss).
template <typename T>
using Coeffs = FocalCoeffs<acc_t<T>>;

// The instantiation of a vectorized kernel for the call's gamma: fn(kGammaTwo or kGammaAny).
template <typename Acc, typename Fn>
void dispatch_gamma(const FocalCoeffs<Acc>& k, Fn&& fn) {
  dispatch_int<kGammaTwo, kGammaAny>(k.gamma_kind == 2, fn);
}

// Whether the mmcv form's vectorized kernels take a call: a Pack spans at most two rows (C >= its width), the
// logits are 16-byte aligned, and every element index is exact in double (mmcv_row_col).
template <typename T>
bool mmcv_vectorized(const SigmoidFocalLossParams& params, std::int64_t n, std::int64_t classes, const void* input) {
  return params.form == FocalLossForm::kMmcv && classes >= Pack<T>::kN && n < kMmcvVecMaxElements && aligned16(input);
}

}  // namespace

void launch_sigmoid_focal_loss_forward(const SigmoidFocalLossParams& params, const SigmoidFocalLossForwardArgs& args,
                                       DType dtype, cudaStream_t stream) {
  dispatch_logit_loss<Coeffs>("sigmoid_focal_loss_forward", params, args.n, dtype, [&](auto tag, const auto& k) {
    using T = typename decltype(tag)::type;
    const bool vec = params.form == FocalLossForm::kTorchvision && aligned16(args.input) && aligned16(args.target);
    const bool mmcv_vec = mmcv_vectorized<T>(params, args.n, args.classes, args.input);
    const double inv_classes = 1.0 / static_cast<double>(args.classes > 0 ? args.classes : 1);
    if (params.reduction == FocalLossReduction::kNone) {
      if (mmcv_vec && aligned16(args.out)) {
        dispatch_gamma(k, [&](auto gamma) {
          launch_kernel(&sigmoid_focal_loss_mmcv_forward_vec_kernel<T, decltype(gamma)::value>,
                        grid_for(args.n / Pack<T>::kN, kThreads), kThreads, stream, k, args.n, args.classes,
                        inv_classes, args.input, args.target, args.weight, args.out, args.first_invalid_row);
        });
      } else if (vec && aligned16(args.out)) {
        dispatch_gamma(k, [&](auto gamma) {
          launch_kernel(&sigmoid_focal_loss_forward_vec_kernel<T, decltype(gamma)::value>,
                        grid_for(args.n / Pack<T>::kN, kThreads), kThreads, stream, k, args.n, args.input, args.target,
                        args.out);
        });
      } else {
        launch_grid_stride(&sigmoid_focal_loss_forward_kernel<T>, args.n, kThreads, stream, params.form, k, args.n,
                           args.classes, args.input, args.target, args.weight, args.out, args.first_invalid_row);
      }
      return;
    }
    const std::int64_t chunks = sigmoid_focal_loss_chunk_count(args.n);
    if (mmcv_vec) {
      dispatch_gamma(k, [&](auto gamma) {
        launch_kernel(&sigmoid_focal_loss_mmcv_chunk_vec_kernel<T, decltype(gamma)::value>, grid_for(chunks, 1),
                      kThreads, stream, k, args.n, args.classes, inv_classes, args.input, args.target, args.weight,
                      args.partials, args.first_invalid_row);
      });
    } else if (vec) {
      dispatch_gamma(k, [&](auto gamma) {
        launch_kernel(&sigmoid_focal_loss_chunk_vec_kernel<T, decltype(gamma)::value>, grid_for(chunks, 1), kThreads,
                      stream, k, args.n, args.input, args.target, args.partials);
      });
    } else {
      launch_kernel(&sigmoid_focal_loss_chunk_kernel<T>, grid_for(chunks, 1), kThreads, stream, params.form, k, args.n,
                    args.classes, args.input, args.target, args.weight, args.partials, args.first_invalid_row);
    }
    launch_kernel(&chunked_sum_finish_kernel<T, kFinishThreads>, 1, kFinishThreads, stream, chunks, args.partials,
                  static_cast<acc_t<T>>(args.scale), args.out);
  });
}

void launch_sigmoid_focal_loss_backward(const SigmoidFocalLossParams& params,
                                        const SigmoidFocalLossBackwardArgs& args, DType dtype, cudaStream_t stream) {
  dispatch_logit_loss<Coeffs>("sigmoid_focal_loss_backward", params, args.n, dtype, [&](auto tag, const auto& k) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const UpstreamGrad& g = args.grad;
    const bool grad_packs = aligned16(args.grad_input) && (g.stride == 0 || (g.stride == 1 && aligned16(g.data)));
    const bool vec = params.form == FocalLossForm::kTorchvision && aligned16(args.input) && aligned16(args.target) &&
                     grad_packs;
    if (grad_packs && mmcv_vectorized<T>(params, args.n, args.classes, args.input)) {
      dispatch_gamma(k, [&](auto gamma) {
        launch_kernel(&sigmoid_focal_loss_mmcv_backward_vec_kernel<T, decltype(gamma)::value>,
                      grid_for(args.n / Pack<T>::kN, kThreads), kThreads, stream, k, args.n, args.classes,
                      1.0 / static_cast<double>(args.classes), g.data, g.stride, static_cast<Acc>(g.scale), args.input,
                      args.target, args.weight, args.grad_input, args.first_invalid_row);
      });
      return;
    }
    if (vec) {
      dispatch_gamma(k, [&](auto gamma) {
        launch_kernel(&sigmoid_focal_loss_backward_vec_kernel<T, decltype(gamma)::value>,
                      grid_for(args.n / Pack<T>::kN, kThreads), kThreads, stream, k, args.n, g.data, g.stride,
                      static_cast<Acc>(g.scale), args.input, args.target, args.grad_input);
      });
      return;
    }
    launch_grid_stride(&sigmoid_focal_loss_backward_kernel<T>, args.n, kThreads, stream, params.form, k, args.n,
                       args.classes, g.data, g.stride, static_cast<Acc>(g.scale), args.input, args.target, args.weight,
                       args.grad_input, args.first_invalid_row);
  });
}

}  // namespace detops
