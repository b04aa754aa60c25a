#include "detops/harness/bench_inputs.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <list>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>

#include "detops/harness/checks.h"

namespace detops::harness {
namespace {

struct Box {
  double x1, y1, x2, y2;
};

// A box of sqrt(area) log-uniform in [min_size, max_size] px, aspect ratio h/w log-uniform in [1/3, 3], centre
// uniform in the image; not clipped.
Box unclipped_box(std::mt19937_64& rng, double min_size, double max_size) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const double size = std::exp(std::log(min_size) + unit(rng) * (std::log(max_size) - std::log(min_size)));
  const double aspect = std::exp(std::log(1.0 / 3.0) + unit(rng) * (std::log(3.0) - std::log(1.0 / 3.0)));
  const double w = size / std::sqrt(aspect), h = size * std::sqrt(aspect);
  const double cx = unit(rng) * kBenchImageWidth, cy = unit(rng) * kBenchImageHeight;
  return Box{cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2};
}

// 16..640 px, clipped to the image, at least 1 px wide and high.
Box random_box(std::mt19937_64& rng) {
  const Box u = unclipped_box(rng, 16.0, 640.0);
  Box b{std::clamp(u.x1, 0.0, kBenchImageWidth - 1), std::clamp(u.y1, 0.0, kBenchImageHeight - 1),
        std::clamp(u.x2, 0.0, kBenchImageWidth), std::clamp(u.y2, 0.0, kBenchImageHeight)};
  b.x2 = std::max(b.x2, b.x1 + 1.0);
  b.y2 = std::max(b.y2, b.y1 + 1.0);
  return b;
}

// An RPN proposal: smaller than random_box's boxes on average (down to 4 px), and not clipped.
Box proposal_box(std::mt19937_64& rng) { return unclipped_box(rng, 4.0, 400.0); }

at::Tensor cpu_f64(std::vector<std::int64_t> shape) { return at::empty(shape, at::TensorOptions().dtype(at::kDouble)); }

}  // namespace

at::Tensor bench_image_boxes(std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  at::Tensor t = cpu_f64({n, 4});
  auto a = t.accessor<double, 2>();
  for (std::int64_t i = 0; i < n; ++i) {
    const Box b = random_box(rng);
    a[i][0] = b.x1;
    a[i][1] = b.y1;
    a[i][2] = b.x2;
    a[i][3] = b.y2;
  }
  return t;
}

namespace {

// RoIs [k, 5] grouped by image, k / images per image (the remainder on the first ones), boxes from draw(rng).
template <typename Draw>
at::Tensor rois_by_image(std::int64_t k, std::int64_t images, std::uint64_t seed, Draw&& draw) {
  std::mt19937_64 rng(seed);
  at::Tensor t = cpu_f64({k, 5});
  auto a = t.accessor<double, 2>();
  const std::int64_t per_image = k / images, extra = k % images;
  std::int64_t row = 0;
  for (std::int64_t img = 0; img < images; ++img) {
    const std::int64_t count = per_image + (img < extra ? 1 : 0);
    for (std::int64_t j = 0; j < count; ++j, ++row) {
      const Box b = draw(rng);
      a[row][0] = static_cast<double>(img);
      a[row][1] = b.x1;
      a[row][2] = b.y1;
      a[row][3] = b.x2;
      a[row][4] = b.y2;
    }
  }
  return t;
}

}  // namespace

at::Tensor bench_image_rois(std::int64_t k, std::int64_t images, std::uint64_t seed) {
  return rois_by_image(k, images, seed, [](std::mt19937_64& rng) { return random_box(rng); });
}

at::Tensor bench_proposal_rois(std::int64_t per_image, std::int64_t images, std::uint64_t seed) {
  if (per_image < 0 || images < 1) {
    throw std::invalid_argument("bench_proposal_rois: needs per_image >= 0 and images >= 1; got per_image " +
                                std::to_string(per_image) + ", images " + std::to_string(images));
  }
  return rois_by_image(per_image * images, images, seed, [](std::mt19937_64& rng) { return proposal_box(rng); });
}

std::pair<at::Tensor, at::Tensor> bench_box_pairs(std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  at::Tensor targets = cpu_f64({n, 4}), predictions = cpu_f64({n, 4});
  auto t = targets.accessor<double, 2>();
  auto p = predictions.accessor<double, 2>();
  for (std::int64_t i = 0; i < n; ++i) {
    const Box b = random_box(rng);
    const double w = b.x2 - b.x1, h = b.y2 - b.y1;
    t[i][0] = b.x1;
    t[i][1] = b.y1;
    t[i][2] = b.x2;
    t[i][3] = b.y2;
    p[i][0] = b.x1 + 0.1 * w * normal(rng);
    p[i][1] = b.y1 + 0.1 * h * normal(rng);
    p[i][2] = std::max(b.x2 + 0.1 * w * normal(rng), p[i][0] + 1.0);
    p[i][3] = std::max(b.y2 + 0.1 * h * normal(rng), p[i][1] + 1.0);
  }
  return {targets, predictions};
}

at::Tensor bench_randn_master(const std::vector<std::int64_t>& shape, std::uint64_t seed) {
  // Most recently used first. Keyed by the whole shape, not the element count: [2, 3] and [3, 2] from one seed
  // hold the same values in different shapes.
  struct Entry {
    std::vector<std::int64_t> shape;
    std::uint64_t seed;
    at::Tensor values;
  };
  static std::mutex mutex;
  static std::list<Entry> entries;
  const std::lock_guard<std::mutex> lock(mutex);
  for (auto it = entries.begin(); it != entries.end(); ++it) {
    if (it->seed == seed && it->shape == shape) {
      entries.splice(entries.begin(), entries, it);
      return entries.front().values;
    }
  }
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor values = at::randn(shape, gen, at::TensorOptions().dtype(at::kFloat));
  entries.push_front(Entry{shape, seed, values});
  std::int64_t bytes = 0;
  for (auto it = entries.begin(); it != entries.end();) {
    bytes += bench_bytes(it->values);
    // The newest entry stays even when it alone exceeds the cap (it is the caller's).
    if (it != entries.begin() && bytes > kBenchDrawCacheBytes) {
      it = entries.erase(it);
    } else {
      ++it;
    }
  }
  return values;
}

at::Tensor bench_randn_cuda(const std::vector<std::int64_t>& shape, DType dtype, std::uint64_t seed) {
  // to() onto another device always copies: the cached draw is never handed out to be changed.
  return bench_randn_master(shape, seed).to(at::TensorOptions().device(at::kCUDA, 0).dtype(scalar_type_of(dtype)));
}

at::Tensor bench_to_cuda(const at::Tensor& master, DType dtype) {
  return master.to(at::TensorOptions().device(at::kCUDA, 0).dtype(scalar_type_of(dtype))).contiguous();
}

std::int64_t bench_bytes(const at::Tensor& t) {
  return t.numel() * static_cast<std::int64_t>(t.element_size());
}

}  // namespace detops::harness
