#pragma once
// Roi builders shared by the RoI ops' case lists (roi_align, roi_pool, ps_roi_*, prroi_pool): the usual
// random proposals and the layouts that broke real libraries (outside the map, inverted, zero size,
// non-finite), as fp64 tensors on the CPU. Each op's spec keeps only the layouts peculiar to it.
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <vector>

namespace detops::kit {

// The four corner columns of K rois, each [K] fp64.
struct RoiCorners {
  at::Tensor x1, y1, x2, y2;
};

// Random proposals in an img_w x img_h image: x1 ~ U(0, 0.8 img_w), x2 = x1 + 1 + U(0, 0.5 img_w), the
// same for y. `u` is the one at::rand({k, 4}) draw from gen they come from (column j for x1, y1, x2, y2),
// for layouts that reuse it.
struct RandomRois {
  RoiCorners corners;
  at::Tensor u;
};
RandomRois random_image_rois(std::int64_t k, double img_w, double img_h, at::Generator& gen);

// Every roi beyond the image: x moved by -3 img_w, and the first half also y by +4 img_h (left of it, and
// left of and below it).
void move_outside(RoiCorners& r, double img_w, double img_h);

// Partly beyond the image: x1 moved by -0.5 img_w, y2 by +0.5 img_h.
void move_partly_outside(RoiCorners& r, double img_w, double img_h);

// x2 < x1 and y2 < y1 (the corners swapped).
void invert(RoiCorners& r);

// x2 = x1 and y2 = y1.
void collapse_to_points(RoiCorners& r);

// Rois from u (see RandomRois) that contain the image and reach 0.3-0.8 of its size beyond each edge.
RoiCorners straddling_rois(const at::Tensor& u, double img_w, double img_h);

// One NaN in each corner column: x1 of roi 0, y1 of roi 1, x2 of roi 2, y2 of roi 3 (indices mod k).
void set_nan_corners(RoiCorners& r);

// Non-finite and huge corners, six kinds cycled over the rois: (-inf, 0, inf, img_h), (0, -inf, img_w, inf),
// +-1e30 around the image, all -inf, all +inf, and (2, 3, inf, 1e30).
RoiCorners infinite_rois(std::int64_t k, double img_w, double img_h);

// The rows (x1, y1, x2, y2) cycled over k rois, each value divided by `scale` (feature-map rows to image
// coordinates when scale is the spatial scale).
RoiCorners cycled_rows(std::int64_t k, const std::vector<std::array<double, 4>>& rows, double scale = 1.0);

enum class RoiBatchLayout {
  kSpread,      // roi i in image i mod batch
  kAllInFirst,  // every roi in image 0
  kFractional,  // i mod batch + 0.75, at most batch - 0.25: truncates to a valid index, as torchvision reads it
};
at::Tensor roi_batch_column(RoiBatchLayout layout, std::int64_t k, std::int64_t batch);

// [K, 5] rois (batch index, x1, y1, x2, y2).
at::Tensor stack_rois(const at::Tensor& batch_index, const RoiCorners& r);

}  // namespace detops::kit
