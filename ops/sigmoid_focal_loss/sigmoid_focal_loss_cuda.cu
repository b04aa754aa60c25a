// Sigmoid focal loss CUDA kernels. 'none' and the backward: one thread per element, grid-stride, 64-bit
// indices. 'mean' / 'sum': the chunk kernel reduces fixed chunks of kFocalLossChunk elements (one chunk per
// block iteration, a fixed-order block sum) into acc_t<T> partial sums; the finish kernel (one block)
// adds the partial sums in a fixed order and writes the scaled total. No atomics on values: deterministic.
// The torchvision form with 16-byte-aligned tensors (what PyTorch allocates) takes vectorized kernels: each
// thread loads 16 bytes of logits and of targets at a time (4 fp32, 8 fp16/bf16, 2 fp64), which keeps
// enough bytes in flight to approach DRAM bandwidth; the chunked reduction keeps its chunks and its order.
#include <cstdint>
#include <utility>
#include <string>

#include "common/dispatch.h"
#include "common/kernel_registry.h"
#include "common/launch.h"
#include "detops/core/cuda_check.h"
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

// Block-wide sum of one value per thread, in a fixed order (so deterministic): a shuffle tree within each
// warp, the warps' sums through shared memory, and a shuffle tree over them in warp 0. One barrier pair
// per call instead of a barrier per tree level. The result is valid in thread 0. Every thread of the
// block must call it; Threads is a multiple of 32, at most 1024.
template <typename Acc, int Threads>
__device__ __forceinline__ Acc block_sum(Acc v, Acc* shared) {
  static_assert(Threads % 32 == 0 && Threads <= 1024, "whole warps, at most 32 of them");
  constexpr unsigned kAll = 0xffffffffu;
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(kAll, v, o);
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) / 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  Acc total = Acc(0);
  if (warp == 0) {
    total = lane < Threads / 32 ? shared[lane] : Acc(0);
#pragma unroll
    for (int o = 16; o > 0; o /= 2) total += __shfl_down_sync(kAll, total, o);
  }
  __syncthreads();  // shared may be reused by the caller's next iteration
  return total;
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
__global__ void __launch_bounds__(kFinishThreads)
    sigmoid_focal_loss_finish_kernel(std::int64_t chunks, const acc_t<T>* __restrict__ partials, acc_t<T> scale,
                                     T* __restrict__ out) {
  using Acc = acc_t<T>;
  __shared__ Acc shared[kFinishThreads];
  Acc sum = Acc(0);
  for (std::int64_t c = threadIdx.x; c < chunks; c += kFinishThreads) sum += partials[c];
  const Acc total = block_sum<Acc, kFinishThreads>(sum, shared);
  if (threadIdx.x == 0) out[0] = from_acc<T>(total * scale);
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

// 16 bytes of T, loaded and stored as one vector.
template <typename T>
struct alignas(16) Pack {
  static constexpr int kN = static_cast<int>(16 / sizeof(T));
  T v[kN];
};

inline bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

// Torchvision form, 'none': out[i] = loss(x[i], t[i]), a Pack per thread per step, then the tail.
template <typename T>
__global__ void sigmoid_focal_loss_forward_vec_kernel(FocalCoeffs<acc_t<T>> k, std::int64_t numel,
                                                      const T* __restrict__ inputs, const T* __restrict__ targets,
                                                      T* __restrict__ out) {
  using Acc = acc_t<T>;
  constexpr int N = Pack<T>::kN;
  const std::int64_t packs = numel / N;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t v = first; v < packs; v += stride) {
    const Pack<T> x = reinterpret_cast<const Pack<T>*>(inputs)[v];
    const Pack<T> t = reinterpret_cast<const Pack<T>*>(targets)[v];
    Pack<T> o;
#pragma unroll
    for (int j = 0; j < N; ++j) o.v[j] = from_acc<T>(focal_loss_value(to_acc<Acc>(x.v[j]), to_acc<Acc>(t.v[j]), k));
    reinterpret_cast<Pack<T>*>(out)[v] = o;
  }
  for (std::int64_t i = packs * N + first; i < numel; i += stride) {
    out[i] = from_acc<T>(focal_loss_value(to_acc<Acc>(inputs[i]), to_acc<Acc>(targets[i]), k));
  }
}

// Torchvision form, 'mean' / 'sum': the same chunks of kFocalLossChunk elements as the scalar kernel, each
// thread summing kPerThread / N Packs (a partial Pack at the end of the last chunk element by element),
// then the same block tree. Deterministic; the order within a thread differs from the scalar kernel's.
template <typename T>
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
        const Pack<T> x = reinterpret_cast<const Pack<T>*>(inputs + e0)[0];
        const Pack<T> t = reinterpret_cast<const Pack<T>*>(targets + e0)[0];
#pragma unroll
        for (int j = 0; j < N; ++j) sum += focal_loss_value(to_acc<Acc>(x.v[j]), to_acc<Acc>(t.v[j]), k);
      } else {
        for (std::int64_t i = e0; i < numel; ++i) sum += focal_loss_value(to_acc<Acc>(inputs[i]), to_acc<Acc>(targets[i]), k);
      }
    }
    const Acc total = block_sum<Acc, kThreads>(sum, shared);
    if (threadIdx.x == 0) partials[c] = total;
  }
}

// Torchvision form, backward: grad_stride 0 (mean / sum: one upstream value) or 1 (none, Pack-loaded).
template <typename T>
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
    const Pack<T> x = reinterpret_cast<const Pack<T>*>(inputs)[v];
    const Pack<T> t = reinterpret_cast<const Pack<T>*>(targets)[v];
    Pack<T> up;
    if (grad_stride != 0) up = reinterpret_cast<const Pack<T>*>(grad)[v];
    Pack<T> o;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const Acc g = grad_stride == 0 ? g0 : to_acc<Acc>(up.v[j]) * grad_scale;
      o.v[j] = from_acc<T>(g * focal_loss_grad(to_acc<Acc>(x.v[j]), to_acc<Acc>(t.v[j]), k));
    }
    reinterpret_cast<Pack<T>*>(grad_inputs)[v] = o;
  }
  for (std::int64_t i = packs * N + first; i < numel; i += stride) {
    const Acc g = grad_stride == 0 ? g0 : to_acc<Acc>(grad[i]) * grad_scale;
    grad_inputs[i] = from_acc<T>(g * focal_loss_grad(to_acc<Acc>(inputs[i]), to_acc<Acc>(targets[i]), k));
  }
}

// register_kernel copies the names. Both forms run the scalar kernels; the torchvision form also the
// vectorized ones.
template <typename T>
void register_type_kernels(const char* type_name) {
  const std::string args = std::string("<") + type_name + ">";
  const std::pair<const char*, const void*> scalar[] = {
      {"sigmoid_focal_loss_forward_kernel", reinterpret_cast<const void*>(&sigmoid_focal_loss_forward_kernel<T>)},
      {"sigmoid_focal_loss_chunk_kernel", reinterpret_cast<const void*>(&sigmoid_focal_loss_chunk_kernel<T>)},
      {"sigmoid_focal_loss_finish_kernel", reinterpret_cast<const void*>(&sigmoid_focal_loss_finish_kernel<T>)},
      {"sigmoid_focal_loss_backward_kernel", reinterpret_cast<const void*>(&sigmoid_focal_loss_backward_kernel<T>)}};
  const std::pair<const char*, const void*> vectorized[] = {
      {"sigmoid_focal_loss_forward_vec_kernel", reinterpret_cast<const void*>(&sigmoid_focal_loss_forward_vec_kernel<T>)},
      {"sigmoid_focal_loss_chunk_vec_kernel", reinterpret_cast<const void*>(&sigmoid_focal_loss_chunk_vec_kernel<T>)},
      {"sigmoid_focal_loss_backward_vec_kernel",
       reinterpret_cast<const void*>(&sigmoid_focal_loss_backward_vec_kernel<T>)}};
  for (const FocalLossForm form : {FocalLossForm::kTorchvision, FocalLossForm::kMmcv}) {
    for (const auto& [name, symbol] : scalar) register_kernel(sigmoid_focal_loss_op_name(form), (name + args).c_str(), symbol);
  }
  for (const auto& [name, symbol] : vectorized) {
    register_kernel(sigmoid_focal_loss_op_name(FocalLossForm::kTorchvision), (name + args).c_str(), symbol);
  }
}

const bool kRegistered = [] {
  register_type_kernels<double>("double");
  register_type_kernels<float>("float");
  register_type_kernels<__half>("half");
  register_type_kernels<__nv_bfloat16>("bfloat16");
  return true;
}();

}  // namespace

void launch_sigmoid_focal_loss_forward(const SigmoidFocalLossParams& params, const SigmoidFocalLossForwardArgs& args,
                                       DType dtype, cudaStream_t stream) {
  if (args.numel == 0) return;
  dispatch_floating(dtype, "sigmoid_focal_loss_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const FocalCoeffs<Acc> k = focal_coeffs<Acc>(params);
    const T* inputs = static_cast<const T*>(args.inputs);
    const T* weight = static_cast<const T*>(args.weight);
    const bool vec = params.form == FocalLossForm::kTorchvision && aligned16(args.inputs) && aligned16(args.targets);
    const T* targets = static_cast<const T*>(args.targets);
    if (params.reduction == FocalLossReduction::kNone && vec && aligned16(args.out)) {
      sigmoid_focal_loss_forward_vec_kernel<T>
          <<<grid_for(args.numel / Pack<T>::kN, kThreads), kThreads, 0, stream>>>(k, args.numel, inputs, targets,
                                                                                 static_cast<T*>(args.out));
      DETOPS_CHECK_LAUNCH();
      return;
    }
    if (params.reduction == FocalLossReduction::kNone) {
      sigmoid_focal_loss_forward_kernel<T><<<grid_for(args.numel, kThreads), kThreads, 0, stream>>>(
          params.form, k, args.numel, args.num_classes, inputs, args.targets, weight, static_cast<T*>(args.out),
          args.first_invalid_row);
      DETOPS_CHECK_LAUNCH();
      return;
    }
    const std::int64_t chunks = sigmoid_focal_loss_chunk_count(args.numel);
    Acc* partials = static_cast<Acc*>(args.partials);
    if (vec) {
      sigmoid_focal_loss_chunk_vec_kernel<T><<<grid_for(chunks, 1), kThreads, 0, stream>>>(k, args.numel, inputs,
                                                                                            targets, partials);
    } else {
      sigmoid_focal_loss_chunk_kernel<T><<<grid_for(chunks, 1), kThreads, 0, stream>>>(
          params.form, k, args.numel, args.num_classes, inputs, args.targets, weight, partials, args.first_invalid_row);
    }
    DETOPS_CHECK_LAUNCH();
    sigmoid_focal_loss_finish_kernel<T><<<1, kFinishThreads, 0, stream>>>(chunks, partials,
                                                                          static_cast<Acc>(args.scale),
                                                                          static_cast<T*>(args.out));
    DETOPS_CHECK_LAUNCH();
  });
}

void launch_sigmoid_focal_loss_backward(const SigmoidFocalLossParams& params,
                                        const SigmoidFocalLossBackwardArgs& args, DType dtype, cudaStream_t stream) {
  if (args.numel == 0) return;
  dispatch_floating(dtype, "sigmoid_focal_loss_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const bool vec = params.form == FocalLossForm::kTorchvision && aligned16(args.inputs) && aligned16(args.targets) &&
                     aligned16(args.grad_inputs) && (args.grad_stride == 0 || (args.grad_stride == 1 && aligned16(args.grad)));
    if (vec) {
      sigmoid_focal_loss_backward_vec_kernel<T><<<grid_for(args.numel / Pack<T>::kN, kThreads), kThreads, 0, stream>>>(
          focal_coeffs<Acc>(params), args.numel, static_cast<const T*>(args.grad), args.grad_stride,
          static_cast<Acc>(args.grad_scale), static_cast<const T*>(args.inputs), static_cast<const T*>(args.targets),
          static_cast<T*>(args.grad_inputs));
      DETOPS_CHECK_LAUNCH();
      return;
    }
    sigmoid_focal_loss_backward_kernel<T><<<grid_for(args.numel, kThreads), kThreads, 0, stream>>>(
        params.form, focal_coeffs<Acc>(params), args.numel, args.num_classes, static_cast<const T*>(args.grad),
        args.grad_stride, static_cast<Acc>(args.grad_scale), static_cast<const T*>(args.inputs), args.targets,
        static_cast<const T*>(args.weight), static_cast<T*>(args.grad_inputs), args.first_invalid_row);
    DETOPS_CHECK_LAUNCH();
  });
}

}  // namespace detops
