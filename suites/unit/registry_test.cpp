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

}  // namespace
}  // namespace detops::harness
