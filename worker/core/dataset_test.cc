#include "worker/core/dataset.h"

#include <algorithm>
#include <fstream>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

TEST(EpochPermutationTest, IsAPermutationAndDeterministic) {
  std::vector<int64_t> a = EpochPermutation(1000, 7, 3, true);
  std::vector<int64_t> b = EpochPermutation(1000, 7, 3, true);
  EXPECT_EQ(a, b);
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_NE(a, EpochPermutation(1000, 7, 4, true)) << "epochs must differ";
  EXPECT_NE(a, EpochPermutation(1000, 8, 3, true)) << "seeds must differ";
}

TEST(EpochPermutationTest, NoShuffleIsIdentity) {
  std::vector<int64_t> a = EpochPermutation(5, 7, 3, false);
  EXPECT_EQ(a, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(EpochPermutation(0, 1, 0, true).empty());
}

TEST(LoadDatasetTest, MissingFileIsNamed) {
  DataSourceSpec src;
  src.images = "/nonexistent/images.gz";
  src.labels = "/nonexistent/labels.gz";
  auto d = LoadDataset(src, ModelSpec());
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(absl::IsNotFound(d.status())) << d.status();
  EXPECT_NE(d.status().message().find("/nonexistent/images.gz"), std::string::npos);
}

TEST(LoadDatasetTest, RealFashionMnistTestSet) {
  DataSourceSpec src;
  src.images = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
  src.labels = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";
  src.limit = 500;
  if (!std::ifstream(src.images).good()) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  auto d = LoadDataset(src, ModelSpec());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->count, 500);
  EXPECT_EQ(d->features, 784);
  EXPECT_EQ(d->num_classes, 10);
  EXPECT_EQ(d->x.size(), 500u * 784u);
  EXPECT_GE(*std::min_element(d->x.begin(), d->x.end()), 0.0f);
  EXPECT_LE(*std::max_element(d->x.begin(), d->x.end()), 1.0f);
}

TEST(LoadDatasetTest, UnlabelledIdxRowsLoadWithLabelZero) {
  DataSourceSpec src;
  src.images = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
  src.labelled = false;  // no labels file: rows to predict
  src.labels = "/nonexistent/never-read";
  src.limit = 300;
  if (!std::ifstream(src.images).good()) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  auto d = LoadDataset(src, ModelSpec());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->count, 300);
  EXPECT_EQ(d->x.size(), 300u * 784u);
  EXPECT_EQ(d->y, std::vector<int32_t>(300, 0));
}

}  // namespace
}  // namespace pscluster
