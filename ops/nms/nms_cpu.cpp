// NMS on the CPU over the same per-pair IoU as the CUDA kernels (nms_kernel.cuh): a stable sort by
// decreasing score key, then the greedy pass: each box not yet suppressed is kept and suppresses every
// later box of its class whose IoU with it exceeds the threshold.
#include <algorithm>
#include <numeric>
#include <vector>

#include "common/dispatch.h"
#include "nms/nms.h"
#include "nms/nms_kernel.cuh"

namespace detops {
namespace {

// Descending by key, NaN first, ties in index order (std::stable_sort on an index range).
template <typename K>
std::vector<std::int64_t> sorted_order(const K* scores, std::int64_t n) {
  std::vector<K> keys(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) keys[i] = nms_score_key<K>(scores[i]);
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    const K ka = keys[a], kb = keys[b];
    if (ka != ka) return kb == kb;  // NaN ranks first; two NaNs are equal
    return ka > kb;
  });
  return order;
}

}  // namespace

void run_nms_cpu(const NmsParams& params, const NmsArgs& args, DType boxes_dtype) {
  const std::int64_t n = args.num_boxes;
  *args.num_kept = 0;
  if (n == 0) return;
  const std::vector<std::int64_t> order =
      args.scores_fp64 ? sorted_order(static_cast<const double*>(args.scores), n)
                       : sorted_order(static_cast<const float*>(args.scores), n);
  dispatch_floating(boxes_dtype, "nms", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const T* in = static_cast<const T*>(args.boxes);
    std::vector<NmsBox<Acc>> boxes(static_cast<std::size_t>(n));
    for (std::int64_t p = 0; p < n; ++p) boxes[p] = make_nms_box<Acc>(in + 4 * order[p]);
    const NmsThreshold<Acc> threshold = nms_make_threshold<Acc>(params.iou_threshold);
    std::vector<char> removed(static_cast<std::size_t>(n), 0);
    std::int64_t kept = 0;
    for (std::int64_t p = 0; p < n; ++p) {
      if (removed[p]) continue;
      args.keep[kept++] = order[p];
      const std::int64_t cls = args.classes != nullptr ? args.classes[order[p]] : 0;
      for (std::int64_t q = p + 1; q < n; ++q) {
        if (removed[q]) continue;
        if (args.classes != nullptr && args.classes[order[q]] != cls) continue;
        if (nms_suppresses(boxes[p], boxes[q], threshold)) removed[q] = 1;
      }
    }
    *args.num_kept = kept;
  });
}

}  // namespace detops
