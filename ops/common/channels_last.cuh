#pragma once
// Layout conversion between [batch, channels, pixels] (channels first, NCHW with pixels = H * W) and
// [batch, pixels, channels] (channels last, NHWC), with a type conversion on the way. Kernels that
// scatter per (pixel, channel) with the channels on the warp's lanes use it: their atomics then hit one
// contiguous run of memory per warp instead of 32 scattered planes.
//
// A 64 x 64 tile per block goes through shared memory, so both the read and the write are coalesced.
// All offsets are 64-bit, and any size is covered (grid-stride loops).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "detops/core/cuda_check.h"
#include "common/launch.h"
#include "common/numeric.h"

namespace detops {

namespace channels_last_detail {

constexpr int kTile = 64;  // a block moves a 64 x 64 tile
constexpr int kLanes = 32;
constexpr int kRows = 8;   // threads per block: kLanes x kRows; each thread moves 16 elements of a tile
constexpr int kPerThread = kTile / kRows;

// in: [batch, rows, cols]; out: [batch, cols, rows]; out = convert(in) transposed per batch. Tiles and
// batches are covered by grid-stride loops (x over tiles, y over batches), so no size hits a grid limit.
// Each thread issues its 16 loads before its first store (16 loads in flight; with 32 x 32 tiles and 4 per
// thread the H200 moved 2.8 TB/s); a warp reads and writes whole 128-byte lines for 4-byte types.
template <typename In, typename Out, typename Acc>
__global__ void __launch_bounds__(kLanes * kRows) transpose_kernel(const In* __restrict__ in, Out* __restrict__ out,
                                                                   std::int64_t batch, std::int64_t rows,
                                                                   std::int64_t cols) {
  __shared__ Acc tile[kTile][kTile + 1];
  const std::int64_t tiles_c = (cols + kTile - 1) / kTile;
  const std::int64_t tiles = (rows + kTile - 1) / kTile * tiles_c;
  const int x = threadIdx.x, y = threadIdx.y;
  for (std::int64_t n = blockIdx.y; n < batch; n += gridDim.y) {
    const In* src = in + n * rows * cols;
    Out* dst = out + n * rows * cols;
    for (std::int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
      const std::int64_t r0 = t / tiles_c * kTile, c0 = t % tiles_c * kTile;
      const bool full = r0 + kTile <= rows && c0 + kTile <= cols;
      if (full) {
        const In* s0 = src + r0 * cols + c0;
        In v[kPerThread][2];
#pragma unroll
        for (int i = 0; i < kPerThread; ++i) {
          const std::int64_t row = static_cast<std::int64_t>(y + i * kRows) * cols;
          v[i][0] = s0[row + x];
          v[i][1] = s0[row + x + kLanes];
        }
#pragma unroll
        for (int i = 0; i < kPerThread; ++i) {
          tile[y + i * kRows][x] = to_acc<Acc>(v[i][0]);
          tile[y + i * kRows][x + kLanes] = to_acc<Acc>(v[i][1]);
        }
      } else {
        for (int j = y; j < kTile; j += kRows) {
          const std::int64_t r = r0 + j;
          for (int h = 0; h < kTile; h += kLanes) {
            const std::int64_t c = c0 + x + h;
            if (r < rows && c < cols) tile[j][x + h] = to_acc<Acc>(src[r * cols + c]);
          }
        }
      }
      __syncthreads();
      if (full) {
        Out* d0 = dst + c0 * rows + r0;
#pragma unroll
        for (int i = 0; i < kPerThread; ++i) {
          const std::int64_t col = static_cast<std::int64_t>(y + i * kRows) * rows;
          d0[col + x] = from_acc<Out>(tile[x][y + i * kRows]);
          d0[col + x + kLanes] = from_acc<Out>(tile[x + kLanes][y + i * kRows]);
        }
      } else {
        for (int j = y; j < kTile; j += kRows) {
          const std::int64_t c = c0 + j;
          for (int h = 0; h < kTile; h += kLanes) {
            const std::int64_t r = r0 + x + h;
            if (r < rows && c < cols) dst[c * rows + r] = from_acc<Out>(tile[x + h][j]);
          }
        }
      }
      __syncthreads();
    }
  }
}

template <typename In, typename Out, typename Acc>
void transpose(const In* in, Out* out, std::int64_t batch, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  if (batch == 0 || rows == 0 || cols == 0) return;
  const std::int64_t tiles = (rows + kTile - 1) / kTile * ((cols + kTile - 1) / kTile);
  const std::int64_t cap = static_cast<std::int64_t>(current_device_sm_count()) * 16;
  const dim3 grid(static_cast<unsigned>(std::min(tiles, cap)), static_cast<unsigned>(std::min<std::int64_t>(batch, 65535)));
  transpose_kernel<In, Out, Acc><<<grid, dim3(kLanes, kRows), 0, stream>>>(in, out, batch, rows, cols);
  DETOPS_CHECK_LAUNCH();
}

}  // namespace channels_last_detail

// [batch, channels, pixels] of In -> [batch, pixels, channels] of Out (rounded through Acc): a channels-last copy
// of a map for kernels that gather per (pixel, channel) with the channels on the lanes.
template <typename In, typename Out, typename Acc = acc_t<Out>>
void channels_first_to_last(const In* in, Out* out, std::int64_t batch, std::int64_t channels, std::int64_t pixels,
                            cudaStream_t stream) {
  channels_last_detail::transpose<In, Out, Acc>(in, out, batch, channels, pixels, stream);
}

// [batch, pixels, channels] of In -> [batch, channels, pixels] of Out (rounded through Acc).
template <typename In, typename Out, typename Acc = acc_t<Out>>
void channels_last_to_first(const In* in, Out* out, std::int64_t batch, std::int64_t pixels, std::int64_t channels,
                            cudaStream_t stream) {
  channels_last_detail::transpose<In, Out, Acc>(in, out, batch, pixels, channels, stream);
}

// A [batch, channels, pixels] map channels last, for `op`'s channels-last kernels: the map itself when
// input_channels_last, else its copy in `workspace` (transposed here; a missing workspace is the caller's bug).
template <typename T>
const T* channels_last_map(const char* op, const void* input, bool input_channels_last, void* workspace,
                           std::int64_t batch, std::int64_t channels, std::int64_t pixels, cudaStream_t stream) {
  if (input_channels_last) return static_cast<const T*>(input);
  if (workspace == nullptr) {
    throw std::invalid_argument(std::string(op) + ": a channels-first input needs channels_last_workspace on CUDA");
  }
  channels_first_to_last<T, T>(static_cast<const T*>(input), static_cast<T*>(workspace), batch, channels, pixels,
                               stream);
  return static_cast<const T*>(workspace);
}

}  // namespace detops
