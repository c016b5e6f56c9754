#include "common/tensor.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(TensorTest, EncodeDecodeRoundTrip) {
  Tensor t({2, 3}, {1, 2, 3, 4, 5, -6.5f});
  TensorProto p;
  EncodeTensor(t, &p);
  EXPECT_EQ(p.dtype(), DT_FLOAT32);
  EXPECT_THAT(p.shape(), ElementsAre(2, 3));
  EXPECT_EQ(p.data().size(), 24u);
  auto back = DecodeTensor(p);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->shape(), (Shape{2, 3}));
  EXPECT_THAT(back->values(), ElementsAre(1, 2, 3, 4, 5, -6.5f));
}

TEST(TensorTest, BytesAreLittleEndianFloat32) {
  TensorProto p;
  EncodeTensor(Shape{1}, std::vector<float>{1.0f}, &p);
  // 1.0f = 0x3f800000.
  EXPECT_EQ(p.data(), std::string("\x00\x00\x80\x3f", 4));
}

TEST(TensorTest, ScalarAndEmpty) {
  TensorProto p;
  EncodeTensor(Shape{}, std::vector<float>{3.0f}, &p);
  EXPECT_EQ(DecodeTensor(p)->values()[0], 3.0f);
  EncodeTensor(Shape{0, 4}, std::vector<float>{}, &p);
  EXPECT_EQ(DecodeTensor(p)->num_elements(), 0);
}

TEST(TensorTest, RejectsWrongByteCount) {
  TensorProto p;
  EncodeTensor(Shape{2, 2}, std::vector<float>{1, 2, 3, 4}, &p);
  p.mutable_data()->pop_back();
  auto t = DecodeTensor(p);
  EXPECT_TRUE(absl::IsInvalidArgument(t.status()));
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("needs 16 bytes but 15"));
}

TEST(TensorTest, RejectsOtherDtypesAndNegativeDims) {
  TensorProto p;
  EncodeTensor(Shape{1}, std::vector<float>{1}, &p);
  p.set_dtype(DT_INVALID);
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeTensor(p).status()));
  p.set_dtype(DT_FLOAT32);
  p.set_shape(0, -1);
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeTensor(p).status()));
  // A huge shape must not overflow into a small byte count.
  p.clear_shape();
  p.add_shape(int64_t{1} << 40);
  p.add_shape(int64_t{1} << 40);
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeTensor(p).status()));
}

TEST(TensorTest, ViewChecksTheExpectedShape) {
  TensorProto p;
  EncodeTensor(Shape{2, 2}, std::vector<float>{1, 2, 3, 4}, &p);
  auto v = TensorView(p, Shape{2, 2}, "w");
  ASSERT_TRUE(v.ok());
  EXPECT_THAT(*v, ElementsAre(1, 2, 3, 4));
  auto bad = TensorView(p, Shape{4}, "gradient of 'w'");
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("gradient of 'w': shape [2, 2] does not match [4]"));
}

}  // namespace
}  // namespace pscluster
