// Deformable convolution on the CPU: per sample, the columns in acc_t<T> (the same per-element math as the CUDA
// im2col, deform_conv2d_kernel.cuh), then each output, column gradient and weight gradient element one
// thread's sum in a fixed order; the input gradient is scattered per channel plane (a plane's entries come from
// its own column rows only), so no two threads write one element. Deterministic for any split. The long
// reductions (an output over C_in/groups kh kw columns, a weight gradient over batch x positions) are summed
// in double whatever T is: the CPU path is the accurate fallback, and a float sum over 10^5 positions loses
// an order of magnitude against torchvision on a real layer (weight gradient error 9e-4 against 9e-5).
#include <algorithm>
#include <vector>

#include "common/dispatch.h"
#include "common/parallel_for.h"
#include "deform_conv2d/deform_conv2d_kernel.cuh"

namespace detops {
namespace {

using P = DeformConv2dParams;
using S = DeformConv2dShape;
using Index = std::int64_t;

template <typename T>
const T* ptr(const void* p) {
  return static_cast<const T*>(p);
}

// The columns of sample b ([C_in kh kw, P], acc_t<T>) into cols.
template <typename T, typename Acc>
void columns_of(const P& p, const S& s, Index b, const T* input, const T* offset, const T* mask,
                const ParallelFor& parallel_for, std::vector<Acc>& cols) {
  const DeformGeometry<Index> geo(p, s);
  cols.assign(static_cast<std::size_t>(s.column_rows() * s.positions()), Acc(0));
  parallel_for_each(parallel_for, s.in_channels, [&](Index c) {
    const Index g = c / geo.channels_per_offset_group;
    const T* plane = input + (b * s.in_channels + c) * s.height * s.width;
    for (Index k = 0; k < geo.taps; ++k) {
      for (Index pos = 0; pos < geo.positions; ++pos) {
        const T* off = offset + geo.offset_base(b, g) + 2 * k * geo.positions + pos;
        const Acc y = geo.template base_y<Acc>(pos, k) + to_acc<Acc>(off[0]);
        const Acc x = geo.template base_x<Acc>(pos, k) + to_acc<Acc>(off[geo.positions]);
        Acc v = deform_sample<Acc>(plane, geo.height, geo.width, y, x);
        if (mask != nullptr) v *= to_acc<Acc>(mask[geo.mask_base(b, g) + k * geo.positions + pos]);
        cols[static_cast<std::size_t>((c * geo.taps + k) * geo.positions + pos)] = v;
      }
    }
  });
}

}  // namespace

void run_deform_conv2d_forward_cpu(const P& p, const DeformConv2dForwardArgs& a, DType dtype,
                                   const ParallelFor& parallel_for) {
  dispatch_floating(dtype, "deform_conv2d_forward_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const S& s = a.s;
    const Index pos_n = s.positions(), kg = s.column_rows() / p.groups, og = s.out_channels / p.groups;
    const T* weight = ptr<T>(a.weight);
    const T* bias = ptr<T>(a.bias);
    T* out = static_cast<T*>(a.out);
    std::vector<Acc> cols;
    for (Index b = 0; b < s.batch; ++b) {
      columns_of<T, Acc>(p, s, b, ptr<T>(a.input), ptr<T>(a.offset), p.use_mask ? ptr<T>(a.mask) : nullptr,
                         parallel_for, cols);
      parallel_for_each(parallel_for, s.out_channels, [&](Index o) {
        const Index g = o / og;
        const T* w = weight + o * kg;
        std::vector<double> row(static_cast<std::size_t>(pos_n), bias == nullptr ? 0.0 : double(to_acc<Acc>(bias[o])));
        for (Index k = 0; k < kg; ++k) {
          const double wk = to_acc<Acc>(w[k]);
          const Acc* col = cols.data() + (g * kg + k) * pos_n;
          for (Index q = 0; q < pos_n; ++q) row[static_cast<std::size_t>(q)] += wk * double(col[q]);
        }
        T* dst = out + (b * s.out_channels + o) * pos_n;
        for (Index q = 0; q < pos_n; ++q) dst[q] = from_acc<T>(static_cast<Acc>(row[static_cast<std::size_t>(q)]));
      });
    }
  });
}

void run_deform_conv2d_backward_cpu(const P& p, const DeformConv2dBackwardArgs& a, DType dtype,
                                    const ParallelFor& parallel_for) {
  dispatch_floating(dtype, "deform_conv2d_backward_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const S& s = a.s;
    const DeformGeometry<Index> geo(p, s);
    const Index pos_n = s.positions(), kg = s.column_rows() / p.groups, og = s.out_channels / p.groups;
    const Index plane = s.height * s.width;
    const T *grad = ptr<T>(a.grad), *input = ptr<T>(a.input), *weight = ptr<T>(a.weight), *offset = ptr<T>(a.offset);
    const T* mask = p.use_mask ? ptr<T>(a.mask) : nullptr;
    std::vector<Acc> cols, gcols(static_cast<std::size_t>(s.column_rows() * pos_n));
    std::vector<double> gweight(static_cast<std::size_t>(s.out_channels * kg), 0.0);
    std::vector<double> gbias(static_cast<std::size_t>(s.out_channels), 0.0);
    for (Index b = 0; b < s.batch; ++b) {
      const T* gb = grad + b * s.out_channels * pos_n;
      // grad_columns[r, q] = sum over the group's output channels o (in order) of weight[o, r'] grad[b, o, q].
      parallel_for_each(parallel_for, s.column_rows(), [&](Index r) {
        const Index g = r / kg;
        Acc* dst = gcols.data() + r * pos_n;
        std::fill(dst, dst + pos_n, Acc(0));
        for (Index o = g * og; o < (g + 1) * og; ++o) {
          const Acc w = to_acc<Acc>(weight[o * kg + (r - g * kg)]);
          const T* go = gb + o * pos_n;
          for (Index q = 0; q < pos_n; ++q) dst[q] += w * to_acc<Acc>(go[q]);
        }
      });
      // grad_input: channel c's plane from its own column rows, taps and positions in order.
      parallel_for_each(parallel_for, s.in_channels, [&](Index c) {
        const Index g = c / geo.channels_per_offset_group;
        std::vector<Acc> acc(static_cast<std::size_t>(plane), Acc(0));
        for (Index k = 0; k < geo.taps; ++k) {
          for (Index q = 0; q < pos_n; ++q) {
            Acc gv = gcols[static_cast<std::size_t>((c * geo.taps + k) * pos_n + q)];
            if (mask != nullptr) gv *= to_acc<Acc>(mask[geo.mask_base(b, g) + k * pos_n + q]);
            const T* off = offset + geo.offset_base(b, g) + 2 * k * pos_n + q;
            const Acc y = geo.template base_y<Acc>(q, k) + to_acc<Acc>(off[0]);
            const Acc x = geo.template base_x<Acc>(q, k) + to_acc<Acc>(off[pos_n]);
            deform_sample_scatter(geo.height, geo.width, y, x, gv,
                                  [&](Index at, Acc v) { acc[static_cast<std::size_t>(at)] += v; });
          }
        }
        T* dst = static_cast<T*>(a.grad_input) + (b * s.in_channels + c) * plane;
        for (Index e = 0; e < plane; ++e) dst[e] = from_acc<T>(acc[static_cast<std::size_t>(e)]);
      });
      // grad_offset / grad_mask: one (offset group, tap, position), its channels in order.
      parallel_for_each(parallel_for, p.offset_groups * geo.taps * pos_n, [&](Index e) {
        const Index q = e % pos_n, k = (e / pos_n) % geo.taps, g = e / (pos_n * geo.taps);
        const Index off_at = geo.offset_base(b, g) + 2 * k * pos_n + q, mask_at = geo.mask_base(b, g) + k * pos_n + q;
        const Acc y = geo.template base_y<Acc>(q, k) + to_acc<Acc>(offset[off_at]);
        const Acc x = geo.template base_x<Acc>(q, k) + to_acc<Acc>(offset[off_at + pos_n]);
        const Acc m = mask == nullptr ? Acc(1) : to_acc<Acc>(mask[mask_at]);
        Acc gy = 0, gx = 0, gm = 0;
        for (Index c = g * geo.channels_per_offset_group; c < (g + 1) * geo.channels_per_offset_group; ++c) {
          const Acc gc = gcols[static_cast<std::size_t>((c * geo.taps + k) * pos_n + q)];
          const DeformSampleGrad<Acc> sg =
              deform_sample_grad<Acc>(input + (b * s.in_channels + c) * plane, geo.height, geo.width, y, x);
          gy += gc * sg.dy;
          gx += gc * sg.dx;
          gm += gc * sg.value;
        }
        static_cast<T*>(a.grad_offset)[off_at] = from_acc<T>(gy * m);
        static_cast<T*>(a.grad_offset)[off_at + pos_n] = from_acc<T>(gx * m);
        if (a.grad_mask != nullptr) static_cast<T*>(a.grad_mask)[mask_at] = from_acc<T>(gm);
      });
      // grad_weight[o, k] += sum over positions (in order) of grad[b, o, q] columns[g kg + k, q]; grad_bias.
      columns_of<T, Acc>(p, s, b, input, offset, mask, parallel_for, cols);
      parallel_for_each(parallel_for, s.out_channels, [&](Index o) {
        const Index g = o / og;
        const T* go = gb + o * pos_n;
        for (Index k = 0; k < kg; ++k) {
          const Acc* col = cols.data() + (g * kg + k) * pos_n;
          double sum = 0;
          for (Index q = 0; q < pos_n; ++q) sum += double(to_acc<Acc>(go[q])) * double(col[q]);
          gweight[static_cast<std::size_t>(o * kg + k)] += sum;
        }
        double sum = 0;
        for (Index q = 0; q < pos_n; ++q) sum += double(to_acc<Acc>(go[q]));
        gbias[static_cast<std::size_t>(o)] += sum;
      });
    }
    for (Index e = 0; e < s.out_channels * kg; ++e) {
      static_cast<T*>(a.grad_weight)[e] = from_acc<T>(static_cast<Acc>(gweight[static_cast<std::size_t>(e)]));
    }
    for (Index o = 0; o < s.out_channels; ++o) {
      static_cast<T*>(a.grad_bias)[o] = from_acc<T>(static_cast<Acc>(gbias[static_cast<std::size_t>(o)]));
    }
  });
}

}  // namespace detops
