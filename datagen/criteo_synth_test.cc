#include "datagen/criteo_synth.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

// A TSV line back into a row (the test's own parser).
CriteoRow ParseLine(const std::string& line) {
  std::vector<std::string> fields = absl::StrSplit(line.substr(0, line.size() - 1), '\t');
  EXPECT_EQ(fields.size(), 1u + kCriteoIntegerFeatures + kCriteoCategoricalFeatures) << line;
  CriteoRow row;
  row.label = fields[0] == "1" ? 1 : 0;
  for (int j = 0; j < kCriteoIntegerFeatures; ++j) {
    row.has_int[j] = !fields[1 + j].empty();
    if (row.has_int[j]) {
      EXPECT_TRUE(absl::SimpleAtoi(fields[1 + j], &row.ints[j])) << line;
    }
  }
  for (int k = 0; k < kCriteoCategoricalFeatures; ++k) {
    const std::string& f = fields[1 + kCriteoIntegerFeatures + k];
    row.has_cat[k] = !f.empty();
    if (row.has_cat[k]) {
      EXPECT_EQ(f.size(), 8u) << line;
      EXPECT_TRUE(absl::SimpleHexAtoi(f, &row.cats[k])) << line;
    }
  }
  return row;
}

TEST(CriteoSynthTest, SameSeedSameLinesAndShardsDiffer) {
  CriteoModel model(CriteoSynthOptions{});
  CriteoSampler a(&model, 0, 3), b(&model, 0, 3), other(&model, 0, 4), holdout(&model, 1, 3);
  CriteoRow ra, rb, ro, rh;
  double p = 0;
  int differ_other = 0, differ_holdout = 0;
  for (int i = 0; i < 100; ++i) {
    a.Next(&ra, &p);
    b.Next(&rb, &p);
    other.Next(&ro, &p);
    holdout.Next(&rh, &p);
    ASSERT_EQ(CriteoTsvLine(ra), CriteoTsvLine(rb));
    differ_other += CriteoTsvLine(ra) != CriteoTsvLine(ro);
    differ_holdout += CriteoTsvLine(ra) != CriteoTsvLine(rh);
  }
  EXPECT_EQ(differ_other, 100);
  EXPECT_EQ(differ_holdout, 100);
}

TEST(CriteoSynthTest, WrittenFeaturesDetermineTheProbability) {
  CriteoModel model(CriteoSynthOptions{});
  CriteoSampler sampler(&model, 0, 0);
  CriteoRow row;
  double p = 0;
  int missing_ints = 0, missing_cats = 0;
  for (int i = 0; i < 2000; ++i) {
    sampler.Next(&row, &p);
    const std::string line = CriteoTsvLine(row);
    const CriteoRow parsed = ParseLine(line);
    EXPECT_EQ(parsed.label, row.label);
    ASSERT_DOUBLE_EQ(model.Probability(parsed), p) << line;
    for (int j = 0; j < kCriteoIntegerFeatures; ++j) missing_ints += !row.has_int[j];
    for (int k = 0; k < kCriteoCategoricalFeatures; ++k) missing_cats += !row.has_cat[k];
  }
  // Criteo's logs have empty fields: so do these.
  EXPECT_GT(missing_ints, 0);
  EXPECT_GT(missing_cats, 0);
}

TEST(CriteoSynthTest, NoiseColumnsDoNotMoveTheProbability) {
  CriteoModel model(CriteoSynthOptions{});
  int informative = 0;
  for (int k = 0; k < kCriteoCategoricalFeatures; ++k) informative += model.informative(k);
  EXPECT_EQ(informative, 18);
  CriteoSampler sampler(&model, 0, 0);
  CriteoRow row;
  double p = 0;
  sampler.Next(&row, &p);
  for (int k = 0; k < kCriteoCategoricalFeatures; ++k) {
    // Columns 0-3 and 8 also enter crosses, which carry signal of their own.
    if (k <= 3 || k == 8) continue;
    CriteoRow changed = row;
    changed.has_cat[k] = true;
    changed.cats[k] = row.cats[k] ^ 0x5a5a5a5au;
    if (model.informative(k)) {
      EXPECT_NE(model.Probability(changed), p) << "C" << k + 1;
    } else {
      EXPECT_EQ(model.Probability(changed), p) << "C" << k + 1;
    }
  }
}

TEST(CriteoSynthTest, ClickRateIsCalibratedAndBayesAucMatchesItsExpectation) {
  for (double ctr : {0.05, 0.25}) {
    CriteoSynthOptions options;
    options.ctr = ctr;
    options.seed = 11;
    CriteoModel model(options);
    CriteoSampler sampler(&model, 1, 0);
    CriteoRow row;
    std::vector<double> p(100000);
    std::vector<int> labels(p.size());
    double mean_p = 0, clicks = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      sampler.Next(&row, &p[i]);
      labels[i] = row.label;
      mean_p += p[i];
      clicks += row.label;
    }
    EXPECT_NEAR(mean_p / p.size(), ctr, 0.01 * std::max(1.0, ctr / 0.05));
    EXPECT_NEAR(clicks / p.size(), ctr, 0.01 * std::max(1.0, ctr / 0.05));
    const double drawn = Auc(p, labels);
    const double expected = ExpectedBayesAuc(p);
    EXPECT_GT(expected, 0.7) << ctr;
    EXPECT_LT(expected, 0.95) << ctr;
    EXPECT_NEAR(drawn, expected, 0.01) << ctr;
  }
}

TEST(CriteoSynthTest, NoSignalMeansChance) {
  CriteoSynthOptions options;
  options.signal = 0;
  CriteoModel model(options);
  CriteoSampler sampler(&model, 0, 0);
  CriteoRow row;
  std::vector<double> p(1000);
  for (double& v : p) sampler.Next(&row, &v);
  EXPECT_NEAR(p.front(), 0.25, 1e-9);
  EXPECT_DOUBLE_EQ(ExpectedBayesAuc(p), 0.5);
}

TEST(AucTest, SmallCases) {
  EXPECT_DOUBLE_EQ(Auc({0.1, 0.9}, {0, 1}), 1.0);
  EXPECT_DOUBLE_EQ(Auc({0.9, 0.1}, {0, 1}), 0.0);
  EXPECT_DOUBLE_EQ(Auc({0.5, 0.5}, {0, 1}), 0.5);
  // Positives at 0.8 and 0.4, negatives at 0.6 and 0.2: 3 of 4 pairs.
  EXPECT_DOUBLE_EQ(Auc({0.8, 0.6, 0.4, 0.2}, {1, 0, 1, 0}), 0.75);
  EXPECT_TRUE(std::isnan(Auc({0.1, 0.2}, {1, 1})));
}

TEST(ExpectedBayesAucTest, SmallCases) {
  // Certain outcomes: the positive always outranks the negative.
  EXPECT_DOUBLE_EQ(ExpectedBayesAuc({0.0, 1.0}), 1.0);
  EXPECT_DOUBLE_EQ(ExpectedBayesAuc({0.5, 0.5, 0.5}), 0.5);
  // Two examples, p = 0.8 and 0.2: pairs (i pos, j neg), i != j:
  // 0.8 * 0.8 (ranked right) and 0.2 * 0.2 (ranked wrong): 0.64 / 0.68.
  EXPECT_NEAR(ExpectedBayesAuc({0.8, 0.2}), 0.64 / 0.68, 1e-12);
}

TEST(CriteoExampleTest, FeaturesAndMissingLists) {
  CriteoRow row;
  row.label = 1;
  row.has_int[0] = true;
  row.ints[0] = 42;
  row.has_cat[25] = true;
  row.cats[25] = 0xdeadbeef;
  const tensorflow::Example example = CriteoExample(row);
  const auto& f = example.features().feature();
  EXPECT_EQ(f.size(), 1u + kCriteoIntegerFeatures + kCriteoCategoricalFeatures);
  EXPECT_EQ(f.at("label").int64_list().value(0), 1);
  EXPECT_EQ(f.at("I1").int64_list().value(0), 42);
  EXPECT_EQ(f.at("I2").int64_list().value_size(), 0);
  EXPECT_EQ(f.at("C1").bytes_list().value_size(), 0);
  EXPECT_EQ(f.at("C26").bytes_list().value(0), "deadbeef");
  // The wire form parses back the same.
  tensorflow::Example parsed;
  ASSERT_TRUE(parsed.ParseFromString(example.SerializeAsString()));
  EXPECT_EQ(parsed.features().feature().at("C26").bytes_list().value(0), "deadbeef");
}

}  // namespace
}  // namespace pscluster
