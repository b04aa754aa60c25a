// What the issue asks of every registered op spec, checked against the registry itself.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <stdexcept>
#include <vector>

#include "detops/harness/bench_inputs.h"
#include "detops/harness/op_spec.h"

namespace detops::harness {
namespace {

TEST(OpRegistry, EveryOpIsWellFormed) {
  const auto& ops = OpRegistry::instance().ops();
  ASSERT_FALSE(ops.empty()) << "no op spec registered: are the specs linked as an OBJECT library?";
  const std::regex name_re("[A-Za-z0-9_]+");
  for (const OpSpec& op : ops) {
    SCOPED_TRACE(op.name);
    EXPECT_GE(op.cases.size(), 40u) << "each op needs at least 40 seeded cases";
    EXPECT_EQ(op.dtypes.size(), 4u) << "fp64, fp32, fp16 and bf16";
    EXPECT_FALSE(op.bad_inputs.empty());
    EXPECT_TRUE(static_cast<bool>(op.valid_call));
    std::set<std::uint64_t> seeds;
    for (const OpCase& c : op.cases) {
      EXPECT_TRUE(std::regex_match(c.name, name_re)) << c.name;
      EXPECT_TRUE(seeds.insert(c.seed).second) << "seed reused by " << c.name;
      EXPECT_TRUE(static_cast<bool>(c.make)) << c.name;
    }
    for (const auto& [dtype, scale] : op.tolerance_scales) {
      if (scale.atol != 1 || scale.rtol != 1) {
        EXPECT_FALSE(scale.reason.empty()) << dtype_name(dtype);
      }
    }
  }
}

TEST(OpRegistry, CasesAreReproducibleFromTheirSeed) {
  for (const OpSpec& op : OpRegistry::instance().ops()) {
    const OpCase& c = op.cases.front();
    const CaseData a = c.make(c.seed), b = c.make(c.seed);
    ASSERT_EQ(a.inputs.size(), b.inputs.size());
    for (size_t i = 0; i < a.inputs.size(); ++i) EXPECT_TRUE(a.inputs[i].equal(b.inputs[i])) << op.name << " input " << i;
  }
}

TEST(OpRegistry, EveryOpDeclaresBenchmarkCases) {
  const std::regex name_re("[A-Za-z0-9_]+");
  for (const OpSpec& op : OpRegistry::instance().ops()) {
    SCOPED_TRACE(op.name);
    EXPECT_FALSE(op.benchmarks.empty()) << "no benchmark cases (docs/benchmarks.md)";
    std::set<std::string> names;
    for (const BenchCase& b : op.benchmarks) {
      EXPECT_TRUE(std::regex_match(b.name, name_re)) << b.name;
      EXPECT_TRUE(names.insert(b.name).second) << "duplicate benchmark case " << b.name;
      EXPECT_FALSE(b.shape.empty()) << b.name;
      EXPECT_FALSE(b.bytes_note.empty()) << b.name;
      EXPECT_TRUE(static_cast<bool>(b.make)) << b.name;
      // Every dtype the op supports, and only those.
      EXPECT_EQ(std::set<DType>(b.dtypes.begin(), b.dtypes.end()), std::set<DType>(op.dtypes.begin(), op.dtypes.end()))
          << b.name;
    }
  }
}

// Issue 13: the RoI ops' cases on RPN proposals, each timed cold and warm. A warm case is the cold case's twin
// (same inputs, bytes and dtypes; its name + "_warm", its shape + " warm L2") that says what its touch does.
TEST(OpRegistry, WarmBenchmarkCasesAreTwinsOfColdOnes) {
  const std::string kSuffix = "_warm";
  std::map<std::string, std::set<std::string>> names;
  for (const OpSpec& op : OpRegistry::instance().ops()) {
    SCOPED_TRACE(op.name);
    std::map<std::string, const BenchCase*> by_name;
    for (const BenchCase& b : op.benchmarks) by_name[b.name] = &b;
    for (const BenchCase& b : op.benchmarks) {
      names[op.name].insert(b.name);
      const bool named_warm = b.name.size() > kSuffix.size() &&
                              b.name.compare(b.name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
      EXPECT_EQ(named_warm, b.l2 == L2State::kWarm) << b.name << ": warm cases, and only they, end in _warm";
      if (b.l2 != L2State::kWarm) {
        EXPECT_TRUE(b.touch_note.empty()) << b.name;
        continue;
      }
      EXPECT_FALSE(b.touch_note.empty()) << b.name;
      const auto cold = by_name.find(b.name.substr(0, b.name.size() - kSuffix.size()));
      ASSERT_NE(cold, by_name.end()) << b.name << " has no cold twin";
      EXPECT_EQ(cold->second->l2, L2State::kCold) << b.name;
      EXPECT_EQ(b.shape, cold->second->shape + " warm L2") << b.name;
      EXPECT_EQ(b.bytes_note, cold->second->bytes_note) << b.name;
      EXPECT_EQ(b.dtypes, cold->second->dtypes) << b.name;
    }
  }
  const std::map<std::string, std::vector<std::string>> expected{
      {"roi_align", {"rpn_box_sr2", "rpn_box_sr0_aligned", "rpn_box_sr0", "rpn_mask_sr0_aligned"}},
      {"roi_pool", {"rpn_box"}},
      {"ps_roi_align", {"rpn_rfcn"}},
      {"ps_roi_pool", {"rpn_rfcn"}}};
  for (const auto& [op, cases] : expected) {
    for (const std::string& c : cases) {
      EXPECT_TRUE(names[op].count(c) == 1 && names[op].count(c + kSuffix) == 1) << op << "/" << c << " cold and warm";
    }
  }
  // The cases that existed before keep their names (baselines are compared by name).
  for (const auto& [op, c] : std::vector<std::pair<std::string, std::string>>{
           {"roi_align", "box_head_1000"}, {"roi_align", "box_head_train_1024"}, {"roi_align", "mask_head_100"},
           {"roi_align", "mask_head_512"}, {"roi_pool", "box_head_1000"}, {"ps_roi_align", "rfcn_1000"},
           {"ps_roi_pool", "rfcn_1000"}}) {
    EXPECT_EQ(names[op].count(c), 1u) << op << "/" << c;
  }
}

// bench_proposal_rois: RPN-like boxes grouped by image, sizes and aspects in range and spread log-uniformly,
// centres in the image, not clipped (some cross the border), reproducible from the seed.
TEST(BenchInputs, ProposalRoisAreRpnLikeAndUnclipped) {
  const std::int64_t per_image = 4000, images = 3;
  const at::Tensor r = bench_proposal_rois(per_image, images, 17);
  ASSERT_EQ(r.scalar_type(), at::kDouble);
  ASSERT_EQ(r.sizes(), (at::IntArrayRef{per_image * images, 5}));
  const auto a = r.accessor<double, 2>();
  const double W = kBenchImageWidth, H = kBenchImageHeight;
  std::int64_t crossing = 0;
  std::vector<double> log_sizes;
  for (std::int64_t i = 0; i < r.size(0); ++i) {
    SCOPED_TRACE(i);
    ASSERT_EQ(a[i][0], static_cast<double>(i / per_image));  // grouped by image
    const double x1 = a[i][1], y1 = a[i][2], x2 = a[i][3], y2 = a[i][4];
    ASSERT_LT(x1, x2);
    ASSERT_LT(y1, y2);
    const double w = x2 - x1, h = y2 - y1, size = std::sqrt(w * h), aspect = h / w;
    ASSERT_GE(size, 4.0 * (1 - 1e-12));
    ASSERT_LE(size, 400.0 * (1 + 1e-12));
    ASSERT_GE(aspect, (1.0 / 3.0) * (1 - 1e-12));
    ASSERT_LE(aspect, 3.0 * (1 + 1e-12));
    const double cx = (x1 + x2) / 2, cy = (y1 + y2) / 2;
    ASSERT_TRUE(cx >= 0 && cx <= W && cy >= 0 && cy <= H) << cx << ", " << cy;
    if (x1 < 0 || y1 < 0 || x2 > W || y2 > H) ++crossing;
    log_sizes.push_back(std::log(size));
  }
  // Not clipped: boxes near the border cross it. Expected fraction ~10 % (a box crosses an edge when its centre
  // is within half its size of it); clipped boxes would give 0.
  EXPECT_GT(crossing, r.size(0) / 50);
  EXPECT_LT(crossing, r.size(0) / 3);
  // Log-uniform sizes: the median of log(size) is the middle of [log 4, log 400] (log 40), and a quarter of the
  // boxes lies in each quarter of that range.
  std::sort(log_sizes.begin(), log_sizes.end());
  const double lo = std::log(4.0), hi = std::log(400.0);
  EXPECT_NEAR(log_sizes[log_sizes.size() / 2], std::log(40.0), 0.05 * (hi - lo));
  EXPECT_NEAR(log_sizes[log_sizes.size() / 4], lo + 0.25 * (hi - lo), 0.05 * (hi - lo));
  EXPECT_NEAR(log_sizes[3 * log_sizes.size() / 4], lo + 0.75 * (hi - lo), 0.05 * (hi - lo));
  // The seed decides everything.
  EXPECT_TRUE(bench_proposal_rois(per_image, images, 17).equal(r));
  EXPECT_FALSE(bench_proposal_rois(per_image, images, 18).equal(r));
  EXPECT_EQ(bench_proposal_rois(0, 2, 1).size(0), 0);
  EXPECT_THROW(bench_proposal_rois(10, 0, 1), std::invalid_argument);
  EXPECT_THROW(bench_proposal_rois(-1, 2, 1), std::invalid_argument);
}

// bench_randn_master keeps draws between the benchmarks of a case: a kept draw must be the draw that key would
// give afresh (not another shape's or seed's values, e.g. a cache keyed by element count or by seed alone), and
// the cap must not drop the draw just made.
TEST(BenchInputs, KeptDrawsAreTheDrawsTheirKeyGives) {
  auto fresh = [](const std::vector<std::int64_t>& shape, std::uint64_t seed) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    return at::randn(shape, gen, at::TensorOptions().dtype(at::kFloat));
  };
  const at::Tensor a = bench_randn_master({2, 3, 5}, 41);
  EXPECT_EQ(a.scalar_type(), at::kFloat);
  EXPECT_TRUE(a.equal(fresh({2, 3, 5}, 41)));
  // Asked again (as the next dtype of the case is): the same values, from the kept draw.
  const at::Tensor again = bench_randn_master({2, 3, 5}, 41);
  EXPECT_TRUE(again.equal(a));
  EXPECT_EQ(again.data_ptr(), a.data_ptr());
  // Same element count, other shape: its own shape (the values of one seed agree element for element).
  const at::Tensor other_shape = bench_randn_master({5, 3, 2}, 41);
  EXPECT_EQ(other_shape.sizes(), (at::IntArrayRef{5, 3, 2}));
  EXPECT_TRUE(other_shape.equal(fresh({5, 3, 2}, 41)));
  // Same shape, other seed: other values.
  const at::Tensor other_seed = bench_randn_master({2, 3, 5}, 42);
  EXPECT_TRUE(other_seed.equal(fresh({2, 3, 5}, 42)));
  EXPECT_FALSE(other_seed.equal(a));
  // More than the cap in all: the oldest go, the newest stays and is right; a dropped key is drawn again, right.
  const std::int64_t big = kBenchDrawCacheBytes / 4 / 3 + 1;  // fp32 elements: a third of the cap and a bit
  std::vector<at::Tensor> bigs;
  for (std::uint64_t seed = 100; seed < 103; ++seed) bigs.push_back(bench_randn_master({big}, seed));
  EXPECT_TRUE(bench_randn_master({big}, 102).equal(fresh({big}, 102)));
  EXPECT_TRUE(bench_randn_master({big}, 100).equal(fresh({big}, 100)));
  EXPECT_TRUE(bench_randn_master({2, 3, 5}, 41).equal(fresh({2, 3, 5}, 41)));
}

}  // namespace
}  // namespace detops::harness
