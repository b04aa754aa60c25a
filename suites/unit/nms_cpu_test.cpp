// The CPU NMS (ops/nms/nms_cpu.cpp: per class, candidates found through a grid) against the plain greedy pass over
// the same per-pair test (nms_suppresses, nms_kernel.cuh), written here in its few lines: the keep lists must be
// equal on inputs built to break the grid's shortcuts. Boxes that are inverted, empty, NaN, infinite, huge (wider than
// the grid's cell limit) or identical; touching edges; thresholds of 0, 1, NaN and below 0 (where disjoint boxes
// suppress, and the grid is not used); one class and many; classes above 256 boxes (the grid) and below.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "nms/nms.h"
#include "nms/nms_kernel.cuh"

namespace detops {
namespace {

struct Input {
  std::vector<float> boxes;  // [n, 4]
  std::vector<float> scores;
  std::vector<std::int64_t> classes;  // empty: one class
  std::int64_t size() const { return static_cast<std::int64_t>(scores.size()); }
};

// Plain greedy: the sorted order (decreasing score key, NaN first, ties by index), each box not yet removed kept and
// removing every later box of its class it suppresses.
std::vector<std::int64_t> plain_nms(const Input& in, double threshold) {
  const std::int64_t n = in.size();
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    const float ka = nms_score_key<float>(in.scores[a]), kb = nms_score_key<float>(in.scores[b]);
    if (ka != ka) return kb == kb;
    return ka > kb;
  });
  const NmsThreshold<float> th = nms_make_threshold<float>(threshold);
  std::vector<char> removed(static_cast<std::size_t>(n), 0);
  std::vector<std::int64_t> keep;
  for (std::int64_t p = 0; p < n; ++p) {
    if (removed[p]) continue;
    const std::int64_t a = order[p];
    keep.push_back(a);
    const NmsBox<float> ba = make_nms_box<float>(in.boxes.data() + 4 * a);
    for (std::int64_t q = p + 1; q < n; ++q) {
      const std::int64_t b = order[q];
      if (removed[q] || (!in.classes.empty() && in.classes[a] != in.classes[b])) continue;
      if (nms_suppresses(ba, make_nms_box<float>(in.boxes.data() + 4 * b), th)) removed[q] = 1;
    }
  }
  return keep;
}

std::vector<std::int64_t> cpu_nms(const Input& in, double threshold) {
  NmsParams params;
  params.iou_threshold = threshold;
  std::vector<std::int64_t> keep(static_cast<std::size_t>(in.size()), -1);
  std::int64_t kept = -1;
  NmsArgs args;
  args.num_boxes = in.size();
  args.boxes = in.boxes.data();
  args.scores = in.scores.data();
  args.classes = in.classes.empty() ? nullptr : in.classes.data();
  args.keep = keep.data();
  args.num_kept = &kept;
  run_nms_cpu(params, args, DType::kFloat32);
  keep.resize(static_cast<std::size_t>(std::max<std::int64_t>(kept, 0)));
  return keep;
}

// Clusters of proposals around objects on a 1000 x 800 image, plus `special` boxes of every awkward kind, with
// scores from few levels (ties) and some NaN.
Input make_input(std::mt19937_64& rng, int n, int classes, int special) {
  std::uniform_real_distribution<float> u01(0.f, 1.f);
  Input in;
  const int objects = std::max(1, n / 40);
  std::vector<std::array<float, 4>> objs;
  for (int o = 0; o < objects; ++o) {
    const float w = 8 + 200 * u01(rng), h = 8 + 200 * u01(rng), x = 1000 * u01(rng), y = 800 * u01(rng);
    objs.push_back({x, y, x + w, y + h});
  }
  for (int i = 0; i < n; ++i) {
    const auto& o = objs[static_cast<std::size_t>(rng() % objs.size())];
    const float w = o[2] - o[0], h = o[3] - o[1];
    const float x1 = o[0] + w * (u01(rng) - 0.5f) * 0.4f, y1 = o[1] + h * (u01(rng) - 0.5f) * 0.4f;
    const float x2 = x1 + w * (0.7f + 0.6f * u01(rng)), y2 = y1 + h * (0.7f + 0.6f * u01(rng));
    in.boxes.insert(in.boxes.end(), {x1, y1, x2, y2});
  }
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::array<float, 4>> odd = {
      {500, 400, 400, 500},        // inverted in x
      {100, 100, 100, 150},        // zero width
      {nan, 10, 20, 30},           // NaN coordinate
      {10, 10, 20, nan},
      {-inf, 100, inf, 200},       // infinite extent
      {-inf, -inf, inf, inf},
      {0, 0, 1000, 800},           // the whole image: more cells than the per-box limit
      {-1e30f, -1e30f, 1e30f, 1e30f},
      {200, 200, 260, 260},        // a box and an identical copy
      {200, 200, 260, 260},
      {260, 200, 320, 260},        // touching the previous pair's right edge
      {inf, inf, inf, inf},
  };
  for (int i = 0; i < special; ++i) {
    const auto& b = odd[static_cast<std::size_t>(i) % odd.size()];
    in.boxes.insert(in.boxes.end(), b.begin(), b.end());
  }
  const int total = n + special;
  for (int i = 0; i < total; ++i) {
    const int level = static_cast<int>(rng() % 64);
    in.scores.push_back(rng() % 97 == 0 ? nan : static_cast<float>(level) / 64.f);
  }
  // Shuffle boxes (with their scores) so the special ones are spread through the ranking.
  std::vector<int> perm(static_cast<std::size_t>(total));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  Input out;
  for (const int i : perm) {
    out.boxes.insert(out.boxes.end(), in.boxes.begin() + 4 * i, in.boxes.begin() + 4 * i + 4);
    out.scores.push_back(in.scores[static_cast<std::size_t>(i)]);
  }
  if (classes > 0) {
    for (int i = 0; i < total; ++i) out.classes.push_back(static_cast<std::int64_t>(rng() % classes) - 2);
  }
  return out;
}

TEST(NmsCpu, EqualsThePlainGreedyPassOnAwkwardInputs) {
  std::mt19937_64 rng(2026112940);
  int grid_classes = 0;
  for (const int n : {300, 2000, 6000}) {
    for (const int classes : {0, 3, 40}) {
      const Input in = make_input(rng, n, classes, 60);
      if (classes == 0 || n / classes > 256) ++grid_classes;
      for (const double threshold : {0.5, 0.0, 0.7, 1.0, 0.3, std::nan(""), -0.25}) {
        const std::vector<std::int64_t> want = plain_nms(in, threshold), got = cpu_nms(in, threshold);
        ASSERT_EQ(got, want) << "n = " << n << ", classes = " << classes << ", threshold = " << threshold << ": "
                             << got.size() << " kept, the plain pass " << want.size();
      }
    }
  }
  EXPECT_GE(grid_classes, 5);  // the grid's path (classes of more than 256 boxes) ran
}

// The grid's cells are chosen from the boxes' median size: one tiny box cluster beside one huge box, and boxes all
// of one size on a line (a one-cell axis), give the same keep lists as the plain pass.
TEST(NmsCpu, EqualsThePlainGreedyPassOnDegenerateLayouts) {
  Input line;
  for (int i = 0; i < 1000; ++i) {
    const float x = static_cast<float>(i % 500) * 3.f;
    line.boxes.insert(line.boxes.end(), {x, 0.f, x + 10.f, 10.f});
    line.scores.push_back(static_cast<float>((i * 37) % 1000) / 1000.f);
  }
  Input tiny = line;
  tiny.boxes.insert(tiny.boxes.end(), {-1e6f, -1e6f, 1e6f, 1e6f});
  tiny.scores.push_back(0.999f);
  for (int i = 0; i < 600; ++i) {  // boxes of 1e-3 px, many on top of each other
    const float x = static_cast<float>(i % 20) * 5e-4f;
    tiny.boxes.insert(tiny.boxes.end(), {x, x, x + 1e-3f, x + 1e-3f});
    tiny.scores.push_back(static_cast<float>(i % 50) / 50.f);
  }
  for (const Input* in : {&line, &tiny}) {
    for (const double threshold : {0.5, 0.0, 0.9}) {
      EXPECT_EQ(cpu_nms(*in, threshold), plain_nms(*in, threshold)) << "threshold " << threshold;
    }
  }
}

}  // namespace
}  // namespace detops
