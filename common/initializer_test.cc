#include "common/initializer.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

InitializerProto Init(const std::string& type) {
  InitializerProto i;
  i.set_type(type);
  i.set_seed(5);
  return i;
}

TEST(InitializerTest, Constants) {
  std::vector<float> v(4, 9.0f);
  RunInitializer(Init("zeros"), "b", {4}, absl::MakeSpan(v));
  EXPECT_EQ(v, std::vector<float>(4, 0.0f));
  RunInitializer(Init("ones"), "b", {4}, absl::MakeSpan(v));
  EXPECT_EQ(v, std::vector<float>(4, 1.0f));
  InitializerProto c = Init("constant");
  c.set_value(2.5f);
  RunInitializer(c, "b", {4}, absl::MakeSpan(v));
  EXPECT_EQ(v, std::vector<float>(4, 2.5f));
}

TEST(InitializerTest, GlorotUniformIsBoundedDeterministicAndPerName) {
  std::vector<float> a(784 * 256), b(784 * 256), c(784 * 256);
  RunInitializer(Init("glorot_uniform"), "dense_0/kernel", {784, 256}, absl::MakeSpan(a));
  RunInitializer(Init("glorot_uniform"), "dense_0/kernel", {784, 256}, absl::MakeSpan(b));
  RunInitializer(Init("glorot_uniform"), "dense_1/kernel", {784, 256}, absl::MakeSpan(c));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  const float limit = std::sqrt(6.0f / (784 + 256));
  double sum = 0;
  for (float x : a) {
    ASSERT_LE(std::fabs(x), limit);
    sum += x;
  }
  EXPECT_NEAR(sum / a.size(), 0.0, 0.01);
}

TEST(InitializerTest, RandomNormalMoments) {
  InitializerProto i = Init("random_normal");
  i.set_mean(1.0f);
  i.set_stddev(0.5f);
  std::vector<float> v(20000);
  RunInitializer(i, "w", {20000}, absl::MakeSpan(v));
  double sum = 0, sq = 0;
  for (float x : v) {
    sum += x;
    sq += x * x;
  }
  const double mean = sum / v.size();
  EXPECT_NEAR(mean, 1.0, 0.02);
  EXPECT_NEAR(std::sqrt(sq / v.size() - mean * mean), 0.5, 0.02);
}

TEST(InitializerTest, Validation) {
  EXPECT_TRUE(ValidateInitializer(Init("glorot_uniform")).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateInitializer(Init("he_normal"))));
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateInitializer(Init("random_normal"))));  // stddev 0
  InitializerProto u = Init("random_uniform");
  u.set_minval(1);
  u.set_maxval(1);
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateInitializer(u)));
}

}  // namespace
}  // namespace pscluster
