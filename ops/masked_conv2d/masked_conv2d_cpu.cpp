// Masked 2-D convolution on the CPU: the three products of masked_conv2d_kernel.cuh as host loops, split over
// the rows of each product; the col2im gather and the weight-gradient finish over their elements. Each result
// is one fixed-order sum by one thread, so results do not depend on the split. The buffers (the map of rows,
// d(im2col), the weight gradient's partial sums) are this file's own.
#include <algorithm>
#include <vector>

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
    const std::int64_t count = args.sel.count;
    std::vector<std::int32_t> rows(static_cast<std::size_t>(s.batch * s.out_height * s.out_width), -1);
    for (std::int64_t r = 0; r < count; ++r) {
      rows[static_cast<std::size_t>(masked_conv2d_position_index(s, args.sel.positions, r))] = static_cast<std::int32_t>(r);
    }
    std::vector<acc_t<T>> dcol(static_cast<std::size_t>(s.taps() * count));
    gemm_cpu<acc_t<T>>(parallel_for, masked_conv2d_dcol_product<T>(params, args, dcol.data()));
    parallel_for_each(parallel_for, s.batch * s.in_channels * s.height * s.width, [&](std::int64_t e) {
      static_cast<T*>(args.grad_features)[e] =
          from_acc<T>(masked_conv2d_col2im<acc_t<T>>(params, s, dcol.data(), rows.data(), count, e));
    });
  });
}

void run_masked_conv2d_backward_weight_cpu(const MaskedConv2dParams& params,
                                           const MaskedConv2dBackwardWeightArgs& args, DType dtype,
                                           const ParallelFor& parallel_for) {
  dispatch_floating(dtype, "masked_conv2d_backward_weight_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::vector<acc_t<T>> partials(static_cast<std::size_t>(masked_conv2d_weight_partial_elements(args.s, args.sel.count)));
    const auto product = masked_conv2d_weight_product<T>(params, args, partials.data());
    gemm_cpu<acc_t<T>>(parallel_for, product);
    parallel_for_each(parallel_for, product.m_size * product.n_size, [&](std::int64_t e) {
      masked_conv2d_weight_finish<T>(args.s, product.chunks, partials.data(), e, static_cast<T*>(args.grad_weight),
                                     static_cast<T*>(args.grad_bias));
    });
  });
}

}  // namespace detops
