#include "worker/core/synthetic_ctr.h"

#include <chrono>
#include <cmath>
#include <map>
#include <vector>

#include "gtest/gtest.h"
#include "worker/core/features.h"

namespace pscluster {
namespace {

// P(rank k) = (k + 1)^-s / sum_{j=1..n} j^-s.
std::vector<double> ZipfPmf(int64_t n, double s, int64_t top) {
  double norm = 0;
  for (int64_t j = n; j >= 1; --j) norm += std::pow(static_cast<double>(j), -s);
  std::vector<double> p;
  for (int64_t k = 0; k < top; ++k) p.push_back(std::pow(static_cast<double>(k + 1), -s) / norm);
  return p;
}

// Empirical frequencies of the top ranks against the pmf, each within 5
// binomial standard deviations, plus the tail as one bin.
void CheckZipf(int64_t n, double s, int draws) {
  SCOPED_TRACE(testing::Message() << "n=" << n << " s=" << s);
  const int64_t kTop = std::min<int64_t>(n, 20);
  ZipfSampler sampler(n, s);
  SplitMix64 rng(12345);
  std::vector<int64_t> counts(kTop + 1, 0);
  for (int i = 0; i < draws; ++i) {
    const int64_t k = sampler.Sample(rng);
    ASSERT_GE(k, 0);
    ASSERT_LT(k, n);
    ++counts[std::min(k, kTop)];
  }
  std::vector<double> p = ZipfPmf(n, s, kTop);
  double head = 0;
  for (double q : p) head += q;
  p.push_back(1 - head);  // everything from rank kTop on
  for (int64_t k = 0; k <= kTop; ++k) {
    if (p[k] < 1e-12) continue;
    const double sd = std::sqrt(p[k] * (1 - p[k]) / draws);
    EXPECT_NEAR(static_cast<double>(counts[k]) / draws, p[k], 5 * sd + 1e-9) << "rank " << k;
  }
}

TEST(ZipfSamplerTest, TopRanksFollowThePmf) {
  CheckZipf(10'000'000, 1.1, 400'000);  // the synthetic_ctr default
  CheckZipf(10'000'000, 1.0, 400'000);  // the exponent-1 special case of H
  CheckZipf(1000, 0.6, 400'000);
  CheckZipf(50, 2.5, 200'000);
  CheckZipf(1, 1.1, 1000);  // a one-id space always gives rank 0
}

TEST(ZipfSamplerTest, DrawsAreConstantTimeInTheIdSpace) {
  ZipfSampler sampler(10'000'000, 1.1);
  SplitMix64 rng(1);
  const auto start = std::chrono::steady_clock::now();
  int64_t sum = 0;
  for (int i = 0; i < 1'000'000; ++i) sum += sampler.Sample(rng);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(sum, 0);
  EXPECT_LT(seconds, 2.0) << "a million draws over 10M ids";
}

DataSourceSpec Source(int64_t n) {
  DataSourceSpec s;
  s.format = "synthetic_ctr";
  s.num_examples = n;
  s.id_space = 10'000'000;
  s.zipf_exponent = 1.1;
  s.seed = 42;
  return s;
}

ModelSpec Model() {
  ModelSpec m;
  m.dense_inputs = 3;
  CategoricalFeatureSpec ad;
  ad.name = "ad";
  ad.hashed = true;
  CategoricalFeatureSpec site;
  site.name = "site";
  site.vocab_size = 1000;
  m.categorical = {ad, site};
  m.loss = "sigmoid_cross_entropy";
  return m;
}

TEST(SyntheticCtrTest, ShapeLimitAndDeterminism) {
  DataSourceSpec src = Source(5000);
  auto a = LoadDataset(src, Model());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->count, 5000);
  EXPECT_EQ(a->features, 3);
  EXPECT_EQ(a->num_classes, 2);
  EXPECT_EQ(a->x.size(), 15000u);
  ASSERT_EQ(a->categorical.size(), 2u);
  for (const CategoricalColumn& c : a->categorical) {
    ASSERT_EQ(c.offsets.size(), 5001u);
    EXPECT_EQ(c.offsets.back(), 5000) << "one id per example";
  }
  for (uint64_t id : a->categorical[1].ids) ASSERT_LT(id, 1000u) << "fixed vocabulary";

  auto b = LoadDataset(src, Model());
  EXPECT_EQ(a->y, b->y);
  EXPECT_EQ(a->x, b->x);
  EXPECT_EQ(a->categorical[0].ids, b->categorical[0].ids);

  // Any range can be generated alone and matches the whole stream.
  auto part = GenerateSyntheticCtr(src, Model(), 1234, 1300);
  ASSERT_TRUE(part.ok());
  EXPECT_EQ(part->count, 66);
  for (int64_t i = 0; i < 66; ++i) {
    ASSERT_EQ(part->categorical[0].ids[i], a->categorical[0].ids[1234 + i]);
    ASSERT_EQ(part->y[i], a->y[1234 + i]);
    ASSERT_EQ(part->x[3 * i], a->x[3 * (1234 + i)]);
  }

  src.limit = 100;
  auto limited = LoadDataset(src, Model());
  ASSERT_TRUE(limited.ok());
  EXPECT_EQ(limited->count, 100);
  src.limit = 0;
  src.seed = 43;
  auto other = LoadDataset(src, Model());
  EXPECT_NE(other->categorical[0].ids, a->categorical[0].ids) << "the seed matters";
}

TEST(SyntheticCtrTest, HotIdsAreScrambledAndLabelsAreLearnable) {
  auto d = LoadDataset(Source(50'000), Model());
  ASSERT_TRUE(d.ok());
  const uint64_t ad_seed = FeatureSeed("ad");
  // The hottest ad is rank 0, scrambled: not id 0, and the most frequent.
  std::map<uint64_t, int64_t> freq;
  for (uint64_t id : d->categorical[0].ids) ++freq[id];
  const uint64_t hot = HashIntValue(ad_seed, 0);
  EXPECT_NE(hot, 0u);
  for (const auto& [id, n] : freq) EXPECT_LE(n, freq[hot]);
  EXPECT_GT(freq[hot], 50'000 / 20);

  for (uint64_t id : d->categorical[1].ids) ASSERT_LT(id, 1000u);

  // With the ad as the only feature, P(label | ad at rank r) is exactly
  // sigmoid(SyntheticWeight(ad, r)): check it on the hottest ranks.
  ModelSpec one = Model();
  one.categorical.pop_back();
  auto ads = LoadDataset(Source(200'000), one);
  ASSERT_TRUE(ads.ok());
  std::map<uint64_t, int64_t> rank_of;
  for (int64_t r = 0; r < 8; ++r) rank_of[HashIntValue(ad_seed, r)] = r;
  std::vector<int64_t> n(8, 0), pos(8, 0);
  for (int64_t i = 0; i < ads->count; ++i) {
    auto it = rank_of.find(ads->categorical[0].ids[i]);
    if (it == rank_of.end()) continue;
    ++n[it->second];
    pos[it->second] += ads->y[i];
  }
  double spread = 0;
  for (int64_t r = 0; r < 8; ++r) {
    const double p = 1 / (1 + std::exp(-SyntheticWeight(ad_seed, r)));
    ASSERT_GT(n[r], 1000) << "rank " << r;
    EXPECT_NEAR(static_cast<double>(pos[r]) / n[r], p, 5 * std::sqrt(p * (1 - p) / n[r]))
        << "rank " << r;
    spread = std::max(spread, std::abs(p - 0.5));
  }
  EXPECT_GT(spread, 0.1) << "some hot ids must carry signal";
  int64_t positive = 0;
  for (int32_t y : d->y) positive += y;
  EXPECT_NEAR(static_cast<double>(positive) / d->count, 0.5, 0.1);

  double mean = 0, sq = 0;
  for (float v : d->x) mean += v, sq += double(v) * v;
  mean /= d->x.size();
  EXPECT_NEAR(mean, 0, 0.02);
  EXPECT_NEAR(sq / d->x.size(), 1, 0.03) << "dense inputs are N(0, 1)";
}

TEST(SyntheticCtrTest, WeightsAreBoundedAndZeroInTheTail) {
  const uint64_t seed = FeatureSeed("ad");
  double lo = 1, hi = -1;
  for (int64_t r = 0; r < kSyntheticWeightedRanks; ++r) {
    const double w = SyntheticWeight(seed, r);
    ASSERT_GE(w, -1);
    ASSERT_LE(w, 1);
    lo = std::min(lo, w);
    hi = std::max(hi, w);
  }
  EXPECT_LT(lo, -0.9);
  EXPECT_GT(hi, 0.9);
  EXPECT_EQ(SyntheticWeight(seed, kSyntheticWeightedRanks), 0.0);
  EXPECT_EQ(SyntheticWeight(seed, 9'999'999), 0.0);
}

TEST(SyntheticCtrTest, NeedsCategoricalFeatures) {
  ModelSpec m;
  m.dense_inputs = 2;
  auto d = LoadDataset(Source(10), m);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(d.status()));
}

}  // namespace
}  // namespace pscluster
