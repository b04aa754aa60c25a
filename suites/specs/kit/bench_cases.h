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

#include "detops/harness/bench_spec.h"

namespace detops::kit {

// A benchmark case run in every dtype (kAllDTypes).
harness::BenchCase bench_case(std::string name, std::string shape, std::string bytes_note,
                              std::function<harness::BenchInstance(DType)> make);

// The bytes of the tensors together (harness::bench_bytes of each; an undefined tensor counts 0).
std::int64_t bench_bytes(std::initializer_list<at::Tensor> tensors);

// ---- The RoI ops ----

// One RoI op's benchmark: x = bench_randn_cuda(input, seed), rois = bench_image_rois(num_rois, input[0],
// seed + 1) and grad_output = bench_randn_cuda(output's shape, seed + 2), built once per dtype. Bytes:
// forward x + rois + output + index; backward grad_output + index + rois + grad_input read and written
// (atomic scatter), and with roi_gradient grad_output and x read once more and grad_rois (rois' size)
// written.
struct RoiBench {
  std::string name, shape, bytes_note;
  std::array<std::int64_t, 4> input;
  std::int64_t num_rois = 0;
  std::uint64_t seed = 0;
  bool roi_gradient = false;
};
// forward(x, rois) -> (output, index): index the int32 tensor the backward takes (argmax, channel_mapping),
// or undefined. backward(grad_output, x, rois, index).
using RoiBenchForward = std::function<std::tuple<at::Tensor, at::Tensor>(const at::Tensor& x, const at::Tensor& rois)>;
using RoiBenchBackward =
    std::function<void(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& rois, const at::Tensor& index)>;
harness::BenchCase roi_bench_case(const RoiBench& b, RoiBenchForward forward, RoiBenchBackward backward);

}  // namespace detops::kit
