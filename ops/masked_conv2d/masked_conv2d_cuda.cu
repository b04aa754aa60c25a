// Masked 2-D convolution on CUDA (masked_conv2d.h): per chunk of selected positions, a gather kernel writes
// position-contiguous columns (the features' im2col, or grad at the positions) and cuBLAS multiplies them with
// the weight on tensor cores (fp16 / bf16 with fp32 accumulation; fp32 in fp32 unless TF32 is allowed; fp64 in
// fp64). The forward's last kernel writes every output element once (bias + product at a selected position,
// 0 elsewhere); the features' gradient is a gather of d(im2col) over the kernel taps of each input pixel. A map
// of rows ([N, H_out, W_out] int32, -1 where not selected) links output positions to their columns. No
// atomics: every sum has a fixed order (deterministic).
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "common/block_reduce.cuh"
#include "common/cublas_gemm.cuh"
#include "common/kernel_launch.cuh"
#include "masked_conv2d/masked_conv2d_kernel.cuh"

namespace detops {
namespace {

constexpr const char* kOp = "masked_conv2d";
constexpr int kThreads = 256;
constexpr std::int64_t kGatherTaps = 32;    // the gather: about this many taps (whole channels) per block
constexpr std::int64_t kOutputChannels = 16;  // the output kernel: channels per block
constexpr int kCol2imChannels = 8;            // the features' gradient: channels per slice
constexpr int kCol2imHits = 9;                // the features' gradient: hits kept per pixel
constexpr std::int64_t kCol2imThreads = 1 << 19;  // the features' gradient: about this many threads (grid y)
constexpr std::int64_t kMaxGridY = 65535;
using P = MaskedConv2dParams;
using S = MaskedConv2dShape;

// rows[(n, y, x)] = r for each selected position r (the map holds -1 before).
__global__ void __launch_bounds__(kThreads)
    masked_conv2d_rows_kernel(S s, const std::int64_t* __restrict__ positions, std::int64_t count,
                              std::int32_t* __restrict__ rows) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < count; r += stride) {
    rows[masked_conv2d_position_index(s, positions, r)] = static_cast<std::int32_t>(r);
  }
}

// The im2col of the chunk's positions r0 + q, q < chunk: columns[t, q] (row length ld) = data[n, c, y sh - ph
// + i, x sw - pw + j] for tap t = (c, i, j) of weight's layout, 0 in the padding; and columns[t, q] = 0 for q in
// [chunk, padded) (padded = chunk rounded up to kMaskedConv2dLdAlign <= ld): the GEMMs run over padded positions
// (cuBLAS picks its fast tensor-core kernels only for aligned extents; a padded position contributes 0 to the
// weight gradient and its rows of the other products are never read). A block: kThreads consecutive positions
// (one per thread: consecutive threads write consecutive columns and read neighbouring pixels) and `channels`
// consecutive channels' kh kw taps per blockIdx.y step. grad at the positions is the im2col of its 1x1 view (a
// shape with C_in = C_out, H x W = H_out x W_out, kernel 1 x 1, padding 0, stride 1).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    masked_conv2d_gather_kernel(P p, S s, const std::int64_t* __restrict__ positions, std::int64_t r0,
                                std::int64_t chunk, std::int64_t padded, std::int64_t channels, std::int64_t ld,
                                const T* __restrict__ data, T* __restrict__ columns) {
  const std::int64_t q = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (q >= padded) return;
  const std::int64_t plane = s.height * s.width, khw = s.kernel_h * s.kernel_w;
  const std::int64_t blocks = (s.in_channels + channels - 1) / channels;
  const T zero = from_acc<T>(acc_t<T>(0));
  if (q >= chunk) {  // a padding column: zeros
    for (std::int64_t b = blockIdx.y; b < blocks; b += gridDim.y) {
      const std::int64_t t0 = b * channels * khw, t1 = std::min(s.in_channels, (b + 1) * channels) * khw;
      for (std::int64_t t = t0; t < t1; ++t) columns[t * ld + q] = zero;
    }
    return;
  }
  const MaskedConv2dWindow win = masked_conv2d_window(p, positions, r0 + q);
  const T* image = data + win.n * s.in_channels * plane;
  for (std::int64_t b = blockIdx.y; b < blocks; b += gridDim.y) {
    const std::int64_t c0 = b * channels, c1 = std::min(s.in_channels, c0 + channels);
    T* out = columns + c0 * khw * ld + q;
    for (std::int64_t c = c0; c < c1; ++c) {
      const T* channel = image + c * plane;
      for (std::int64_t i = 0; i < s.kernel_h; ++i) {
        const std::int64_t h = win.h0 + i;
        const bool row_inside = static_cast<std::uint64_t>(h) < static_cast<std::uint64_t>(s.height);
        const std::int64_t line = row_inside ? h * s.width : 0;
        for (std::int64_t j = 0; j < s.kernel_w; ++j, out += ld) {
          const std::int64_t w = win.w0 + j;
          *out = row_inside && static_cast<std::uint64_t>(w) < static_cast<std::uint64_t>(s.width) ? channel[line + w]
                                                                                                 : zero;
        }
      }
    }
  }
}

// The output's positions e = (n, y, x) (one per thread) and `channels` channels per blockIdx.y step: where e's
// row r is in the chunk [r0, r1), out[n, o, y, x] = bias[o] + selected[o, r - r0] (selected null: no taps, 0);
// where e is not selected and write_zeros (the first chunk), 0; nothing otherwise.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    masked_conv2d_output_kernel(S s, const std::int32_t* __restrict__ rows, std::int64_t r0, std::int64_t r1,
                                bool write_zeros, std::int64_t channels, const acc_t<T>* __restrict__ selected,
                                std::int64_t ld, const T* __restrict__ bias, T* __restrict__ out) {
  using Acc = acc_t<T>;
  const std::int64_t plane = s.out_height * s.out_width;
  const std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (e >= s.batch * plane) return;
  const std::int64_t r = rows[e];
  const bool in_chunk = r >= r0 && r < r1;
  if (!in_chunk && !(r < 0 && write_zeros)) return;
  const std::int64_t n = e / plane, pixel = e - n * plane;
  const std::int64_t blocks = (s.out_channels + channels - 1) / channels;
  for (std::int64_t b = blockIdx.y; b < blocks; b += gridDim.y) {
    const std::int64_t o0 = b * channels, o1 = std::min(s.out_channels, o0 + channels);
    T* dst = out + (n * s.out_channels + o0) * plane + pixel;
    for (std::int64_t o = o0; o < o1; ++o, dst += plane) {
      Acc v = Acc(0);
      if (in_chunk) {
        if (selected != nullptr) v = selected[o * ld + (r - r0)];
        if (bias != nullptr) v += to_acc<Acc>(bias[o]);
      }
      *dst = from_acc<T>(v);
    }
  }
}

// Element `at` of a sum over chunks: this chunk's `sum` after prev[at] (the earlier chunks'; prev null on the
// first chunk), into partial[at] (the running sum) or, where partial is null (the last chunk), out[at] in T.
template <typename T>
__device__ __forceinline__ void finish_sum(std::int64_t at, acc_t<T> sum, const acc_t<T>* prev, acc_t<T>* partial,
                                           T* out) {
  const acc_t<T> v = prev != nullptr ? prev[at] + sum : sum;
  if (partial != nullptr) {
    partial[at] = v;
  } else {
    out[at] = from_acc<T>(v);
  }
}

// The features' gradient at the input pixels e = (n, h, w) (one per thread) and the channels c of blockIdx.y's
// slices of kCol2imChannels channels: the sum over the chunk's selected positions r in [r0, r1) whose window
// reads the pixel, in tap order, of dcol[(c, tap), r - r0] (row length ld), plus prev (the earlier chunks' sums;
// null on the first chunk), into partial (acc; when not null) or else grad_features. The pixel's hits (tap and
// row) are found once and kept for every channel (up to kCol2imHits of them: a 3x3 kernel at stride 1 has 9 at
// most; a pixel with more walks the map of rows again per slice), so a slice's loads are all independent.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    masked_conv2d_col2im_kernel(P p, S s, const std::int32_t* __restrict__ rows, std::int64_t r0, std::int64_t r1,
                                const acc_t<T>* __restrict__ dcol, std::int64_t ld, const acc_t<T>* prev,
                                acc_t<T>* partial, T* grad_features) {
  using Acc = acc_t<T>;
  constexpr int kC = kCol2imChannels;
  const std::int64_t plane = s.height * s.width;
  const std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (e >= s.batch * plane) return;
  const std::int64_t n = e / plane, pixel = e - n * plane, h = pixel / s.width, w = pixel - h * s.width;
  const std::int32_t* image_rows = rows + n * s.out_height * s.out_width;
  const std::int64_t channel_rows = s.kernel_h * s.kernel_w * ld;  // one channel's taps in dcol
  // The hits in this chunk: offsets tap ld + (row - r0) into a channel's taps, in tap order.
  std::int64_t hit[kCol2imHits];
  int hits = 0;
  bool more = false;
  masked_conv2d_for_each_hit(p, s, image_rows, h, w, [&](std::int64_t tap, std::int32_t row) {
    if (row < r0 || row >= r1) return;
    if (hits < kCol2imHits) {
      hit[hits++] = tap * ld + (row - r0);
    } else {
      more = true;
    }
  });
  for (std::int64_t c0 = static_cast<std::int64_t>(blockIdx.y) * kC; c0 < s.in_channels;
       c0 += static_cast<std::int64_t>(gridDim.y) * kC) {
    const int channels = static_cast<int>(std::min<std::int64_t>(kC, s.in_channels - c0));
    Acc acc[kC];
#pragma unroll
    for (int k = 0; k < kC; ++k) acc[k] = Acc(0);
    const Acc* dc = dcol + c0 * channel_rows;
    if (!more) {
#pragma unroll
      for (int x = 0; x < kCol2imHits; ++x) {
        if (x >= hits) break;
        const Acc* at = dc + hit[x];
#pragma unroll
        for (int k = 0; k < kC; ++k) {
          if (k < channels) acc[k] += at[k * channel_rows];
        }
      }
    } else {
      masked_conv2d_for_each_hit(p, s, image_rows, h, w, [&](std::int64_t tap, std::int32_t row) {
        if (row < r0 || row >= r1) return;
        const Acc* at = dc + tap * ld + (row - r0);
#pragma unroll
        for (int k = 0; k < kC; ++k) {
          if (k < channels) acc[k] += at[k * channel_rows];
        }
      });
    }
#pragma unroll
    for (int k = 0; k < kC; ++k) {
      if (k >= channels) continue;
      finish_sum((n * s.in_channels + c0 + k) * plane + pixel, acc[k], prev, partial, grad_features);
    }
  }
}

// grad_bias[o] (one block per o): the sum of selected[o, 0:chunk] (row length ld) in a fixed order, plus prev[o]
// (the earlier chunks'; null on the first chunk), into partial (when not null) or else grad_bias.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    masked_conv2d_bias_grad_kernel(std::int64_t out_channels, std::int64_t chunk, std::int64_t ld,
                                   const T* __restrict__ selected, const acc_t<T>* prev, acc_t<T>* partial,
                                   T* grad_bias) {
  using Acc = acc_t<T>;
  __shared__ Acc shared[kThreads / 32];
  for (std::int64_t o = blockIdx.x; o < out_channels; o += gridDim.x) {
    Acc sum = Acc(0);
    for (std::int64_t q = threadIdx.x; q < chunk; q += kThreads) sum += to_acc<Acc>(selected[o * ld + q]);
    sum = block_sum<Acc, kThreads>(sum, shared);
    if (threadIdx.x == 0) finish_sum(o, sum, prev, partial, grad_bias);
  }
}

// out[e] = in[e] rounded to T.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    masked_conv2d_round_kernel(std::int64_t elements, const acc_t<T>* __restrict__ in, T* __restrict__ out) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < elements; e += stride) {
    out[e] = from_acc<T>(in[e]);
  }
}

const bool kRegistered = for_each_floating_type([](auto tag, const char* type) {
  using T = typename decltype(tag)::type;
  register_instantiation(kOp, "masked_conv2d_gather_kernel", type, &masked_conv2d_gather_kernel<T>);
  register_instantiation(kOp, "masked_conv2d_output_kernel", type, &masked_conv2d_output_kernel<T>);
  register_instantiation(kOp, "masked_conv2d_col2im_kernel", type, &masked_conv2d_col2im_kernel<T>);
  register_instantiation(kOp, "masked_conv2d_bias_grad_kernel", type, &masked_conv2d_bias_grad_kernel<T>);
  register_instantiation(kOp, "masked_conv2d_round_kernel", type, &masked_conv2d_round_kernel<T>);
});
const bool kRegisteredRows = (register_kernel(kOp, "masked_conv2d_rows_kernel",
                                               reinterpret_cast<const void*>(&masked_conv2d_rows_kernel)),
                               true);

// ---------------------------------------------------------------- launch helpers
// A 2-D grid: ceil(x / kThreads) blocks along x, min(y, 65535) along y (the kernels loop over the rest).
dim3 grid_2d(std::int64_t x, std::int64_t y) {
  return dim3(static_cast<unsigned>((x + kThreads - 1) / kThreads), static_cast<unsigned>(std::min(y, kMaxGridY)));
}

// A launcher's workspace parts (masked_conv2d_workspace, checked against what the caller passed), its chunks
// and its steps.
template <typename T>
struct Launch {
  const MaskedConv2dProblem& a;
  cudaStream_t stream;
  MaskedConv2dWorkspace w;
  std::int64_t chunk, ld;
  char* base;

  Launch(const P& p, const MaskedConv2dProblem& problem, MaskedConv2dPass pass, cudaStream_t s)
      : a(problem), stream(s), w(masked_conv2d_workspace(a.s, p, a.sel.count, pass, sizeof(T), sizeof(acc_t<T>))),
        chunk(masked_conv2d_chunk_positions(a.s, p, a.sel.count)), ld(masked_conv2d_chunk_ld(chunk)),
        base(static_cast<char*>(a.workspace)) {
    if (a.workspace_bytes < w.bytes || (w.bytes > 0 && base == nullptr) ||
        reinterpret_cast<std::uintptr_t>(base) % 256 != 0) {
      throw std::invalid_argument(std::string(kOp) + ": the CUDA launcher needs a 256-byte aligned workspace of " +
                                  std::to_string(w.bytes) + " bytes; got " + std::to_string(a.workspace_bytes));
    }
  }
  std::int32_t* rows() const { return reinterpret_cast<std::int32_t*>(base + w.rows); }
  T* columns() const { return reinterpret_cast<T*>(base + w.columns); }
  acc_t<T>* dcol() const { return reinterpret_cast<acc_t<T>*>(base + w.columns); }  // backward input's columns
  template <typename E>
  E* selected() const { return reinterpret_cast<E*>(base + w.selected); }
  acc_t<T>* accumulator() const { return reinterpret_cast<acc_t<T>*>(base + w.accumulator); }
  bool chunked() const { return chunk < a.sel.count; }

  // The map of rows: -1 everywhere, then each selected position's index.
  void build_rows() const {
    const S& s = a.s;
    DETOPS_CUDA_CHECK(cudaMemsetAsync(rows(), 0xFF, s.batch * s.out_height * s.out_width * 4, stream));
    launch_grid_stride(&masked_conv2d_rows_kernel, a.sel.count, kThreads, stream, s, a.sel.positions, a.sel.count,
                       rows());
  }
  // The im2col of positions [r0, r0 + n) of `data` (shape s, params p) into out (row length ld), zeros in the
  // columns [n, padded(n)).
  void gather(const P& p, const S& s, std::int64_t r0, std::int64_t n, const void* data, T* out) const {
    const std::int64_t channels = std::max<std::int64_t>(1, kGatherTaps / (s.kernel_h * s.kernel_w));
    if (s.in_channels == 0) return;
    launch_kernel(&masked_conv2d_gather_kernel<T>, grid_2d(padded(n), (s.in_channels + channels - 1) / channels),
                  kThreads, stream, p, s, a.sel.positions, r0, n, padded(n), channels, ld, data, out);
  }
  // A chunk's positions rounded up to kMaskedConv2dLdAlign (<= ld): the GEMMs' extent along the positions.
  static std::int64_t padded(std::int64_t n) { return masked_conv2d_chunk_ld(n); }
  // The test hook: every workspace byte 0xFF (NaN) before use.
  void poison(const P& p) const {
    if (p.poison_workspace && w.bytes > 0) DETOPS_CUDA_CHECK(cudaMemsetAsync(base, 0xFF, w.bytes, stream));
  }
  // grad at positions [r0, r0 + n) into selected [C_out, ld]: the gather over grad's 1x1 view.
  void gather_grad(std::int64_t r0, std::int64_t n, const void* grad) const {
    const S& s = a.s;
    const S view{s.batch, s.out_channels, s.out_height, s.out_width, s.out_channels, 1, 1, s.out_height, s.out_width};
    gather(P{}, view, r0, n, grad, selected<T>());
  }
  // body(r0, n, first, last) for the chunks [r0, r0 + n) of the selection, in order.
  template <typename Body>
  void for_each_chunk(Body&& body) const {
    for (std::int64_t r0 = 0; r0 < a.sel.count; r0 += chunk) {
      body(r0, std::min(chunk, a.sel.count - r0), r0 == 0, r0 + chunk >= a.sel.count);
    }
  }
};

}  // namespace

void launch_masked_conv2d_forward(const P& p, const MaskedConv2dForwardArgs& a, DType dtype, cudaStream_t stream) {
  const S& s = a.s;
  const std::int64_t positions = s.batch * s.out_height * s.out_width, taps = s.taps();
  if (positions * s.out_channels == 0) return;
  dispatch_floating(dtype, "launch_masked_conv2d_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    if (a.sel.count == 0) {
      DETOPS_CUDA_CHECK(cudaMemsetAsync(a.out, 0, positions * s.out_channels * sizeof(T), stream));
      return;
    }
    const Launch<T> l(p, a, MaskedConv2dPass::kForward, stream);
    l.poison(p);
    l.build_rows();
    const auto write_output = [&](std::int64_t r0, std::int64_t r1, bool first, const Acc* selected) {
      launch_kernel(&masked_conv2d_output_kernel<T>, grid_2d(positions, (s.out_channels + kOutputChannels - 1) / kOutputChannels),
                    kThreads, stream, s, l.rows(), r0, r1, first, kOutputChannels, selected, l.ld, a.bias, a.out);
    };
    if (taps == 0) return write_output(0, a.sel.count, true, nullptr);  // the bias (or 0) where selected
    BlasScope blas(kOp, a.blas, stream);
    l.for_each_chunk([&](std::int64_t r0, std::int64_t n, bool first, bool) {
      l.gather(p, s, r0, n, a.features, l.columns());
      // selected (n x C_out, column-major, ld) = columns (n x K, ld) weight^T (K x C_out: weight [C_out, K] row-major),
      // over the padded positions (rows [n, padded) unused)
      blas_gemm<T, Acc>(blas, a.allow_tf32, l.padded(n), s.out_channels, taps, BlasOperand{l.columns(), l.ld, 0, CUBLAS_OP_N},
                        BlasOperand{a.weight, taps, 0, CUBLAS_OP_N}, l.template selected<Acc>(), l.ld, 0, 1, false);
      write_output(r0, r0 + n, first, l.template selected<Acc>());
    });
  });
}

// Across chunks, the features' and the bias' gradients keep their running sums in the accumulator: each chunk's
// kernel adds `prev` (null on the first chunk) and writes `partial` (null on the last: the result).
void launch_masked_conv2d_backward_input(const P& p, const MaskedConv2dBackwardInputArgs& a, DType dtype,
                                         cudaStream_t stream) {
  const S& s = a.s;
  const std::int64_t pixels = s.batch * s.height * s.width, taps = s.taps();
  if (pixels * s.in_channels == 0) return;
  dispatch_floating(dtype, "launch_masked_conv2d_backward_input", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (a.sel.count == 0 || s.out_channels == 0) {  // no selected position, or no channel to sum over
      DETOPS_CUDA_CHECK(cudaMemsetAsync(a.grad_features, 0, pixels * s.in_channels * sizeof(T), stream));
      return;
    }
    const Launch<T> l(p, a, MaskedConv2dPass::kBackwardInput, stream);
    l.poison(p);
    l.build_rows();
    BlasScope blas(kOp, a.blas, stream);
    l.for_each_chunk([&](std::int64_t r0, std::int64_t n, bool first, bool last) {
      l.gather_grad(r0, n, a.grad);
      // dcol (n x K, column-major, ld) = selected (n x C_out, ld) weight (C_out x K: [C_out, K] row-major, op T),
      // over the padded positions (rows [n, padded) unused)
      blas_gemm<T, acc_t<T>>(blas, a.allow_tf32, l.padded(n), taps, s.out_channels,
                             BlasOperand{l.template selected<T>(), l.ld, 0, CUBLAS_OP_N},
                             BlasOperand{a.weight, taps, 0, CUBLAS_OP_T}, l.dcol(), l.ld, 0, 1, false);
      const std::int64_t slices = (s.in_channels + kCol2imChannels - 1) / kCol2imChannels;
      launch_kernel(&masked_conv2d_col2im_kernel<T>,
                    grid_2d(pixels, std::min(slices, std::max<std::int64_t>(1, kCol2imThreads / pixels))), kThreads, stream, p, s, l.rows(), r0, r0 + n, l.dcol(), l.ld, first ? nullptr : l.accumulator(),
                    last ? nullptr : l.accumulator(), a.grad_features);
    });
  });
}

// grad_weight: with one chunk the GEMM writes it (rounded once); with more, the accumulator's [C_out, K] part
// sums the chunks (beta = 1) and is rounded at the end. grad_bias: the accumulator's last C_out elements.
void launch_masked_conv2d_backward_weight(const P& p, const MaskedConv2dBackwardWeightArgs& a, DType dtype,
                                          cudaStream_t stream) {
  const S& s = a.s;
  const std::int64_t taps = s.taps(), weight_elements = s.out_channels * taps;
  if (s.out_channels == 0) return;
  dispatch_floating(dtype, "launch_masked_conv2d_backward_weight", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    if (a.sel.count == 0) {
      if (weight_elements > 0) DETOPS_CUDA_CHECK(cudaMemsetAsync(a.grad_weight, 0, weight_elements * sizeof(T), stream));
      DETOPS_CUDA_CHECK(cudaMemsetAsync(a.grad_bias, 0, s.out_channels * sizeof(T), stream));
      return;
    }
    const Launch<T> l(p, a, MaskedConv2dPass::kBackwardWeight, stream);
    l.poison(p);
    BlasScope blas(kOp, a.blas, stream);
    Acc* bias_running = l.chunked() ? l.accumulator() + weight_elements : nullptr;
    l.for_each_chunk([&](std::int64_t r0, std::int64_t n, bool first, bool last) {
      l.gather_grad(r0, n, a.grad);
      if (taps > 0) {
        l.gather(p, s, r0, n, a.features, l.columns());
        // grad_weight (K x C_out, column-major: [C_out, K] row-major) (+)= columns^T (K x n: [K, ld] row-major,
        // op T) selected (n x C_out, ld), over the padded positions (both operands 0 there)
        const BlasOperand columns{l.columns(), l.ld, 0, CUBLAS_OP_T}, grad{l.template selected<T>(), l.ld, 0, CUBLAS_OP_N};
        if (l.chunked()) {
          blas_gemm<T, Acc>(blas, a.allow_tf32, taps, s.out_channels, l.padded(n), columns, grad, l.accumulator(), taps, 0,
                            1, !first);
        } else {
          blas_gemm<T, T>(blas, a.allow_tf32, taps, s.out_channels, l.padded(n), columns, grad, a.grad_weight, taps, 0,
                          1, false);
        }
      }
      launch_kernel(&masked_conv2d_bias_grad_kernel<T>, static_cast<unsigned>(std::min(s.out_channels, kMaxGridY)),
                    kThreads, stream, s.out_channels, n, l.ld, l.template selected<T>(), first ? nullptr : bias_running,
                    last ? nullptr : bias_running, a.grad_bias);
    });
    if (l.chunked()) {
      launch_grid_stride(&masked_conv2d_round_kernel<T>, weight_elements, kThreads, stream, weight_elements,
                         l.accumulator(), a.grad_weight);
    }
  });
}

}  // namespace detops
