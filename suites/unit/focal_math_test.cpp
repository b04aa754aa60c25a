// The fp32 helpers of the sigmoid focal loss kernels' per-element math (sigmoid_focal_loss_kernel.cuh),
// on the host: log(1 + e) for e in [0, 1] as a short series, against double log1p.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "sigmoid_focal_loss/sigmoid_focal_loss_kernel.cuh"

namespace detops {
namespace {

float float_from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Error in units of the last place of the double result rounded to float.
double ulp_error(float got, double want) {
  const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

// Every 61st float in [0, 1] (17 million values spread over every binade, subnormals included) and the
// ends: within 4 ulp (the implementation reaches 3.4), relative, down to the smallest subnormal. A wrong
// coefficient or a missing term of order z^5 or lower (each worth 25 ulp or more at e = 1), or forming 2s
// as 2 * (e / (2 + e)) (which rounds the smallest subnormals to 0) fails here.
TEST(FocalMath, Log1pUnitWithin4UlpOverZeroToOne) {
  double worst = 0;
  float worst_at = 0;
  const std::uint32_t one = 0x3f800000u;  // 1.0f
  for (std::uint32_t u = 1; u <= one + 60; u += 61) {
    const float e = float_from_bits(u < one ? u : one);
    const double err = ulp_error(focal_log1p_unit(e), std::log1p(static_cast<double>(e)));
    if (err > worst) {
      worst = err;
      worst_at = e;
    }
  }
  EXPECT_LE(worst, 4.0) << "worst at e = " << worst_at;
  EXPECT_EQ(focal_log1p_unit(0.0f), 0.0f);
  EXPECT_EQ(focal_log1p_unit(std::numeric_limits<float>::denorm_min()), std::numeric_limits<float>::denorm_min());
  EXPECT_TRUE(std::isnan(focal_log1p_unit(std::numeric_limits<float>::quiet_NaN())));
}

// The per-element loss at logits where p rounds to 0 or 1 in fp32 stays finite and relative to the
// double result (the softplus form never takes log(0) or loses log1p(e) for tiny e).
TEST(FocalMath, LossAtLargeLogitsMatchesDouble) {
  SigmoidFocalLossParams p;
  const FocalCoeffs<float> kf = focal_coeffs<float>(p);
  const FocalCoeffs<double> kd = focal_coeffs<double>(p);
  for (const float x : {-100.0f, -40.0f, -17.0f, 17.0f, 40.0f, 100.0f}) {
    for (const float t : {0.0f, 1.0f}) {
      const double want = focal_loss_value<double>(x, t, kd);
      const float got = focal_loss_value<float, kGammaTwo>(x, t, kf);
      ASSERT_TRUE(std::isfinite(got)) << "x " << x << " t " << t;
      if (want < 1e-37) continue;  // below fp32's normal range
      EXPECT_LE(std::fabs(got - want) / want, 2e-6) << "x " << x << " t " << t << ": " << got << " vs " << want;
    }
  }
}

}  // namespace
}  // namespace detops
