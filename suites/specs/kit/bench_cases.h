#pragma once
// Benchmark-case builders (docs/benchmarks.md): the BenchCase frame every spec fills in, byte counts, and the
// whole case of a RoI op (inputs built once on the device, forward and backward calls, bytes moved).
#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <tuple>
#include <vector>

#include "detops/harness/bench_spec.h"

namespace detops::kit {

// A benchmark case run in every dtype (kAllDTypes).
harness::BenchCase bench_case(std::string name, std::string shape, std::string bytes_note,
                              std::function<harness::BenchInstance(DType)> make);

// The bytes of the tensors together (harness::bench_bytes of each; an undefined tensor counts 0).
std::int64_t bench_bytes(std::initializer_list<at::Tensor> tensors);

// ---- The RoI ops ----

// Where a RoI benchmark's rois come from (harness/bench_inputs.h).
enum class RoiBoxes {
  kImageBoxes,  // bench_image_rois(num_rois, images, seed + 1): boxes 16..640 px inside the image
  kProposals,   // bench_proposal_rois(num_rois / images, images, seed + 1): RPN proposals 4..400 px, unclipped
};

// One RoI op's benchmark: x = bench_randn_cuda(input, seed), rois from `boxes` over input[0] images and
// grad_output = bench_randn_cuda(output's shape, seed + 2), built once per dtype. Bytes: forward x + rois +
// output + index; backward grad_output + index + rois + grad_input read and written (atomic scatter), and
// with roi_gradient grad_output and x read once more and grad_rois (rois' size) written.
struct RoiBench {
  std::string name, shape, bytes_note;
  std::array<std::int64_t, 4> input;
  std::int64_t num_rois = 0;
  std::uint64_t seed = 0;
  bool roi_gradient = false;
  RoiBoxes boxes = RoiBoxes::kImageBoxes;  // kProposals: num_rois must be a multiple of input[0]
};
// forward(x, rois) -> (output, index): index the int32 tensor the backward takes (argmax, channel_mapping),
// or undefined. backward(grad_output, x, rois, index).
using RoiBenchForward = std::function<std::tuple<at::Tensor, at::Tensor>(const at::Tensor& x, const at::Tensor& rois)>;
using RoiBenchBackward =
    std::function<void(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& rois, const at::Tensor& index)>;
// l2 kWarm: the instance also gets the touches (forward: x.mul_(1), backward: grad_output.mul_(1), both
// value-exact rewrites in place on the current stream), and the case its touch_note; the caller names it.
harness::BenchCase roi_bench_case(const RoiBench& b, RoiBenchForward forward, RoiBenchBackward backward,
                                  harness::L2State l2 = harness::L2State::kCold);

// The case twice: cold (b.name, L2 flushed before each call) and warm (b.name + "_warm", shape + " warm L2",
// the map or grad_output just rewritten before each call, as a model's previous layer leaves it).
std::vector<harness::BenchCase> roi_bench_cold_and_warm(const RoiBench& b, RoiBenchForward forward,
                                                        RoiBenchBackward backward);

}  // namespace detops::kit
