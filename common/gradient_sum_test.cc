#include "common/gradient_sum.h"

#include <cstring>
#include <vector>

#include "common/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

SparseGradient Rows(std::vector<uint64_t> ids, float value, int64_t width = 2) {
  SparseGradient g;
  g.set_name("emb");
  std::string bytes(ids.size() * 8, '\0');
  std::memcpy(bytes.data(), ids.data(), bytes.size());
  g.set_ids(bytes);
  EncodeTensor({static_cast<int64_t>(ids.size()), width},
               std::vector<float>(ids.size() * width, value), g.mutable_rows());
  return g;
}

TEST(GradientSumTest, WeightsDenseAndRowsAndScalesTheResult) {
  GradientSum sum;
  PushRequest a, b;
  NamedTensor* ta = a.add_gradients();
  ta->set_name("w");
  EncodeTensor({2}, std::vector<float>{1, 2}, ta->mutable_tensor());
  *a.add_sparse() = Rows({7, 3}, 1.0f);
  *b.add_gradients() = *ta;
  EncodeTensor({2}, std::vector<float>{5, 6}, b.mutable_gradients(0)->mutable_tensor());
  *b.add_sparse() = Rows({3, 9}, 5.0f);
  ASSERT_TRUE(sum.Add(a, 3.0f).ok());
  ASSERT_TRUE(sum.Add(b, 1.0f).ok());
  PushRequest out;
  sum.WriteTo(0.25f, &out);
  ASSERT_EQ(out.gradients_size(), 1);
  EXPECT_THAT(DecodeTensor(out.gradients(0).tensor())->ToVector(), ElementsAre(2, 3));
  ASSERT_EQ(out.sparse_size(), 1);
  std::vector<uint64_t> ids(3);
  std::memcpy(ids.data(), out.sparse(0).ids().data(), 24);
  EXPECT_THAT(ids, ElementsAre(7, 3, 9));  // first-seen order
  EXPECT_THAT(DecodeTensor(out.sparse(0).rows())->ToVector(),
              ElementsAre(0.75, 0.75, 2, 2, 1.25, 1.25));
}

TEST(GradientSumTest, MismatchedSizesAreNamed) {
  GradientSum sum;
  ASSERT_TRUE(sum.AddRows(Rows({1}, 1.0f, 2), 1.0f).ok());
  absl::Status s = sum.AddRows(Rows({1}, 1.0f, 3), 1.0f);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("'emb' are 3 wide"));
}

}  // namespace
}  // namespace pscluster
