#pragma once
// The runs of cases the RoI ops' lists share, name for name and in the same order (each run's cases take
// consecutive seeds from the list), and the config fields every RoI op's case has. A config of these ops
// derives from RoiCaseShape and has `params` (spatial_scale, pooled_height, pooled_width first), `rois`
// (a layout enum with kOutside, kPartlyOutside and kWholeMap) and `batches` (with kAllInFirst).
#include <cstdint>
#include <initializer_list>
#include <string>

#include "kit/case_list.h"
#include "kit/feature_cases.h"

namespace detops::kit {

struct RoiCaseShape {
  std::int64_t batch = 2, channels = 3, height = 12, width = 15, num_rois = 6;
  bool noncontiguous_input = false;  // the op gets kit::w_major(input)
  bool noncontiguous_rois = false;   // the op gets kit::row_stride_10(rois)
  bool stride0_grad = false;         // grad_output from kit::stride0_grad_output
};

// The pooling ops' parameter grid: pooled p x p for each p at spatial_scale 1, 1/4, 1/8, 1/16 and 1/32, the
// n-th case on a (10 + n % 5) x (13 + n % 7) map, named grid_<p>x<p>_s<1 / scale>.
template <typename Config>
void add_pooled_scale_grid(CaseList<Config>& l, std::initializer_list<std::int64_t> pooled) {
  int n = 0;
  for (std::int64_t ps : pooled) {
    for (double scale : {1.0, 0.25, 0.125, 0.0625, 0.03125}) {
      Config cfg;
      cfg.params = {scale, ps, ps};
      cfg.height = 10 + n % 5;
      cfg.width = 13 + n % 7;
      ++n;
      l.add("grid_" + std::to_string(ps) + "x" + std::to_string(ps) + "_" + scale_name(scale), cfg);
    }
  }
}

// The pooling ops' first cases after the grid: pooled 3x5, a scale not a power of two, no rois, no
// channels, rois outside the map and partly outside it.
template <typename Config, typename Params>
void add_pooling_basic_cases(CaseList<Config>& l, const Params& box_head) {
  using Layout = decltype(Config::rois);
  Config c;
  c = {}; c.params = {0.5, 3, 5}; l.add("rectangular_pooled_3x5_scale_half", c);
  c = {}; c.params = {0.3, 2, 7}; l.add("scale_not_a_power_of_two", c);
  c = {}; c.params = box_head; c.num_rois = 0; l.add("no_rois", c);
  c = {}; c.params = box_head; c.channels = 0; l.add("zero_channels", c);
  c = {}; c.params = box_head; c.rois = Layout::kOutside; l.add("rois_outside_map", c);
  c = {}; c.params = box_head; c.rois = Layout::kPartlyOutside; l.add("rois_partly_outside_map", c);
}

// Other strides, a stride-0 grad_output, more rois than a grid dimension of 65535 blocks (1 channel, a
// 6 x 7 map, `many_rois` params), and 12 rois in the first of 4 images or spread over them.
template <typename Config, typename Params>
void add_stride_and_batch_cases(CaseList<Config>& l, const Params& box_head, const Params& mask_head,
                                const Params& many_rois) {
  using Batches = decltype(Config::batches);
  Config c;
  c = {}; c.params = box_head; c.noncontiguous_input = true; l.add("noncontiguous_input", c);
  c = {}; c.params = box_head; c.noncontiguous_rois = true; l.add("noncontiguous_rois", c);
  c = {}; c.params = box_head; c.stride0_grad = true; l.add("stride0_grad_output", c);
  c = {}; c.params = mask_head; c.stride0_grad = true; c.noncontiguous_input = true; l.add("stride0_grad_noncontiguous_input", c);
  c = {}; c.params = many_rois; c.channels = 1; c.height = 6; c.width = 7; c.num_rois = 70000;
  l.add("more_than_65535_rois", c);
  c = {}; c.params = box_head; c.batch = 4; c.num_rois = 12; c.batches = Batches::kAllInFirst; l.add("all_rois_in_first_image", c);
  c = {}; c.params = box_head; c.batch = 4; c.num_rois = 12; l.add("rois_spread_over_batch", c);
}

// The pooling ops' map-size cases: one roi over the whole map, 64 channels, and real-model scale: an FPN
// P2 level of an 800x1344 image (200x336 at 1/4) with the box head 7x7 (few channels and rois keep the CPU
// checks short), and the P5 level (25x42 at 1/32) with the mask head 14x14.
template <typename Config, typename Params>
void add_pooling_map_size_cases(CaseList<Config>& l, const Params& box_head, std::int64_t p2_channels,
                                std::int64_t p2_rois) {
  using Layout = decltype(Config::rois);
  Config c;
  c = {}; c.params = box_head; c.rois = Layout::kWholeMap; l.add("roi_covers_whole_map", c);
  c = {}; c.params = {0.25, 7, 7}; c.channels = 64; c.height = 9; c.width = 11; l.add("many_channels", c);
  c = {}; c.params = {0.25, 7, 7}; c.batch = 1; c.channels = p2_channels; c.height = 200; c.width = 336;
  c.num_rois = p2_rois; l.add("fpn_p2_box_head", c);
  c = {}; c.params = {0.03125, 14, 14}; c.batch = 2; c.channels = 2; c.height = 25; c.width = 42; c.num_rois = 16;
  l.add("fpn_p5_mask_head", c);
}

}  // namespace detops::kit
