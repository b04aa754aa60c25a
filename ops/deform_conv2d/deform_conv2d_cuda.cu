// Deformable convolution on CUDA (deform_conv2d.h). Per chunk of samples the input goes channels last, so a
// sample point's four corners are four runs of contiguous channels: one thread owns a point (sample, output
// position, tap, offset group) and a share of its group's channels, 16 bytes at a time, and forms the
// point's bilinear weights once for all of them. The im2col writes the columns channels last ([n, P, K] with
// K ordered (weight group, tap, channel)), the GEMMs run in cuBLAS (tensor cores for fp16 / bf16, and for
// fp32 when params.allow_tf32) with fp32 accumulation for the half types. The backward's sampling pass
// scatters the input gradient with atomicAdd into a channels-last acc buffer (adjacent lanes, adjacent
// addresses; 16-byte atomics where the GPU has them), reduces the offset and mask gradients over a point's
// lanes with a fixed shuffle tree, and writes the columns again for the weight gradient's GEMM.
#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/block_reduce.cuh"
#include "common/channels_last.cuh"
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

template <typename Acc, typename Index, typename T>
__device__ __forceinline__ DeformPoint<Acc, Index> deform_point(const DeformGeometry<Index>& geo, Index e, Index lanes,
                                                                const T* offset, const T* mask) {
  DeformPoint<Acc, Index> q;
  q.lane = e % lanes;
  Index u = e / lanes;
  q.pos = u % geo.positions;
  u /= geo.positions;
  q.og = u % geo.offset_groups;
  u /= geo.offset_groups;
  q.k = u % geo.taps;
  q.b = u / geo.taps;
  q.offset_at = geo.offset_base(q.b, q.og) + 2 * q.k * geo.positions + q.pos;
  q.y = geo.template base_y<Acc>(q.pos, q.k) + to_acc<Acc>(offset[q.offset_at]);
  q.x = geo.template base_x<Acc>(q.pos, q.k) + to_acc<Acc>(offset[q.offset_at + geo.positions]);
  q.mask_at = geo.mask_base(q.b, q.og) + q.k * geo.positions + q.pos;
  q.m = mask == nullptr ? Acc(1) : to_acc<Acc>(mask[q.mask_at]);
  return q;
}

// Channel-last addressing of the chunk: the column of (b, pos) for input channel c and tap k, and pixel (y, x).
template <typename Index>
struct ChannelsLast {
  Index channels, group_channels, taps, width, height, positions;
  __device__ __forceinline__ Index column(Index b, Index pos, Index k, Index c) const {
    const Index g = c / group_channels;
    return (b * positions + pos) * channels * taps + (g * taps + k) * group_channels + (c - g * group_channels);
  }
  __device__ __forceinline__ Index pixel(Index b, Index y, Index x, Index c) const {
    return ((b * height + y) * width + x) * channels + c;
  }
};

template <typename Index>
__device__ __forceinline__ ChannelsLast<Index> channels_last(const P& p, const S& s) {
  return {static_cast<Index>(s.in_channels), static_cast<Index>(s.in_channels / p.groups),
          static_cast<Index>(s.kernel_taps()), static_cast<Index>(s.width), static_cast<Index>(s.height),
          static_cast<Index>(s.positions())};
}

// The chunk's deformable im2col from the channels-last input: columns [n, P, K], K ordered (group, tap, channel).
template <typename T, typename Index, int V>
__global__ void __launch_bounds__(kThreads)
    deform_conv2d_im2col_kernel(P p, S s, std::int64_t batch_count, int lanes, const T* __restrict__ input_cl,
                                const T* __restrict__ offset, const T* __restrict__ mask, T* __restrict__ columns) {
  using Acc = acc_t<T>;
  const DeformGeometry<Index> geo(p, s);
  const ChannelsLast<Index> cl = channels_last<Index>(p, s);
  const Index lane_count = lanes, runs = geo.channels_per_offset_group / V;
  const Index points = static_cast<Index>(batch_count) * geo.positions * geo.taps * geo.offset_groups;
  grid_stride_for<Index>(points * lane_count, [&](Index e) {
    const DeformPoint<Acc, Index> q = deform_point<Acc>(geo, e, lane_count, offset, mask);
    DeformCell<Acc, Index> cell;
    const bool sampled = deform_in_map(q.y, q.x, geo.height, geo.width) && deform_cell(q.y, q.x, geo.height, geo.width, cell);
    const Acc hy = Acc(1) - cell.ly, hx = Acc(1) - cell.lx;
    const Acc w00 = hy * hx * q.m, w01 = hy * cell.lx * q.m, w10 = cell.ly * hx * q.m, w11 = cell.ly * cell.lx * q.m;
    for (Index r = q.lane; r < runs; r += lane_count) {
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
      *reinterpret_cast<Run<T, V>*>(columns + cl.column(q.b, q.pos, q.k, c)) = out;
    }
  });
}

// out[b, o, :] = bias[o] over the chunk (the GEMM then adds with beta = 1).
template <typename T, typename Index>
__global__ void __launch_bounds__(kThreads)
    deform_conv2d_fill_bias_kernel(std::int64_t total_count, std::int64_t position_count, std::int64_t channel_count, const T* __restrict__ bias,
                                   T* __restrict__ out) {
  const Index positions = static_cast<Index>(position_count), out_channels = static_cast<Index>(channel_count);
  grid_stride_for<Index>(static_cast<Index>(total_count), [&](Index e) { out[e] = bias[(e / positions) % out_channels]; });
}

// The sampling pass of the backward, one point per `lanes` threads: the input gradient (grad_columns times the
// mask, scattered onto the point's corners), d/d dy, d/d dx and d/d mask summed over the offset group's channels
// (each lane its runs in order, then a shuffle tree over the point's lanes), and the point's columns (the
// forward's im2col) for the weight gradient.
template <typename T, typename Index, int V>
__global__ void __launch_bounds__(kThreads)
    deform_conv2d_sample_grad_kernel(P p, S s, std::int64_t batch_count, int lanes, const acc_t<T>* __restrict__ grad_columns,
                                     const T* __restrict__ input_cl, const T* __restrict__ offset,
                                     const T* __restrict__ mask, acc_t<T>* __restrict__ grad_input_cl,
                                     T* __restrict__ columns, T* __restrict__ grad_offset, T* __restrict__ grad_mask) {
  using Acc = acc_t<T>;
  const DeformGeometry<Index> geo(p, s);
  const ChannelsLast<Index> cl = channels_last<Index>(p, s);
  const Index lane_count = lanes, runs = geo.channels_per_offset_group / V;
  const Index points = static_cast<Index>(batch_count) * geo.positions * geo.taps * geo.offset_groups;
  // The lanes of a point are `lanes` adjacent lanes of one warp (lanes divides 32), all active together: a
  // point's threads enter and leave the grid-stride loop in the same iteration.
  const unsigned lane_in_warp = threadIdx.x % 32;
  const unsigned group_mask =
      lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1u) << (lane_in_warp / static_cast<unsigned>(lanes) * lanes);
  grid_stride_for<Index>(points * lane_count, [&](Index e) {
    const DeformPoint<Acc, Index> q = deform_point<Acc>(geo, e, lane_count, offset, mask);
    DeformCell<Acc, Index> cell;
    const bool near = deform_cell(q.y, q.x, geo.height, geo.width, cell);  // derivatives nonzero
    const bool sampled = near && deform_in_map(q.y, q.x, geo.height, geo.width);
    const Acc hy = Acc(1) - cell.ly, hx = Acc(1) - cell.lx;
    const Acc w00 = hy * hx, w01 = hy * cell.lx, w10 = cell.ly * hx, w11 = cell.ly * cell.lx;
    const bool in00 = near && cell.top && cell.left, in01 = near && cell.top && cell.right;
    const bool in10 = near && cell.bottom && cell.left, in11 = near && cell.bottom && cell.right;
    Acc gy = 0, gx = 0, gm = 0;
    for (Index r = q.lane; r < runs; r += lane_count) {
      const Index c = q.og * geo.channels_per_offset_group + r * V;
      const Index col = cl.column(q.b, q.pos, q.k, c);
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
    for (int step = lanes / 2; step > 0; step /= 2) {
      gy += __shfl_xor_sync(group_mask, gy, step, lanes);
      gx += __shfl_xor_sync(group_mask, gx, step, lanes);
      gm += __shfl_xor_sync(group_mask, gm, step, lanes);
    }
    if (q.lane == 0) {
      grad_offset[q.offset_at] = from_acc<T>(gy * q.m);
      grad_offset[q.offset_at + geo.positions] = from_acc<T>(gx * q.m);
      if (grad_mask != nullptr) grad_mask[q.mask_at] = from_acc<T>(gm);
    }
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
  register_instantiation("deform_conv2d", "deform_conv2d_fill_bias_kernel", targs,
                         &deform_conv2d_fill_bias_kernel<T, Index>);
});
const bool kRegisteredPerType = for_each_floating_type([](auto t, const char* type) {
  using T = typename decltype(t)::type;
  register_instantiation("deform_conv2d", "deform_conv2d_bias_grad_kernel", type, &deform_conv2d_bias_grad_kernel<T>);
});

// ---------------------------------------------------------------- cuBLAS
void check_blas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("deform_conv2d: cuBLAS ") + what + " failed: " +
                             cublasGetStatusName(status) + " (" + cublasGetStatusString(status) + ")");
  }
}

template <typename T> constexpr cudaDataType kBlasType = CUDA_R_32F;
template <> constexpr cudaDataType kBlasType<double> = CUDA_R_64F;
template <> constexpr cudaDataType kBlasType<__half> = CUDA_R_16F;
template <> constexpr cudaDataType kBlasType<__nv_bfloat16> = CUDA_R_16BF;

// A column-major strided-batched GEMM, C = A B + beta C, A and B of type T, C of type C_T.
struct Operand {
  const void* data;
  std::int64_t ld;
  long long stride;
  cublasOperation_t op;
};

template <typename T, typename CT>
void gemm(cublasHandle_t handle, bool allow_tf32, std::int64_t m, std::int64_t n, std::int64_t k, Operand a,
          Operand b, void* c, std::int64_t ldc, long long stride_c, std::int64_t batch, bool accumulate) {
  if (m == 0 || n == 0 || batch == 0) return;
  const bool is_double = std::is_same_v<T, double>;
  const cublasComputeType_t compute = is_double ? CUBLAS_COMPUTE_64F
                                      : (std::is_same_v<T, float> && allow_tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                                 : CUBLAS_COMPUTE_32F;
  const double alpha_d = 1.0, beta_d = accumulate ? 1.0 : 0.0;
  const float alpha_f = 1.0f, beta_f = accumulate ? 1.0f : 0.0f;
  const void* alpha = is_double ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = is_double ? static_cast<const void*>(&beta_d) : &beta_f;
  check_blas(cublasGemmStridedBatchedEx_64(handle, a.op, b.op, m, n, k, alpha, a.data, kBlasType<T>, a.ld, a.stride,
                                           b.data, kBlasType<T>, b.ld, b.stride, beta, c, kBlasType<CT>, ldc, stride_c,
                                           batch, compute, CUBLAS_GEMM_DEFAULT),
             "GEMM");
}

// The handle bound to `stream`, in fp32-accumulating math (no reduced-precision split-K reductions), restored
// to its previous math mode on exit.
class BlasScope {
 public:
  BlasScope(void* handle, cudaStream_t stream) : handle_(static_cast<cublasHandle_t>(handle)) {
    if (handle_ == nullptr) throw std::invalid_argument("deform_conv2d: the CUDA launchers need a cuBLAS handle");
    check_blas(cublasGetMathMode(handle_, &saved_), "cublasGetMathMode");
    check_blas(cublasSetStream(handle_, stream), "cublasSetStream");
    check_blas(cublasSetMathMode(handle_, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                                                    CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
               "cublasSetMathMode");
  }
  ~BlasScope() { cublasSetMathMode(handle_, saved_); }
  BlasScope(const BlasScope&) = delete;
  BlasScope& operator=(const BlasScope&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_;
  cublasMath_t saved_ = CUBLAS_DEFAULT_MATH;
};

// ---------------------------------------------------------------- the chunk loop
// One chunk [b0, b0 + count) of the batch, and whether every index its kernels form fits 32 bits.
struct Chunk {
  std::int64_t b0, count;
  bool fits32;
};

template <typename Body>
void for_each_chunk(const P& p, const S& s, Body&& body) {
  const std::int64_t per = deform_conv2d_batch_chunk(s, deform_conv2d_column_capacity(s));
  const std::int64_t kLimit = (std::int64_t{1} << 31) - 1;
  for (std::int64_t b0 = 0; b0 < s.batch; b0 += per) {
    const std::int64_t n = std::min(per, s.batch - b0);
    const std::int64_t largest = n * std::max({s.in_channels * s.height * s.width,
                                               2 * p.offset_groups * s.kernel_taps() * s.positions(),
                                               s.column_rows() * s.positions(), s.out_channels * s.positions()});
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
  acc_t<T> *grad_columns, *grad_input_cl, *grad_weight_cl;
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
          reinterpret_cast<acc_t<T>*>(base + w.grad_input_cl), reinterpret_cast<acc_t<T>*>(base + w.grad_weight_cl)};
}

// How a point's channels spread over threads: runs of `run` elements, `lanes` threads per point (a power of
// two up to 32, about the runs per offset group).
struct Spread {
  bool vector;  // run = kRun<T>, else 1
  int lanes;
};

template <typename T>
Spread spread(const P& p, const S& s) {
  const std::int64_t per_offset_group = s.in_channels / p.offset_groups, per_group = s.in_channels / p.groups;
  const bool vector = per_offset_group % kRun<T> == 0 && per_group % kRun<T> == 0;
  const std::int64_t runs = per_offset_group / (vector ? kRun<T> : 1);
  int lanes = 1;
  while (lanes < 32 && lanes < runs) lanes *= 2;
  return {vector, lanes};
}

// A point kernel over the chunk: kernel_of(Index tag, V) for the chunk's index width and run.
template <typename T, typename KernelOf, typename... Args>
void launch_points(KernelOf&& kernel_of, const P& p, const S& s, const Chunk& ch, cudaStream_t stream, Args&&... args) {
  const Spread sp = spread<T>(p, s);
  const std::int64_t threads = ch.count * s.positions() * s.kernel_taps() * p.offset_groups * sp.lanes;
  if (threads == 0) return;
  const auto launch = [&](auto run) {
    launch_index_width([&](auto i) { return kernel_of(i, run); }, threads, kThreads, ch.fits32, stream, p, s, ch.count,
                       sp.lanes, std::forward<Args>(args)...);
  };
  if (sp.vector) {
    launch(std::integral_constant<int, kRun<T>>{});
  } else {
    launch(std::integral_constant<int, 1>{});
  }
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
    BlasScope blas(a.blas, stream);
    // weight [C_out, C_in / groups, taps] -> [C_out, taps, C_in / groups]
    transpose(static_cast<const T*>(a.weight), w.weight_cl, s.out_channels, s.in_channels / p.groups,
              s.kernel_taps(), stream);
    for_each_chunk(p, s, [&](const Chunk& ch) {
      T* out = at<T>(a.out, ch.b0 * s.out_channels * pos);
      const std::int64_t out_elements = ch.count * s.out_channels * pos;
      if (a.bias != nullptr) {
        launch_index_width([](auto i) { return &deform_conv2d_fill_bias_kernel<T, type_of<decltype(i)>>; },
                           out_elements, kThreads, ch.fits32, stream, out_elements, pos, s.out_channels, a.bias, out);
      }
      if (kg == 0) {  // no input channels: the bias (or zeros) alone
        if (a.bias == nullptr) DETOPS_CUDA_CHECK(cudaMemsetAsync(out, 0, out_elements * sizeof(T), stream));
        return;
      }
      const std::int64_t offset_rows = 2 * p.offset_groups * s.kernel_taps();
      transpose(at<T>(a.input, ch.b0 * s.in_channels * pixels), w.input_cl, ch.count, s.in_channels, pixels, stream);
      launch_points<T>([](auto i, auto run) { return &deform_conv2d_im2col_kernel<T, type_of<decltype(i)>, decltype(run)::value>; },
                       p, s, ch, stream, w.input_cl, at<T>(a.offset, ch.b0 * offset_rows * pos),
                       p.use_mask ? at<T>(a.mask, ch.b0 * offset_rows / 2 * pos) : nullptr, w.columns);
      for (std::int64_t g = 0; g < p.groups; ++g) {
        // out[b, g] (P x og, column-major) = columns[b, :, g]^T (P x kg) * weight_cl[g]^T (kg x og)
        gemm<T, T>(blas.get(), p.allow_tf32, pos, og, kg,
                   Operand{w.columns + g * kg, s.column_rows(), static_cast<long long>(s.column_rows() * pos), CUBLAS_OP_T},
                   Operand{w.weight_cl + g * og * kg, kg, 0, CUBLAS_OP_N}, out + g * og * pos, pos,
                   static_cast<long long>(s.out_channels * pos), ch.count, a.bias != nullptr);
      }
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
    BlasScope blas(a.blas, stream);
    transpose(static_cast<const T*>(a.weight), w.weight_cl, s.out_channels, s.in_channels / p.groups,
              s.kernel_taps(), stream);
    DETOPS_CUDA_CHECK(cudaMemsetAsync(w.grad_weight_cl, 0, weight_elements * sizeof(Acc), stream));
    const long long col_stride = static_cast<long long>(s.column_rows() * pos);
    for_each_chunk(p, s, [&](const Chunk& ch) {
      const T* grad = at<T>(a.grad, ch.b0 * s.out_channels * pos);
      // grad_columns[b] (K x P, column-major), group g's rows = weight_cl[g] (kg x og) * grad[b, g]^T (og x P)
      for (std::int64_t g = 0; g < p.groups; ++g) {
        gemm<T, Acc>(blas.get(), p.allow_tf32, kg, pos, og, Operand{w.weight_cl + g * og * kg, kg, 0, CUBLAS_OP_N},
                     Operand{grad + g * og * pos, pos, static_cast<long long>(s.out_channels * pos), CUBLAS_OP_T},
                     w.grad_columns + g * kg, s.column_rows(), col_stride, ch.count, false);
      }
      transpose(at<T>(a.input, ch.b0 * s.in_channels * pixels), w.input_cl, ch.count, s.in_channels, pixels, stream);
      DETOPS_CUDA_CHECK(cudaMemsetAsync(w.grad_input_cl, 0, ch.count * s.in_channels * pixels * sizeof(Acc), stream));
      launch_points<T>(
          [](auto i, auto run) { return &deform_conv2d_sample_grad_kernel<T, type_of<decltype(i)>, decltype(run)::value>; },
          p, s, ch, stream, w.grad_columns, w.input_cl, at<T>(a.offset, ch.b0 * offset_rows * pos),
          p.use_mask ? at<T>(a.mask, ch.b0 * mask_rows * pos) : nullptr, w.grad_input_cl, w.columns,
          at<T>(a.grad_offset, ch.b0 * offset_rows * pos), p.use_mask ? at<T>(a.grad_mask, ch.b0 * mask_rows * pos) : nullptr);
      channels_last_to_first<Acc, T>(w.grad_input_cl, at<T>(a.grad_input, ch.b0 * s.in_channels * pixels), ch.count,
                                     pixels, s.in_channels, stream);
      // grad_weight_cl[g] (kg x og, column-major) += columns[b, :, g] (kg x P) * grad[b, g]^T (P x og), b in order
      for (std::int64_t b = 0; b < ch.count; ++b) {
        gemm<T, Acc>(blas.get(), p.allow_tf32, kg, og, pos,
                     Operand{w.columns + b * s.column_rows() * pos, s.column_rows(), static_cast<long long>(kg), CUBLAS_OP_N},
                     Operand{grad + b * s.out_channels * pos, pos, static_cast<long long>(og * pos), CUBLAS_OP_N},
                     w.grad_weight_cl, kg, static_cast<long long>(og * kg), p.groups, true);
      }
    });
    // [C_out, taps, C_in / groups] -> grad_weight [C_out, C_in / groups, taps]
    transpose(w.grad_weight_cl, static_cast<T*>(a.grad_weight), s.out_channels, s.kernel_taps(),
              s.in_channels / p.groups, stream);
  });
}

}  // namespace detops
