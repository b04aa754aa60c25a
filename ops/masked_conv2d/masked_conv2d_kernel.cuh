#pragma once
// Masked 2-D convolution: the per-element math shared by the CUDA kernels and the CPU implementation
// (DETOPS_HD), in T's accumulation type Acc = acc_t<T> (fp32 for fp16 / bf16 / fp32, fp64 for fp64).
// Output element (n, o, y, x) of a selected position is
//   bias[o] + sum over taps t = (c, i, j) of features[n, c, y sh - ph + i, x sw - pw + j] * weight[o, c, i, j]
// with features 0 outside the map (the zero padding); every other output element is 0.
#include <cstdint>

#include "common/macros.h"
#include "common/numeric.h"
#include "masked_conv2d/masked_conv2d.h"

namespace detops {

// Selected position r: its output coordinates and the input pixel under its kernel tap (0, 0).
struct MaskedConv2dWindow {
  std::int64_t n = 0, y = 0, x = 0, h0 = 0, w0 = 0;
};

DETOPS_HD MaskedConv2dWindow masked_conv2d_window(const MaskedConv2dParams& p, const std::int64_t* positions,
                                                  std::int64_t r) {
  const std::int64_t* q = positions + 3 * r;
  return {q[0], q[1], q[2], q[1] * p.stride_h - p.padding_h, q[2] * p.stride_w - p.padding_w};
}

// im2col: the feature under tap (c, i, j) of window w; 0 in the padding.
template <typename T, typename Acc>
DETOPS_HD Acc masked_conv2d_tap(const MaskedConv2dShape& s, const T* features, const MaskedConv2dWindow& w,
                                std::int64_t c, std::int64_t i, std::int64_t j) {
  const std::int64_t h = w.h0 + i, x = w.w0 + j;
  if (h < 0 || h >= s.height || x < 0 || x >= s.width) return Acc(0);
  return to_acc<Acc>(features[((w.n * s.in_channels + c) * s.height + h) * s.width + x]);
}

// Flat index of output (or grad) element (n, o, y, x) of window w.
DETOPS_HD std::int64_t masked_conv2d_out_index(const MaskedConv2dShape& s, const MaskedConv2dWindow& w,
                                               std::int64_t o) {
  return ((w.n * s.out_channels + o) * s.out_height + w.y) * s.out_width + w.x;
}

template <typename T, typename Acc>
DETOPS_HD Acc masked_conv2d_grad_at(const MaskedConv2dShape& s, const T* grad, const MaskedConv2dWindow& w,
                                    std::int64_t o) {
  return to_acc<Acc>(grad[masked_conv2d_out_index(s, w, o)]);
}

// Where selected position r's row goes in the [N, H_out, W_out] map of rows: (n H_out + y) W_out + x.
DETOPS_HD std::int64_t masked_conv2d_position_index(const MaskedConv2dShape& s, const std::int64_t* positions,
                                                    std::int64_t r) {
  const std::int64_t* q = positions + 3 * r;
  return (q[0] * s.out_height + q[1]) * s.out_width + q[2];
}

// The selected positions whose window reads input pixel (h, w), through tap (i, j): y sh - ph + i = h and
// x sw - pw + j = w. `rows` is the pixel's image's [H_out, W_out] map of rows (the position's index in the
// selection, -1 where not selected). Calls fn(i kw + j, row) for each selected one, in (i, j) order: i runs
// over the kernel rows with (h + ph - i) % sh == 0 (output row y = (h + ph - i) / sh, descending), j likewise.
template <typename Fn>
DETOPS_HD void masked_conv2d_for_each_hit(const MaskedConv2dParams& p, const MaskedConv2dShape& s,
                                          const std::int32_t* rows, std::int64_t h, std::int64_t w, Fn&& fn) {
  const std::int64_t hp = h + p.padding_h, wp = w + p.padding_w;
  const std::int64_t i0 = p.stride_h == 1 ? 0 : hp % p.stride_h, j0 = p.stride_w == 1 ? 0 : wp % p.stride_w;
  const std::int64_t y0 = p.stride_h == 1 ? hp : (hp - i0) / p.stride_h;
  const std::int64_t x0 = p.stride_w == 1 ? wp : (wp - j0) / p.stride_w;
  for (std::int64_t i = i0, y = y0; i < s.kernel_h && y >= 0; i += p.stride_h, --y) {
    if (y >= s.out_height) continue;
    const std::int32_t* row_y = rows + y * s.out_width;
    for (std::int64_t j = j0, x = x0; j < s.kernel_w && x >= 0; j += p.stride_w, --x) {
      if (x >= s.out_width) continue;
      const std::int32_t row = row_y[x];
      if (row >= 0) fn(i * s.kernel_w + j, row);
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// The CPU implementation: the op as three matrix products C(m, n) = sum over k of A(m, k) B(n, k) over the P
// selected positions r, the taps t = (c, i, j) of weight's layout and the output channels o (implicit GEMM:
// the operands are gathered where they lie, no im2col buffer):
//   forward        out(r, o)   = sum over taps t       im2col(r, t) * weight(o, t)   (+ bias, to NCHW)
//   d(im2col)      dcol(t, r)  = sum over channels o   grad(r, o) * weight(o, t)
//   grad_weight    gw(t, o)    = sum over positions r  im2col(r, t) * grad(r, o)      (t = taps: the bias)
// and grad_features, a gather of dcol over the kernel taps of each input pixel. An operand is read by rows:
// row(r) decodes row r once, load4(row, k, k_end, v) gives the values at k..k+3, 0 at and past k_end and for a
// row past the end.

// The tensor (features or grad) that an operand reads at the selected positions, with the op's parameters
// and shapes that place each position's window in it.
template <typename T>
struct AtSelection {
  MaskedConv2dParams p;
  MaskedConv2dShape s;
  const T* data;
  const std::int64_t* positions;
  DETOPS_HD MaskedConv2dWindow window(std::int64_t r) const { return masked_conv2d_window(p, positions, r); }
};

// Forward A: position r, tap k -> the feature under the tap (im2col). Taps fit in int (the binding checks).
template <typename T, typename Acc>
struct TapsOfPosition {
  AtSelection<T> features;
  std::int64_t count;
  struct Row {
    MaskedConv2dWindow w;
    bool valid;
  };
  DETOPS_HD Row row(std::int64_t r) const {
    return r < count ? Row{features.window(r), true} : Row{MaskedConv2dWindow{}, false};
  }
  DETOPS_HD void load4(const Row& row, std::int64_t k, std::int64_t k_end, Acc (&v)[4]) const {
    const MaskedConv2dShape& s = features.s;
    const int kh = static_cast<int>(s.kernel_h), kw = static_cast<int>(s.kernel_w);
    const int t = static_cast<int>(k), c0 = t / (kh * kw), rem = t - c0 * (kh * kw);
    int c = c0, i = rem / kw, j = rem - (rem / kw) * kw;
    for (int q = 0; q < 4; ++q) {
      v[q] = row.valid && k + q < k_end ? masked_conv2d_tap<T, Acc>(s, features.data, row.w, c, i, j) : Acc(0);
      if (++j == kw) {
        j = 0;
        if (++i == kh) {
          i = 0;
          ++c;
        }
      }
    }
  }
};

// Forward B: output channel o, tap k -> weight[o, k] (weight rows are contiguous in k).
template <typename T, typename Acc>
struct WeightOfChannel {
  const T* weight;
  std::int64_t taps, out_channels;
  DETOPS_HD const T* row(std::int64_t o) const { return o < out_channels ? weight + o * taps : nullptr; }
  DETOPS_HD void load4(const T* row, std::int64_t k, std::int64_t k_end, Acc (&v)[4]) const {
    for (int q = 0; q < 4; ++q) v[q] = row != nullptr && k + q < k_end ? to_acc<Acc>(row[k + q]) : Acc(0);
  }
};

// d(im2col) A: position r, output channel k -> grad[n, k, y, x].
template <typename T, typename Acc>
struct GradOfPosition {
  AtSelection<T> grad;
  std::int64_t count;
  DETOPS_HD const T* row(std::int64_t r) const {
    if (r >= count) return nullptr;
    return grad.data + masked_conv2d_out_index(grad.s, grad.window(r), 0);
  }
  DETOPS_HD void load4(const T* row, std::int64_t k, std::int64_t k_end, Acc (&v)[4]) const {
    const std::int64_t plane = grad.s.out_height * grad.s.out_width;
    for (int q = 0; q < 4; ++q) v[q] = row != nullptr && k + q < k_end ? to_acc<Acc>(row[(k + q) * plane]) : Acc(0);
  }
};

// d(im2col) B: tap t, output channel k -> weight[k, t].
template <typename T, typename Acc>
struct WeightOfTap {
  const T* weight;
  std::int64_t taps;
  DETOPS_HD const T* row(std::int64_t t) const { return t < taps ? weight + t : nullptr; }
  DETOPS_HD void load4(const T* row, std::int64_t k, std::int64_t k_end, Acc (&v)[4]) const {
    for (int q = 0; q < 4; ++q) v[q] = row != nullptr && k + q < k_end ? to_acc<Acc>(row[(k + q) * taps]) : Acc(0);
  }
};

// grad_weight A: tap t (t = taps: the bias, whose "feature" is 1), position k -> im2col(k, t).
template <typename T, typename Acc>
struct TapOfPositions {
  AtSelection<T> features;
  struct Row {
    std::int64_t c, i, j;
    int kind;  // 0: a tap, 1: the bias, 2: past the end
  };
  DETOPS_HD Row row(std::int64_t t) const {
    const MaskedConv2dShape& s = features.s;
    const std::int64_t khw = s.kernel_h * s.kernel_w, taps = s.taps();
    if (t >= taps) return {0, 0, 0, t == taps ? 1 : 2};
    return {t / khw, (t % khw) / s.kernel_w, t % s.kernel_w, 0};
  }
  DETOPS_HD void load4(const Row& row, std::int64_t k, std::int64_t k_end, Acc (&v)[4]) const {
    for (int q = 0; q < 4; ++q) {
      v[q] = Acc(0);
      if (k + q >= k_end || row.kind == 2) continue;
      v[q] = row.kind == 1 ? Acc(1)
                           : masked_conv2d_tap<T, Acc>(features.s, features.data, features.window(k + q), row.c,
                                                       row.i, row.j);
    }
  }
};

// grad_weight B: output channel o, position k -> grad[n, o, y, x].
template <typename T, typename Acc>
struct GradOfChannel {
  AtSelection<T> grad;
  struct Row {
    std::int64_t o;
    bool valid;
  };
  DETOPS_HD Row row(std::int64_t o) const { return {o, o < grad.s.out_channels}; }
  DETOPS_HD void load4(const Row& row, std::int64_t k, std::int64_t k_end, Acc (&v)[4]) const {
    for (int q = 0; q < 4; ++q) {
      v[q] = row.valid && k + q < k_end ? masked_conv2d_grad_at<T, Acc>(grad.s, grad.data, grad.window(k + q), row.o)
                                        : Acc(0);
    }
  }
};

// The stores: (row m, column n, k chunk z, value).
template <typename T, typename Acc>
struct StoreOutput {  // forward: out[n, o, y, x] = value + bias[o]
  MaskedConv2dParams p;
  MaskedConv2dShape s;
  const std::int64_t* positions;
  const T* bias;
  T* out;
  DETOPS_HD void operator()(std::int64_t r, std::int64_t o, unsigned, Acc v) const {
    if (bias != nullptr) v += to_acc<Acc>(bias[o]);
    out[masked_conv2d_out_index(s, masked_conv2d_window(p, positions, r), o)] = from_acc<T>(v);
  }
};

template <typename Acc>
struct StoreDcol {  // dcol[t, r]
  Acc* dcol;
  std::int64_t count;
  DETOPS_HD void operator()(std::int64_t r, std::int64_t t, unsigned, Acc v) const { dcol[t * count + r] = v; }
};

template <typename Acc>
struct StorePartial {  // partials[z, o, t]
  Acc* partials;
  std::int64_t taps1, slice;
  DETOPS_HD void operator()(std::int64_t t, std::int64_t o, unsigned z, Acc v) const {
    partials[z * slice + o * taps1 + t] = v;
  }
};

// The weight gradient reduces over the selected positions in a fixed split that depends only on their
// count: at most kMaskedConv2dMaxChunks chunks of at least kMaskedConv2dMinChunk positions (a multiple of 16),
// each summed into its own [C_out, taps + 1] slice of partials (column `taps`: the bias), then the slices in
// order. So the result does not depend on the thread split.
inline constexpr std::int64_t kMaskedConv2dMaxChunks = 32;
inline constexpr std::int64_t kMaskedConv2dMinChunk = 1024;

constexpr std::int64_t masked_conv2d_chunk_length(std::int64_t count) {
  const std::int64_t by_max = (count + kMaskedConv2dMaxChunks - 1) / kMaskedConv2dMaxChunks;
  const std::int64_t len = by_max > kMaskedConv2dMinChunk ? by_max : kMaskedConv2dMinChunk;
  return (len + 15) / 16 * 16;
}

constexpr std::int64_t masked_conv2d_chunks(std::int64_t count) {
  return count == 0 ? 0 : (count + masked_conv2d_chunk_length(count) - 1) / masked_conv2d_chunk_length(count);
}

constexpr std::int64_t masked_conv2d_weight_partial_elements(const MaskedConv2dShape& s, std::int64_t count) {
  return masked_conv2d_chunks(count) * s.out_channels * (s.taps() + 1);
}

// One product as the CPU runs it: C(m, n) = sum over k < k_size of A(m, k) B(n, k), k split into `chunks`
// chunks of k_chunk (chunk z stored as store(m, n, z, value)).
template <typename A, typename B, typename Store>
struct MaskedConv2dProduct {
  A a;
  B b;
  Store store;
  std::int64_t m_size, n_size, k_size, k_chunk, chunks;
};

template <typename T>
MaskedConv2dProduct<TapsOfPosition<T, acc_t<T>>, WeightOfChannel<T, acc_t<T>>, StoreOutput<T, acc_t<T>>>
masked_conv2d_forward_product(const MaskedConv2dParams& p, const MaskedConv2dForwardArgs& args) {
  const MaskedConv2dShape& s = args.s;
  return {{{p, s, static_cast<const T*>(args.features), args.sel.positions}, args.sel.count},
          {static_cast<const T*>(args.weight), s.taps(), s.out_channels},
          {p, s, args.sel.positions, static_cast<const T*>(args.bias), static_cast<T*>(args.out)},
          args.sel.count, s.out_channels, s.taps(), s.taps(), 1};
}

// dcol: taps x count elements.
template <typename T>
MaskedConv2dProduct<GradOfPosition<T, acc_t<T>>, WeightOfTap<T, acc_t<T>>, StoreDcol<acc_t<T>>>
masked_conv2d_dcol_product(const MaskedConv2dParams& p, const MaskedConv2dBackwardInputArgs& args, acc_t<T>* dcol) {
  const MaskedConv2dShape& s = args.s;
  const std::int64_t count = args.sel.count;
  return {{{p, s, static_cast<const T*>(args.grad), args.sel.positions}, count},
          {static_cast<const T*>(args.weight), s.taps()},
          {dcol, count},
          count, s.taps(), s.out_channels, s.out_channels, 1};
}

// partials: masked_conv2d_weight_partial_elements(s, count) elements.
template <typename T>
MaskedConv2dProduct<TapOfPositions<T, acc_t<T>>, GradOfChannel<T, acc_t<T>>, StorePartial<acc_t<T>>>
masked_conv2d_weight_product(const MaskedConv2dParams& p, const MaskedConv2dBackwardWeightArgs& args,
                             acc_t<T>* partials) {
  const MaskedConv2dShape& s = args.s;
  const std::int64_t count = args.sel.count, taps1 = s.taps() + 1;
  return {{{p, s, static_cast<const T*>(args.features), args.sel.positions}},
          {{p, s, static_cast<const T*>(args.grad), args.sel.positions}},
          {partials, taps1, s.out_channels * taps1},
          taps1, s.out_channels, count, masked_conv2d_chunk_length(count), masked_conv2d_chunks(count)};
}

// grad_features element e = (n, c, h, w): the dcol entries [tap, row] of the selected positions reading the
// pixel, in tap order. rows: the [N, H_out, W_out] map of rows.
template <typename Acc>
DETOPS_HD Acc masked_conv2d_col2im(const MaskedConv2dParams& p, const MaskedConv2dShape& s, const Acc* dcol,
                                   const std::int32_t* rows, std::int64_t count, std::int64_t e) {
  const std::int64_t w = e % s.width, h = (e / s.width) % s.height;
  const std::int64_t nc = e / (s.width * s.height), c = nc % s.in_channels, n = nc / s.in_channels;
  const Acc* dc = dcol + c * s.kernel_h * s.kernel_w * count;
  Acc acc = Acc(0);
  masked_conv2d_for_each_hit(p, s, rows + n * s.out_height * s.out_width, h, w,
                             [&](std::int64_t tap, std::int32_t row) { acc += dc[tap * count + row]; });
  return acc;
}

// grad_weight / grad_bias element e = (o, t) of [C_out, taps + 1]: the chunks' partial sums, in order.
template <typename T>
DETOPS_HD void masked_conv2d_weight_finish(const MaskedConv2dShape& s, std::int64_t chunks, const acc_t<T>* partials,
                                           std::int64_t e, T* grad_weight, T* grad_bias) {
  const std::int64_t taps = s.taps(), slice = s.out_channels * (taps + 1);
  acc_t<T> sum = acc_t<T>(0);
  for (std::int64_t z = 0; z < chunks; ++z) sum += partials[z * slice + e];
  const std::int64_t o = e / (taps + 1), t = e % (taps + 1);
  if (t < taps) {
    grad_weight[o * taps + t] = from_acc<T>(sum);
  } else {
    grad_bias[o] = from_acc<T>(sum);
  }
}

}  // namespace detops
