#include "common/metrics.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

// P(score of a positive > score of a negative), ties 1/2, over all pairs.
double PairwiseAuc(const std::vector<double>& pos, const std::vector<double>& neg) {
  double won = 0;
  for (double p : pos) {
    for (double q : neg) won += p > q ? 1.0 : (p == q ? 0.5 : 0.0);
  }
  return won / (static_cast<double>(pos.size()) * neg.size());
}

struct Histograms {
  std::vector<int64_t> pos = std::vector<int64_t>(kAucBuckets);
  std::vector<int64_t> neg = std::vector<int64_t>(kAucBuckets);
};

Histograms Count(const std::vector<double>& pos, const std::vector<double>& neg) {
  Histograms h;
  for (double p : pos) ++h.pos[AucBucket(p)];
  for (double q : neg) ++h.neg[AucBucket(q)];
  return h;
}

TEST(AucBucketTest, EdgesAndClamping) {
  EXPECT_EQ(AucBucket(0.0), 0);
  EXPECT_EQ(AucBucket(0.0009), 0);
  EXPECT_EQ(AucBucket(0.001), 1);
  EXPECT_EQ(AucBucket(0.5), kAucBuckets / 2);
  EXPECT_EQ(AucBucket(1.0), kAucBuckets - 1);
  EXPECT_EQ(AucBucket(-3.0), 0);
  EXPECT_EQ(AucBucket(7.0), kAucBuckets - 1);
  EXPECT_EQ(AucBucket(std::nan("")), 0);
}

// Scores on bucket centres (many ties): the histogram AUC is exact.
TEST(AucFromHistogramsTest, MatchesPairwiseAucExactlyForBucketedScores) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> bucket(0, kAucBuckets - 1);
  std::uniform_int_distribution<int> shift(0, 300);
  for (int trial = 0; trial < 5; ++trial) {
    std::vector<double> pos, neg;
    for (int i = 0; i < 400; ++i) {
      // Positives lean higher, so the AUC is well above 1/2 but not 1.
      const int b = std::min(kAucBuckets - 1, bucket(rng) / 2 + shift(rng));
      pos.push_back((b + 0.5) / kAucBuckets);
    }
    for (int i = 0; i < 500; ++i) neg.push_back((bucket(rng) / 2 + 0.5) / kAucBuckets);
    pos.push_back(neg[0]);  // a guaranteed tie
    const Histograms h = Count(pos, neg);
    const double want = PairwiseAuc(pos, neg);
    EXPECT_GT(want, 0.6);
    EXPECT_LT(want, 0.99);
    EXPECT_NEAR(AucFromHistograms(h.pos, h.neg), want, 1e-12) << "trial " << trial;
  }
}

// Continuous scores: the error is bounded by the pairs sharing a bucket.
TEST(AucFromHistogramsTest, ApproximatesPairwiseAucForContinuousScores) {
  std::mt19937 rng(11);
  std::normal_distribution<double> noise(0.0, 1.0);
  std::vector<double> pos, neg;
  auto sigmoid = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  for (int i = 0; i < 2000; ++i) pos.push_back(sigmoid(0.8 + noise(rng)));
  for (int i = 0; i < 3000; ++i) neg.push_back(sigmoid(-0.3 + noise(rng)));
  const Histograms h = Count(pos, neg);
  const double want = PairwiseAuc(pos, neg);
  EXPECT_NEAR(AucFromHistograms(h.pos, h.neg), want, 1e-3);
}

TEST(AucFromHistogramsTest, PerfectInvertedAndTied) {
  std::vector<int64_t> low = {5, 0, 0}, high = {0, 0, 3};
  EXPECT_DOUBLE_EQ(AucFromHistograms(/*positive=*/high, /*negative=*/low), 1.0);
  EXPECT_DOUBLE_EQ(AucFromHistograms(/*positive=*/low, /*negative=*/high), 0.0);
  EXPECT_DOUBLE_EQ(AucFromHistograms(low, low), 0.5);
}

TEST(AucFromHistogramsTest, ShorterSpanCountsAsZerosAndEmptyClassIsNaN) {
  const std::vector<int64_t> pos = {0, 0, 2};
  const std::vector<int64_t> neg = {1};
  EXPECT_DOUBLE_EQ(AucFromHistograms(pos, neg), 1.0);
  EXPECT_TRUE(std::isnan(AucFromHistograms(pos, {})));
  EXPECT_TRUE(std::isnan(AucFromHistograms({}, neg)));
  EXPECT_TRUE(std::isnan(AucFromHistograms({}, {})));
}

}  // namespace
}  // namespace pscluster
