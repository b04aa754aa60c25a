// NMS on the device, with nothing copied to the host.
//
// 1. Sort: each score becomes a sort key (nms_score_key) and CUB's stable radix sort orders the box
//    indices by decreasing key (equal scores keep index order).
// 2. Gather: the boxes, in sorted order, become (x1, y1, x2, y2) and an area in fp32 or fp64.
// 3. Chunks of rows. The suppression mask has one bit per pair (i, j), j > i in sorted order: bit set
//    when box i would suppress box j (same class, IoU > threshold). Its rows are built and consumed one
//    chunk of 64-row blocks at a time, so its memory is bounded by params.mask_chunk_bytes whatever N is.
//    a. mask kernel: a 64-thread block per row block and group of kMaskColBlocks column blocks, a thread
//       per row, the group's 64 x 64 tiles one after the other (column boxes in shared memory). Rows and
//       columns already suppressed by earlier chunks are skipped: a whole tile when all its rows or all its
//       columns are; a row's thread idles; columns are visited one by one (find-first-set) when fewer than
//       kDenseColumns are alive, else all 64 in an unrolled loop and the dead ones' bits dropped. The
//       diagonal tile (row block against itself) is stored whole; of the other tiles only the nonzero 64-bit
//       row words are stored, each as an entry (word, column block, row) appended to its row block's list
//       (one atomic per warp and tile).
//    b. scan kernel: one warp walks the chunk's row blocks in order, with the removed bitset of the
//       chunk's columns in shared memory (global past ~1.6M boxes) and each row block's diagonal tile,
//       sorted indices and first kStagedEntries entries copied into a shared-memory ring kScanStages row
//       blocks ahead (cp.async), so the walk waits on no global load. For row block b:
//         kept = ~removed[b]; for each row k of `kept` whose diagonal word is nonzero, in order (find-first-
//         set): kept &= ~diag[k]   (a kept row removes its later rows of the block; a removed row, not
//         visited, removes nothing: the greedy rule, chains included);
//         write the kept rows' indices; OR each entry of a kept row into removed[column block].
//       Nothing else is serial: no block-wide barrier, no global round trip.
//
// Cost model of the scan, per row block (cycles of one warp on an H200, ~1.98 GHz):
//   ~60   wait for the staged row block (already there), __syncwarp, read removed[b], two ballots;
//   ~40 x R  resolve: R = kept rows with a nonzero diagonal word (overlapping boxes within the block: 0-3
//         for 20k detector-like boxes; up to 64 for a chain, where the old 64-step loop was paid always);
//   ~40   popc and the keep stores (fire and forget);
//   ~50 x ceil(min(E, 256) / 32)  OR the staged entries (E per row block: ~50-300 for 20k-100k boxes):
//         a shared-memory read and a shared atomic OR per entry;
//   ~700 x ceil((E - 256) / 256)   entries beyond the staged ones, read from L2, 8 per lane in flight;
//   ~50   issue the cp.async of the row block kScanStages - 1 ahead.
//   So ~250-450 cycles (0.13-0.23 us) per row block for the benchmark inputs instead of ~3.9 us (a 64-step
//   dependent loop, two __syncthreads of 1024 threads and four dependent global loads per row block):
//   20k boxes (313 row blocks) ~0.05-0.07 ms, 100k (1563) ~0.2-0.35 ms plus ~5 us a chunk.
// Cost of the mask: ~13 instructions per warp and (row, column) pair for the 32 rows of a warp (an LDS.128
// of the column box, four fmin/fmax, two compares, the branch; the overlap path when any lane overlaps;
// the division only for overlapping pairs whose IoU may exceed the threshold: the quick test of
// nms_overlap_suppresses), ~N^2 / 2 pairs less those of tiles skipped whole or of suppressed columns:
// 20k boxes ~2e8 pairs, ~0.1 ms on 132 SMs (4 warp instructions a cycle each); 100k ~3-5e9, ~1.5-2 ms.
// The previous tile kernel (a 64-thread block per tile, 5 scalar loads and a 64-bit class compare per
// pair, every overlapping pair divided, strided 8-byte mask writes) took 0.39 ms at 20k.
#include <cub/device/device_radix_sort.cuh>
#include <cuda_pipeline.h>

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
constexpr std::int64_t kBlockRows = 64;
constexpr int kMaskColBlocks = 4;       // column blocks (64 x 64 tiles) per mask-kernel block
constexpr int kScanStages = 8;          // row blocks staged ahead of the scan, plus the one in use
constexpr int kStagedEntries = 256;     // list entries staged per row block (the rest read from L2)
constexpr int kDenseColumns = 40;       // a tile with this many live columns runs the unrolled loop over all 64
constexpr int kScanUnroll = 8;          // entries per lane in flight past the staged ones
constexpr unsigned kFullWarp = 0xffffffffu;
using Word = unsigned long long;

// The gathered box coordinates, 16 (fp32) or 32 (fp64) bytes: one vector load.
template <typename Acc>
struct alignas(4 * sizeof(Acc)) NmsXyxy {
  Acc x1, y1, x2, y2;
};

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
                                  const int* __restrict__ order, NmsXyxy<acc_t<T>>* __restrict__ sorted_xyxy,
                                  acc_t<T>* __restrict__ sorted_area, std::int64_t* __restrict__ sorted_classes) {
  for (std::int64_t p = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; p < n;
       p += static_cast<std::int64_t>(blockDim.x) * gridDim.x) {
    const std::int64_t i = order[p];
    const NmsBox<acc_t<T>> b = make_nms_box<acc_t<T>>(boxes + 4 * i);
    sorted_xyxy[p] = {b.x1, b.y1, b.x2, b.y2};
    sorted_area[p] = b.area;
    if (classes != nullptr) sorted_classes[p] = classes[i];
  }
}

struct ChunkArgs {
  std::int64_t n = 0;
  std::int64_t words = 0;         // W: 64-row blocks in all
  std::int64_t rb0 = 0, rb1 = 0;  // the chunk's row blocks [rb0, rb1)
  std::int64_t stride = 0;        // W - rb0: the column blocks the chunk's rows can reach
  std::int64_t cap = 0;           // 64 * stride: list slots per row block
  Word* diag = nullptr;           // [rb1 - rb0, 64]: the diagonal tiles, row words
  Word* ent_word = nullptr;       // [rb1 - rb0, cap]: list entries, the row's word of the tile
  unsigned* ent_tag = nullptr;    // [rb1 - rb0, cap]: (column block - rb0) << 6 | row in the block
  int* count = nullptr;           // [rb1 - rb0]: entries per row block
  Word* removed = nullptr;        // [W]
};

__device__ __forceinline__ float tile_min(float a, float b) { return fminf(a, b); }
__device__ __forceinline__ double tile_min(double a, double b) { return fmin(a, b); }
__device__ __forceinline__ float tile_max(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double tile_max(double a, double b) { return fmax(a, b); }

template <typename Acc>
struct TileRow {
  NmsXyxy<Acc> box;
  Acc area;
  std::int64_t cls;
};

// nms_suppresses(row, column k) (nms_kernel.cuh), the same decision for every input: the extents through
// fmin / fmax (nms_suppresses explains why a NaN coordinate cannot tell the difference), and w > 0 tested as
// right > left (IEEE subtraction without flush to zero: a - b > 0 exactly when a > b, NaN false in both).
// Classes are compared only where the geometry could suppress.
template <typename Acc, bool kBatched>
__device__ __forceinline__ bool tile_pair(const TileRow<Acc>& r, int k, const NmsXyxy<Acc>* col_xyxy,
                                          const Acc* col_area, const std::int64_t* col_class,
                                          const NmsThreshold<Acc>& th) {
  const NmsXyxy<Acc> c = col_xyxy[k];
  const Acc left = tile_max(r.box.x1, c.x1), right = tile_min(r.box.x2, c.x2);
  const Acc top = tile_max(r.box.y1, c.y1), bottom = tile_min(r.box.y2, c.y2);
  if (right > left && bottom > top) {
    if (kBatched && col_class[k] != r.cls) return false;
    return nms_overlap_suppresses(nms_sub(right, left), nms_sub(bottom, top), r.area, col_area[k], th);
  }
  if (!th.negative) return false;
  if (kBatched && col_class[k] != r.cls) return false;
  return nms_disjoint_suppresses(r.area, col_area[k]);
}

// Block (column group x, row block y of the chunk), a thread per row. For each column block of the group at
// or after the row block: the diagonal tile's words go to a.diag; any other tile's nonzero words are
// appended to the row block's list.
template <typename Acc, bool kBatched>
__global__ void __launch_bounds__(kBlockRows) nms_mask_kernel(ChunkArgs a, const NmsXyxy<Acc>* __restrict__ xyxy,
                                                             const Acc* __restrict__ areas,
                                                             const std::int64_t* __restrict__ classes,
                                                             NmsThreshold<Acc> th) {
  const std::int64_t rb_local = blockIdx.y;
  const std::int64_t rb = a.rb0 + rb_local;
  const std::int64_t group = a.rb0 + static_cast<std::int64_t>(blockIdx.x) * kMaskColBlocks;
  const std::int64_t cb_begin = std::max(rb, group);
  const std::int64_t cb_end = std::min(a.words, group + kMaskColBlocks);
  if (cb_begin >= cb_end) return;
  const Word row_removed = a.removed[rb] | past_end_bits(rb, a.n);
  if (row_removed == ~Word(0)) return;  // the scan skips this row block without reading it

  __shared__ NmsXyxy<Acc> col_xyxy[kBlockRows];
  __shared__ Acc col_area[kBlockRows];
  __shared__ std::int64_t col_class[kBatched ? kBlockRows : 1];
  const int t = threadIdx.x, lane = t & 31;
  const bool row_alive = !((row_removed >> t) & 1);
  TileRow<Acc> r{};
  if (row_alive) {
    const std::int64_t i = rb * kBlockRows + t;
    r.box = xyxy[i];
    r.area = areas[i];
    r.cls = kBatched ? classes[i] : 0;
  }
  for (std::int64_t cb = cb_begin; cb < cb_end; ++cb) {
    const bool diagonal = cb == rb;
    const Word col_removed = a.removed[cb] | past_end_bits(cb, a.n);
    if (!diagonal && col_removed == ~Word(0)) continue;  // uniform over the block
    __syncthreads();  // the previous tile's column boxes are no longer read
    if (!((col_removed >> t) & 1)) {
      const std::int64_t j = cb * kBlockRows + t;
      col_xyxy[t] = xyxy[j];
      col_area[t] = areas[j];
      if (kBatched) col_class[t] = classes[j];
    }
    __syncthreads();

    Word word = 0;
    if (row_alive) {
      Word cols = ~col_removed;
      if (diagonal) cols &= t == kBlockRows - 1 ? Word(0) : ~Word(0) << (t + 1);
      if (__popcll(~col_removed) >= kDenseColumns) {
        // Most columns alive (the choice is uniform over the block): all 64 without bit tests, then the
        // suppressed columns' (and the diagonal's lower) bits dropped. Their shared-memory slots hold another
        // tile's boxes or nothing yet: the values are computed and discarded.
        for (int k0 = 0; k0 < kBlockRows; k0 += 8) {
          unsigned bits = 0;  // bit u: column k0 + u (a constant shift per unrolled step)
#pragma unroll
          for (int u = 0; u < 8; ++u) {
            if (tile_pair<Acc, kBatched>(r, k0 + u, col_xyxy, col_area, col_class, th)) bits |= 1u << u;
          }
          word |= Word(bits) << k0;
        }
        word &= cols;
      } else {
        for (Word m = cols; m != 0; m &= m - 1) {
          const int k = __ffsll(static_cast<long long>(m)) - 1;
          if (tile_pair<Acc, kBatched>(r, k, col_xyxy, col_area, col_class, th)) word |= Word(1) << k;
        }
      }
    }
    if (diagonal) {
      a.diag[rb_local * kBlockRows + t] = word;
      continue;
    }
    // Append this warp's nonzero words: one atomic for the warp, slots in lane order.
    const unsigned nonzero = __ballot_sync(kFullWarp, word != 0);
    if (nonzero != 0) {
      const int leader = __ffs(nonzero) - 1;
      int base = 0;
      if (lane == leader) base = atomicAdd(a.count + rb_local, __popc(nonzero));
      base = __shfl_sync(kFullWarp, base, leader);
      if (word != 0) {
        const std::int64_t slot = rb_local * a.cap + base + __popc(nonzero & ((1u << lane) - 1u));
        a.ent_word[slot] = word;
        a.ent_tag[slot] = static_cast<unsigned>(cb - a.rb0) << 6 | static_cast<unsigned>(t);
      }
    }
  }
}

// One row block's scan inputs, staged in shared memory ahead of its turn. 16-byte pieces throughout.
struct ScanStage {
  Word diag[kBlockRows];
  Word word[kStagedEntries];
  unsigned tag[kStagedEntries];
  int order[kBlockRows];
  int count;
  int pad[3];
};
static_assert(sizeof(ScanStage) % 16 == 0, "stages are copied in 16-byte pieces");
static_assert(kBlockRows == 64 && kStagedEntries % 128 == 0, "a warp stages a row block in whole 16-byte pieces");

// cp.async of row block b's diagonal tile, first kStagedEntries list entries (those past the row block's
// count are never read), sorted indices and entry count (nothing past the chunk). All sources are 16-byte
// aligned: 256-byte aligned buffers, 512-byte diagonal tiles, lists of a multiple of 64 slots, 64 indices.
__device__ __forceinline__ void stage_row_block(ScanStage& s, const ChunkArgs& a, const int* order, std::int64_t b,
                                                int lane) {
  if (b >= a.rb1) return;
  const std::int64_t local = b - a.rb0;
  const Word* diag = a.diag + local * kBlockRows;
  const Word* words = a.ent_word + local * a.cap;
  const unsigned* tags = a.ent_tag + local * a.cap;
  __pipeline_memcpy_async(s.diag + 2 * lane, diag + 2 * lane, 16);  // 32 pieces
#pragma unroll
  for (int q = 0; q < kStagedEntries / 64; ++q) {
    __pipeline_memcpy_async(s.word + 2 * (lane + 32 * q), words + 2 * (lane + 32 * q), 16);
  }
#pragma unroll
  for (int q = 0; q < kStagedEntries / 128; ++q) {
    __pipeline_memcpy_async(s.tag + 4 * (lane + 32 * q), tags + 4 * (lane + 32 * q), 16);
  }
  if (lane < kBlockRows / 4) __pipeline_memcpy_async(s.order + 4 * lane, order + b * kBlockRows + 4 * lane, 16);
  if (lane == 0) __pipeline_memcpy_async(&s.count, a.count + local, 4);
}

// The removed words of the chunk's columns as 32-bit halves (low half first): a 32-bit atomic OR is one
// instruction in shared memory, a 64-bit one a compare-and-swap loop. kShared: in shared memory; else the
// global bitset, read at L2 (where the other lanes' atomics are).
template <bool kShared>
struct RemovedView {
  unsigned* half;
  __device__ __forceinline__ Word load(std::int64_t c) const {
    if constexpr (kShared) {
      return Word(half[2 * c]) | (Word(half[2 * c + 1]) << 32);
    } else {
      return Word(__ldcg(half + 2 * c)) | (Word(__ldcg(half + 2 * c + 1)) << 32);
    }
  }
  __device__ __forceinline__ void add(std::int64_t c, Word w) const {
    const unsigned lo = static_cast<unsigned>(w), hi = static_cast<unsigned>(w >> 32);
    if (lo != 0) atomicOr(half + 2 * c, lo);
    if (hi != 0) atomicOr(half + 2 * c + 1, hi);
  }
};

// One warp. Dynamic shared memory: kScanStages stages, then (kShared) the removed words of the chunk's
// columns [rb0, W).
template <bool kShared>
__global__ void __launch_bounds__(32) nms_scan_kernel(ChunkArgs a, const int* __restrict__ order,
                                                      std::int64_t* __restrict__ keep,
                                                      std::int64_t* __restrict__ num_kept) {
  extern __shared__ __align__(16) unsigned char scan_shared[];
  ScanStage* stages = reinterpret_cast<ScanStage*>(scan_shared);
  const int lane = threadIdx.x;
  // removed.load(c) / add(c, bits): column block rb0 + c.
  RemovedView<kShared> removed{reinterpret_cast<unsigned*>(a.removed + a.rb0)};
  if constexpr (kShared) {
    removed.half = reinterpret_cast<unsigned*>(scan_shared + kScanStages * sizeof(ScanStage));
    for (std::int64_t c = lane; c < a.stride; c += 32) {
      __pipeline_memcpy_async(removed.half + 2 * c, a.removed + a.rb0 + c, 8);
    }
  }
  __pipeline_commit();
  for (int s = 0; s < kScanStages - 1; ++s) {
    stage_row_block(stages[s], a, order, a.rb0 + s, lane);
    __pipeline_commit();
  }
  std::int64_t count = *num_kept;
  for (std::int64_t b = a.rb0; b < a.rb1; ++b) {
    const std::int64_t local = b - a.rb0;
    // The stage of row block b - 1, read before the __syncwarp that ended its turn.
    stage_row_block(stages[(local + kScanStages - 1) % kScanStages], a, order, b + kScanStages - 1, lane);
    __pipeline_commit();
    __pipeline_wait_prior(kScanStages - 1);  // this lane's copies of row block b (and of `removed`) landed
    __syncwarp();                            // ... and every lane's, and the last turn's atomics
    const ScanStage& s = stages[local % kScanStages];
    Word kept = ~(removed.load(local) | past_end_bits(b, a.n));
    if (kept != 0) {
      // Resolve the block: rows with a zero diagonal word suppress nothing here, so only the kept rows with
      // a nonzero one are visited, in order; each visited row is kept (nothing before it removed it).
      const Word d_lo = s.diag[lane], d_hi = s.diag[lane + 32];
      const Word suppressing = Word(__ballot_sync(kFullWarp, d_lo != 0)) |
                               (Word(__ballot_sync(kFullWarp, d_hi != 0)) << 32);
      for (Word pending = kept & suppressing; pending != 0;) {
        const int k = __ffsll(static_cast<long long>(pending)) - 1;
        const Word dk = s.diag[k];  // bits above k only
        kept &= ~dk;
        pending &= ~dk;
        pending &= pending - 1;  // row k
      }
      if ((kept >> lane) & 1) keep[count + __popcll(kept & ((Word(1) << lane) - 1))] = s.order[lane];
      if ((kept >> (lane + 32)) & 1) {
        keep[count + __popcll(kept & ((Word(1) << (lane + 32)) - 1))] = s.order[lane + 32];
      }
      count += __popcll(kept);
      // The kept rows' entries remove their columns (an entry's column block is after b: no lane reads or
      // writes removed[local] concurrently).
      const int total = s.count;
      const int staged = total < kStagedEntries ? total : kStagedEntries;
      for (int e = lane; e < staged; e += 32) {
        const unsigned tag = s.tag[e];
        if ((kept >> (tag & 63u)) & 1) removed.add(tag >> 6, s.word[e]);
      }
      const Word* words = a.ent_word + local * a.cap;
      const unsigned* tags = a.ent_tag + local * a.cap;
      for (int e0 = kStagedEntries; e0 < total; e0 += 32 * kScanUnroll) {
        Word w[kScanUnroll];
        unsigned tag[kScanUnroll];
#pragma unroll
        for (int u = 0; u < kScanUnroll; ++u) {
          const int e = e0 + u * 32 + lane;
          w[u] = 0;
          tag[u] = 0;
          if (e < total) {
            w[u] = __ldg(words + e);
            tag[u] = __ldg(tags + e);
          }
        }
#pragma unroll
        for (int u = 0; u < kScanUnroll; ++u) {
          if ((kept >> (tag[u] & 63u)) & 1) removed.add(tag[u] >> 6, w[u]);
        }
      }
    }
    if constexpr (!kShared) __threadfence_block();  // the global atomics before the next turn's reads
    __syncwarp();
  }
  __pipeline_wait_prior(0);
  if constexpr (kShared) {
    __syncwarp();
    unsigned* out = reinterpret_cast<unsigned*>(a.removed + a.rb0);
    for (std::int64_t h = lane; h < 2 * a.stride; h += 32) out[h] = removed.half[h];
  }
  if (lane == 0) *num_kept = count;
}

const bool kRegistered = for_each_floating_type([](auto tag, const char* type) {
  using T = typename decltype(tag)::type;
  register_instantiation("nms", "nms_gather_kernel", type, &nms_gather_kernel<T>);
  if (std::is_same<T, double>::value || std::is_same<T, float>::value) {
    register_instantiation("nms", "nms_mask_kernel", std::string(type) + ", nms", &nms_mask_kernel<acc_t<T>, false>);
    register_instantiation("nms", "nms_mask_kernel", std::string(type) + ", batched", &nms_mask_kernel<acc_t<T>, true>);
  }
}) && [] {
  register_instantiation("nms", "nms_keys_kernel", "float", &nms_keys_kernel<float, float>);
  register_instantiation("nms", "nms_keys_kernel", "double", &nms_keys_kernel<double, double>);
  register_instantiation("nms", "nms_scan_kernel", "shared", &nms_scan_kernel<true>);
  register_instantiation("nms", "nms_scan_kernel", "global", &nms_scan_kernel<false>);
  return true;
}();

std::size_t align_up(std::size_t v) { return (v + 255) / 256 * 256; }

// Where each workspace buffer lives, and the chunking.
struct Layout {
  std::int64_t words = 0, rb_per_chunk = 0;
  std::size_t keys_in = 0, keys_out = 0, order_in = 0, order_out = 0, sort_temp = 0, sort_temp_bytes = 0,
              xyxy = 0, area = 0, classes = 0, removed = 0, diag = 0, ent_word = 0, ent_tag = 0, count = 0, total = 0;
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
  // A row block's worst case: its diagonal tile, an entry (12 bytes) for each of its rows' words of every
  // later column block, and its count.
  const std::int64_t row_block_bytes = kBlockRows * 8 + kBlockRows * std::max<std::int64_t>(l.words, 1) * 12 + 4;
  l.rb_per_chunk = std::max<std::int64_t>(1, std::max<std::int64_t>(params.mask_chunk_bytes, 0) / row_block_bytes);
  l.rb_per_chunk = std::min<std::int64_t>({l.rb_per_chunk, std::max<std::int64_t>(l.words, 1), 65535});
  const std::size_t key_bytes = scores_fp64 ? sizeof(double) : sizeof(float);
  const std::size_t acc_bytes = boxes_dtype == DType::kFloat64 ? sizeof(double) : sizeof(float);
  const std::size_t un = static_cast<std::size_t>(n);
  const std::size_t entries = static_cast<std::size_t>(l.rb_per_chunk * kBlockRows * l.words) + kStagedEntries;
  std::size_t at = 0;
  auto take = [&](std::size_t bytes) {
    const std::size_t where = at;
    at += align_up(bytes);
    return where;
  };
  l.keys_in = take(un * key_bytes);
  l.keys_out = take(un * key_bytes);
  l.order_in = take(un * sizeof(int));
  l.order_out = take(un * sizeof(int));  // read in whole 64-index blocks: align_up covers the last one
  l.sort_temp_bytes = scores_fp64 ? sort_temp_bytes<double>(n) : sort_temp_bytes<float>(n);
  l.sort_temp = take(l.sort_temp_bytes);
  l.xyxy = take(un * 4 * acc_bytes);
  l.area = take(un * acc_bytes);
  l.classes = take(batched ? un * sizeof(std::int64_t) : 0);
  l.removed = take(static_cast<std::size_t>(l.words) * sizeof(Word));
  l.diag = take(static_cast<std::size_t>(l.rb_per_chunk * kBlockRows) * sizeof(Word));
  l.ent_word = take(entries * sizeof(Word));
  l.ent_tag = take(entries * sizeof(unsigned));
  l.count = take(static_cast<std::size_t>(l.rb_per_chunk) * sizeof(int));
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

template <typename Acc, bool kBatched>
void launch_mask(const ChunkArgs& c, const char* ws, const Layout& l, const NmsThreshold<Acc>& th, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((c.stride + kMaskColBlocks - 1) / kMaskColBlocks),
                  static_cast<unsigned>(c.rb1 - c.rb0));
  nms_mask_kernel<Acc, kBatched><<<grid, kBlockRows, 0, stream>>>(
      c, reinterpret_cast<const NmsXyxy<Acc>*>(ws + l.xyxy), reinterpret_cast<const Acc*>(ws + l.area),
      kBatched ? reinterpret_cast<const std::int64_t*>(ws + l.classes) : nullptr, th);
  DETOPS_CHECK_LAUNCH();
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
  const bool batched = args.classes != nullptr;
  const Layout l = make_layout(params, n, boxes_dtype, args.scores_fp64, batched);
  if (workspace_bytes < l.total) throw std::invalid_argument("launch_nms: workspace too small");
  char* ws = static_cast<char*>(workspace);
  if (args.scores_fp64) {
    sort_by_score<double>(l, ws, args, stream);
  } else {
    sort_by_score<float>(l, ws, args, stream);
  }
  const int* order = reinterpret_cast<const int*>(ws + l.order_out);
  std::int64_t* sorted_classes = batched ? reinterpret_cast<std::int64_t*>(ws + l.classes) : nullptr;
  DETOPS_CUDA_CHECK(cudaMemsetAsync(ws + l.removed, 0, static_cast<std::size_t>(l.words) * sizeof(Word), stream));

  // The scan keeps the removed words of its chunk's columns in shared memory when the first (widest) chunk's
  // fit in what one block may opt in to.
  const std::size_t stage_bytes = kScanStages * sizeof(ScanStage);
  const std::size_t widest_shared = stage_bytes + static_cast<std::size_t>(l.words) * sizeof(Word);
  int device = 0, optin = 0;
  DETOPS_CUDA_CHECK(cudaGetDevice(&device));
  DETOPS_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const bool shared_removed = params.scan_removed_in_shared && widest_shared <= static_cast<std::size_t>(optin);
  if (shared_removed && widest_shared > 48 * 1024) {
    DETOPS_CUDA_CHECK(cudaFuncSetAttribute(&nms_scan_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(widest_shared)));
  }

  dispatch_floating(boxes_dtype, "nms", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    nms_gather_kernel<T><<<grid_for(n, kPrepThreads), kPrepThreads, 0, stream>>>(
        n, static_cast<const T*>(args.boxes), args.classes, order, reinterpret_cast<NmsXyxy<Acc>*>(ws + l.xyxy),
        reinterpret_cast<Acc*>(ws + l.area), sorted_classes);
    DETOPS_CHECK_LAUNCH();
    const NmsThreshold<Acc> th = nms_make_threshold<Acc>(params.iou_threshold);
    for (std::int64_t rb0 = 0; rb0 < l.words; rb0 += l.rb_per_chunk) {
      ChunkArgs c;
      c.n = n;
      c.words = l.words;
      c.rb0 = rb0;
      c.rb1 = std::min(l.words, rb0 + l.rb_per_chunk);
      c.stride = l.words - rb0;
      c.cap = kBlockRows * c.stride;
      c.diag = reinterpret_cast<Word*>(ws + l.diag);
      c.ent_word = reinterpret_cast<Word*>(ws + l.ent_word);
      c.ent_tag = reinterpret_cast<unsigned*>(ws + l.ent_tag);
      c.count = reinterpret_cast<int*>(ws + l.count);
      c.removed = reinterpret_cast<Word*>(ws + l.removed);
      DETOPS_CUDA_CHECK(cudaMemsetAsync(c.count, 0, static_cast<std::size_t>(c.rb1 - c.rb0) * sizeof(int), stream));
      if (batched) {
        launch_mask<Acc, true>(c, ws, l, th, stream);
      } else {
        launch_mask<Acc, false>(c, ws, l, th, stream);
      }
      if (shared_removed) {
        const std::size_t bytes = stage_bytes + static_cast<std::size_t>(c.stride) * sizeof(Word);
        nms_scan_kernel<true><<<1, 32, bytes, stream>>>(c, order, args.keep, args.num_kept);
      } else {
        nms_scan_kernel<false><<<1, 32, stage_bytes, stream>>>(c, order, args.keep, args.num_kept);
      }
      DETOPS_CHECK_LAUNCH();
    }
  });
}

}  // namespace detops
