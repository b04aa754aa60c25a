// What the issue asks of every registered op spec, checked against the registry itself.
#include <gtest/gtest.h>

#include <regex>
#include <set>

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

}  // namespace
}  // namespace detops::harness
