#include "runtime/model/compare.h"

#include <gtest/gtest.h>

namespace cleave::runtime {
namespace {

// efficientnet_b0's case (issue 41): an output reaching 58 in magnitude; one element near zero
// rounds differently in a cut (0.05898) than in the fused whole model (0.05823).
at::Tensor wholeModel() { return at::tensor({58.0f, -31.5f, 0.05823f, 12.25f}); }
at::Tensor reassociated() { return at::tensor({58.0007f, -31.5004f, 0.05898f, 12.2501f}); }

TEST(Compare, ReassociationWithinTheOutputsScalePasses) {
  Comparison scaled = compareTensors(reassociated(), wholeModel(), kCutTolerance);
  EXPECT_TRUE(scaled.equal) << scaled.message;
  EXPECT_NEAR(scaled.outputScale, 58.0, 1e-6);
  EXPECT_LT(scaled.scaledError(), 1.3e-5 + 1e-7);
  // Element by element, the near-zero element is past tolerance: both figures are reported.
  EXPECT_EQ(scaled.pastElementwise, 1);
  EXPECT_GT(scaled.maxElementRel, 1e-2);
  AllClose elementwise = kCutTolerance;
  elementwise.scale = ToleranceScale::Element;
  Comparison strict = compareTensors(reassociated(), wholeModel(), elementwise);
  EXPECT_FALSE(strict.equal);
  EXPECT_EQ(strict.worstIndex, std::vector<std::int64_t>{2});
}

TEST(Compare, RealDifferencesStillFail) {
  at::Tensor square = at::arange(16, at::kFloat).reshape({4, 4}) - 7.5f;
  // A lost transpose, a wrong op (relu for identity), a swapped operand (b - a for a - b).
  at::Tensor other = at::full({4, 4}, 0.25f);
  const std::vector<std::pair<at::Tensor, at::Tensor>> planted = {
      {square.t().contiguous(), square}, {at::relu(square), square}, {other - square, square - other}};
  for (const auto& [got, want] : planted) {
    Comparison comparison = compareTensors(got, want, kCutTolerance);
    EXPECT_FALSE(comparison.equal);
    EXPECT_NE(comparison.message.find("the output's largest |expected|"), std::string::npos) << comparison.message;
  }
}

TEST(Compare, IntegersCompareExactlyWhateverTheScale) {
  at::Tensor want = at::tensor({100000, 3, 7}, at::kLong), got = at::tensor({100000, 4, 7}, at::kLong);
  Comparison comparison = compareTensors(got, want, kCutTolerance);
  EXPECT_FALSE(comparison.equal); // 1 would be within 1e-4 * 100000 under the Output scale
  EXPECT_EQ(comparison.worstIndex, std::vector<std::int64_t>{1});
}

TEST(Compare, NanAndInfinityAgreeOnlyWithThemselves) {
  at::Tensor want = at::tensor({NAN, INFINITY, 1.0f});
  EXPECT_TRUE(compareTensors(want.clone(), want, kCutTolerance).equal);
  EXPECT_FALSE(compareTensors(at::tensor({NAN, -INFINITY, 1.0f}), want, kCutTolerance).equal);
  EXPECT_DOUBLE_EQ(compareTensors(want.clone(), want, kCutTolerance).outputScale, 1.0); // finite only
}

} // namespace
} // namespace cleave::runtime
