// The choice of cuDNN convolution algorithms (ops/cuda/conv_algo.h, NOTE [cuDNN convolutions]) on
// made-up candidate lists: the rules are plain C++, so they are checked here without a GPU. The
// expected tries are written out by hand from the rules in the header.
#include <gtest/gtest.h>

#include <vector>

#include "ops/cuda/conv_algo.h"

using namespace trident::cuda;

namespace {

constexpr size_t kLimit = 1000;

ConvAlgoCandidate cand(int algo, ConvMath math, bool det = true, size_t ws = 0, bool ok = true) {
  return ConvAlgoCandidate{algo, ok, math, det, ws};
}

std::vector<ConvAlgoTry> rank(const std::vector<ConvAlgoCandidate>& perf, ConvPrecision p, bool det = false) {
  return rank_conv_algorithms(perf, p, det, kLimit);
}

void expect_tries(const std::vector<ConvAlgoTry>& got, const std::vector<ConvAlgoTry>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].algo, want[i].algo) << "try " << i;
    EXPECT_EQ(static_cast<int>(got[i].math), static_cast<int>(want[i].math)) << "try " << i;
    EXPECT_EQ(got[i].workspace, want[i].workspace) << "try " << i;
  }
}

TEST(ConvAlgoSelection, RequestedMathAndAllowedMathPerPrecision) {
  EXPECT_EQ(requested_math(ConvPrecision::F32Strict), ConvMath::Fma);
  EXPECT_EQ(requested_math(ConvPrecision::F32Tf32), ConvMath::Default);
  EXPECT_EQ(requested_math(ConvPrecision::Half), ConvMath::TensorOp);
  const ConvMath all[] = {ConvMath::Default, ConvMath::TensorOp, ConvMath::TensorOpAllowConversion, ConvMath::Fma};
  const bool strict[] = {false, false, false, true};
  const bool tf32[] = {true, true, false, true};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(conv_math_allowed(all[i], ConvPrecision::F32Strict), strict[i]) << i;
    EXPECT_EQ(conv_math_allowed(all[i], ConvPrecision::F32Tf32), tf32[i]) << i;
    EXPECT_TRUE(conv_math_allowed(all[i], ConvPrecision::Half)) << i;
  }
}

// The case a filter on the reported math got wrong: strict f32 asked with FMA on the descriptor,
// every candidate reported under another math. All stay, in cuDNN's order, to run under FMA.
TEST(ConvAlgoSelection, StrictF32KeepsCandidatesReportedUnderAnotherMathAndRunsThemUnderFma) {
  const auto got = rank({cand(1, ConvMath::Default, true, 100), cand(6, ConvMath::TensorOp, true, 50),
                         cand(0, ConvMath::Default, true, 0)},
                        ConvPrecision::F32Strict);
  expect_tries(got, {{1, ConvMath::Fma, 0}, {6, ConvMath::Fma, 0}, {0, ConvMath::Fma, 0}});
}

TEST(ConvAlgoSelection, StrictF32TriesFmaReportsFirstThenTheOthersUnderFma) {
  const auto got = rank({cand(6, ConvMath::TensorOp, true, 10), cand(1, ConvMath::Fma, true, 5),
                         cand(0, ConvMath::Default, true, 0), cand(2, ConvMath::Fma, true, 7)},
                        ConvPrecision::F32Strict);
  expect_tries(got, {{1, ConvMath::Fma, 5}, {2, ConvMath::Fma, 7}, {6, ConvMath::Fma, 0}, {0, ConvMath::Fma, 0}});
}

// The same algorithm listed under two maths becomes one try under FMA.
TEST(ConvAlgoSelection, StrictF32MergesOneAlgorithmListedUnderTwoMaths) {
  const auto got =
      rank({cand(1, ConvMath::TensorOp, true, 10), cand(1, ConvMath::Default, true, 20)}, ConvPrecision::F32Strict);
  expect_tries(got, {{1, ConvMath::Fma, 0}});
}

// TF32 allowed: TF32 tensor-op and default candidates run under their own math in cuDNN's order;
// a down-conversion candidate only after them, under DEFAULT.
TEST(ConvAlgoSelection, Tf32KeepsReportedMathButNeverDownConversion) {
  const auto got = rank({cand(7, ConvMath::TensorOpAllowConversion, true, 1), cand(1, ConvMath::TensorOp, true, 2),
                         cand(1, ConvMath::Default, true, 3), cand(0, ConvMath::Fma, true, 4)},
                        ConvPrecision::F32Tf32);
  expect_tries(got, {{1, ConvMath::TensorOp, 2}, {1, ConvMath::Default, 3}, {0, ConvMath::Fma, 4}, {7, ConvMath::Default, 0}});
}

TEST(ConvAlgoSelection, HalfTakesEveryMathInCudnnOrder) {
  const auto got = rank({cand(1, ConvMath::TensorOpAllowConversion, true, 1), cand(1, ConvMath::Default, true, 2),
                         cand(0, ConvMath::TensorOp, true, 3)},
                        ConvPrecision::Half);
  expect_tries(got, {{1, ConvMath::TensorOpAllowConversion, 1}, {1, ConvMath::Default, 2}, {0, ConvMath::TensorOp, 3}});
}

// Backward passes: deterministic candidates first (allowed math, then forced), then the rest.
TEST(ConvAlgoSelection, DeterministicCandidatesComeFirstWhenAsked) {
  const std::vector<ConvAlgoCandidate> perf = {cand(0, ConvMath::Fma, false, 1), cand(3, ConvMath::Default, true, 2),
                                               cand(1, ConvMath::Fma, true, 3), cand(5, ConvMath::Default, false, 4)};
  expect_tries(rank(perf, ConvPrecision::F32Strict, true),
               {{1, ConvMath::Fma, 3}, {3, ConvMath::Fma, 0}, {0, ConvMath::Fma, 1}, {5, ConvMath::Fma, 0}});
  // The forward pass does not ask: allowed maths first, cuDNN's order otherwise.
  expect_tries(rank(perf, ConvPrecision::F32Strict, false),
               {{0, ConvMath::Fma, 1}, {1, ConvMath::Fma, 3}, {3, ConvMath::Fma, 0}, {5, ConvMath::Fma, 0}});
}

TEST(ConvAlgoSelection, SkipsUnsupportedAndOversizedCandidatesAndIsEmptyWithoutAUsableOne) {
  const auto got = rank({cand(1, ConvMath::Fma, true, 10, false), cand(2, ConvMath::Fma, true, kLimit + 1),
                         cand(-1, ConvMath::Fma, true, 0), cand(4, ConvMath::Fma, true, kLimit)},
                        ConvPrecision::F32Strict);
  expect_tries(got, {{4, ConvMath::Fma, kLimit}});
  EXPECT_TRUE(rank({cand(1, ConvMath::Default, true, 0, false), cand(2, ConvMath::TensorOp, false, kLimit + 1)},
                   ConvPrecision::F32Strict, true)
                  .empty());
  EXPECT_TRUE(rank({}, ConvPrecision::Half).empty());
}

}  // namespace
