#include "kit/bench_cases.h"

#include <c10/util/Exception.h>

#include <utility>

#include "detops/harness/bench_inputs.h"

namespace detops::kit {

harness::BenchCase bench_case(std::string name, std::string shape, std::string bytes_note,
                              std::function<harness::BenchInstance(DType)> make) {
  harness::BenchCase bc;
  bc.name = std::move(name);
  bc.shape = std::move(shape);
  bc.bytes_note = std::move(bytes_note);
  bc.dtypes = {std::begin(kAllDTypes), std::end(kAllDTypes)};
  bc.make = std::move(make);
  return bc;
}

std::int64_t bench_bytes(std::initializer_list<at::Tensor> tensors) {
  std::int64_t bytes = 0;
  for (const at::Tensor& t : tensors) bytes += t.defined() ? harness::bench_bytes(t) : 0;
  return bytes;
}

namespace {

// What the warm twins' touches do, as recorded with every warm entry (docs/benchmarks.md).
const char* const kRoiTouchNote =
    "x.mul_(1) before fwd (the feature map rewritten in place, values unchanged, as the FPN layer that produced it "
    "leaves it), grad_output.mul_(1) before bwd (as the head's backward leaves it); what fits of it stays in L2";

at::Tensor roi_bench_rois(const RoiBench& b) {
  const std::int64_t images = b.input[0];
  if (b.boxes == RoiBoxes::kImageBoxes) return harness::bench_image_rois(b.num_rois, images, b.seed + 1);
  TORCH_CHECK(images > 0 && b.num_rois % images == 0, "benchmark case ", b.name, ": ", b.num_rois,
              " proposals do not split evenly over ", images, " images");
  return harness::bench_proposal_rois(b.num_rois / images, images, b.seed + 1);
}

}  // namespace

harness::BenchCase roi_bench_case(const RoiBench& b, RoiBenchForward forward, RoiBenchBackward backward,
                                  harness::L2State l2) {
  const bool warm = l2 == harness::L2State::kWarm;
  auto make = [b, forward, backward, warm](DType dtype) {
    const at::Tensor x = harness::bench_randn_cuda({b.input.begin(), b.input.end()}, dtype, b.seed);
    const at::Tensor rois = harness::bench_to_cuda(roi_bench_rois(b), dtype);
    const auto [out, index] = forward(x, rois);
    const at::Tensor grad = harness::bench_randn_cuda(out.sizes().vec(), dtype, b.seed + 2);
    harness::BenchInstance inst;
    inst.forward = [x, rois, forward] { (void)forward(x, rois); };
    inst.backward = [grad, x, rois, index = index, backward] { backward(grad, x, rois, index); };
    inst.bytes_forward = bench_bytes({x, rois, out, index});
    inst.bytes_backward = bench_bytes({grad, index, rois, x, x});
    if (b.roi_gradient) inst.bytes_backward += bench_bytes({grad, x, rois});
    if (warm) {
      inst.touch_forward = [x] { x.mul_(1); };
      inst.touch_backward = [grad] { grad.mul_(1); };
    }
    return inst;
  };
  harness::BenchCase bc = bench_case(b.name, b.shape, b.bytes_note, make);
  bc.l2 = l2;
  if (warm) bc.touch_note = kRoiTouchNote;
  return bc;
}

std::vector<harness::BenchCase> roi_bench_cold_and_warm(const RoiBench& b, RoiBenchForward forward,
                                                        RoiBenchBackward backward) {
  RoiBench w = b;
  w.name += "_warm";
  w.shape += " warm L2";
  return {roi_bench_case(b, forward, backward), roi_bench_case(w, forward, backward, harness::L2State::kWarm)};
}

}  // namespace detops::kit
