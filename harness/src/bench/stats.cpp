#include "detops/harness/bench/stats.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace detops::harness::bench {

double quantile_sorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) throw std::invalid_argument("quantile_sorted: no values");
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

double median_of(std::vector<double> values) {
  if (values.empty()) throw std::invalid_argument("median_of: no values");
  std::sort(values.begin(), values.end());
  return quantile_sorted(values, 0.5);
}

SampleStats summarize_samples(const std::vector<double>& samples) {
  SampleStats s;
  if (samples.empty()) return s;
  std::vector<double> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  s.count = static_cast<std::int64_t>(sorted.size());
  s.min = sorted.front();
  s.max = sorted.back();
  s.q1 = quantile_sorted(sorted, 0.25);
  s.median = quantile_sorted(sorted, 0.5);
  s.q3 = quantile_sorted(sorted, 0.75);
  double sum = 0;
  for (double v : sorted) sum += v;
  s.mean = sum / static_cast<double>(sorted.size());
  if (sorted.size() > 1) {
    double ss = 0;
    for (double v : sorted) ss += (v - s.mean) * (v - s.mean);
    s.stdev = std::sqrt(ss / static_cast<double>(sorted.size() - 1));
  }
  s.rel_stdev = s.mean != 0 ? s.stdev / s.mean : 0;
  return s;
}

std::vector<double> repetition_medians(const std::vector<double>& samples, int repetitions) {
  if (repetitions < 1) throw std::invalid_argument("repetition_medians: repetitions must be >= 1");
  const std::size_t n = samples.size();
  const std::size_t r = std::min<std::size_t>(static_cast<std::size_t>(repetitions), n);
  std::vector<double> medians;
  medians.reserve(r);
  for (std::size_t i = 0; i < r; ++i) {
    const std::size_t begin = i * n / r, end = (i + 1) * n / r;
    medians.push_back(median_of(std::vector<double>(samples.begin() + static_cast<std::ptrdiff_t>(begin),
                                                    samples.begin() + static_cast<std::ptrdiff_t>(end))));
  }
  return medians;
}

}  // namespace detops::harness::bench
