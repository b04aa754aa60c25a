// Masked 2-D convolution on the CPU: the three products of masked_conv2d_kernel.cuh (the same operands, stores,
// k order and position chunks as the CUDA kernels) as host loops, split over the rows of each product; the
// col2im gather and the weight-gradient finish over their elements. Each result is one fixed-order sum by one
// thread, so results do not depend on the split.
#include <algorithm>

#include "common/dispatch.h"
#include "common/parallel_for.h"
#include "masked_conv2d/masked_conv2d_kernel.cuh"

namespace detops {
namespace {

// A product (masked_conv2d_kernel.cuh): its chunks in order, each C(m, n) summed in k order by one thread.
template <typename Acc, typename Product>
void gemm_cpu(const ParallelFor& parallel_for, const Product& c) {
  for (std::int64_t z = 0; z < c.chunks; ++z) {
    const std::int64_t k_begin = z * c.k_chunk, k_end = std::min(c.k_size, k_begin + c.k_chunk);
    parallel_for_each(parallel_for, c.m_size, [&](std::int64_t m) {
      const auto a_row = c.a.row(m);
      for (std::int64_t n = 0; n < c.n_size; ++n) {
        const auto b_row = c.b.row(n);
        Acc acc = Acc(0), av[4], bv[4];
        for (std::int64_t k = k_begin; k < k_end; k += 4) {
          c.a.load4(a_row, k, k_end, av);
          c.b.load4(b_row, k, k_end, bv);
          for (int q = 0; q < 4; ++q) acc += av[q] * bv[q];
        }
        c.store(m, n, static_cast<unsigned>(z), acc);
      }
    });
  }
}

}  // namespace

void run_masked_conv2d_forward_cpu(const MaskedConv2dParams& params, const MaskedConv2dForwardArgs& args, DType dtype,
                                   const ParallelFor& parallel_for) {
  dispatch_floating(dtype, "masked_conv2d_forward_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    gemm_cpu<acc_t<T>>(parallel_for, masked_conv2d_forward_product<T>(params, args));
  });
}

void run_masked_conv2d_backward_input_cpu(const MaskedConv2dParams& params, const MaskedConv2dBackwardInputArgs& args,
                                          DType dtype, const ParallelFor& parallel_for) {
  dispatch_floating(dtype, "masked_conv2d_backward_input_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const MaskedConv2dShape& s = args.s;
    gemm_cpu<acc_t<T>>(parallel_for, masked_conv2d_dcol_product<T>(params, args));
    parallel_for_each(parallel_for, s.batch * s.in_channels * s.height * s.width, [&](std::int64_t e) {
      static_cast<T*>(args.grad_features)[e] = from_acc<T>(masked_conv2d_col2im<acc_t<T>>(
          params, s, static_cast<const acc_t<T>*>(args.dcol), args.rows, args.sel.count, e));
    });
  });
}

void run_masked_conv2d_backward_weight_cpu(const MaskedConv2dParams& params,
                                           const MaskedConv2dBackwardWeightArgs& args, DType dtype,
                                           const ParallelFor& parallel_for) {
  dispatch_floating(dtype, "masked_conv2d_backward_weight_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto product = masked_conv2d_weight_product<T>(params, args);
    gemm_cpu<acc_t<T>>(parallel_for, product);
    parallel_for_each(parallel_for, product.m_size * product.n_size, [&](std::int64_t e) {
      masked_conv2d_weight_finish<T>(args.s, product.chunks, static_cast<const acc_t<T>*>(args.partials), e,
                                     static_cast<T*>(args.grad_weight), static_cast<T*>(args.grad_bias));
    });
  });
}

}  // namespace detops
