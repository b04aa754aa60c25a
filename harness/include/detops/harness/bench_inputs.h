#pragma once
// Seeded, realistic inputs for the op specs' benchmark cases (BenchCase::make), built on CUDA device 0.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "detops/core/dtype.h"

namespace detops::harness {

// The input image the detection shapes come from (Faster/Mask R-CNN R50-FPN, OPS.md).
inline constexpr double kBenchImageHeight = 800.0;
inline constexpr double kBenchImageWidth = 1344.0;

// Boxes [n, 4] (x1, y1, x2, y2), fp64 on the CPU: sqrt(area) log-uniform in [16, 640] px, aspect ratio
// h/w log-uniform in [1/3, 3], centers uniform in the image, clipped to it, at least 1 px wide and high.
at::Tensor bench_image_boxes(std::int64_t n, std::uint64_t seed);

// RoIs [k, 5] (batch index, x1, y1, x2, y2), fp64 on the CPU: boxes as above, k/images per image (the
// remainder on the first ones), grouped by image as torchvision's MultiScaleRoIAlign passes them.
at::Tensor bench_image_rois(std::int64_t k, std::int64_t images, std::uint64_t seed);

// RPN-like proposals [per_image * images, 5] (batch index, x1, y1, x2, y2), fp64 on the CPU, grouped by image
// (per_image rows of image 0, then of image 1, ...), as a Faster R-CNN's RPN hands them to the box head:
// sqrt(area) log-uniform in [4, 400] px, aspect ratio h/w log-uniform in [1/3, 3], centers uniform in the
// 800x1344 image, NOT clipped to it, so boxes near the border cross it (negative coordinates, or beyond
// 1344 / 800, by at most half a box: |coordinate| < 1344 + 400 * sqrt(3) / 2 < 1691). Always x1 < x2 and
// y1 < y2. Throws std::invalid_argument unless per_image >= 0 and images >= 1.
at::Tensor bench_proposal_rois(std::int64_t per_image, std::int64_t images, std::uint64_t seed);

// (targets, predictions) [n, 4] each, fp64 on the CPU: predictions are the targets with each edge moved
// by N(0, (0.1 * size)^2), kept at least 1 px wide and high (a regression head's outputs near its targets).
std::pair<at::Tensor, at::Tensor> bench_box_pairs(std::int64_t n, std::uint64_t seed);

// N(0, 1) values of `shape`, generated in fp32 on the CPU from `seed`, on CUDA in `dtype` (a new tensor: the
// caller may change it).
at::Tensor bench_randn_cuda(const std::vector<std::int64_t>& shape, DType dtype, std::uint64_t seed);

// The fp32 CPU draw behind bench_randn_cuda: at::randn(shape) from a CPU generator seeded with `seed`. Drawn
// once per (shape, seed) and kept (the most recently used, up to kBenchDrawCacheBytes in all), because every
// dtype of a case, and a case's warm twin, draw the same values again, and a [2, 256, 200, 336] map takes
// ~0.3 s of host time to draw. The same values as a fresh draw; shared, so read-only for the caller.
inline constexpr std::int64_t kBenchDrawCacheBytes = std::int64_t{1} << 30;
at::Tensor bench_randn_master(const std::vector<std::int64_t>& shape, std::uint64_t seed);

// `master` (fp64, CPU) on CUDA in `dtype`.
at::Tensor bench_to_cuda(const at::Tensor& master, DType dtype);

// numel * element size.
std::int64_t bench_bytes(const at::Tensor& t);

}  // namespace detops::harness
