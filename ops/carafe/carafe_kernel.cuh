#pragma once
// CARAFE: the per-element math of the CPU implementation and of the CUDA fallback kernels (DETOPS_HD; the tiled
// CUDA kernels of carafe_cuda.cu compute the same sums in the same order from shared memory), in T's
// accumulation type Acc = acc_t<T> (fp32 for fp16 / bf16 / fp32, fp64 for fp64). With r = (k - 1) / 2 and the
// group g = c / (C / G) of channel c:
//   out[n, c, y, x]            = sum over taps (i, j) of masks[n, g k k + i k + j, y, x] * features[n, c, y / s + i - r, x / s + j - r]
//   grad_features[n, c, h, w]  = sum over the outputs (y, x) whose tap (i, j) reads (h, w) of
//                                masks[n, g k k + i k + j, y, x] * grad[n, c, y, x]
//   grad_masks[n, g k k + i k + j, y, x] = sum over the group's channels c of grad[n, c, y, x] * features[n, c, y / s + i - r, x / s + j - r]
// where a tap whose feature position lies outside the map is absent (its mask value gets gradient 0). Every
// sum runs in a fixed order (taps (i, j) in row-major order, then (dy, dx) within an output block; channels in
// order), each element by one thread: deterministic, no atomics; the features' gradient is a gather.
#include <cstdint>

#include "carafe/carafe.h"
#include "common/macros.h"
#include "common/numeric.h"
#include "common/readonly_load.h"

// Full unrolling of the constant-trip channel-chunk loops in device code, so the chunk's accumulators stay in
// registers; host compilers unroll or not as they please.
#if defined(__CUDA_ARCH__)
#define DETOPS_CARAFE_UNROLL _Pragma("unroll")
#else
#define DETOPS_CARAFE_UNROLL
#endif

namespace detops {

// The sizes the kernels index with, derived once from the params and the features' shape (64-bit throughout).
struct CarafeGeometry {
  std::int64_t n, c, h, w;              // features [N, C, H, W]
  std::int64_t k, r, groups, scale;     // the params; r = (k - 1) / 2
  std::int64_t ho, wo;                  // the output's H s, W s
  std::int64_t group_channels, taps;    // C / G, k k
  std::int64_t mask_channels, chunks;   // k k G; channel chunks per group, ceil((C / G) / kCarafeChannelChunk)
  DETOPS_HD std::int64_t in_plane() const { return h * w; }
  DETOPS_HD std::int64_t out_plane() const { return ho * wo; }
  // The chunked work items of the forward (one per output pixel) and of the features' gradient (one per
  // feature pixel): (n, group, chunk, pixel), pixel fastest.
  DETOPS_HD std::int64_t forward_items() const { return n * groups * chunks * out_plane(); }
  DETOPS_HD std::int64_t features_grad_items() const { return n * groups * chunks * in_plane(); }
  DETOPS_HD std::int64_t mask_elements() const { return n * mask_channels * out_plane(); }
};

inline CarafeGeometry carafe_geometry(const CarafeParams& p, const CarafeShape& s) {
  const std::int64_t group_channels = s.channels / p.group_size;
  return {s.batch,
          s.channels,
          s.height,
          s.width,
          p.kernel_size,
          carafe_radius(p),
          p.group_size,
          p.scale_factor,
          s.height * p.scale_factor,
          s.width * p.scale_factor,
          group_channels,
          p.kernel_size * p.kernel_size,
          carafe_mask_channels(p),
          (group_channels + kCarafeChannelChunk - 1) / kCarafeChannelChunk};
}

// Work item e over planes of ph x pw pixels: image n, the chunk's first channel c0 (in group `group`), its
// channel count (<= kCarafeChannelChunk) and the pixel (y, x).
struct CarafeChunkItem {
  std::int64_t n, group, c0, y, x;
  int count;
};

DETOPS_HD CarafeChunkItem carafe_chunk_item(const CarafeGeometry& g, std::int64_t e, std::int64_t ph, std::int64_t pw) {
  const std::int64_t x = e % pw, rest = e / pw;
  const std::int64_t y = rest % ph, rest2 = rest / ph;
  const std::int64_t chunk = rest2 % g.chunks, ng = rest2 / g.chunks;
  const std::int64_t group = ng % g.groups, first = chunk * kCarafeChannelChunk;
  const std::int64_t left = g.group_channels - first;
  return {ng / g.groups, group, group * g.group_channels + first, y, x,
          left < kCarafeChannelChunk ? static_cast<int>(left) : kCarafeChannelChunk};
}

// Forward item e: out[n, c0 + q, y, x] for q < count. The pixel's k k mask values are read once, each
// feature once per channel (neighbouring threads, neighbouring x, read neighbouring features: cached).
template <typename T, typename Acc>
DETOPS_HD void carafe_forward_item(const CarafeGeometry& g, const T* features, const T* masks, T* out, std::int64_t e) {
  const CarafeChunkItem it = carafe_chunk_item(g, e, g.ho, g.wo);
  const std::int64_t in_plane = g.in_plane(), out_plane = g.out_plane();
  const T* mask = masks + ((it.n * g.mask_channels + it.group * g.taps) * g.ho + it.y) * g.wo + it.x;
  const T* feat = features + (it.n * g.c + it.c0) * in_plane;
  const std::int64_t fy0 = it.y / g.scale - g.r, fx0 = it.x / g.scale - g.r;
  Acc acc[kCarafeChannelChunk];
  DETOPS_CARAFE_UNROLL
  for (int q = 0; q < kCarafeChannelChunk; ++q) acc[q] = Acc(0);
  for (std::int64_t i = 0; i < g.k; ++i) {
    const std::int64_t fy = fy0 + i;
    if (fy < 0 || fy >= g.h) continue;
    for (std::int64_t j = 0; j < g.k; ++j) {
      const std::int64_t fx = fx0 + j;
      if (fx < 0 || fx >= g.w) continue;
      const Acc m = to_acc<Acc>(load_readonly(mask + (i * g.k + j) * out_plane));
      const T* f = feat + fy * g.w + fx;
      DETOPS_CARAFE_UNROLL
      for (int q = 0; q < kCarafeChannelChunk; ++q) {
        if (q < it.count) acc[q] += m * to_acc<Acc>(load_readonly(f + q * in_plane));
      }
    }
  }
  T* o = out + ((it.n * g.c + it.c0) * g.ho + it.y) * g.wo + it.x;
  DETOPS_CARAFE_UNROLL
  for (int q = 0; q < kCarafeChannelChunk; ++q) {
    if (q < it.count) o[q * out_plane] = from_acc<T>(acc[q]);
  }
}

// Features' gradient item e: grad_features[n, c0 + q, h, w] for q < count, a gather. Tap (i, j) of the source
// pixel (sy, sx) = (h + r - i, w + r - j) reads (h, w); that pixel's s x s block of outputs (sy s + dy,
// sx s + dx) each contribute mask * grad.
template <typename T, typename Acc>
DETOPS_HD void carafe_features_grad_item(const CarafeGeometry& g, const T* grad, const T* masks, T* grad_features,
                                         std::int64_t e) {
  const CarafeChunkItem it = carafe_chunk_item(g, e, g.h, g.w);
  const std::int64_t out_plane = g.out_plane();
  const T* mask_n = masks + (it.n * g.mask_channels + it.group * g.taps) * out_plane;
  const T* grad_c = grad + (it.n * g.c + it.c0) * out_plane;
  Acc acc[kCarafeChannelChunk];
  DETOPS_CARAFE_UNROLL
  for (int q = 0; q < kCarafeChannelChunk; ++q) acc[q] = Acc(0);
  for (std::int64_t i = 0; i < g.k; ++i) {
    const std::int64_t sy = it.y + g.r - i;
    if (sy < 0 || sy >= g.h) continue;
    for (std::int64_t j = 0; j < g.k; ++j) {
      const std::int64_t sx = it.x + g.r - j;
      if (sx < 0 || sx >= g.w) continue;
      const std::int64_t block = sy * g.scale * g.wo + sx * g.scale;
      const T* m = mask_n + (i * g.k + j) * out_plane + block;
      const T* gr = grad_c + block;
      for (std::int64_t dy = 0; dy < g.scale; ++dy) {
        for (std::int64_t dx = 0; dx < g.scale; ++dx) {
          const std::int64_t o = dy * g.wo + dx;
          const Acc mv = to_acc<Acc>(load_readonly(m + o));
          DETOPS_CARAFE_UNROLL
          for (int q = 0; q < kCarafeChannelChunk; ++q) {
            if (q < it.count) acc[q] += mv * to_acc<Acc>(load_readonly(gr + q * out_plane + o));
          }
        }
      }
    }
  }
  T* gf = grad_features + ((it.n * g.c + it.c0) * g.h + it.y) * g.w + it.x;
  DETOPS_CARAFE_UNROLL
  for (int q = 0; q < kCarafeChannelChunk; ++q) {
    if (q < it.count) gf[q * g.in_plane()] = from_acc<T>(acc[q]);
  }
}

// Masks' gradient element (n, m, y, x), m = group k k + i k + j: the group's channels in order; 0 where the
// tap's feature position lies outside the map.
template <typename T, typename Acc>
DETOPS_HD Acc carafe_masks_grad_at(const CarafeGeometry& g, const T* grad, const T* features, std::int64_t n,
                                   std::int64_t m, std::int64_t y, std::int64_t x) {
  const std::int64_t group = m / g.taps, t = m - group * g.taps, i = t / g.k, j = t - i * g.k;
  const std::int64_t fy = y / g.scale + i - g.r, fx = x / g.scale + j - g.r;
  if (fy < 0 || fy >= g.h || fx < 0 || fx >= g.w) return Acc(0);
  const std::int64_t c0 = group * g.group_channels, in_plane = g.in_plane(), out_plane = g.out_plane();
  const T* gr = grad + ((n * g.c + c0) * g.ho + y) * g.wo + x;
  const T* f = features + ((n * g.c + c0) * g.h + fy) * g.w + fx;
  Acc acc = Acc(0);
  for (std::int64_t c = 0; c < g.group_channels; ++c) {
    acc += to_acc<Acc>(load_readonly(gr + c * out_plane)) * to_acc<Acc>(load_readonly(f + c * in_plane));
  }
  return acc;
}

// The flat index of grad_masks element (n, m, y, x).
DETOPS_HD std::int64_t carafe_mask_index(const CarafeGeometry& g, std::int64_t n, std::int64_t m, std::int64_t y,
                                         std::int64_t x) {
  return ((n * g.mask_channels + m) * g.ho + y) * g.wo + x;
}

}  // namespace detops
