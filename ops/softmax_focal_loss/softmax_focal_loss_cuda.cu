// Softmax focal loss CUDA kernels over the per-row math of softmax_focal_loss_kernel.cuh. A row is processed by a
// group of RowThreads threads: a warp (32; 8 rows per block), or the whole block (256) for rows of at least
// kSoftmaxFocalBlockRowClasses classes. Each thread runs the online softmax over its classes (c = rank,
// rank + RowThreads, ...; coalesced), then the group combines the (max, sum) pairs with group_all_reduce (a fixed
// order; every thread of the group gets the same statistics). 'none': one loss per row, groups looping over rows
// with a grid stride, 64-bit indices. 'mean' / 'sum': the chunk kernel sums the row losses of fixed chunks of
// kSoftmaxFocalChunkRows rows (each group's rows in order, then a fixed-order block sum) into acc_t<T> partial
// sums; chunked_sum_finish_kernel (one block, common/chunked_sum.cuh) adds them in a fixed order. The backward
// recomputes the row statistics and writes the row's gradient. No atomics on values: deterministic.
#include <cstdint>
#include <string>

#include "common/block_reduce.cuh"
#include "common/chunked_sum.cuh"
#include "common/int_dispatch.h"
#include "common/kernel_launch.cuh"
#include "softmax_focal_loss/softmax_focal_loss_kernel.cuh"

namespace detops {
namespace {

constexpr int kThreads = 256;
constexpr int kFinishThreads = 1024;
constexpr int kWarpRow = 32;         // RowThreads: a warp per row
constexpr int kBlockRow = kThreads;  // RowThreads: a block per row
constexpr const char* kOp = "softmax_focal_loss";

// A row group of RowThreads threads (softmax_focal_loss_kernel.cuh): a warp, or the whole block, reduced with
// group_all_reduce (common/block_reduce.cuh: a fixed order, the same value in every thread of the group).
template <int RowThreads, typename Acc>
struct RowGroup {
  int rank, size;
  Acc* shared;  // kThreads / 32 elements
  template <bool Max>
  __host__ __device__ Acc reduce(Acc v) const {
#ifdef __CUDA_ARCH__
    return group_all_reduce<Max, RowThreads>(v, shared);
#else
    return v;  // never called on the host: the CPU's group is SerialRow
#endif
  }
  __host__ __device__ Acc max(Acc v) const { return reduce<true>(v); }
  __host__ __device__ Acc sum(Acc v) const { return reduce<false>(v); }
};

// A row whose target is C or more: its group's first thread records it (FirstInvalidRow).
__device__ __forceinline__ void report_invalid(int kind, int rank, std::int64_t n, unsigned long long* first_invalid_row) {
  if (kind == 1 && rank == 0 && first_invalid_row != nullptr) atomicMin(first_invalid_row, static_cast<unsigned long long>(n));
}

// row(g, n) for the rows of this thread's group g: the groups loop over rows with a grid stride (a block's loop
// bounds are the same for all its threads when the group is the block).
template <int RowThreads, typename Acc, typename Row>
__device__ __forceinline__ void for_each_group_row(std::int64_t rows, Row&& row) {
  __shared__ Acc shared[kThreads / 32];
  const RowGroup<RowThreads, Acc> g{static_cast<int>(threadIdx.x) % RowThreads, RowThreads, shared};
  constexpr int kGroups = kThreads / RowThreads;
  for (std::int64_t n = static_cast<std::int64_t>(blockIdx.x) * kGroups + threadIdx.x / RowThreads; n < rows;
       n += static_cast<std::int64_t>(gridDim.x) * kGroups) {
    row(g, n);
  }
}

// 'none': out[n] = loss of row n.
template <typename T, int RowThreads>
__global__ void __launch_bounds__(kThreads)
    softmax_focal_loss_forward_kernel(SoftmaxFocalCoeffs<acc_t<T>> k, std::int64_t rows, std::int64_t classes,
                                      const T* __restrict__ input, const std::int64_t* __restrict__ target,
                                      const T* __restrict__ weight, T* __restrict__ out,
                                      unsigned long long* first_invalid_row) {
  for_each_group_row<RowThreads, acc_t<T>>(rows, [&](const auto& g, std::int64_t n) {
    int kind = 0;
    const acc_t<T> loss = softmax_focal_row_loss(g, k, n, classes, input, target, weight, kind);
    report_invalid(kind, g.rank, n, first_invalid_row);
    if (g.rank == 0) out[n] = from_acc<T>(loss);
  });
}

// 'mean' / 'sum': partials[chunk] = the sum of the chunk's row losses. Group j takes rows j, j + groups, ... of the
// chunk and its first thread adds their losses in order; the block then sums those values (block_sum).
template <typename T, int RowThreads>
__global__ void __launch_bounds__(kThreads)
    softmax_focal_loss_chunk_kernel(SoftmaxFocalCoeffs<acc_t<T>> k, std::int64_t rows, std::int64_t classes,
                                    const T* __restrict__ input, const std::int64_t* __restrict__ target,
                                    const T* __restrict__ weight, acc_t<T>* __restrict__ partials,
                                    unsigned long long* first_invalid_row) {
  using Acc = acc_t<T>;
  __shared__ Acc shared[kThreads / 32];
  const RowGroup<RowThreads, Acc> g{static_cast<int>(threadIdx.x) % RowThreads, RowThreads, shared};
  constexpr int kGroups = kThreads / RowThreads;
  const std::int64_t chunks = softmax_focal_loss_chunk_count(rows);
  // The chunk loop's bounds depend only on blockIdx / gridDim, so every thread reaches block_sum's barriers.
  for (std::int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    const std::int64_t first = chunk * kSoftmaxFocalChunkRows;
    const std::int64_t last = first + kSoftmaxFocalChunkRows < rows ? first + kSoftmaxFocalChunkRows : rows;
    Acc sum = Acc(0);
    for (std::int64_t n = first + threadIdx.x / RowThreads; n < last; n += kGroups) {
      int kind = 0;
      sum += softmax_focal_row_loss(g, k, n, classes, input, target, weight, kind);
      report_invalid(kind, g.rank, n, first_invalid_row);
    }
    const Acc total = block_sum<Acc, kThreads>(g.rank == 0 ? sum : Acc(0), shared);
    if (threadIdx.x == 0) partials[chunk] = total;
  }
}

// grad_input of row n: grad[n * grad_stride] * grad_scale * d (weighted loss_n) / dx; zeros for ignored and
// invalid rows.
template <typename T, int RowThreads>
__global__ void __launch_bounds__(kThreads)
    softmax_focal_loss_backward_kernel(SoftmaxFocalCoeffs<acc_t<T>> k, std::int64_t rows, std::int64_t classes,
                                       const T* __restrict__ grad, std::int64_t grad_stride, acc_t<T> grad_scale,
                                       const T* __restrict__ input, const std::int64_t* __restrict__ target,
                                       const T* __restrict__ weight, T* __restrict__ grad_input,
                                       unsigned long long* first_invalid_row) {
  for_each_group_row<RowThreads, acc_t<T>>(rows, [&](const auto& g, std::int64_t n) {
    int kind = 0;
    softmax_focal_row_grad(g, k, n, classes, to_acc<acc_t<T>>(grad[n * grad_stride]) * grad_scale, input, target,
                           weight, grad_input, kind);
    report_invalid(kind, g.rank, n, first_invalid_row);
  });
}

const bool kRegistered = for_each_floating_type([](auto tag, const char* type) {
  using T = typename decltype(tag)::type;
  for_each_int<kWarpRow, kBlockRow>([&](auto group) {
    constexpr int R = decltype(group)::value;
    const std::string args = std::string(type) + ", " + std::to_string(R);
    register_instantiation(kOp, "softmax_focal_loss_forward_kernel", args, &softmax_focal_loss_forward_kernel<T, R>);
    register_instantiation(kOp, "softmax_focal_loss_chunk_kernel", args, &softmax_focal_loss_chunk_kernel<T, R>);
    register_instantiation(kOp, "softmax_focal_loss_backward_kernel", args, &softmax_focal_loss_backward_kernel<T, R>);
  });
  register_instantiation(kOp, "chunked_sum_finish_kernel", std::string(type) + ", " + std::to_string(kFinishThreads),
                         &chunked_sum_finish_kernel<T, kFinishThreads>);
});

// The call's coefficients in the accumulation type of T (dispatch_logit_loss).
template <typename T>
using Coeffs = SoftmaxFocalCoeffs<acc_t<T>>;

// fn(TypeTag<T>{}, k, group) for the logits' dtype T, the call's coefficients k and the kernels' row group over
// args' rows: std::integral_constant<int, kBlockRow> for rows of at least kSoftmaxFocalBlockRowClasses classes, else
// kWarpRow (kThreads / group rows per block). Nothing for no rows.
template <typename Args, typename Fn>
void dispatch_rows(const char* name, const SoftmaxFocalLossParams& params, const Args& args, DType dtype, Fn&& fn) {
  dispatch_logit_loss<Coeffs>(name, params, args.n, dtype, [&](auto tag, const auto& k) {
    dispatch_int<kBlockRow, kWarpRow>(args.classes >= kSoftmaxFocalBlockRowClasses,
                                      [&](auto group) { fn(tag, k, group); });
  });
}

}  // namespace

void launch_softmax_focal_loss_forward(const SoftmaxFocalLossParams& params, const SoftmaxFocalLossForwardArgs& args,
                                       DType dtype, cudaStream_t stream) {
  dispatch_rows("softmax_focal_loss_forward", params, args, dtype, [&](auto tag, const auto& k, auto group) {
    using T = typename decltype(tag)::type;
    if (params.reduction == SoftmaxFocalLossReduction::kNone) {
      launch_kernel(&softmax_focal_loss_forward_kernel<T, decltype(group)::value>, grid_for(args.n, kThreads / group),
                    kThreads, stream, k, args.n, args.classes, args.input, args.target, args.weight, args.out,
                    args.first_invalid_row);
      return;
    }
    const std::int64_t chunks = softmax_focal_loss_chunk_count(args.n);
    launch_kernel(&softmax_focal_loss_chunk_kernel<T, decltype(group)::value>, grid_for(chunks, 1), kThreads, stream, k,
                  args.n, args.classes, args.input, args.target, args.weight, args.partials, args.first_invalid_row);
    launch_kernel(&chunked_sum_finish_kernel<T, kFinishThreads>, 1, kFinishThreads, stream, chunks, args.partials,
                  static_cast<acc_t<T>>(args.scale), args.out);
  });
}

void launch_softmax_focal_loss_backward(const SoftmaxFocalLossParams& params, const SoftmaxFocalLossBackwardArgs& args,
                                        DType dtype, cudaStream_t stream) {
  dispatch_rows("softmax_focal_loss_backward", params, args, dtype, [&](auto tag, const auto& k, auto group) {
    using T = typename decltype(tag)::type;
    launch_kernel(&softmax_focal_loss_backward_kernel<T, decltype(group)::value>, grid_for(args.n, kThreads / group),
                  kThreads, stream, k, args.n, args.classes, args.grad.data, args.grad.stride,
                  static_cast<acc_t<T>>(args.grad.scale), args.input, args.target, args.weight, args.grad_input,
                  args.first_invalid_row);
  });
}

}  // namespace detops
