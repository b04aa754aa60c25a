// Softmax focal loss CUDA kernels over the per-row math of softmax_focal_loss_kernel.cuh.
//
// Rows of fewer than kSoftmaxFocalBlockRowClasses classes (detection heads: 2 to ~1200) take the tile kernels. A
// block of 256 threads streams tiles of R consecutive rows (R a power of two, at most 256). A tile's logits are one
// contiguous span of R * C elements, copied into shared memory with 16-byte cp.async copies on the input's own
// 16-byte grid (the packs reaching past either end of the input element by element), so the global reads are
// coalesced and vectorized whatever C is; its targets come along (8-byte copies). Where two buffers fit in 48 KB, the
// next tile's copies are in flight while the block works on the current one. Per tile:
//  1. group phase: a group of L lanes per row (L a power of two up to 32, from C and the dtype: TilePlan), lane
//     `rank` taking classes rank, rank + L, ...: the row's maximum m (one pass over the row in shared memory, then a
//     butterfly of shuffles), then so = sum_{c != t} exp(x_c - m) (a second pass; the target's lane first sets the
//     target's slot to -inf, so the passes test nothing per element); m, z_t = x_t - m and so go to shared memory.
//  2. row phase: thread r evaluates row r's math once (softmax_focal_row): its loss ('none': out[n]; 'mean' /
//     'sum': the unit's loss buffer) or, for the backward, its two gradient factors.
//  3. backward: the groups overwrite the tile's logits with the gradient, d_other * exp(x_c - m) and d_target at t,
//     and the block stores the tile with 16-byte stores where grad_input has the input's alignment.
// 'mean' / 'sum': a block takes units of max(R, 64) rows, so whole chunks of kSoftmaxFocalChunkRows rows; when a
// unit is done, one warp per chunk sums its 64 row losses in a fixed tree into an acc_t<T> partial sum;
// chunked_sum_finish_kernel (one block, common/chunked_sum.cuh) adds the partial sums in a fixed order. A row's
// statistics depend only on its logits and L (a function of C and the dtype), never on its tile, block or the grid:
// 'none', 'mean' / 'sum' and the backward see the same row values, and no result depends on the grid.
//
// Rows of kSoftmaxFocalBlockRowClasses classes or more: a block per row (the block kernels), each thread running the
// online softmax over classes rank, rank + 256, ... and the block combining the (max, sum) pairs with
// group_all_reduce. No atomics on values anywhere: deterministic.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "common/block_reduce.cuh"
#include "common/chunked_sum.cuh"
#include "common/int_dispatch.h"
#include "common/kernel_launch.cuh"
#include "common/vector_pack.cuh"
#include "softmax_focal_loss/softmax_focal_loss_kernel.cuh"

namespace detops {
namespace {

constexpr int kThreads = 256;
constexpr int kFinishThreads = 1024;
constexpr int kBlockRow = kThreads;  // the block kernels' RowThreads: a block per row
constexpr int kChunkRows = static_cast<int>(kSoftmaxFocalChunkRows);
constexpr const char* kOp = "softmax_focal_loss";
static_assert(kChunkRows == 64, "sum_unit_chunks: a chunk is two rows per lane of one warp");

// A row whose target is C or more: reported once, by rank 0 of the row's thread group (FirstInvalidRow).
__device__ __forceinline__ void report_invalid(int kind, int rank, std::int64_t n, unsigned long long* first_invalid_row) {
  if (kind == 1 && rank == 0 && first_invalid_row != nullptr) atomicMin(first_invalid_row, static_cast<unsigned long long>(n));
}

// ---------------------------------------------------------------------------------------------------
// Tile kernels: rows of fewer than kSoftmaxFocalBlockRowClasses classes.

// One launch's tiling (TilePlan): tiles of rows_per_tile rows; a block takes units of tiles_per_unit consecutive
// tiles (max(R, 64) rows: whole chunks), units blockIdx.x, blockIdx.x + gridDim.x, ...
struct TileGeometry {
  int classes = 1;
  int rows_per_tile = 1;   // R: a power of two, at most kThreads
  int tiles_per_unit = 1;  // max(1, kChunkRows / R)
  int buffers = 1;         // 2: the next tile's copy overlaps the current tile's work
  int buffer_elems = 0;    // one buffer's capacity in elements: R * C + N - 1 rounded up to N (Pack<T>::kN)
  int input_offset = 0;    // the input's address modulo 16 bytes, in elements
  int output_offset = 0;   // grad_input's (backward)
};

// The block's dynamic shared memory (TilePlan::smem_bytes): the tile buffers (one when single-buffered), two slots of R
// targets (the current tile's and the next's), per tile row m, z_t and so (the backward's row phase replaces z_t and
// so by its two gradient factors), then the current unit's row losses ('mean' / 'sum': max(R, 64) of them).
template <typename T, typename Acc>
struct TileSmem {
  T* buffers;
  int second;  // buffer_elems with two buffers, 0 with one
  std::int64_t* target_slots;
  int rows;  // R
  Acc* m;
  Acc* zt;
  Acc* so;
  Acc* loss;
  // The logits and the targets of the block's k-th tile.
  __device__ __forceinline__ T* buffer(std::int64_t k) const { return buffers + (k & 1) * second; }
  __device__ __forceinline__ std::int64_t* targets(std::int64_t k) const { return target_slots + (k & 1) * rows; }
};

template <typename T, typename Acc>
__device__ __forceinline__ TileSmem<T, Acc> tile_smem(const TileGeometry& geo) {
  extern __shared__ __align__(16) unsigned char smem[];
  TileSmem<T, Acc> s;
  s.buffers = reinterpret_cast<T*>(smem);
  s.second = (geo.buffers - 1) * geo.buffer_elems;
  s.rows = geo.rows_per_tile;
  s.target_slots =
      reinterpret_cast<std::int64_t*>(smem + static_cast<std::size_t>(geo.buffers) * geo.buffer_elems * sizeof(T));
  Acc* stats = reinterpret_cast<Acc*>(s.target_slots + 2 * geo.rows_per_tile);
  s.m = stats;
  s.zt = stats + geo.rows_per_tile;
  s.so = stats + 2 * geo.rows_per_tile;
  s.loss = stats + 3 * geo.rows_per_tile;
  return s;
}

// Global -> shared copies in flight (cp.async, sm_80 and later; plain copies before) of 16 bytes (bypassing L1) and of
// 8 bytes; their commit and wait.
__device__ __forceinline__ void copy16_async(void* dst, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(dst))),
               "l"(src)
               : "memory");
#else
  *static_cast<int4*>(dst) = *static_cast<const int4*>(src);
#endif
}
__device__ __forceinline__ void copy8_async(void* dst, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(dst))),
               "l"(src)
               : "memory");
#else
  *static_cast<long long*>(dst) = *static_cast<const long long*>(src);
#endif
}
__device__ __forceinline__ void copies_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void copies_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
#endif
}

// Copies elements [a0, a1) of x (`total` elements; off: x's address modulo 16, in elements) into dst, element e at
// dst[e - a0 + s] with s = (a0 + off) % N: the 16-byte packs of x's own 16-byte grid that [a0, a1) touches, with
// cp.async; x's first and last packs where they reach past its ends element by element (threads 0 and kThreads - 1).
// The packs' elements outside [a0, a1) belong to the neighbouring tiles: read, unused.
template <typename T>
__device__ __forceinline__ void copy_tile(T* dst, const T* __restrict__ x, std::int64_t total, int off, std::int64_t a0,
                                          std::int64_t a1) {
  constexpr int N = Pack<T>::kN;
  const std::int64_t p0 = (a0 + off) / N, e0 = p0 * N - off;  // the tile's first pack, its first element in x
  const int packs = static_cast<int>((a1 - 1 + off) / N - p0 + 1);
  // Packs [whole0, whole1] of the tile lie inside x: pack i holds x's elements e0 + i N ... e0 + i N + N - 1.
  const int whole0 = e0 < 0 ? 1 : 0;
  const std::int64_t inside = (total + off) / N - 1 - p0;
  const int whole1 = inside < packs - 1 ? static_cast<int>(inside) : packs - 1;
  for (int i = whole0 + static_cast<int>(threadIdx.x); i <= whole1; i += kThreads) {
    copy16_async(dst + i * N, x + (e0 + static_cast<std::int64_t>(i) * N));
  }
  const auto edge = [&](int i) {
    const std::int64_t e = e0 + static_cast<std::int64_t>(i) * N;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      if (e + j >= 0 && e + j < total) dst[i * N + j] = x[e + j];
    }
  };
  if (threadIdx.x == 0 && (whole0 > 0 || whole1 < 0)) edge(0);
  if (threadIdx.x == kThreads - 1 && packs > 1 && whole1 < packs - 1) edge(packs - 1);
}

// The inverse for the backward: y[e] = src[e - a0 + s] for e in [a0, a1). Where y has x's alignment (in_off ==
// out_off), 16-byte stores of the packs inside [a0, a1) and element stores for the (at most N - 1) elements at each
// end that share a pack with the neighbouring tiles; else element stores.
template <typename T>
__device__ __forceinline__ void store_tile(T* __restrict__ y, const T* src, int in_off, int out_off, std::int64_t a0,
                                           std::int64_t a1) {
  constexpr int N = Pack<T>::kN;
  const int s = static_cast<int>((a0 + in_off) % N), span = static_cast<int>(a1 - a0);
  T* y0 = y + a0;  // y0[i] = src[s + i]
  int head = 0, tail = 0;  // elements [0, head) and [tail, span) element by element
  if (in_off == out_off) {
    // Pack i of src holds y0[i N - s ... i N - s + N - 1]: the whole packs inside [0, span) are i in [whole0, whole1].
    const int whole0 = s > 0 ? 1 : 0, whole1 = (s + span) / N - 1;
    for (int i = whole0 + static_cast<int>(threadIdx.x); i <= whole1; i += kThreads) {
      *reinterpret_cast<int4*>(y0 + (i * N - s)) = *reinterpret_cast<const int4*>(src + i * N);
    }
    head = whole0 * N - s < span ? whole0 * N - s : span;
    tail = (whole1 + 1) * N - s > head ? (whole1 + 1) * N - s : head;
  }
  for (int i = static_cast<int>(threadIdx.x); i < head; i += kThreads) y0[i] = src[s + i];
  for (int i = tail + static_cast<int>(threadIdx.x); i < span; i += kThreads) y0[i] = src[s + i];
}

// The lanes of this thread's group of L (a power of two, at most 32) in its warp, for the group's shuffles.
template <int L>
__device__ __forceinline__ unsigned group_lanes() {
  if constexpr (L == 32) {
    return 0xffffffffu;
  } else {
    return ((1u << L) - 1u) << (threadIdx.x & 31u & ~static_cast<unsigned>(L - 1));
  }
}

// fmax: the larger of a and b, b when a is NaN (one instruction; a pass's maximum never becomes NaN).
__device__ __forceinline__ float acc_max(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double acc_max(double a, double b) { return fmax(a, b); }

// exp(v) in the group passes: exp's full precision for fp32 and fp64; for the half types, whose loss and gradient are
// rounded to 11 or 8 significant bits, the hardware's 2^x of v log2(e) (as __expf: at most 2 + 1.173 |v| ulps of
// fp32, below 2^-16 relative for |v| < 100, the range where exp(v) is not negligible; results below 2^-126 flushed
// to 0) in 2 instructions instead of 8.
template <typename T, typename Acc>
__device__ __forceinline__ Acc tile_exp(Acc v) {
  if constexpr (sizeof(T) == 2) {
#ifdef __CUDA_ARCH__
    float e;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(v * 1.44269504088896341f));
    return e;
#else
    return exp2f(v * 1.44269504088896341f);
#endif
  } else {
    return sfl_exp(v);
  }
}

// The maximum of a lane's classes rank, rank + L, ... of row x (-inf for none); the half types compare in T itself
// (__hmax: exact, no conversion per element; like fmax it drops a NaN), converted once.
template <int L, typename T, typename Acc>
__device__ __forceinline__ Acc lane_max(const T* x, int rank, int classes) {
  if constexpr (sizeof(T) == 2) {
    T m = from_acc<T>(-std::numeric_limits<Acc>::infinity());
#pragma unroll 4
    for (int c = rank; c < classes; c += L) m = __hmax(m, x[c]);
    return to_acc<Acc>(m);
  } else {
    Acc m = -std::numeric_limits<Acc>::infinity();
#pragma unroll 4
    for (int c = rank; c < classes; c += L) m = acc_max(m, to_acc<Acc>(x[c]));
    return m;
  }
}

// The group's maximum / sum of v in every lane: a butterfly of shuffles (each pairing is commutative, so all lanes
// compute the same value). No lane's v is NaN in the maximum (the passes never select a NaN).
template <int L, typename Acc>
__device__ __forceinline__ Acc group_max(Acc v, unsigned lanes) {
#pragma unroll
  for (int o = L / 2; o > 0; o /= 2) {
    v = acc_max(v, __shfl_xor_sync(lanes, v, o));
  }
  return v;
}
template <int L, typename Acc>
__device__ __forceinline__ Acc group_sum(Acc v, unsigned lanes) {
#pragma unroll
  for (int o = L / 2; o > 0; o /= 2) v += __shfl_xor_sync(lanes, v, o);
  return v;
}

// Group phase: for the tile's rows r = group, group + kThreads / L, ... that have a class target (x0: row 0's logits,
// targets: the rows' targets, both in shared memory), m[r] (the row's maximum, x_t included), zt[r] = x_t - m and
// so[r] = sum_{c != t} exp(x_c - m); other rows are left to the row phase. The target's slot holds -inf afterwards:
// the target's lane (the only one reading it) sets it between the two passes, after every lane has read x_t. A NaN
// logit is never the maximum; it makes so or z_t NaN, so the row's loss and gradient are NaN.
template <int L, typename T, typename Acc>
__device__ __forceinline__ void tile_row_stats(T* x0, const std::int64_t* targets, int classes, int nrows,
                                               const TileSmem<T, Acc>& sm) {
  const int rank = static_cast<int>(threadIdx.x) % L;
  const unsigned lanes = group_lanes<L>();
  for (int r = static_cast<int>(threadIdx.x) / L; r < nrows; r += kThreads / L) {
    const std::int64_t t = targets[r];
    if (t < 0 || t >= classes) continue;  // the whole group: ignored or invalid
    T* x = x0 + r * classes;
    const int ti = static_cast<int>(t);
    const Acc xt = to_acc<Acc>(x[ti]);
    const Acc m = group_max<L>(lane_max<L, T, Acc>(x, rank, classes), lanes);
    __syncwarp(lanes);
    if (rank == ti % L) x[ti] = from_acc<T>(-std::numeric_limits<Acc>::infinity());
    Acc so = Acc(0);
#pragma unroll 4
    for (int c = rank; c < classes; c += L) so += tile_exp<T>(to_acc<Acc>(x[c]) - m);
    so = group_sum<L>(so, lanes);
    if (rank == 0) {
      sm.m[r] = m;
      sm.zt[r] = xt - m;
      sm.so[r] = so;
    }
  }
}

// Calls work(x0, buffer, targets, n0, nrows, tile) for each of this block's tiles: rows [n0, n0 + nrows), their logits
// in `buffer` from x0 = row n0's, their targets in `targets`, every thread of the block together (work may synchronize
// the block). The tile's copies are complete and visible when work starts; with two buffers the next tile's copies
// are issued first.
template <typename T, typename Acc, typename Work>
__device__ __forceinline__ void for_each_tile(const TileGeometry& geo, std::int64_t rows, const T* __restrict__ input,
                                              const std::int64_t* __restrict__ target, const TileSmem<T, Acc>& sm,
                                              Work&& work) {
  constexpr int N = Pack<T>::kN;
  const std::int64_t R = geo.rows_per_tile, C = geo.classes, per_unit = geo.tiles_per_unit;
  const std::int64_t tiles = (rows + R - 1) / R;
  const auto tile_at = [&](std::int64_t k) {
    return (static_cast<std::int64_t>(blockIdx.x) + k / per_unit * static_cast<std::int64_t>(gridDim.x)) * per_unit +
           k % per_unit;
  };
  const auto rows_of = [&](std::int64_t tile) { return static_cast<int>(rows - tile * R < R ? rows - tile * R : R); };
  const auto issue = [&](std::int64_t k, std::int64_t tile) {  // the copies of tile, the block's k-th
    const std::int64_t n0 = tile * R;
    const int nrows = rows_of(tile);
    copy_tile(sm.buffer(k), input, rows * C, geo.input_offset, n0 * C, (n0 + nrows) * C);
    std::int64_t* t = sm.targets(k);
    for (int i = static_cast<int>(threadIdx.x); i < nrows; i += kThreads) copy8_async(t + i, target + n0 + i);
    copies_commit();
  };
  std::int64_t tile = tile_at(0);
  if (tile < tiles) issue(0, tile);
  for (std::int64_t k = 0; tile < tiles; ++k) {
    const std::int64_t next = tile_at(k + 1);
    copies_wait_all();
    __syncthreads();
    if (geo.buffers == 2 && next < tiles) issue(k + 1, next);
    const std::int64_t n0 = tile * R;
    T* buffer = sm.buffer(k);
    work(buffer + (n0 * C + geo.input_offset) % N, buffer, sm.targets(k), n0, rows_of(tile), tile);
    if (geo.buffers == 1 && next < tiles) {
      __syncthreads();
      issue(k + 1, next);
    }
    tile = next;
  }
}

// 'mean' / 'sum': the chunks of a finished unit (rows [row0, row0 + unit_rows), losses loss[0, unit_rows)), one warp
// per chunk: lane l adds the losses of the chunk's rows l and l + 32, then a fixed shuffle tree; rows past the end
// count 0. The order depends on nothing but the chunk: the partial sums do not depend on the grid.
template <typename Acc>
__device__ __forceinline__ void sum_unit_chunks(const Acc* loss, std::int64_t row0, int unit_rows, std::int64_t rows,
                                                Acc* __restrict__ partials) {
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) / 32;
  for (int q = warp; q * kChunkRows < unit_rows; q += kThreads / 32) {
    const std::int64_t first = row0 + q * kChunkRows;
    if (first >= rows) break;
    const Acc a = first + lane < rows ? loss[q * kChunkRows + lane] : Acc(0);
    const Acc b = first + 32 + lane < rows ? loss[q * kChunkRows + 32 + lane] : Acc(0);
    Acc v = a + b;
#pragma unroll
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
    if (lane == 0) partials[first / kChunkRows] = v;
  }
}

// Chunked false ('none'): out[n] = row n's weighted loss. Chunked ('mean' / 'sum'): partials[chunk] = the sum of the
// chunk's row losses (out unused).
template <typename T, int L, bool Chunked>
__global__ void __launch_bounds__(kThreads)
    softmax_focal_loss_tile_forward_kernel(SoftmaxFocalCoeffs<acc_t<T>> k, TileGeometry geo, std::int64_t rows,
                                           const T* __restrict__ input, const std::int64_t* __restrict__ target,
                                           const T* __restrict__ weight, T* __restrict__ out,
                                           acc_t<T>* __restrict__ partials, unsigned long long* first_invalid_row) {
  using Acc = acc_t<T>;
  const TileSmem<T, Acc> sm = tile_smem<T, Acc>(geo);
  for_each_tile(geo, rows, input, target, sm,
                [&](T* x0, T*, const std::int64_t* targets, std::int64_t n0, int nrows, std::int64_t tile) {
    tile_row_stats<L>(x0, targets, geo.classes, nrows, sm);
    __syncthreads();
    const int slot = static_cast<int>(tile % geo.tiles_per_unit);
    for (int r = static_cast<int>(threadIdx.x); r < nrows; r += kThreads) {
      const std::int64_t n = n0 + r;
      const SoftmaxFocalTarget<Acc> tg = load_softmax_focal_target<T, Acc>(r, geo.classes, targets, weight);
      report_invalid(tg.kind, 0, n, first_invalid_row);
      const Acc loss = tg.kind == 0 ? tg.w * softmax_focal_row(sm.zt[r], sm.so[r], k).loss : Acc(0);
      if constexpr (Chunked) {
        sm.loss[slot * geo.rows_per_tile + r] = loss;
      } else {
        out[n] = from_acc<T>(loss);
      }
    }
    if constexpr (Chunked) {
      if (slot == geo.tiles_per_unit - 1 || n0 + nrows == rows) {  // the unit is done
        __syncthreads();
        const int unit_rows = geo.tiles_per_unit * geo.rows_per_tile;
        sum_unit_chunks(sm.loss, (tile / geo.tiles_per_unit) * unit_rows, unit_rows, rows, partials);
      }
    }
  });
}

// grad_input of row n: grad[n * grad_stride] * grad_scale * d (weighted loss_n) / dx; zeros for ignored and invalid
// rows.
template <typename T, int L>
__global__ void __launch_bounds__(kThreads)
    softmax_focal_loss_tile_backward_kernel(SoftmaxFocalCoeffs<acc_t<T>> k, TileGeometry geo, std::int64_t rows,
                                            const T* __restrict__ grad, std::int64_t grad_stride, acc_t<T> grad_scale,
                                            const T* __restrict__ input, const std::int64_t* __restrict__ target,
                                            const T* __restrict__ weight, T* __restrict__ grad_input,
                                            unsigned long long* first_invalid_row) {
  using Acc = acc_t<T>;
  const TileSmem<T, Acc> sm = tile_smem<T, Acc>(geo);
  const int C = geo.classes;
  for_each_tile(geo, rows, input, target, sm,
                [&](T* x0, T* buffer, const std::int64_t* targets, std::int64_t n0, int nrows, std::int64_t) {
    tile_row_stats<L>(x0, targets, C, nrows, sm);
    __syncthreads();
    for (int r = static_cast<int>(threadIdx.x); r < nrows; r += kThreads) {
      const std::int64_t n = n0 + r;
      const SoftmaxFocalTarget<Acc> tg = load_softmax_focal_target<T, Acc>(r, C, targets, weight);
      report_invalid(tg.kind, 0, n, first_invalid_row);
      if (tg.kind != 0) continue;
      const SoftmaxFocalRow<Acc> row = softmax_focal_row(sm.zt[r], sm.so[r], k);
      const Acc upstream = to_acc<Acc>(grad[n * grad_stride]) * grad_scale;
      sm.zt[r] = upstream * tg.w * row.d_target;
      sm.so[r] = upstream * tg.w * row.d_other;
    }
    __syncthreads();
    const int rank = static_cast<int>(threadIdx.x) % L;
    for (int r = static_cast<int>(threadIdx.x) / L; r < nrows; r += kThreads / L) {
      const std::int64_t t = targets[r];
      T* x = x0 + r * C;
      if (t < 0 || t >= C) {
        for (int c = rank; c < C; c += L) x[c] = from_acc<T>(Acc(0));
        continue;
      }
      const Acc m = sm.m[r], d_target = sm.zt[r], d_other = sm.so[r];
#pragma unroll 4
      for (int c = rank; c < C; c += L) x[c] = from_acc<T>(d_other * tile_exp<T>(to_acc<Acc>(x[c]) - m));
      if (rank == static_cast<int>(t) % L) x[t] = from_acc<T>(d_target);  // its slot held -inf: d_other * 0
    }
    __syncthreads();
    store_tile(grad_input, buffer, geo.input_offset, geo.output_offset, n0 * C, (n0 + nrows) * C);
  });
}

// ---------------------------------------------------------------------------------------------------
// Block kernels: rows of kSoftmaxFocalBlockRowClasses classes or more, a block per row.

// The row group of the block kernels (softmax_focal_loss_kernel.cuh): the whole block, reduced with group_all_reduce
// (common/block_reduce.cuh: a fixed order, the same value in every thread).
template <int RowThreads, typename Acc>
struct RowGroup {
  int rank, size;
  Acc* shared;  // kThreads / 32 elements
  template <bool Max>
  __host__ __device__ Acc reduce(Acc v) const {
#ifdef __CUDA_ARCH__
    return group_all_reduce<Max, RowThreads>(v, shared);
#else
    return v;  // never called on the host: the CPU's group is SerialRow
#endif
  }
  __host__ __device__ Acc max(Acc v) const { return reduce<true>(v); }
  __host__ __device__ Acc sum(Acc v) const { return reduce<false>(v); }
};

// row(g, n) for the rows of this block: blocks loop over rows with a grid stride (the loop bounds are the same for
// all the block's threads).
template <int RowThreads, typename Acc, typename Row>
__device__ __forceinline__ void for_each_group_row(std::int64_t rows, Row&& row) {
  __shared__ Acc shared[kThreads / 32];
  const RowGroup<RowThreads, Acc> g{static_cast<int>(threadIdx.x) % RowThreads, RowThreads, shared};
  constexpr int kGroups = kThreads / RowThreads;
  for (std::int64_t n = static_cast<std::int64_t>(blockIdx.x) * kGroups + threadIdx.x / RowThreads; n < rows;
       n += static_cast<std::int64_t>(gridDim.x) * kGroups) {
    row(g, n);
  }
}

// 'none': out[n] = loss of row n.
template <typename T, int RowThreads>
__global__ void __launch_bounds__(kThreads)
    softmax_focal_loss_forward_kernel(SoftmaxFocalCoeffs<acc_t<T>> k, std::int64_t rows, std::int64_t classes,
                                      const T* __restrict__ input, const std::int64_t* __restrict__ target,
                                      const T* __restrict__ weight, T* __restrict__ out,
                                      unsigned long long* first_invalid_row) {
  for_each_group_row<RowThreads, acc_t<T>>(rows, [&](const auto& g, std::int64_t n) {
    int kind = 0;
    const acc_t<T> loss = softmax_focal_row_loss(g, k, n, classes, input, target, weight, kind);
    report_invalid(kind, g.rank, n, first_invalid_row);
    if (g.rank == 0) out[n] = from_acc<T>(loss);
  });
}

// 'mean' / 'sum': partials[chunk] = the sum of the chunk's row losses, in row order (thread 0), one chunk per block
// iteration.
template <typename T, int RowThreads>
__global__ void __launch_bounds__(kThreads)
    softmax_focal_loss_chunk_kernel(SoftmaxFocalCoeffs<acc_t<T>> k, std::int64_t rows, std::int64_t classes,
                                    const T* __restrict__ input, const std::int64_t* __restrict__ target,
                                    const T* __restrict__ weight, acc_t<T>* __restrict__ partials,
                                    unsigned long long* first_invalid_row) {
  using Acc = acc_t<T>;
  __shared__ Acc shared[kThreads / 32];
  const RowGroup<RowThreads, Acc> g{static_cast<int>(threadIdx.x) % RowThreads, RowThreads, shared};
  constexpr int kGroups = kThreads / RowThreads;
  const std::int64_t chunks = softmax_focal_loss_chunk_count(rows);
  // The chunk loop's bounds depend only on blockIdx / gridDim, so every thread reaches block_sum's barriers.
  for (std::int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    const std::int64_t first = chunk * kSoftmaxFocalChunkRows;
    const std::int64_t last = first + kSoftmaxFocalChunkRows < rows ? first + kSoftmaxFocalChunkRows : rows;
    Acc sum = Acc(0);
    for (std::int64_t n = first + threadIdx.x / RowThreads; n < last; n += kGroups) {
      int kind = 0;
      sum += softmax_focal_row_loss(g, k, n, classes, input, target, weight, kind);
      report_invalid(kind, g.rank, n, first_invalid_row);
    }
    const Acc total = block_sum<Acc, kThreads>(g.rank == 0 ? sum : Acc(0), shared);
    if (threadIdx.x == 0) partials[chunk] = total;
  }
}

template <typename T, int RowThreads>
__global__ void __launch_bounds__(kThreads)
    softmax_focal_loss_backward_kernel(SoftmaxFocalCoeffs<acc_t<T>> k, std::int64_t rows, std::int64_t classes,
                                       const T* __restrict__ grad, std::int64_t grad_stride, acc_t<T> grad_scale,
                                       const T* __restrict__ input, const std::int64_t* __restrict__ target,
                                       const T* __restrict__ weight, T* __restrict__ grad_input,
                                       unsigned long long* first_invalid_row) {
  for_each_group_row<RowThreads, acc_t<T>>(rows, [&](const auto& g, std::int64_t n) {
    int kind = 0;
    softmax_focal_row_grad(g, k, n, classes, to_acc<acc_t<T>>(grad[n * grad_stride]) * grad_scale, input, target,
                           weight, grad_input, kind);
    report_invalid(kind, g.rank, n, first_invalid_row);
  });
}

const bool kRegistered = for_each_floating_type([](auto tag, const char* type) {
  using T = typename decltype(tag)::type;
  for_each_int<1, 2, 4, 8, 16, 32>([&](auto lanes) {
    constexpr int L = decltype(lanes)::value;
    const std::string args = std::string(type) + ", " + std::to_string(L);
    register_instantiation(kOp, "softmax_focal_loss_tile_forward_kernel", args + ", false",
                           &softmax_focal_loss_tile_forward_kernel<T, L, false>);
    register_instantiation(kOp, "softmax_focal_loss_tile_forward_kernel", args + ", true",
                           &softmax_focal_loss_tile_forward_kernel<T, L, true>);
    register_instantiation(kOp, "softmax_focal_loss_tile_backward_kernel", args,
                           &softmax_focal_loss_tile_backward_kernel<T, L>);
  });
  const std::string block = std::string(type) + ", " + std::to_string(kBlockRow);
  register_instantiation(kOp, "softmax_focal_loss_forward_kernel", block, &softmax_focal_loss_forward_kernel<T, kBlockRow>);
  register_instantiation(kOp, "softmax_focal_loss_chunk_kernel", block, &softmax_focal_loss_chunk_kernel<T, kBlockRow>);
  register_instantiation(kOp, "softmax_focal_loss_backward_kernel", block,
                         &softmax_focal_loss_backward_kernel<T, kBlockRow>);
  register_instantiation(kOp, "chunked_sum_finish_kernel", std::string(type) + ", " + std::to_string(kFinishThreads),
                         &chunked_sum_finish_kernel<T, kFinishThreads>);
});

// ---------------------------------------------------------------------------------------------------
// Host: the tile plan and the launches.

constexpr std::size_t kTileSmemLimit = 48 * 1024;  // a block's dynamic shared memory without opting in
constexpr std::size_t kTileBufferTarget = 16 * 1024;  // tiles grow (more rows per group) up to this many bytes

// The shared-memory replays of a warp's read of one slot per lane with groups of `lanes` (the warp's groups read
// consecutive rows of `classes` elements, lane rank of each reading class rank + j * lanes): the most distinct 4-byte
// words any bank serves (per half warp for 8-byte elements).
int bank_conflicts(int lanes, int classes, int elem_bytes) {
  const int words_per_element = std::max(1, elem_bytes / 4), phase_lanes = elem_bytes == 8 ? 16 : 32;
  int worst = 1;
  for (int first = 0; first < 32; first += phase_lanes) {
    std::int64_t words[32];
    int count = 0;
    for (int lane = first; lane < first + phase_lanes; ++lane) {
      const std::int64_t w0 = (static_cast<std::int64_t>(lane / lanes) * classes + lane % lanes) * elem_bytes / 4;
      for (std::int64_t w = w0; w < w0 + words_per_element; ++w) {
        if (std::find(words, words + count, w) == words + count) words[count++] = w;
      }
    }
    for (int bank = 0; bank < 32; ++bank) {
      worst = std::max(worst, static_cast<int>(std::count_if(words, words + count,
                                                             [bank](std::int64_t w) { return w % 32 == bank; })));
    }
  }
  return worst;
}

// The launch's tiling for classes < kSoftmaxFocalBlockRowClasses. The group size L: among those whose tile of one row
// per group fits two buffers in kTileSmemLimit (else one buffer; else none: below), the one with the fewest
// estimated cycles per row, L / 32 * (ceil(C / L) * max(14, 8 * replays) + 4 log2 L + 12): per element slot of a
// lane, about 14 instructions in the two passes (exp included; 16 with the half types' conversions) or the
// shared-memory pipe's replays of its two loads (4 instructions' time each), whichever bounds, plus the reductions
// and the row's bookkeeping, all shared by the group's L lanes. The tile then grows to more rows per group while a
// buffer stays within kTileBufferTarget. Rows too long for 8 rows in one buffer (more than 1520 classes in fp32, 754
// in fp64) take L = 32 and fewer rows than warps.
template <typename T>
struct TilePlan {
  int lanes = 32;
  TileGeometry geo;
  std::size_t smem = 0;

  TilePlan(int classes, const void* input, const void* output) {
    constexpr int N = Pack<T>::kN;
    const auto buffer_elems = [&](int rows) { return (rows * classes + 2 * (N - 1)) / N * N; };
    const auto smem_bytes = [&](int rows, int buffers) {  // TileSmem
      return static_cast<std::size_t>(buffers) * buffer_elems(rows) * sizeof(T) + 2 * rows * sizeof(std::int64_t) +
             static_cast<std::size_t>(3 * rows + std::max(rows, kChunkRows)) * sizeof(acc_t<T>);
    };
    int rows = 0, buffers = 0;
    for (int b = 2; b >= 1 && rows == 0; --b) {
      double best = 0;
      for (int l = 1, steps = 0; l <= 32; l *= 2, ++steps) {
        if (smem_bytes(kThreads / l, b) > kTileSmemLimit) continue;
        const double slot = std::max(sizeof(T) == 2 ? 16.0 : 14.0, 8.0 * bank_conflicts(l, classes, sizeof(T)));
        const double cost = l / 32.0 * ((classes + l - 1) / l * slot + 4.0 * steps + 12.0);
        if (rows == 0 || cost < best) {
          best = cost;
          lanes = l;
          rows = kThreads / l;
          buffers = b;
        }
      }
    }
    if (rows == 0) {  // one buffer of fewer rows than warps
      lanes = 32;
      buffers = 1;
      for (rows = kThreads / 32; rows > 1 && smem_bytes(rows, 1) > kTileSmemLimit;) rows /= 2;
    } else {
      while (rows < kThreads && smem_bytes(2 * rows, buffers) <= kTileSmemLimit &&
             buffer_elems(2 * rows) * sizeof(T) <= kTileBufferTarget) {
        rows *= 2;
      }
    }
    geo.classes = classes;
    geo.rows_per_tile = rows;
    geo.tiles_per_unit = std::max(1, kChunkRows / rows);
    geo.buffers = buffers;
    geo.buffer_elems = buffer_elems(rows);
    geo.input_offset = static_cast<int>(reinterpret_cast<std::uintptr_t>(input) % 16 / sizeof(T));
    geo.output_offset = static_cast<int>(reinterpret_cast<std::uintptr_t>(output) % 16 / sizeof(T));
    smem = smem_bytes(rows, buffers);
  }
};

// kernel over `rows` rows with plan's tiling: as many blocks as fit on the device at once (a block streams its
// units), never more than there are units; the SMs' L1 / shared split preferring shared memory (the tiles need it,
// the kernels barely use L1).
template <typename T, typename... Params, typename... Args>
void launch_tiles(void (*kernel)(Params...), const TilePlan<T>& plan, std::int64_t rows, cudaStream_t stream,
                  Args&&... args) {
  const std::int64_t tiles = (rows + plan.geo.rows_per_tile - 1) / plan.geo.rows_per_tile;
  const std::int64_t units = (tiles + plan.geo.tiles_per_unit - 1) / plan.geo.tiles_per_unit;
  DETOPS_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  int per_sm = 0;
  DETOPS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, plan.smem));
  kernel<<<grid_for(units, 1, std::max(per_sm, 1)), kThreads, plan.smem, stream>>>(
      kernel_arg<Params>(std::forward<Args>(args))...);
  DETOPS_CHECK_LAUNCH();
}

// fn(std::integral_constant<int, L>{}) for the plan's group size L.
template <typename Fn>
void dispatch_lanes(int lanes, Fn&& fn) {
  for_each_int<1, 2, 4, 8, 16, 32>([&](auto l) {
    if (decltype(l)::value == lanes) fn(l);
  });
}

// The call's coefficients in the accumulation type of T (dispatch_logit_loss).
template <typename T>
using Coeffs = SoftmaxFocalCoeffs<acc_t<T>>;

bool block_rows(std::int64_t classes) { return classes >= kSoftmaxFocalBlockRowClasses; }

}  // namespace

void launch_softmax_focal_loss_forward(const SoftmaxFocalLossParams& params, const SoftmaxFocalLossForwardArgs& args,
                                       DType dtype, cudaStream_t stream) {
  dispatch_logit_loss<Coeffs>("softmax_focal_loss_forward", params, args.n, dtype, [&](auto tag, const auto& k) {
    using T = typename decltype(tag)::type;
    const bool none = params.reduction == SoftmaxFocalLossReduction::kNone;
    const std::int64_t chunks = softmax_focal_loss_chunk_count(args.n);
    if (block_rows(args.classes)) {
      if (none) {
        launch_kernel(&softmax_focal_loss_forward_kernel<T, kBlockRow>, grid_for(args.n, 1), kThreads, stream, k,
                      args.n, args.classes, args.input, args.target, args.weight, args.out, args.first_invalid_row);
        return;
      }
      launch_kernel(&softmax_focal_loss_chunk_kernel<T, kBlockRow>, grid_for(chunks, 1), kThreads, stream, k, args.n,
                    args.classes, args.input, args.target, args.weight, args.partials, args.first_invalid_row);
    } else {
      const TilePlan<T> plan(static_cast<int>(args.classes), args.input, nullptr);
      dispatch_lanes(plan.lanes, [&](auto lanes) {
        constexpr int L = decltype(lanes)::value;
        if (none) {
          launch_tiles(&softmax_focal_loss_tile_forward_kernel<T, L, false>, plan, args.n, stream, k, plan.geo, args.n,
                       args.input, args.target, args.weight, args.out, args.partials, args.first_invalid_row);
        } else {
          launch_tiles(&softmax_focal_loss_tile_forward_kernel<T, L, true>, plan, args.n, stream, k, plan.geo, args.n,
                       args.input, args.target, args.weight, args.out, args.partials, args.first_invalid_row);
        }
      });
      if (none) return;
    }
    launch_kernel(&chunked_sum_finish_kernel<T, kFinishThreads>, 1, kFinishThreads, stream, chunks, args.partials,
                  static_cast<acc_t<T>>(args.scale), args.out);
  });
}

void launch_softmax_focal_loss_backward(const SoftmaxFocalLossParams& params, const SoftmaxFocalLossBackwardArgs& args,
                                        DType dtype, cudaStream_t stream) {
  dispatch_logit_loss<Coeffs>("softmax_focal_loss_backward", params, args.n, dtype, [&](auto tag, const auto& k) {
    using T = typename decltype(tag)::type;
    const acc_t<T> scale = static_cast<acc_t<T>>(args.grad.scale);
    if (block_rows(args.classes)) {
      launch_kernel(&softmax_focal_loss_backward_kernel<T, kBlockRow>, grid_for(args.n, 1), kThreads, stream, k, args.n,
                    args.classes, args.grad.data, args.grad.stride, scale, args.input, args.target, args.weight,
                    args.grad_input, args.first_invalid_row);
      return;
    }
    const TilePlan<T> plan(static_cast<int>(args.classes), args.input, args.grad_input);
    dispatch_lanes(plan.lanes, [&](auto lanes) {
      launch_tiles(&softmax_focal_loss_tile_backward_kernel<T, decltype(lanes)::value>, plan, args.n, stream, k,
                   plan.geo, args.n, args.grad.data, args.grad.stride, scale, args.input, args.target, args.weight,
                   args.grad_input, args.first_invalid_row);
    });
  });
}

}  // namespace detops
