#include "ps/core/row_initializer.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::AllOf;
using ::testing::Each;
using ::testing::Ge;
using ::testing::Lt;

InitializerProto Init(const std::string& type, uint64_t seed = 7) {
  InitializerProto init;
  init.set_type(type);
  init.set_seed(seed);
  init.set_minval(-0.5f);
  init.set_maxval(0.5f);
  init.set_mean(1.0f);
  init.set_stddev(2.0f);
  init.set_value(3.0f);
  return init;
}

std::vector<float> Row(const RowInitializer& init, uint64_t id, int64_t dim) {
  std::vector<float> row(dim);
  init.Fill(id, absl::MakeSpan(row));
  return row;
}

TEST(RowInitializerTest, LogicalTableName) {
  EXPECT_EQ(LogicalTableName("embedding/movie/part_3"), "embedding/movie");
  EXPECT_EQ(LogicalTableName("embedding/movie/part_12"), "embedding/movie");
  EXPECT_EQ(LogicalTableName("embedding/movie"), "embedding/movie");
  EXPECT_EQ(LogicalTableName("x/part_"), "x/part_");
  EXPECT_EQ(LogicalTableName("x/part_1a"), "x/part_1a");
  EXPECT_EQ(LogicalTableName("x/part_1/y"), "x/part_1/y");
}

TEST(RowInitializerTest, SameIdSameRowOnEveryShard) {
  const RowInitializer a(Init("random_uniform"), "x/part_0", 8);
  const RowInitializer b(Init("random_uniform"), "x/part_1", 8);
  const RowInitializer whole(Init("random_uniform"), "x", 8);
  for (uint64_t id : {uint64_t{0}, uint64_t{1}, uint64_t{123456789}, ~uint64_t{0}}) {
    EXPECT_EQ(Row(a, id, 8), Row(b, id, 8)) << id;
    EXPECT_EQ(Row(a, id, 8), Row(whole, id, 8)) << id;
  }
  EXPECT_NE(Row(a, 1, 8), Row(a, 2, 8));
  const RowInitializer other_table(Init("random_uniform"), "y/part_0", 8);
  EXPECT_NE(Row(a, 1, 8), Row(other_table, 1, 8));
  const RowInitializer other_seed(Init("random_uniform", 8), "x/part_0", 8);
  EXPECT_NE(Row(a, 1, 8), Row(other_seed, 1, 8));
}

TEST(RowInitializerTest, Distributions) {
  const RowInitializer uniform(Init("random_uniform"), "t", 4);
  const RowInitializer normal(Init("random_normal"), "t", 5);  // odd dim
  const RowInitializer glorot(Init("glorot_uniform"), "t", 6);
  double sum = 0, sum_sq = 0;
  int n = 0;
  for (uint64_t id = 0; id < 2000; ++id) {
    EXPECT_THAT(Row(uniform, id, 4), Each(AllOf(Ge(-0.5f), Lt(0.5f))));
    EXPECT_THAT(Row(glorot, id, 6), Each(AllOf(Ge(-0.71f), Lt(0.71f))));  // sqrt(6 / 12)
    for (float x : Row(normal, id, 5)) {
      sum += x;
      sum_sq += x * x;
      ++n;
    }
  }
  const double mean = sum / n;
  const double stddev = std::sqrt(sum_sq / n - mean * mean);
  EXPECT_NEAR(mean, 1.0, 0.05);
  EXPECT_NEAR(stddev, 2.0, 0.05);
  EXPECT_THAT(Row(RowInitializer(Init("constant"), "t", 3), 9, 3), Each(3.0f));
  EXPECT_THAT(Row(RowInitializer(Init("zeros"), "t", 3), 9, 3), Each(0.0f));
}

}  // namespace
}  // namespace pscluster
