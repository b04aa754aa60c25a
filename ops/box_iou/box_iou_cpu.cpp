// Box IoU family on the CPU: the same per-element math as the CUDA kernels, in host loops.
#include <vector>

#include "box_iou/box_iou_kernel.cuh"
#include "common/dispatch.h"

namespace detops {
namespace {

// fn(variant tag, dtype tag) for the op's variant and dtype; nothing on empty work (rows == 0).
template <typename Fn>
void dispatch_box_iou_cpu(const char* what, BoxIouVariant variant, DType dtype, std::int64_t rows, Fn&& fn) {
  if (rows == 0) return;
  dispatch_box_iou_variant(variant, what, [&](auto vtag) {
    dispatch_floating(dtype, what, [&](auto tag) { fn(vtag, tag); });
  });
}

}  // namespace

void run_box_iou_pairwise_cpu(const BoxIouParams& params, const BoxIouPairwiseArgs& args, DType dtype,
                              const ParallelFor& parallel_for) {
  dispatch_box_iou_cpu("box_iou_pairwise_cpu", params.variant, dtype, args.batch * args.n * args.m,
                       [&](auto vtag, auto tag) {
    constexpr BoxIouVariant V = decltype(vtag)::value;
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const Acc eps = static_cast<Acc>(params.eps);
    const bool defined = params.defined_degenerate;
    std::vector<BoxGeometry<Acc>> cols(static_cast<size_t>(args.m));
    for (std::int64_t b = 0; b < args.batch; ++b) {
      const T* boxes1 = static_cast<const T*>(args.boxes1) + b * args.n * 4;
      const T* boxes2 = static_cast<const T*>(args.boxes2) + b * args.m * 4;
      Acc* out = static_cast<Acc*>(args.out) + b * args.n * args.m;
      for (std::int64_t j = 0; j < args.m; ++j) cols[static_cast<size_t>(j)] = box_geometry<V, T, Acc>(boxes2 + j * 4, defined);
      parallel_for_each(parallel_for, args.n, [&](std::int64_t i) {
        const BoxGeometry<Acc> row = box_geometry<V, T, Acc>(boxes1 + i * 4, defined);
        Acc* out_row = out + i * args.m;
        for (std::int64_t j = 0; j < args.m; ++j) {
          out_row[j] = box_iou_pairwise_value<V, Acc>(row, cols[static_cast<size_t>(j)], eps, defined);
        }
      });
    }
  });
}

void run_box_iou_pairwise_backward_cpu(const BoxIouParams& params, const BoxIouPairwiseBackwardArgs& args, DType dtype,
                                       const ParallelFor& parallel_for) {
  const std::int64_t batch = args.batch, n = args.n, m = args.m;
  dispatch_box_iou_cpu("box_iou_pairwise_backward_cpu", params.variant, dtype, batch * n * m, [&](auto vtag, auto tag) {
    constexpr BoxIouVariant V = decltype(vtag)::value;
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const Acc eps = static_cast<Acc>(params.eps);
    const bool defined = params.defined_degenerate;
    std::vector<BoxGeometry<Acc>> rows(static_cast<size_t>(batch * n)), cols(static_cast<size_t>(batch * m));
    parallel_for_each(parallel_for, batch * n, [&](std::int64_t i) {
      rows[static_cast<size_t>(i)] = box_geometry<V, T, Acc>(static_cast<const T*>(args.boxes1) + i * 4, defined);
    });
    parallel_for_each(parallel_for, batch * m, [&](std::int64_t j) {
      cols[static_cast<size_t>(j)] = box_geometry<V, T, Acc>(static_cast<const T*>(args.boxes2) + j * 4, defined);
    });
    const Acc* grad = static_cast<const Acc*>(args.grad);
    const std::int64_t* s = args.grad_strides;
    // The gradient of each box of one side (boxes1: count n, its pairs along a row) as the in-order sum over
    // the other side's `inner` boxes.
    const auto sweep = [&](bool first, std::int64_t count, std::int64_t inner, void* out) {
      parallel_for_each(parallel_for, batch * count, [&](std::int64_t o) {
        const std::int64_t b = o / count, x = o % count;
        Acc acc[4] = {Acc(0), Acc(0), Acc(0), Acc(0)};
        for (std::int64_t y = 0; y < inner; ++y) {
          const std::int64_t i = first ? x : y, j = first ? y : x;
          const BoxPairGrad<Acc> d =
              box_iou_pairwise_grad<V, Acc>(rows[static_cast<size_t>(b * n + i)], cols[static_cast<size_t>(b * m + j)],
                                            eps, grad[b * s[0] + i * s[1] + j * s[2]], defined);
          for (int c = 0; c < 4; ++c) acc[c] += first ? d.a[c] : d.b[c];
        }
        for (int c = 0; c < 4; ++c) static_cast<T*>(out)[o * 4 + c] = from_acc<T>(acc[c]);
      });
    };
    sweep(true, n, m, args.grad_boxes1);
    sweep(false, m, n, args.grad_boxes2);
  });
}

void run_box_iou_loss_forward_cpu(const BoxIouLossParams& params, const BoxIouLossForwardArgs& args, DType dtype,
                                  const ParallelFor& parallel_for) {
  dispatch_box_iou_cpu("box_iou_loss_forward_cpu", params.variant, dtype, args.n, [&](auto vtag, auto tag) {
    constexpr BoxIouVariant V = decltype(vtag)::value;
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const T* b1 = static_cast<const T*>(args.boxes1);
    const T* b2 = static_cast<const T*>(args.boxes2);
    const T* a1 = static_cast<const T*>(args.alpha_boxes1);
    const T* a2 = static_cast<const T*>(args.alpha_boxes2);
    Acc* loss = static_cast<Acc*>(args.loss);
    parallel_for_each(parallel_for, args.n, [&](std::int64_t i) {
      const BoxCoords<Acc> a = load_box<T, Acc>(b1 + i * 4);
      const BoxCoords<Acc> b = load_box<T, Acc>(b2 + i * 4);
      const BoxCoords<Acc> a0 = a1 != nullptr ? load_box<T, Acc>(a1 + i * 4) : a;
      const BoxCoords<Acc> b0 = a2 != nullptr ? load_box<T, Acc>(a2 + i * 4) : b;
      loss[i] = box_iou_loss_value<V, Acc>(params, a, b, a0, b0, params.defined_degenerate);
    });
  });
}

void run_box_iou_loss_backward_cpu(const BoxIouLossParams& params, const BoxIouLossBackwardArgs& args, DType dtype,
                                   const ParallelFor& parallel_for) {
  dispatch_box_iou_cpu("box_iou_loss_backward_cpu", params.variant, dtype, args.n, [&](auto vtag, auto tag) {
    constexpr BoxIouVariant V = decltype(vtag)::value;
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const Acc* grad = static_cast<const Acc*>(args.grad.data);
    T* g1 = static_cast<T*>(args.grad_boxes1);
    T* g2 = static_cast<T*>(args.grad_boxes2);
    const Acc scale = static_cast<Acc>(args.grad.scale);
    parallel_for_each(parallel_for, args.n, [&](std::int64_t i) {
      const BoxPairGrad<Acc> d = box_iou_loss_grad<V, Acc>(params, load_box<T, Acc>(static_cast<const T*>(args.boxes1) + i * 4),
                                                           load_box<T, Acc>(static_cast<const T*>(args.boxes2) + i * 4),
                                                           grad[i * args.grad.stride] * scale,
                                                           params.defined_degenerate);
      for (int k = 0; k < 4; ++k) {
        g1[i * 4 + k] = from_acc<T>(d.a[k]);
        g2[i * 4 + k] = from_acc<T>(d.b[k]);
      }
    });
  });
}

}  // namespace detops
