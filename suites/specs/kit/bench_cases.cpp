#include "kit/bench_cases.h"

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

harness::BenchCase roi_bench_case(const RoiBench& b, RoiBenchForward forward, RoiBenchBackward backward) {
  auto make = [b, forward, backward](DType dtype) {
    const at::Tensor x = harness::bench_randn_cuda({b.input.begin(), b.input.end()}, dtype, b.seed);
    const at::Tensor rois = harness::bench_to_cuda(harness::bench_image_rois(b.num_rois, b.input[0], b.seed + 1), dtype);
    const auto [out, index] = forward(x, rois);
    const at::Tensor grad = harness::bench_randn_cuda(out.sizes().vec(), dtype, b.seed + 2);
    harness::BenchInstance inst;
    inst.forward = [x, rois, forward] { (void)forward(x, rois); };
    inst.backward = [grad, x, rois, index = index, backward] { backward(grad, x, rois, index); };
    inst.bytes_forward = bench_bytes({x, rois, out, index});
    inst.bytes_backward = bench_bytes({grad, index, rois, x, x});
    if (b.roi_gradient) inst.bytes_backward += bench_bytes({grad, x, rois});
    return inst;
  };
  return bench_case(b.name, b.shape, b.bytes_note, make);
}

}  // namespace detops::kit
