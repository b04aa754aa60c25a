#pragma once
// Summary statistics of timing samples, and the repetition blocks the record reports. Pure C++.
#include <cstdint>
#include <vector>

namespace detops::harness::bench {

struct SampleStats {
  double min = 0, q1 = 0, median = 0, q3 = 0, max = 0, mean = 0;
  double stdev = 0;      // sample standard deviation (n - 1); 0 for fewer than 2 samples
  double rel_stdev = 0;  // stdev / mean; 0 when the mean is 0
  std::int64_t count = 0;
};

// Quantile q in [0, 1] with linear interpolation between order statistics (numpy's default, "type 7").
// `sorted` must be sorted ascending and non-empty.
double quantile_sorted(const std::vector<double>& sorted, double q);
double median_of(std::vector<double> values);  // throws std::invalid_argument when empty

// All-zero stats with count 0 for an empty input.
SampleStats summarize_samples(const std::vector<double>& samples);

// The samples split into `repetitions` contiguous blocks in sampling order, block i holding samples
// [floor(i*n/r), floor((i+1)*n/r)), so sizes differ by at most one. With fewer samples than
// repetitions, one block per sample. Returns each block's median.
std::vector<double> repetition_medians(const std::vector<double>& samples, int repetitions);

}  // namespace detops::harness::bench
