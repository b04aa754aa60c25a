#pragma once
// The RoI family's CPU skeletons: the early return on empty work, the dtype dispatch, the typed views of
// the args and the loops over rois (and channels), around the op's per-roi lambda. No libtorch.
//
//   roi_forward_cpu(what, args, per_roi, dtype, parallel_for, [&](const auto& f, std::int64_t k) {...})
//       body for every roi k, split over rois; f is a RoiCpuForward<T> (per_roi: output elements a roi has)
//   roi_backward_cpu(what, args, per_roi, dtype, [&](const auto& b, std::int64_t k) {...})
//       body for every roi k, serially (a scatter: deterministic); b is a RoiCpuBackward<T>
//   roi_backward_cpu_by_channel(what, args, per_roi, dtype, parallel_for, [&](const auto& b, c, k) {...})
//       body for every (channel c, roi k), split over channels: each channel's planes are summed in the
//       fixed roi order, so the scatter is deterministic
// In the body, `using T = roi_value_t<decltype(f)>;` names the dtype.
#include <cstdint>
#include <type_traits>

#include "common/dispatch.h"
#include "common/numeric.h"
#include "common/roi_args.h"

namespace detops {

// What the views of one dtype T share: the shape and the rois.
template <typename T_>
struct RoiCpuRois {
  using T = T_;
  using Acc = acc_t<T>;
  RoiShape s;
  const T* rois;

  const T* roi(std::int64_t k) const { return rois + k * 5; }
  std::int64_t plane_offset(std::int64_t batch, std::int64_t c) const {
    return (batch * s.channels + c) * s.height * s.width;
  }
};

// RoiForwardArgs for one dtype T.
template <typename T>
struct RoiCpuForward : RoiCpuRois<T> {
  const T* input;
  T* output;
  std::int64_t per_roi;  // output elements of one roi

  T* out(std::int64_t k) const { return output + k * per_roi; }
  // Channel c of image `batch`.
  const T* plane(std::int64_t batch, std::int64_t c) const { return input + this->plane_offset(batch, c); }
  // The output of an invalid roi: zeros.
  void zero(std::int64_t k) const {
    T* o = out(k);
    for (std::int64_t i = 0; i < per_roi; ++i) o[i] = from_acc<T>(acc_t<T>(0));
  }
};

// RoiBackwardArgs for one dtype T; grad_input_acc laid out [batch, channels, height, width].
template <typename T>
struct RoiCpuBackward : RoiCpuRois<T> {
  const T* grad_output;
  RoiGradStrides go;
  acc_t<T>* grad_input;

  // grad_output[k, c, ph, pw] (any strides) in the accumulation type.
  acc_t<T> grad(std::int64_t k, std::int64_t c, std::int64_t ph, std::int64_t pw) const {
    return to_acc<acc_t<T>>(grad_output[go.offset(k, c, ph, pw)]);
  }
  acc_t<T>* plane(std::int64_t batch, std::int64_t c) const { return grad_input + this->plane_offset(batch, c); }
};

template <typename View>
using roi_value_t = typename std::decay_t<View>::T;

template <typename T>
RoiCpuBackward<T> roi_cpu_backward_view(const RoiBackwardArgs& args) {
  return {{args.shape, static_cast<const T*>(args.rois)}, static_cast<const T*>(args.grad_output),
          roi_grad_strides(args), static_cast<acc_t<T>*>(args.grad_input_acc)};
}

// fn(TypeTag<T>) for the dtype; nothing on empty work (no rois, or no elements per roi).
template <typename Fn>
void roi_cpu_dispatch(const char* what, const RoiShape& s, std::int64_t per_roi, DType dtype, Fn&& fn) {
  if (s.num_rois * per_roi == 0) return;
  dispatch_floating(dtype, what, fn);
}

template <typename Body>
void roi_forward_cpu(const char* what, const RoiForwardArgs& args, std::int64_t per_roi, DType dtype,
                     const ParallelFor& parallel_for, Body&& body) {
  roi_cpu_dispatch(what, args.shape, per_roi, dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const RoiCpuForward<T> f{{args.shape, static_cast<const T*>(args.rois)}, static_cast<const T*>(args.input),
                             static_cast<T*>(args.output), per_roi};
    parallel_for_each(parallel_for, args.shape.num_rois, [&](std::int64_t k) { body(f, k); });
  });
}

template <typename Body>
void roi_backward_cpu(const char* what, const RoiBackwardArgs& args, std::int64_t per_roi, DType dtype, Body&& body) {
  roi_cpu_dispatch(what, args.shape, per_roi, dtype, [&](auto tag) {
    const auto b = roi_cpu_backward_view<typename decltype(tag)::type>(args);
    for (std::int64_t k = 0; k < args.shape.num_rois; ++k) body(b, k);
  });
}

template <typename Body>
void roi_backward_cpu_by_channel(const char* what, const RoiBackwardArgs& args, std::int64_t per_roi, DType dtype,
                                 const ParallelFor& parallel_for, Body&& body) {
  roi_cpu_dispatch(what, args.shape, per_roi, dtype, [&](auto tag) {
    const auto b = roi_cpu_backward_view<typename decltype(tag)::type>(args);
    parallel_for_each(parallel_for, args.shape.channels, [&](std::int64_t c) {
      for (std::int64_t k = 0; k < args.shape.num_rois; ++k) body(b, c, k);
    });
  });
}

}  // namespace detops
