// Deformable convolution on CUDA (deform_conv2d.h). Per chunk of samples the input goes channels last, so a
// sample point's four corners are four runs of contiguous channels: one thread owns a point (sample, output
// position, tap, offset group) and a share of its group's channels, 16 bytes at a time, and forms the
// point's bilinear weights once for all of them. The im2col writes the columns channels last ([n, P, K] with
// K ordered (weight group, tap, channel)), the GEMMs run in cuBLAS (tensor cores for fp16 / bf16, and for
// fp32 when params.allow_tf32) with fp32 accumulation for the half types. The backward's sampling pass
// scatters the input gradient with atomicAdd into a channels-last acc buffer (adjacent lanes, adjacent
// addresses; 16-byte atomics where the GPU has them), reduces the offset and mask gradients over a point's
// lanes with a fixed shuffle tree, and writes the columns again for the weight gradient's GEMM.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/block_reduce.cuh"
#include "common/channels_last.cuh"
#include "common/cublas_gemm.cuh"
#include "common/fast_divisor.h"
#include "common/kernel_launch.cuh"
#include "common/roi_cuda.cuh"
#include "deform_conv2d/deform_conv2d_kernel.cuh"

namespace detops {
namespace {

constexpr int kThreads = 256;
using P = DeformConv2dParams;
using S = DeformConv2dShape;

// V consecutive elements, moved as one aligned access (V * sizeof(E) bytes, at most 32).
template <typename E, int V>
struct alignas(sizeof(E) * V) Run {
  E v[V];
};

template <typename E, int V>
__device__ __forceinline__ Run<E, V> load_run(const E* at) {
  return *reinterpret_cast<const Run<E, V>*>(at);
}

// at[i] += add[i], i < V: 16-byte (float4) or 8-byte (float2) atomics on sm_90 and later, else one per element.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr bool kVectorAtomics = true;
#else
constexpr bool kVectorAtomics = false;
#endif

template <typename E, int V>
__device__ __forceinline__ void atomic_add_run(E* at, const E (&add)[V]) {
  if constexpr (kVectorAtomics && std::is_same_v<E, float> && V % 4 == 0) {
#pragma unroll
    for (int i = 0; i < V; i += 4) {
      atomicAdd(reinterpret_cast<float4*>(at + i), make_float4(add[i], add[i + 1], add[i + 2], add[i + 3]));
    }
  } else if constexpr (kVectorAtomics && std::is_same_v<E, float> && V % 2 == 0) {
#pragma unroll
    for (int i = 0; i < V; i += 2) atomicAdd(reinterpret_cast<float2*>(at + i), make_float2(add[i], add[i + 1]));
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) atomicAdd(at + i, add[i]);
  }
}

// The divisors of a point kernel's index arithmetic (point_dividers, on the host; common/fast_divisor.h: a point's
// setup divides by six values known only at run time, about 20 instructions each as 32-bit divisions): lanes per
// point (a power of two, as a shift), and the positions, offset groups, taps, output width, kernel width and channels
// per weight group.
struct PointDividers {
  int lane_shift = 0;
  FastDivisor positions, offset_groups, taps, out_width, kernel_w, group_channels;
};

PointDividers point_dividers(const P& p, const S& s, std::int64_t lanes) {
  PointDividers dv;
  while ((std::int64_t{1} << dv.lane_shift) < lanes) ++dv.lane_shift;
  if ((std::int64_t{1} << dv.lane_shift) != lanes) {
    throw std::logic_error("deform_conv2d: lanes per point must be a power of two, got " + std::to_string(lanes));
  }
  dv.positions = FastDivisor(s.positions());
  dv.offset_groups = FastDivisor(p.offset_groups);
  dv.taps = FastDivisor(s.kernel_taps());
  dv.out_width = FastDivisor(s.out_width);
  dv.kernel_w = FastDivisor(s.kernel_w);
  dv.group_channels = FastDivisor(s.in_channels / p.groups);
  return dv;
}

// One sample point of the chunk: thread e is lane e % lanes of point e / lanes, the point (b, k, og, pos)
// ordered with pos fastest (neighbouring warps sample neighbouring pixels with the same tap: their corners
// overlap in L1, and their offsets are adjacent). Its channels: og * C_og + (lane + j * lanes) * V + [0, V), j = 0, 1, ...
template <typename Acc, typename Index>
struct DeformPoint {
  Index b, pos, k, og, lane;
  Acc y, x;  // where it samples
  Acc m;     // its mask (1 without one)
  Index offset_at, mask_at;  // its dy entry (dx one row further) and its mask entry
};

// Where the point samples: DeformGeometry's base_y / base_x (the same integer expressions) plus its offsets, the
// divisions by dv's.
template <typename Acc, typename Index, typename T>
__device__ __forceinline__ DeformPoint<Acc, Index> deform_point(const DeformGeometry<Index>& geo, const PointDividers& dv,
                                                                Index e, const T* offset, const T* mask) {
  DeformPoint<Acc, Index> q;
  q.lane = e & ((Index(1) << dv.lane_shift) - 1);
  Index u = e >> dv.lane_shift;
  Index v = dv.positions.div(u);
  q.pos = u - v * geo.positions;
  u = v;
  v = dv.offset_groups.div(u);
  q.og = u - v * geo.offset_groups;
  u = v;
  v = dv.taps.div(u);
  q.k = u - v * geo.taps;
  q.b = v;
  const Index oy = dv.out_width.div(q.pos), ox = q.pos - oy * geo.out_width;
  const Index ky = dv.kernel_w.div(q.k), kx = q.k - ky * geo.kernel_w;
  q.offset_at = geo.offset_base(q.b, q.og) + 2 * q.k * geo.positions + q.pos;
  q.y = static_cast<Acc>(oy * geo.stride_h - geo.pad_h + ky * geo.dilation_h) + to_acc<Acc>(offset[q.offset_at]);
  q.x = static_cast<Acc>(ox * geo.stride_w - geo.pad_w + kx * geo.dilation_w) +
        to_acc<Acc>(offset[q.offset_at + geo.positions]);
  q.mask_at = geo.mask_base(q.b, q.og) + q.k * geo.positions + q.pos;
  q.m = mask == nullptr ? Acc(1) : to_acc<Acc>(mask[q.mask_at]);
  return q;
}

// Channel-last addressing of the chunk: the column of (b, pos) for input channel c and tap k, and pixel (y, x).
template <typename Index>
struct ChannelsLast {
  Index channels, group_channels, taps, width, height, positions;
  __device__ __forceinline__ Index column(Index b, Index pos, Index k, Index c, const FastDivisor& per_group) const {
    const Index g = per_group.div(c);
    return (b * positions + pos) * channels * taps + (g * taps + k) * group_channels + (c - g * group_channels);
  }
  __device__ __forceinline__ Index pixel(Index b, Index y, Index x, Index c) const {
    return ((b * height + y) * width + x) * channels + c;
  }
};

// The columns' rows per sample: P_pad, the host's deform_conv2d_padded_positions (the same constexpr function).
template <typename T, typename Index>
__device__ __forceinline__ ChannelsLast<Index> channels_last(const P& p, const S& s) {
  return {static_cast<Index>(s.in_channels), static_cast<Index>(s.in_channels / p.groups),
          static_cast<Index>(s.kernel_taps()), static_cast<Index>(s.width), static_cast<Index>(s.height),
          static_cast<Index>(deform_conv2d_padded_positions(s, sizeof(T)))};
}

// The next run of a lane after r: r + lanes, or `runs` (the end) where that would pass it. Never forms r + lanes
// past runs, which with 32-bit indices wraps when runs is within `lanes` of 2^31 (2^31 - 1 channels, one run each).
template <typename Index>
__device__ __forceinline__ Index next_run(Index r, Index runs, Index lanes) {
  return runs - r > lanes ? r + lanes : runs;
}

// The chunk's deformable im2col from the channels-last input: columns [n, P_pad, K], K ordered (group, tap,
// channel); rows P..P_pad-1 are not written (zero_pad_rows).
template <typename T, typename Index, int V>
__global__ void __launch_bounds__(kThreads)
    deform_conv2d_im2col_kernel(P p, S s, std::int64_t batch_count, int lanes, PointDividers dv,
                                const T* __restrict__ input_cl,
                                const T* __restrict__ offset, const T* __restrict__ mask, T* __restrict__ columns) {
  using Acc = acc_t<T>;
  const DeformGeometry<Index> geo(p, s);
  const ChannelsLast<Index> cl = channels_last<T, Index>(p, s);
  const Index lane_count = lanes, runs = geo.channels_per_offset_group / V;
  const Index points = static_cast<Index>(batch_count) * geo.positions * geo.taps * geo.offset_groups;
  grid_stride_for<Index>(points * lane_count, [&](Index e) {
    const DeformPoint<Acc, Index> q = deform_point<Acc>(geo, dv, e, offset, mask);
    DeformCell<Acc, Index> cell;
    const bool sampled = deform_in_map(q.y, q.x, geo.height, geo.width) && deform_cell(q.y, q.x, geo.height, geo.width, cell);
    const Acc hy = Acc(1) - cell.ly, hx = Acc(1) - cell.lx;
    const Acc w00 = hy * hx * q.m, w01 = hy * cell.lx * q.m, w10 = cell.ly * hx * q.m, w11 = cell.ly * cell.lx * q.m;
    for (Index r = q.lane; r < runs; r = next_run(r, runs, lane_count)) {
      const Index c = q.og * geo.channels_per_offset_group + r * V;
      Acc v[V];
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] = Acc(0);
      if (sampled) {
        const auto add = [&](bool inside, Index y, Index x, Acc w) {
          if (!inside) return;
          const Run<T, V> corner = load_run<T, V>(input_cl + cl.pixel(q.b, y, x, c));
#pragma unroll
          for (int i = 0; i < V; ++i) v[i] += w * to_acc<Acc>(corner.v[i]);
        };
        add(cell.top && cell.left, cell.y0, cell.x0, w00);
        add(cell.top && cell.right, cell.y0, cell.x0 + 1, w01);
        add(cell.bottom && cell.left, cell.y0 + 1, cell.x0, w10);
        add(cell.bottom && cell.right, cell.y0 + 1, cell.x0 + 1, w11);
      }
      Run<T, V> out;
#pragma unroll
      for (int i = 0; i < V; ++i) out.v[i] = from_acc<T>(v[i]);
      *reinterpret_cast<Run<T, V>*>(columns + cl.column(q.b, q.pos, q.k, c, dv.group_channels)) = out;
    }
  });
}

// out[r, :] = bias[r % C_out] for the rows r of the chunk's [n, C_out, ld] output (the GEMM then adds with beta = 1):
// rows over blockIdx.y, each row's runs of V elements (16-byte stores where the rows are 16-byte aligned) over the
// x-blocks, so the row's bias is read once and no element index is divided (an element-wise fill dividing each index
// took 0.02 ms of the fp16 forward at x[2, 256, 100, 168] on the H200, this one 11 us at Nsight Compute's locked clock).
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    deform_conv2d_fill_bias_kernel(std::int64_t rows, std::int64_t row_elements, std::int64_t out_channels,
                                   const T* __restrict__ bias, T* __restrict__ out) {
  const std::int64_t runs = row_elements / V;
  for (std::int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    Run<T, V> value;
    const T b = bias[r % out_channels];
#pragma unroll
    for (int i = 0; i < V; ++i) value.v[i] = b;
    Run<T, V>* row = reinterpret_cast<Run<T, V>*>(out + r * row_elements);
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < runs;
         i += static_cast<std::int64_t>(gridDim.x) * kThreads) {
      row[i] = value;
    }
  }
}

// dst[r, c] = src[r, c] for c < src_cols, else 0, for r < rows and c < dst_cols, rows of src_ld / dst_ld elements:
// between an [n, C_out, P] tensor and the workspace's [n, C_out, P_pad] copy (zeros in the padding), and, with
// src_cols 0, the zeros of the columns' padding rows. A kernel, not cudaMemcpy2DAsync: a row of P elements can
// pass the copy's maximum pitch (2^31 - 1 bytes) in the 2^31 cases.
template <typename T, typename Index>
__global__ void __launch_bounds__(kThreads)
    deform_conv2d_copy_rows_kernel(std::int64_t total_count, std::int64_t dst_cols, std::int64_t src_cols,
                                   const T* __restrict__ src, std::int64_t src_ld, T* __restrict__ dst,
                                   std::int64_t dst_ld) {
  const Index d_cols = static_cast<Index>(dst_cols), s_cols = static_cast<Index>(src_cols);
  const Index s_ld = static_cast<Index>(src_ld), d_ld = static_cast<Index>(dst_ld);
  grid_stride_for<Index>(static_cast<Index>(total_count), [&](Index e) {
    const Index r = e / d_cols, c = e - r * d_cols;
    dst[r * d_ld + c] = c < s_cols ? src[r * s_ld + c] : from_acc<T>(acc_t<T>(0));
  });
}

// The sampling pass of the backward, one point per `lanes` threads: the input gradient (grad_columns times the
// mask, scattered onto the point's corners), d/d dy, d/d dx and d/d mask summed over the offset group's channels
// (each lane its runs in order, then a shuffle tree over the warp's lanes of the point), and the point's columns
// (the forward's im2col) for the weight gradient. lanes <= 32: lane 0 writes the point's gradients. lanes > 32 (a
// multiple of 32: few points of very many channels): lane 0 of each warp writes the warp's sums to
// partials[point * lanes / 32 + warp], and deform_conv2d_offset_grad_partials_kernel adds them in warp order.
template <typename T, typename Index, int V>
__global__ void __launch_bounds__(kThreads)
    deform_conv2d_sample_grad_kernel(P p, S s, std::int64_t batch_count, int lanes, PointDividers dv,
                                     const acc_t<T>* __restrict__ grad_columns,
                                     const T* __restrict__ input_cl, const T* __restrict__ offset,
                                     const T* __restrict__ mask, acc_t<T>* __restrict__ grad_input_cl,
                                     T* __restrict__ columns, T* __restrict__ grad_offset, T* __restrict__ grad_mask,
                                     acc_t<T>* __restrict__ partials) {
  using Acc = acc_t<T>;
  const DeformGeometry<Index> geo(p, s);
  const ChannelsLast<Index> cl = channels_last<T, Index>(p, s);
  const Index lane_count = lanes, runs = geo.channels_per_offset_group / V;
  const Index points = static_cast<Index>(batch_count) * geo.positions * geo.taps * geo.offset_groups;
  // The lanes of a point are `lanes` adjacent lanes of one warp (lanes divides 32) or whole warps (lanes a
  // multiple of 32), all active together: a warp's threads enter and leave the grid-stride loop in the same
  // iteration (the stride is a multiple of 32, and so is the thread count when lanes >= 32).
  const unsigned lane_in_warp = threadIdx.x % 32;
  const int width = lanes < 32 ? lanes : 32;  // the lanes of a point within one warp
  const unsigned group_mask =
      width == 32 ? 0xffffffffu : ((1u << width) - 1u) << (lane_in_warp / static_cast<unsigned>(width) * width);
  grid_stride_for<Index>(points * lane_count, [&](Index e) {
    const DeformPoint<Acc, Index> q = deform_point<Acc>(geo, dv, e, offset, mask);
    DeformCell<Acc, Index> cell;
    const bool near = deform_cell(q.y, q.x, geo.height, geo.width, cell);  // derivatives nonzero
    const bool sampled = near && deform_in_map(q.y, q.x, geo.height, geo.width);
    const Acc hy = Acc(1) - cell.ly, hx = Acc(1) - cell.lx;
    const Acc w00 = hy * hx, w01 = hy * cell.lx, w10 = cell.ly * hx, w11 = cell.ly * cell.lx;
    const bool in00 = near && cell.top && cell.left, in01 = near && cell.top && cell.right;
    const bool in10 = near && cell.bottom && cell.left, in11 = near && cell.bottom && cell.right;
    Acc gy = 0, gx = 0, gm = 0;
    for (Index r = q.lane; r < runs; r = next_run(r, runs, lane_count)) {
      const Index c = q.og * geo.channels_per_offset_group + r * V;
      const Index col = cl.column(q.b, q.pos, q.k, c, dv.group_channels);
      const Run<Acc, V> gcol = load_run<Acc, V>(grad_columns + col);
      Acc v00[V], v01[V], v10[V], v11[V];
      const auto corner = [&](bool inside, Index y, Index x, Acc (&v)[V]) {
        if (inside) {
          const Run<T, V> run = load_run<T, V>(input_cl + cl.pixel(q.b, y, x, c));
#pragma unroll
          for (int i = 0; i < V; ++i) v[i] = to_acc<Acc>(run.v[i]);
        } else {
#pragma unroll
          for (int i = 0; i < V; ++i) v[i] = Acc(0);
        }
      };
      corner(in00, cell.y0, cell.x0, v00);
      corner(in01, cell.y0, cell.x0 + 1, v01);
      corner(in10, cell.y0 + 1, cell.x0, v10);
      corner(in11, cell.y0 + 1, cell.x0 + 1, v11);
      Run<T, V> out;
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const Acc value = sampled ? w00 * v00[i] + w01 * v01[i] + w10 * v10[i] + w11 * v11[i] : Acc(0);
        gy += gcol.v[i] * (hx * (v10[i] - v00[i]) + cell.lx * (v11[i] - v01[i]));
        gx += gcol.v[i] * (hy * (v01[i] - v00[i]) + cell.ly * (v11[i] - v10[i]));
        gm += gcol.v[i] * value;
        out.v[i] = from_acc<T>(value * q.m);
      }
      *reinterpret_cast<Run<T, V>*>(columns + col) = out;
      if (sampled) {
        const auto scatter = [&](bool inside, Index y, Index x, Acc w) {
          if (!inside) return;
          Acc add[V];
#pragma unroll
          for (int i = 0; i < V; ++i) add[i] = w * q.m * gcol.v[i];
          atomic_add_run<Acc, V>(grad_input_cl + cl.pixel(q.b, y, x, c), add);
        };
        scatter(in00, cell.y0, cell.x0, w00);
        scatter(in01, cell.y0, cell.x0 + 1, w01);
        scatter(in10, cell.y0 + 1, cell.x0, w10);
        scatter(in11, cell.y0 + 1, cell.x0 + 1, w11);
      }
    }
    for (int step = width / 2; step > 0; step /= 2) {
      gy += __shfl_xor_sync(group_mask, gy, step, width);
      gx += __shfl_xor_sync(group_mask, gx, step, width);
      gm += __shfl_xor_sync(group_mask, gm, step, width);
    }
    if (lanes > 32) {
      if (lane_in_warp == 0) {
        Acc* slot = partials + 3 * (e / 32);  // e / 32 = point * (lanes / 32) + the point's warp
        slot[0] = gy;
        slot[1] = gx;
        slot[2] = gm;
      }
    } else if (q.lane == 0) {
      grad_offset[q.offset_at] = from_acc<T>(gy * q.m);
      grad_offset[q.offset_at + geo.positions] = from_acc<T>(gx * q.m);
      if (grad_mask != nullptr) grad_mask[q.mask_at] = from_acc<T>(gm);
    }
  });
}

// The offset and mask gradients of points spread over lanes / 32 warps: each point's warp sums (partials, written
// by deform_conv2d_sample_grad_kernel) added in warp order.
template <typename T, typename Index>
__global__ void __launch_bounds__(kThreads)
    deform_conv2d_offset_grad_partials_kernel(P p, S s, std::int64_t batch_count, int lanes, PointDividers dv,
                                              const T* __restrict__ offset, const T* __restrict__ mask,
                                              const acc_t<T>* __restrict__ partials, T* __restrict__ grad_offset,
                                              T* __restrict__ grad_mask) {
  using Acc = acc_t<T>;
  const DeformGeometry<Index> geo(p, s);
  const Index lane_count = lanes, warps = lane_count / 32;
  const Index points = static_cast<Index>(batch_count) * geo.positions * geo.taps * geo.offset_groups;
  grid_stride_for<Index>(points, [&](Index point) {
    const DeformPoint<Acc, Index> q = deform_point<Acc>(geo, dv, point * lane_count, offset, mask);
    Acc gy = 0, gx = 0, gm = 0;
    for (Index w = 0; w < warps; ++w) {
      const Acc* slot = partials + 3 * (point * warps + w);
      gy += slot[0];
      gx += slot[1];
      gm += slot[2];
    }
    grad_offset[q.offset_at] = from_acc<T>(gy * q.m);
    grad_offset[q.offset_at + geo.positions] = from_acc<T>(gx * q.m);
    if (grad_mask != nullptr) grad_mask[q.mask_at] = from_acc<T>(gm);
  });
}

// grad_bias[o] = the sum of grad[b, o, :] over every sample: one block per o, a fixed order.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    deform_conv2d_bias_grad_kernel(std::int64_t batch, std::int64_t out_channels, std::int64_t positions,
                                   const T* __restrict__ grad, T* __restrict__ grad_bias) {
  using Acc = acc_t<T>;
  __shared__ Acc shared[kThreads / 32];
  for (std::int64_t o = blockIdx.x; o < out_channels; o += gridDim.x) {
    Acc sum = 0;
    for (std::int64_t b = 0; b < batch; ++b) {
      const T* row = grad + (b * out_channels + o) * positions;
      for (std::int64_t q = threadIdx.x; q < positions; q += kThreads) sum += to_acc<Acc>(row[q]);
    }
    sum = block_sum<Acc, kThreads>(sum, shared);
    if (threadIdx.x == 0) grad_bias[o] = from_acc<T>(sum);
  }
}

// The channel run of one thread: 16 bytes of T when every offset group's and weight group's channel count is a
// multiple of it, else one element.
template <typename T>
constexpr int kRun = static_cast<int>(16 / sizeof(T));

const bool kRegistered = for_each_floating_and_index_type([](auto t, auto i, const std::string& targs) {
  using T = typename decltype(t)::type;
  using Index = typename decltype(i)::type;
  register_instantiation("deform_conv2d", "deform_conv2d_im2col_kernel", targs + ",1",
                         &deform_conv2d_im2col_kernel<T, Index, 1>);
  register_instantiation("deform_conv2d", "deform_conv2d_im2col_kernel", targs + ",run",
                         &deform_conv2d_im2col_kernel<T, Index, kRun<T>>);
  register_instantiation("deform_conv2d", "deform_conv2d_sample_grad_kernel", targs + ",1",
                         &deform_conv2d_sample_grad_kernel<T, Index, 1>);
  register_instantiation("deform_conv2d", "deform_conv2d_sample_grad_kernel", targs + ",run",
                         &deform_conv2d_sample_grad_kernel<T, Index, kRun<T>>);
  register_instantiation("deform_conv2d", "deform_conv2d_offset_grad_partials_kernel", targs,
                         &deform_conv2d_offset_grad_partials_kernel<T, Index>);
  register_instantiation("deform_conv2d", "deform_conv2d_copy_rows_kernel", targs,
                         &deform_conv2d_copy_rows_kernel<T, Index>);
});
const bool kRegisteredPerType = for_each_floating_type([](auto t, const char* type) {
  using T = typename decltype(t)::type;
  register_instantiation("deform_conv2d", "deform_conv2d_bias_grad_kernel", type, &deform_conv2d_bias_grad_kernel<T>);
  register_instantiation("deform_conv2d", "deform_conv2d_fill_bias_kernel", std::string(type) + ",1",
                         &deform_conv2d_fill_bias_kernel<T, 1>);
  register_instantiation("deform_conv2d", "deform_conv2d_fill_bias_kernel", std::string(type) + ",run",
                         &deform_conv2d_fill_bias_kernel<T, kRun<T>>);
});

// ---------------------------------------------------------------- the chunk loop
// One chunk [b0, b0 + count) of the batch, and whether every index its kernels form fits 32 bits.
struct Chunk {
  std::int64_t b0, count;
  bool fits32;
};

// pad_pos: the columns' rows per sample (P_pad).
template <typename Body>
void for_each_chunk(const P& p, const S& s, std::int64_t pad_pos, Body&& body) {
  const std::int64_t per = deform_conv2d_batch_chunk(s, deform_conv2d_column_capacity(s));
  const std::int64_t kLimit = (std::int64_t{1} << 31) - 1;
  for (std::int64_t b0 = 0; b0 < s.batch; b0 += per) {
    const std::int64_t n = std::min(per, s.batch - b0);
    const std::int64_t largest = n * std::max({s.in_channels * s.height * s.width,
                                               2 * p.offset_groups * s.kernel_taps() * s.positions(),
                                               s.column_rows() * pad_pos, s.out_channels * pad_pos});
    body(Chunk{b0, n, largest <= kLimit});
  }
}

template <typename T>
const T* at(const void* base, std::int64_t elements) {
  return base == nullptr ? nullptr : static_cast<const T*>(base) + elements;
}
template <typename T>
T* at(void* base, std::int64_t elements) {
  return base == nullptr ? nullptr : static_cast<T*>(base) + elements;
}

// The workspace's parts (deform_conv2d_workspace), checked against what the caller passed.
template <typename T>
struct Parts {
  T *columns, *input_cl, *weight_cl;
  acc_t<T> *grad_columns, *grad_input_cl, *grad_weight_cl, *partials;
  T* padded;  // nullptr when P_pad == P (deform_conv2d.h)
};

template <typename T>
Parts<T> carve(const P& p, const DeformConv2dProblem& a, bool backward) {
  const DeformConv2dWorkspace w = deform_conv2d_workspace(a.s, p.groups, sizeof(T), sizeof(acc_t<T>), backward);
  if (a.workspace_bytes < w.bytes || (w.bytes > 0 && a.workspace == nullptr) ||
      reinterpret_cast<std::uintptr_t>(a.workspace) % 256 != 0) {
    throw std::invalid_argument("deform_conv2d: the CUDA launcher needs a 256-byte aligned workspace of " +
                                std::to_string(w.bytes) + " bytes; got " + std::to_string(a.workspace_bytes));
  }
  char* base = static_cast<char*>(a.workspace);
  return {reinterpret_cast<T*>(base + w.columns), reinterpret_cast<T*>(base + w.input_cl),
          reinterpret_cast<T*>(base + w.weight_cl), reinterpret_cast<acc_t<T>*>(base + w.grad_columns),
          reinterpret_cast<acc_t<T>*>(base + w.grad_input_cl), reinterpret_cast<acc_t<T>*>(base + w.grad_weight_cl),
          reinterpret_cast<acc_t<T>*>(base + w.partials), w.padded < 0 ? nullptr : reinterpret_cast<T*>(base + w.padded)};
}

// How a point's channels spread over threads: runs of `run` elements, `lanes` threads per point (a power of
// two up to max_lanes, about the runs per offset group).
struct Spread {
  bool vector;  // run = kRun<T>, else 1
  int lanes;
};

template <typename T>
Spread spread(const P& p, const S& s, std::int64_t max_lanes) {
  const std::int64_t per_offset_group = s.in_channels / p.offset_groups, per_group = s.in_channels / p.groups;
  const bool vector = per_offset_group % kRun<T> == 0 && per_group % kRun<T> == 0;
  const std::int64_t runs = per_offset_group / (vector ? kRun<T> : 1);
  int lanes = 1;
  while (lanes < max_lanes && lanes < runs) lanes *= 2;
  return {vector, lanes};
}

// The lanes per point of a kernel without a reduction over them (the forward's im2col): a warp, or, for a chunk
// of few points (a 1x1 map of 2^31 channels has one per tap), up to kDeformConv2dWideThreads in all.
std::int64_t wide_lanes(const P& p, const S& s, const Chunk& ch) {
  const std::int64_t points = ch.count * s.positions() * s.kernel_taps() * p.offset_groups;
  std::int64_t lanes = 32;
  while (lanes < (std::int64_t{1} << 20) && lanes * 2 * points <= kDeformConv2dWideThreads) lanes *= 2;
  return lanes;
}

// The lanes per point of the backward's sampling pass: at most a warp (its sums reduced with shuffles), unless
// each of 32 lanes would run more than 64 of the offset group's channel runs (few points of very many channels:
// one point of 2^31 - 1 channels took 37 s on an H200 with 32 lanes of 2^26 runs each). Then more warps, up to
// kDeformConv2dWideThreads threads in the chunk, whose partial sums a second pass adds in warp order.
template <typename T>
std::int64_t backward_lanes(const P& p, const S& s, const Chunk& ch) {
  const Spread sp = spread<T>(p, s, 32);
  const std::int64_t runs = s.in_channels / p.offset_groups / (sp.vector ? kRun<T> : 1);
  const std::int64_t points = ch.count * s.positions() * s.kernel_taps() * p.offset_groups;
  std::int64_t lanes = sp.lanes;
  while (lanes >= 32 && lanes < (std::int64_t{1} << 20) && runs > lanes * 64 && lanes * 2 * points <= kDeformConv2dWideThreads) {
    lanes *= 2;
  }
  return lanes;
}

// A point kernel over the chunk: kernel_of(Index tag, V) for the chunk's index width and run, with up to
// max_lanes threads per point (a power of two; 32 where the kernel reduces over a point's lanes in a warp).
template <typename T, typename KernelOf, typename... Args>
void launch_points(KernelOf&& kernel_of, const P& p, const S& s, const Chunk& ch, cudaStream_t stream,
                   std::int64_t max_lanes, Args&&... args) {
  const Spread sp = spread<T>(p, s, max_lanes);
  const std::int64_t threads = ch.count * s.positions() * s.kernel_taps() * p.offset_groups * sp.lanes;
  if (threads == 0) return;
  const auto launch = [&](auto run) {
    launch_index_width([&](auto i) { return kernel_of(i, run); }, threads, kThreads, ch.fits32, stream, p, s, ch.count,
                       sp.lanes, point_dividers(p, s, sp.lanes), std::forward<Args>(args)...);
  };
  if (sp.vector) {
    launch(std::integral_constant<int, kRun<T>>{});
  } else {
    launch(std::integral_constant<int, 1>{});
  }
}

// rows x dst_cols elements of dst (row pitch dst_ld elements): src's (row pitch src_ld) where c < src_cols, else 0.
template <typename T>
void copy_rows(const T* src, std::int64_t src_ld, std::int64_t src_cols, T* dst, std::int64_t dst_ld,
               std::int64_t dst_cols, std::int64_t rows, cudaStream_t stream) {
  const std::int64_t total = rows * dst_cols;
  if (total == 0) return;
  const bool fits32 = rows * std::max(src_ld, dst_ld) <= std::int64_t{INT32_MAX};
  launch_index_width([](auto i) { return &deform_conv2d_copy_rows_kernel<T, type_of<decltype(i)>>; }, total, kThreads,
                     fits32, stream, total, dst_cols, src_cols, src, src_ld, dst, dst_ld);
}

// out[r, :] = bias[r % out_channels] for rows r < rows of row_elements each (deform_conv2d_fill_bias_kernel): 16-byte
// runs when out and every row start are 16-byte aligned, else element by element.
template <typename T>
void fill_bias(T* out, std::int64_t rows, std::int64_t row_elements, std::int64_t out_channels, const T* bias,
               cudaStream_t stream) {
  if (rows * row_elements == 0) return;
  constexpr int V = kRun<T>;
  const bool runs = row_elements % V == 0 && reinterpret_cast<std::uintptr_t>(out) % 16 == 0;
  const std::int64_t per_row = runs ? row_elements / V : row_elements;
  const dim3 grid(static_cast<unsigned>(std::min<std::int64_t>((per_row + kThreads - 1) / kThreads, 4096)),
                  static_cast<unsigned>(std::min<std::int64_t>(rows, 65535)));
  if (runs) {
    launch_kernel(&deform_conv2d_fill_bias_kernel<T, V>, grid, kThreads, stream, rows, row_elements, out_channels, bias, out);
  } else {
    launch_kernel(&deform_conv2d_fill_bias_kernel<T, 1>, grid, kThreads, stream, rows, row_elements, out_channels, bias, out);
  }
}

// Zeros in rows P..P_pad-1 of each sample's columns [P_pad, K] (the GEMMs run over P_pad positions; the weight
// gradient's sums over positions then add exact zeros).
template <typename T>
void zero_pad_rows(T* columns, std::int64_t samples, std::int64_t pos, std::int64_t padded, std::int64_t k,
                   cudaStream_t stream) {
  if (padded == pos) return;
  copy_rows<T>(nullptr, 0, 0, columns + pos * k, padded * k, (padded - pos) * k, samples, stream);
}

// [batch, rows, cols] -> [batch, cols, rows], converting In to Out.
template <typename In, typename Out>
void transpose(const In* in, Out* out, std::int64_t batch, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  channels_last_detail::transpose<In, Out, acc_t<Out>>(in, out, batch, rows, cols, stream);
}

}  // namespace

void launch_deform_conv2d_forward(const P& p, const DeformConv2dForwardArgs& a, DType dtype, cudaStream_t stream) {
  const S& s = a.s;
  if (s.batch * s.out_channels * s.positions() == 0) return;
  dispatch_floating(dtype, "launch_deform_conv2d_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const std::int64_t kg = s.column_rows() / p.groups, og = s.out_channels / p.groups, pos = s.positions();
    const std::int64_t pixels = s.height * s.width;
    const Parts<T> w = carve<T>(p, a, false);
    BlasScope blas("deform_conv2d", a.blas, stream);
    // weight [C_out, C_in / groups, taps] -> [C_out, taps, C_in / groups]
    transpose(static_cast<const T*>(a.weight), w.weight_cl, s.out_channels, s.in_channels / p.groups,
              s.kernel_taps(), stream);
    const std::int64_t pad_pos = deform_conv2d_padded_positions(s, sizeof(T));
    for_each_chunk(p, s, pad_pos, [&](const Chunk& ch) {
      T* const out_final = at<T>(a.out, ch.b0 * s.out_channels * pos);
      // The GEMM runs over P_pad positions (P rounded up to 16 bytes: cuBLAS's aligned kernels need the positions'
      // extent aligned, not only the leading dimension) and writes out_final, or when P_pad != P the padded
      // [n, C_out, P_pad] workspace, copied into out_final after it (deform_conv2d.h).
      const bool padded = w.padded != nullptr && kg > 0;
      const std::int64_t ldo = padded ? pad_pos : pos;
      T* out = padded ? w.padded : out_final;
      const std::int64_t out_elements = ch.count * s.out_channels * ldo;
      if (a.bias != nullptr) fill_bias(out, ch.count * s.out_channels, ldo, s.out_channels, static_cast<const T*>(a.bias), stream);
      if (kg == 0) {  // no input channels: the bias (or zeros) alone
        if (a.bias == nullptr) DETOPS_CUDA_CHECK(cudaMemsetAsync(out, 0, out_elements * sizeof(T), stream));
        return;
      }
      const std::int64_t offset_rows = 2 * p.offset_groups * s.kernel_taps();
      transpose(at<T>(a.input, ch.b0 * s.in_channels * pixels), w.input_cl, ch.count, s.in_channels, pixels, stream);
      launch_points<T>([](auto i, auto run) { return &deform_conv2d_im2col_kernel<T, type_of<decltype(i)>, decltype(run)::value>; },
                       p, s, ch, stream, wide_lanes(p, s, ch), w.input_cl, at<T>(a.offset, ch.b0 * offset_rows * pos),
                       p.use_mask ? at<T>(a.mask, ch.b0 * offset_rows / 2 * pos) : nullptr, w.columns);
      zero_pad_rows(w.columns, ch.count, pos, ldo, s.column_rows(), stream);
      for (std::int64_t g = 0; g < p.groups; ++g) {
        // out[b, g] (P_pad x og, column-major) = columns[b, :, g]^T (P_pad x kg) * weight_cl[g]^T (kg x og)
        blas_gemm<T, T>(blas, p.allow_tf32, ldo, og, kg,
                        BlasOperand{w.columns + g * kg, s.column_rows(), static_cast<long long>(s.column_rows() * ldo), CUBLAS_OP_T},
                        BlasOperand{w.weight_cl + g * og * kg, kg, 0, CUBLAS_OP_N}, out + g * og * ldo, ldo,
                        static_cast<long long>(s.out_channels * ldo), ch.count, a.bias != nullptr);
      }
      if (padded) copy_rows<T>(out, ldo, pos, out_final, pos, pos, ch.count * s.out_channels, stream);
    });
  });
}

void launch_deform_conv2d_backward(const P& p, const DeformConv2dBackwardArgs& a, DType dtype, cudaStream_t stream) {
  const S& s = a.s;
  dispatch_floating(dtype, "launch_deform_conv2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    const std::int64_t kg = s.column_rows() / p.groups, og = s.out_channels / p.groups, pos = s.positions();
    const std::int64_t pixels = s.height * s.width, input_elements = s.batch * s.in_channels * pixels;
    const std::int64_t weight_elements = s.out_channels * kg;
    const std::int64_t offset_rows = 2 * p.offset_groups * s.kernel_taps(), mask_rows = offset_rows / 2;
    const std::int64_t offset_elements = s.batch * offset_rows * pos;
    if (s.out_channels > 0) {
      if (s.batch * pos > 0) {
        launch_kernel(&deform_conv2d_bias_grad_kernel<T>, static_cast<unsigned>(std::min<std::int64_t>(s.out_channels, 65535)),
                      kThreads, stream, s.batch, s.out_channels, pos, a.grad, a.grad_bias);
      } else {
        DETOPS_CUDA_CHECK(cudaMemsetAsync(a.grad_bias, 0, s.out_channels * sizeof(T), stream));
      }
    }
    if (s.batch * pos == 0 || kg == 0 || og == 0) {  // nothing reaches the input, offsets, mask or weight
      if (input_elements > 0) DETOPS_CUDA_CHECK(cudaMemsetAsync(a.grad_input, 0, input_elements * sizeof(T), stream));
      if (weight_elements > 0) DETOPS_CUDA_CHECK(cudaMemsetAsync(a.grad_weight, 0, weight_elements * sizeof(T), stream));
      if (offset_elements > 0) DETOPS_CUDA_CHECK(cudaMemsetAsync(a.grad_offset, 0, offset_elements * sizeof(T), stream));
      if (a.grad_mask != nullptr && offset_elements > 0) {
        DETOPS_CUDA_CHECK(cudaMemsetAsync(a.grad_mask, 0, offset_elements / 2 * sizeof(T), stream));
      }
      return;
    }
    const Parts<T> w = carve<T>(p, a, true);
    BlasScope blas("deform_conv2d", a.blas, stream);
    transpose(static_cast<const T*>(a.weight), w.weight_cl, s.out_channels, s.in_channels / p.groups,
              s.kernel_taps(), stream);
    DETOPS_CUDA_CHECK(cudaMemsetAsync(w.grad_weight_cl, 0, weight_elements * sizeof(Acc), stream));
    // The GEMMs run over P_pad positions (deform_conv2d.h; P_pad = P when aligned): grad is then its copy with
    // rows of P_pad (zeros past P), and the columns' padding rows are zeros, so the weight gradient adds exact zeros.
    const std::int64_t gld = deform_conv2d_padded_positions(s, sizeof(T));
    const long long col_stride = static_cast<long long>(s.column_rows() * gld);
    for_each_chunk(p, s, gld, [&](const Chunk& ch) {
      const T* grad = at<T>(a.grad, ch.b0 * s.out_channels * pos);
      if (gld != pos) {
        copy_rows<T>(grad, pos, pos, w.padded, gld, gld, ch.count * s.out_channels, stream);
        grad = w.padded;
      }
      // grad_columns[b] (K x P_pad, column-major), group g's rows = weight_cl[g] (kg x og) * grad[b, g]^T (og x P_pad)
      for (std::int64_t g = 0; g < p.groups; ++g) {
        blas_gemm<T, Acc>(blas, p.allow_tf32, kg, gld, og, BlasOperand{w.weight_cl + g * og * kg, kg, 0, CUBLAS_OP_N},
                          BlasOperand{grad + g * og * gld, gld, static_cast<long long>(s.out_channels * gld), CUBLAS_OP_T},
                          w.grad_columns + g * kg, s.column_rows(), col_stride, ch.count, false);
      }
      transpose(at<T>(a.input, ch.b0 * s.in_channels * pixels), w.input_cl, ch.count, s.in_channels, pixels, stream);
      DETOPS_CUDA_CHECK(cudaMemsetAsync(w.grad_input_cl, 0, ch.count * s.in_channels * pixels * sizeof(Acc), stream));
      const std::int64_t lanes = backward_lanes<T>(p, s, ch);
      const T* chunk_offset = at<T>(a.offset, ch.b0 * offset_rows * pos);
      const T* chunk_mask = p.use_mask ? at<T>(a.mask, ch.b0 * mask_rows * pos) : nullptr;
      T* chunk_grad_offset = at<T>(a.grad_offset, ch.b0 * offset_rows * pos);
      T* chunk_grad_mask = p.use_mask ? at<T>(a.grad_mask, ch.b0 * mask_rows * pos) : nullptr;
      launch_points<T>(
          [](auto i, auto run) { return &deform_conv2d_sample_grad_kernel<T, type_of<decltype(i)>, decltype(run)::value>; },
          p, s, ch, stream, lanes, w.grad_columns, w.input_cl, chunk_offset, chunk_mask, w.grad_input_cl, w.columns,
          chunk_grad_offset, chunk_grad_mask, w.partials);
      if (lanes > 32) {
        const std::int64_t points = ch.count * s.positions() * s.kernel_taps() * p.offset_groups;
        launch_index_width([](auto i) { return &deform_conv2d_offset_grad_partials_kernel<T, type_of<decltype(i)>>; },
                           points, kThreads, ch.fits32, stream, p, s, ch.count, static_cast<int>(lanes),
                           point_dividers(p, s, lanes), chunk_offset,
                           chunk_mask, w.partials, chunk_grad_offset, chunk_grad_mask);
      }
      channels_last_to_first<Acc, T>(w.grad_input_cl, at<T>(a.grad_input, ch.b0 * s.in_channels * pixels), ch.count,
                                     pixels, s.in_channels, stream);
      zero_pad_rows(w.columns, ch.count, pos, gld, s.column_rows(), stream);
      // grad_weight_cl[g] (kg x og, column-major) += columns[b, :, g] (kg x P_pad) * grad[b, g]^T (P_pad x og), b in
      // order
      for (std::int64_t b = 0; b < ch.count; ++b) {
        blas_gemm<T, Acc>(blas, p.allow_tf32, kg, og, gld,
                          BlasOperand{w.columns + b * s.column_rows() * gld, s.column_rows(), static_cast<long long>(kg), CUBLAS_OP_N},
                          BlasOperand{grad + b * s.out_channels * gld, gld, static_cast<long long>(og * gld), CUBLAS_OP_N},
                          w.grad_weight_cl, kg, static_cast<long long>(og * kg), p.groups, true);
      }
    });
    // [C_out, taps, C_in / groups] -> grad_weight [C_out, C_in / groups, taps]
    transpose(w.grad_weight_cl, static_cast<T*>(a.grad_weight), s.out_channels, s.kernel_taps(),
              s.in_channels / p.groups, stream);
  });
}

}  // namespace detops
