// NMS on the device, with nothing copied to the host.
//
// 1. Sort: each score becomes a sort key (nms_score_key) and CUB's stable radix sort orders the box
//    indices by decreasing key (equal scores keep index order).
// 2. Gather: the boxes, in sorted order, become NmsBox<Acc> (coordinates and area in fp32 or fp64).
// 3. Chunks of rows. The suppression mask has one bit per pair (i, j), j > i in sorted order: bit set
//    when box i would suppress box j (same class, IoU > threshold). Its rows are built and consumed one
//    chunk at a time, so its memory is bounded by params.mask_chunk_bytes whatever N is.
//    a. mask kernel: one 64-thread block per 64 x 64 tile (row block rb, column block cb >= rb) of
//       the chunk's rows. Rows and columns already suppressed by earlier chunks are skipped. A tile
//       with any bit set is appended to its row block's tile list (diagonal tiles are always stored
//       and not listed).
//    b. scan kernel: one block walks the chunk's row blocks in order. For row block b, warp 0
//       resolves the 64 rows sequentially from the removed bits and the diagonal tile (kept rows
//       suppress later rows of the same block), appends the kept rows' original indices to `keep`,
//       and then all warps OR the kept rows' words of every listed tile into the removed bitset.
//    Only tiles with a set bit are read back, so sparse suppression (few overlapping pairs) and dense
//    suppression (most rows removed early, so later chunks compute little) both stay cheap.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "detops/core/cuda_check.h"
#include "common/dispatch.h"
#include "common/kernel_launch.cuh"
#include "nms/nms.h"
#include "nms/nms_kernel.cuh"

namespace detops {
namespace {

constexpr int kPrepThreads = 256;
constexpr int kScanThreads = 1024;
constexpr std::int64_t kBlockRows = 64;
using Word = unsigned long long;

// Tail bits of block `block` past the last box: they count as removed.
__device__ __forceinline__ Word past_end_bits(std::int64_t block, std::int64_t n) {
  const std::int64_t valid = n - block * kBlockRows;
  return valid >= kBlockRows ? Word(0) : (~Word(0) << valid);
}

template <typename K, typename S>
__global__ void nms_keys_kernel(std::int64_t n, const S* __restrict__ scores, K* __restrict__ keys,
                                int* __restrict__ order) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(blockDim.x) * gridDim.x) {
    keys[i] = nms_score_key<K>(static_cast<K>(scores[i]));
    order[i] = static_cast<int>(i);
  }
}

template <typename T>
__global__ void nms_gather_kernel(std::int64_t n, const T* __restrict__ boxes, const std::int64_t* __restrict__ classes,
                                  const int* __restrict__ order, NmsBox<acc_t<T>>* __restrict__ sorted_boxes,
                                  std::int64_t* __restrict__ sorted_classes) {
  for (std::int64_t p = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; p < n;
       p += static_cast<std::int64_t>(blockDim.x) * gridDim.x) {
    const std::int64_t i = order[p];
    sorted_boxes[p] = make_nms_box<acc_t<T>>(boxes + 4 * i);
    if (classes != nullptr) sorted_classes[p] = classes[i];
  }
}

struct ChunkArgs {
  std::int64_t n = 0;
  std::int64_t words = 0;       // W: 64-row blocks in all
  std::int64_t rb0 = 0, rb1 = 0; // the chunk's row blocks [rb0, rb1)
  std::int64_t stride = 0;      // W - rb0: mask words per row and list slots per row block
  Word* mask = nullptr;         // [(rb1 - rb0) * 64, stride]: column block cb at cb - rb0
  int* list = nullptr;          // [rb1 - rb0, stride]: listed column blocks of each row block
  int* list_count = nullptr;    // [rb1 - rb0]
  Word* removed = nullptr;      // [W]
};

template <typename Acc>
__global__ void __launch_bounds__(kBlockRows) nms_mask_kernel(ChunkArgs a, const NmsBox<Acc>* __restrict__ boxes,
                                                             const std::int64_t* __restrict__ classes, Acc threshold) {
  const std::int64_t rb = a.rb0 + blockIdx.y;
  const std::int64_t cb = a.rb0 + blockIdx.x;
  if (cb < rb) return;
  const Word row_removed = a.removed[rb] | past_end_bits(rb, a.n);
  if (row_removed == ~Word(0)) return;  // the scan skips this row block without reading it
  const Word col_removed = a.removed[cb] | past_end_bits(cb, a.n);
  const bool diagonal = cb == rb;
  if (!diagonal && col_removed == ~Word(0)) return;

  __shared__ NmsBox<Acc> col_boxes[kBlockRows];
  __shared__ std::int64_t col_classes[kBlockRows];
  const int t = threadIdx.x;
  const std::int64_t j = cb * kBlockRows + t;
  if (j < a.n) {
    col_boxes[t] = boxes[j];
    col_classes[t] = classes != nullptr ? classes[j] : 0;
  }
  __syncthreads();

  const std::int64_t i = rb * kBlockRows + t;
  Word word = 0;
  if (!((row_removed >> t) & 1)) {
    const NmsBox<Acc> bi = boxes[i];
    const std::int64_t ci = classes != nullptr ? classes[i] : 0;
    for (int k = diagonal ? t + 1 : 0; k < kBlockRows; ++k) {
      if ((col_removed >> k) & 1) continue;
      if (col_classes[k] != ci) continue;
      if (nms_suppresses(bi, col_boxes[k], threshold)) word |= Word(1) << k;
    }
  }
  Word* row = a.mask + (i - a.rb0 * kBlockRows) * a.stride + (cb - a.rb0);
  if (diagonal) {
    *row = word;
    return;
  }
  if (__syncthreads_or(word != 0)) {
    *row = word;
    if (t == 0) {
      const int slot = atomicAdd(a.list_count + (rb - a.rb0), 1);
      a.list[(rb - a.rb0) * a.stride + slot] = static_cast<int>(cb - a.rb0);
    }
  }
}

__device__ __forceinline__ Word warp_or(Word w) {
  for (int offset = 16; offset > 0; offset >>= 1) w |= __shfl_xor_sync(0xffffffffu, w, offset);
  return w;
}

__global__ void __launch_bounds__(kScanThreads) nms_scan_kernel(ChunkArgs a, const int* __restrict__ order,
                                                               std::int64_t* __restrict__ keep,
                                                               std::int64_t* __restrict__ num_kept) {
  __shared__ Word kept_shared;
  __shared__ std::int64_t count_shared;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, warps = blockDim.x >> 5;
  if (tid == 0) count_shared = *num_kept;
  __syncthreads();
  for (std::int64_t b = a.rb0; b < a.rb1; ++b) {
    const std::int64_t local_row0 = (b - a.rb0) * kBlockRows;
    if (warp == 0) {
      Word removed = a.removed[b] | past_end_bits(b, a.n);
      Word kept = 0;
      if (removed != ~Word(0)) {
        const Word* diag = a.mask + local_row0 * a.stride + (b - a.rb0);
        const Word d0 = ((removed >> lane) & 1) ? Word(0) : diag[lane * a.stride];
        const Word d1 = ((removed >> (lane + 32)) & 1) ? Word(0) : diag[(lane + 32) * a.stride];
        for (int k = 0; k < kBlockRows; ++k) {
          const Word dk = __shfl_sync(0xffffffffu, k < 32 ? d0 : d1, k & 31);
          if (!((removed >> k) & 1)) {
            kept |= Word(1) << k;
            removed |= dk;
          }
        }
        const std::int64_t base = count_shared;
        for (int k = lane; k < kBlockRows; k += 32) {
          if ((kept >> k) & 1) {
            const int before = __popcll(kept & ((Word(1) << k) - 1));
            keep[base + before] = order[b * kBlockRows + k];
          }
        }
      }
      __syncwarp();
      if (lane == 0) {
        kept_shared = kept;
        count_shared += __popcll(kept);
        a.removed[b] = removed;
      }
    }
    __syncthreads();
    const Word kept = kept_shared;
    if (kept != 0) {
      const int tiles = a.list_count[b - a.rb0];
      const int* list = a.list + (b - a.rb0) * a.stride;
      const Word* rows = a.mask + local_row0 * a.stride;
      const bool keep_lo = (kept >> lane) & 1, keep_hi = (kept >> (lane + 32)) & 1;
      for (int t = warp; t < tiles; t += warps) {
        const int col = list[t];
        Word w = 0;
        if (keep_lo) w |= rows[lane * a.stride + col];
        if (keep_hi) w |= rows[(lane + 32) * a.stride + col];
        w = warp_or(w);
        if (lane == 0 && w != 0) a.removed[a.rb0 + col] |= w;  // each column block is listed once per row block
      }
    }
    __syncthreads();
  }
  if (tid == 0) *num_kept = count_shared;
}

const bool kRegistered = for_each_floating_type([](auto tag, const char* type) {
  using T = typename decltype(tag)::type;
  register_instantiation("nms", "nms_gather_kernel", type, &nms_gather_kernel<T>);
  if (std::is_same<T, double>::value || std::is_same<T, float>::value) {
    register_instantiation("nms", "nms_mask_kernel", type, &nms_mask_kernel<acc_t<T>>);
  }
}) && [] {
  register_instantiation("nms", "nms_keys_kernel", "float", &nms_keys_kernel<float, float>);
  register_instantiation("nms", "nms_keys_kernel", "double", &nms_keys_kernel<double, double>);
  register_kernel("nms", "nms_scan_kernel", reinterpret_cast<const void*>(&nms_scan_kernel));
  return true;
}();

std::size_t align_up(std::size_t v) { return (v + 255) / 256 * 256; }

// Where each workspace buffer lives, and the chunking.
struct Layout {
  std::int64_t words = 0, rb_per_chunk = 0;
  std::size_t keys_in = 0, keys_out = 0, order_in = 0, order_out = 0, sort_temp = 0, sort_temp_bytes = 0,
              boxes = 0, classes = 0, removed = 0, mask = 0, list = 0, list_count = 0, total = 0;
};

template <typename K>
std::size_t sort_temp_bytes(std::int64_t n) {
  std::size_t bytes = 0;
  DETOPS_CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(nullptr, bytes, static_cast<const K*>(nullptr),
                                                              static_cast<K*>(nullptr), static_cast<const int*>(nullptr),
                                                              static_cast<int*>(nullptr), static_cast<int>(n)));
  return bytes;
}

Layout make_layout(const NmsParams& params, std::int64_t n, DType boxes_dtype, bool scores_fp64, bool batched) {
  Layout l;
  l.words = (n + kBlockRows - 1) / kBlockRows;
  const std::int64_t budget_words = std::max<std::int64_t>(params.mask_chunk_bytes, 0) / 8;
  l.rb_per_chunk = std::max<std::int64_t>(1, budget_words / std::max<std::int64_t>(1, kBlockRows * l.words));
  l.rb_per_chunk = std::min<std::int64_t>({l.rb_per_chunk, std::max<std::int64_t>(l.words, 1), 65535});
  const std::size_t key_bytes = scores_fp64 ? sizeof(double) : sizeof(float);
  const std::size_t box_bytes = boxes_dtype == DType::kFloat64 ? sizeof(NmsBox<double>) : sizeof(NmsBox<float>);
  const std::size_t un = static_cast<std::size_t>(n);
  std::size_t at = 0;
  auto take = [&](std::size_t bytes) {
    const std::size_t where = at;
    at += align_up(bytes);
    return where;
  };
  l.keys_in = take(un * key_bytes);
  l.keys_out = take(un * key_bytes);
  l.order_in = take(un * sizeof(int));
  l.order_out = take(un * sizeof(int));
  l.sort_temp_bytes = scores_fp64 ? sort_temp_bytes<double>(n) : sort_temp_bytes<float>(n);
  l.sort_temp = take(l.sort_temp_bytes);
  l.boxes = take(un * box_bytes);
  l.classes = take(batched ? un * sizeof(std::int64_t) : 0);
  l.removed = take(static_cast<std::size_t>(l.words) * sizeof(Word));
  l.mask = take(static_cast<std::size_t>(l.rb_per_chunk * kBlockRows * l.words) * sizeof(Word));
  l.list = take(static_cast<std::size_t>(l.rb_per_chunk * l.words) * sizeof(int));
  l.list_count = take(static_cast<std::size_t>(l.rb_per_chunk) * sizeof(int));
  l.total = at;
  return l;
}

template <typename K>
void sort_by_score(const Layout& l, char* ws, const NmsArgs& args, cudaStream_t stream) {
  const std::int64_t n = args.num_boxes;
  K* keys_in = reinterpret_cast<K*>(ws + l.keys_in);
  nms_keys_kernel<K, K><<<grid_for(n, kPrepThreads), kPrepThreads, 0, stream>>>(
      n, static_cast<const K*>(args.scores), keys_in, reinterpret_cast<int*>(ws + l.order_in));
  DETOPS_CHECK_LAUNCH();
  std::size_t temp_bytes = l.sort_temp_bytes;
  DETOPS_CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(
      ws + l.sort_temp, temp_bytes, keys_in, reinterpret_cast<K*>(ws + l.keys_out),
      reinterpret_cast<const int*>(ws + l.order_in), reinterpret_cast<int*>(ws + l.order_out), static_cast<int>(n), 0,
      static_cast<int>(sizeof(K) * 8), stream));
}

}  // namespace

std::size_t nms_cuda_workspace_bytes(const NmsParams& params, std::int64_t num_boxes, DType boxes_dtype,
                                     bool scores_fp64, bool batched) {
  return make_layout(params, num_boxes, boxes_dtype, scores_fp64, batched).total;
}

void launch_nms(const NmsParams& params, const NmsArgs& args, DType boxes_dtype, void* workspace,
                std::size_t workspace_bytes, cudaStream_t stream) {
  const std::int64_t n = args.num_boxes;
  DETOPS_CUDA_CHECK(cudaMemsetAsync(args.num_kept, 0, sizeof(std::int64_t), stream));
  if (n == 0) return;
  const Layout l = make_layout(params, n, boxes_dtype, args.scores_fp64, args.classes != nullptr);
  if (workspace_bytes < l.total) throw std::invalid_argument("launch_nms: workspace too small");
  char* ws = static_cast<char*>(workspace);
  if (args.scores_fp64) {
    sort_by_score<double>(l, ws, args, stream);
  } else {
    sort_by_score<float>(l, ws, args, stream);
  }
  const int* order = reinterpret_cast<const int*>(ws + l.order_out);
  std::int64_t* sorted_classes = args.classes != nullptr ? reinterpret_cast<std::int64_t*>(ws + l.classes) : nullptr;
  DETOPS_CUDA_CHECK(cudaMemsetAsync(ws + l.removed, 0, static_cast<std::size_t>(l.words) * sizeof(Word), stream));
  dispatch_floating(boxes_dtype, "nms", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    auto* boxes = reinterpret_cast<NmsBox<Acc>*>(ws + l.boxes);
    nms_gather_kernel<T><<<grid_for(n, kPrepThreads), kPrepThreads, 0, stream>>>(
        n, static_cast<const T*>(args.boxes), args.classes, order, boxes, sorted_classes);
    DETOPS_CHECK_LAUNCH();
    for (std::int64_t rb0 = 0; rb0 < l.words; rb0 += l.rb_per_chunk) {
      ChunkArgs c;
      c.n = n;
      c.words = l.words;
      c.rb0 = rb0;
      c.rb1 = std::min(l.words, rb0 + l.rb_per_chunk);
      c.stride = l.words - rb0;
      c.mask = reinterpret_cast<Word*>(ws + l.mask);
      c.list = reinterpret_cast<int*>(ws + l.list);
      c.list_count = reinterpret_cast<int*>(ws + l.list_count);
      c.removed = reinterpret_cast<Word*>(ws + l.removed);
      DETOPS_CUDA_CHECK(cudaMemsetAsync(c.list_count, 0, static_cast<std::size_t>(c.rb1 - c.rb0) * sizeof(int), stream));
      const dim3 grid(static_cast<unsigned>(c.stride), static_cast<unsigned>(c.rb1 - c.rb0));
      nms_mask_kernel<Acc><<<grid, kBlockRows, 0, stream>>>(c, boxes, sorted_classes,
                                                           nms_compare_threshold<Acc>(params.iou_threshold));
      DETOPS_CHECK_LAUNCH();
      nms_scan_kernel<<<1, kScanThreads, 0, stream>>>(c, order, args.keep, args.num_kept);
      DETOPS_CHECK_LAUNCH();
    }
  });
}

}  // namespace detops
