// Masked 2-D convolution CUDA kernels: the three products of masked_conv2d_kernel.cuh in one tiled GEMM kernel
// (its operands and stores as template arguments), the col2im gather and the weight-gradient finish. A GEMM
// block computes a 64 x 64 tile of C with 256 threads (4 x 4 results each, rows tx + 16 a, columns ty + 16 b);
// the reduction runs through shared memory in k slices of 16, the next slice's global loads in flight while
// the current one is multiplied, in acc_t<T> (fp32 for the half types). Each result is one thread's sum in k
// order: deterministic. grad_weight splits its positions into the fixed chunks of masked_conv2d.h
// (blockIdx.z), each into its own partial slice; the finish kernel adds the slices in order. No atomics.
#include <algorithm>
#include <cstdint>
#include <string>

#include "common/kernel_launch.cuh"
#include "masked_conv2d/masked_conv2d_kernel.cuh"

namespace detops {
namespace {

constexpr int kTile = 64, kTileK = 16, kThreads = 256, kLd = kTile + 4;
constexpr std::int64_t kMaxGridY = 65535;

// C(m, n) = sum over k of A(m, k) B(n, k), for k in chunk blockIdx.z ([z k_chunk, (z + 1) k_chunk) within
// [0, k_size)); tile rows blockIdx.x, tile columns blockIdx.y + n_tile0.
template <typename Acc, typename LoadA, typename LoadB, typename Store>
__global__ void __launch_bounds__(kThreads)
    masked_conv2d_gemm_kernel(std::int64_t m_size, std::int64_t n_size, std::int64_t k_size, std::int64_t k_chunk,
                              std::int64_t n_tile0, LoadA load_a, LoadB load_b, Store store) {
  __shared__ Acc a_tile[kTileK][kLd];
  __shared__ Acc b_tile[kTileK][kLd];
  const int t = static_cast<int>(threadIdx.x), tx = t % 16, ty = t / 16, lr = t / 4, lk = (t % 4) * 4;
  const std::int64_t m0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
  const std::int64_t n0 = (static_cast<std::int64_t>(blockIdx.y) + n_tile0) * kTile;
  const std::int64_t k_begin = static_cast<std::int64_t>(blockIdx.z) * k_chunk;
  const std::int64_t k_end = k_begin + k_chunk < k_size ? k_begin + k_chunk : k_size;
  const auto a_row = load_a.row(m0 + lr);
  const auto b_row = load_b.row(n0 + lr);
  Acc acc[4][4];
#pragma unroll
  for (int a = 0; a < 4; ++a) {
#pragma unroll
    for (int b = 0; b < 4; ++b) acc[a][b] = Acc(0);
  }
  Acc a_next[4], b_next[4];
  if (k_begin < k_end) {
    load_a.load4(a_row, k_begin + lk, k_end, a_next);
    load_b.load4(b_row, k_begin + lk, k_end, b_next);
  }
  for (std::int64_t k0 = k_begin; k0 < k_end; k0 += kTileK) {
    __syncthreads();  // the previous slice is no longer read
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      a_tile[lk + q][lr] = a_next[q];
      b_tile[lk + q][lr] = b_next[q];
    }
    __syncthreads();
    if (k0 + kTileK < k_end) {  // the next slice's loads overlap this slice's products
      load_a.load4(a_row, k0 + kTileK + lk, k_end, a_next);
      load_b.load4(b_row, k0 + kTileK + lk, k_end, b_next);
    }
#pragma unroll
    for (int kk = 0; kk < kTileK; ++kk) {
      Acc av[4], bv[4];
#pragma unroll
      for (int a = 0; a < 4; ++a) av[a] = a_tile[kk][tx + 16 * a];
#pragma unroll
      for (int b = 0; b < 4; ++b) bv[b] = b_tile[kk][ty + 16 * b];
#pragma unroll
      for (int a = 0; a < 4; ++a) {
#pragma unroll
        for (int b = 0; b < 4; ++b) acc[a][b] += av[a] * bv[b];
      }
    }
  }
#pragma unroll
  for (int a = 0; a < 4; ++a) {
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const std::int64_t m = m0 + tx + 16 * a, n = n0 + ty + 16 * b;
      if (m < m_size && n < n_size) store(m, n, blockIdx.z, acc[a][b]);
    }
  }
}

// grad_features[n, c, h, w] = sum over the selected positions reading the pixel, in tap order, of dcol[tap, row].
template <typename T>
__global__ void masked_conv2d_col2im_kernel(MaskedConv2dParams p, MaskedConv2dShape s, const acc_t<T>* __restrict__ dcol,
                                            const std::int64_t* __restrict__ rows, std::int64_t count,
                                            T* __restrict__ grad_features) {
  using Acc = acc_t<T>;
  const std::int64_t total = s.batch * s.in_channels * s.height * s.width;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    grad_features[e] = from_acc<T>(masked_conv2d_col2im<Acc>(p, s, dcol, rows, count, e));
  }
}

// grad_weight / grad_bias element e = (o, t) of [C_out, taps + 1]: the chunks' partial sums in order.
template <typename T>
__global__ void masked_conv2d_weight_finish_kernel(MaskedConv2dShape s, std::int64_t chunks,
                                                   const acc_t<T>* __restrict__ partials, T* __restrict__ grad_weight,
                                                   T* __restrict__ grad_bias) {
  using Acc = acc_t<T>;
  const std::int64_t taps = s.taps(), slice = s.out_channels * (taps + 1);
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < slice; e += stride) {
    masked_conv2d_weight_finish<T>(s, chunks, partials, e, grad_weight, grad_bias);
  }
}

template <typename Acc, typename Product>
void launch_gemm(const Product& c, cudaStream_t stream) {
  if (c.m_size == 0 || c.n_size == 0 || c.chunks == 0) return;
  const std::int64_t m_tiles = (c.m_size + kTile - 1) / kTile, n_tiles = (c.n_size + kTile - 1) / kTile;
  for (std::int64_t n_tile0 = 0; n_tile0 < n_tiles; n_tile0 += kMaxGridY) {  // grid.y is at most 65535
    const dim3 grid(static_cast<unsigned>(m_tiles), static_cast<unsigned>(std::min(kMaxGridY, n_tiles - n_tile0)),
                    static_cast<unsigned>(c.chunks));
    launch_kernel(&masked_conv2d_gemm_kernel<Acc, decltype(c.a), decltype(c.b), decltype(c.store)>, grid, kThreads,
                  stream, c.m_size, c.n_size, c.k_size, c.k_chunk, n_tile0, c.a, c.b, c.store);
  }
}

const bool kRegistered = for_each_floating_type([](auto tag, const char* type) {
  using T = typename decltype(tag)::type;
  using Acc = acc_t<T>;
  register_instantiation("masked_conv2d", "masked_conv2d_gemm_kernel", std::string(type) + ", forward",
                         &masked_conv2d_gemm_kernel<Acc, TapsOfPosition<T, Acc>, WeightOfChannel<T, Acc>, StoreOutput<T, Acc>>);
  register_instantiation("masked_conv2d", "masked_conv2d_gemm_kernel", std::string(type) + ", dcol",
                         &masked_conv2d_gemm_kernel<Acc, GradOfPosition<T, Acc>, WeightOfTap<T, Acc>, StoreDcol<Acc>>);
  register_instantiation("masked_conv2d", "masked_conv2d_gemm_kernel", std::string(type) + ", weight",
                         &masked_conv2d_gemm_kernel<Acc, TapOfPositions<T, Acc>, GradOfChannel<T, Acc>, StorePartial<Acc>>);
  register_instantiation("masked_conv2d", "masked_conv2d_col2im_kernel", type, &masked_conv2d_col2im_kernel<T>);
  register_instantiation("masked_conv2d", "masked_conv2d_weight_finish_kernel", type,
                         &masked_conv2d_weight_finish_kernel<T>);
});

}  // namespace

void launch_masked_conv2d_forward(const MaskedConv2dParams& params, const MaskedConv2dForwardArgs& args, DType dtype,
                                  cudaStream_t stream) {
  dispatch_floating(dtype, "launch_masked_conv2d_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_gemm<acc_t<T>>(masked_conv2d_forward_product<T>(params, args), stream);
  });
}

void launch_masked_conv2d_backward_input(const MaskedConv2dParams& params, const MaskedConv2dBackwardInputArgs& args,
                                         DType dtype, cudaStream_t stream) {
  dispatch_floating(dtype, "launch_masked_conv2d_backward_input", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const MaskedConv2dShape& s = args.s;
    launch_gemm<acc_t<T>>(masked_conv2d_dcol_product<T>(params, args), stream);
    launch_grid_stride(&masked_conv2d_col2im_kernel<T>, s.batch * s.in_channels * s.height * s.width, kThreads, stream,
                       params, s, args.dcol, args.rows, args.sel.count, args.grad_features);
  });
}

void launch_masked_conv2d_backward_weight(const MaskedConv2dParams& params, const MaskedConv2dBackwardWeightArgs& args,
                                          DType dtype, cudaStream_t stream) {
  dispatch_floating(dtype, "launch_masked_conv2d_backward_weight", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto product = masked_conv2d_weight_product<T>(params, args);
    launch_gemm<acc_t<T>>(product, stream);
    launch_grid_stride(&masked_conv2d_weight_finish_kernel<T>, product.m_size * product.n_size, kThreads, stream,
                       args.s, product.chunks, args.partials, args.grad_weight, args.grad_bias);
  });
}

}  // namespace detops
