// Sigmoid focal loss CUDA kernels. 'none' and the backward: one thread per element, grid-stride, 64-bit
// indices. 'mean' / 'sum': the chunk kernel reduces fixed chunks of kFocalLossChunk elements (one chunk per
// block iteration, a fixed shared-memory tree) into acc_t<T> partial sums; the finish kernel (one block)
// adds the partial sums in a fixed order and writes the scaled total. No atomics on values: deterministic.
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

// Block-wide sum of one value per thread through shared memory, in a fixed tree order; the result is
// valid in thread 0. Every thread of the block must call it.
template <typename Acc, int Threads>
__device__ __forceinline__ Acc block_sum(Acc v, Acc* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
#pragma unroll
  for (int s = Threads / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  const Acc total = shared[0];
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

// register_kernel copies the names; both forms run the same kernels.
template <typename T>
void register_type_kernels(const char* type_name) {
  const std::string args = std::string("<") + type_name + ">";
  for (const FocalLossForm form : {FocalLossForm::kTorchvision, FocalLossForm::kMmcv}) {
    const char* op = sigmoid_focal_loss_op_name(form);
    register_kernel(op, ("sigmoid_focal_loss_forward_kernel" + args).c_str(),
                    reinterpret_cast<const void*>(&sigmoid_focal_loss_forward_kernel<T>));
    register_kernel(op, ("sigmoid_focal_loss_chunk_kernel" + args).c_str(),
                    reinterpret_cast<const void*>(&sigmoid_focal_loss_chunk_kernel<T>));
    register_kernel(op, ("sigmoid_focal_loss_finish_kernel" + args).c_str(),
                    reinterpret_cast<const void*>(&sigmoid_focal_loss_finish_kernel<T>));
    register_kernel(op, ("sigmoid_focal_loss_backward_kernel" + args).c_str(),
                    reinterpret_cast<const void*>(&sigmoid_focal_loss_backward_kernel<T>));
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
    if (params.reduction == FocalLossReduction::kNone) {
      sigmoid_focal_loss_forward_kernel<T><<<grid_for(args.numel, kThreads), kThreads, 0, stream>>>(
          params.form, k, args.numel, args.num_classes, inputs, args.targets, weight, static_cast<T*>(args.out),
          args.first_invalid_row);
      DETOPS_CHECK_LAUNCH();
      return;
    }
    const std::int64_t chunks = sigmoid_focal_loss_chunk_count(args.numel);
    Acc* partials = static_cast<Acc*>(args.partials);
    sigmoid_focal_loss_chunk_kernel<T><<<grid_for(chunks, 1), kThreads, 0, stream>>>(
        params.form, k, args.numel, args.num_classes, inputs, args.targets, weight, partials, args.first_invalid_row);
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
    sigmoid_focal_loss_backward_kernel<T><<<grid_for(args.numel, kThreads), kThreads, 0, stream>>>(
        params.form, focal_coeffs<Acc>(params), args.numel, args.num_classes, static_cast<const T*>(args.grad),
        args.grad_stride, static_cast<Acc>(args.grad_scale), static_cast<const T*>(args.inputs), args.targets,
        static_cast<const T*>(args.weight), static_cast<T*>(args.grad_inputs), args.first_invalid_row);
    DETOPS_CHECK_LAUNCH();
  });
}

}  // namespace detops
