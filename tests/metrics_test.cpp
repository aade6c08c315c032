// The comparison metrics of docs/DESIGN.md §4 on cases whose values follow from their definitions.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "core/metrics.hpp"

namespace gdnv {
namespace {

TEST(Metrics, OneChangedElementGivesItsIndexAndDefinitionalValues) {
  const Tensor ref = Tensor::from(std::vector<double>{1, 2, 3, 4}, {2, 2});
  const Tensor cand = Tensor::from(std::vector<double>{1, 2, 3, 5}, {2, 2});
  const Metrics m = compare(ref, cand);
  EXPECT_EQ(m.max_abs, 1.0);
  EXPECT_EQ(m.max_abs_index, 3);
  EXPECT_EQ(m.max_rel, 0.25);
  EXPECT_EQ(m.max_rel_index, 3);
  // rms(diff) = sqrt(1/4), rms(ref) = sqrt(30/4).
  EXPECT_NEAR(m.rel_rms, std::sqrt(0.25) / (std::sqrt(7.5) + 1e-12), 1e-15);
  // <a,b> = 1+4+9+20 = 34, |a|^2 = 30, |b|^2 = 39.
  EXPECT_NEAR(m.one_minus_cos, 1.0 - 34.0 / std::sqrt(30.0 * 39.0), 1e-15);
  EXPECT_NEAR(m.snr_db, 10 * std::log10(30.0), 1e-12);
  EXPECT_FALSE(m.bitwise);
  EXPECT_EQ(mismatches(ref, cand, 0.5, 0.1), 1);  // 1 > 0.5 + 0.4
  EXPECT_EQ(mismatches(ref, cand, 0.5, 0.2), 0);  // 1 <= 0.5 + 0.8
}

TEST(Metrics, IdenticalTensorsAreBitwiseWithInfiniteSnr) {
  const Tensor a = Tensor::from(std::vector<float>{0.5f, -1.0f}, {2});
  const Metrics m = compare(a, a.to(DType::F32));
  EXPECT_TRUE(m.bitwise);
  EXPECT_EQ(m.max_abs, 0.0);
  EXPECT_TRUE(std::isinf(m.snr_db));
}

TEST(Metrics, SignedZeroIsNumericallyEqualButNotBitwise) {
  const Metrics m = compare(Tensor::from(std::vector<double>{0.0}, {1}), Tensor::from(std::vector<double>{-0.0}, {1}));
  EXPECT_EQ(m.max_abs, 0.0);
  EXPECT_FALSE(m.bitwise);
}

TEST(Metrics, NonFiniteValuesAreCountedAndMismatch) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const Tensor ref = Tensor::from(std::vector<double>{1, 2, inf}, {3});
  const Tensor cand = Tensor::from(std::vector<double>{nan, 2, inf}, {3});
  const Metrics m = compare(ref, cand);
  EXPECT_EQ(m.nan_cand, 1);
  EXPECT_EQ(m.inf_ref, 1);
  EXPECT_EQ(m.inf_cand, 1);
  EXPECT_EQ(mismatches(ref, cand, 1e9, 0), 1);  // the NaN, however loose the tolerance
}

TEST(Metrics, TolerancesAreTheSmallestThatPassAndTheErrorsGoToTheirDecades) {
  const Tensor ref = Tensor::from(std::vector<double>{1, 2, 0, 4, 10}, {5});
  const Tensor cand = Tensor::from(std::vector<double>{1, 2.03, 0, 4.0005, 10.3}, {5});
  const Tolerances t = tolerances(ref, cand);
  EXPECT_NEAR(t.min_atol, 0.3, 1e-12);   // |10.3 - 10|
  EXPECT_NEAR(t.min_rtol, 0.03, 1e-12);  // 0.3 / 10 and 0.03 / 2
  EXPECT_EQ(mismatches(ref, cand, t.min_atol, 0), 0);
  EXPECT_EQ(mismatches(ref, cand, 0, t.min_rtol), 0);
  EXPECT_GT(mismatches(ref, cand, 0.99 * t.min_atol, 0), 0);
  EXPECT_EQ(decade_histogram(t), "0:2 1e-04:1 1e-02:1 1e-01:1");
}

// One character a decade, its height the count on a log scale (one element the lowest bar, the most
// populated decade the highest), a space where no error falls.
TEST(Metrics, DecadeBarsAreLogHeightsOverTheGivenDecades) {
  Tolerances t;
  t.decades = {{-9, 1000}, {-8, 10}, {-6, 1}};
  EXPECT_EQ(decade_bars(t, -10, -5), " \u2588\u2583 \u2581 ");  // 10 of 1000: 7 log 10 / log 1000 = 2.3 -> 3rd bar
  EXPECT_EQ(decade_bars(t, -9, -9), "\u2588");
  EXPECT_EQ(decade_str(-9), "1e-09");
}

TEST(Metrics, NoToleranceCoversANaNOrAnErrorWhereTheReferenceIsZero) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tolerances t =
      tolerances(Tensor::from(std::vector<double>{0, 1}, {2}), Tensor::from(std::vector<double>{2e-3, nan}, {2}));
  EXPECT_TRUE(std::isinf(t.min_atol));
  EXPECT_TRUE(std::isinf(t.min_rtol));
  EXPECT_EQ(decade_histogram(t), "0:0 1e-03:1 nan/inf:1");
}

TEST(Metrics, ShapeMismatchIsAnError) {
  EXPECT_THROW(compare(Tensor(DType::F64, {2}), Tensor(DType::F64, {3})), Error);
}

}  // namespace
}  // namespace gdnv
