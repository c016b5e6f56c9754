#include "common/row_ids.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(RowIdsTest, LittleEndianRoundTrip) {
  const std::string bytes = EncodeRowIds(std::vector<uint64_t>{1, 0x0102030405060708ull});
  ASSERT_EQ(bytes.size(), 16u);
  EXPECT_EQ(bytes[0], 1);
  EXPECT_EQ(bytes[8], 8);
  EXPECT_EQ(bytes[15], 1);
  auto ids = DecodeRowIds(bytes, "lookup of 'x'");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(*ids, ElementsAre(1u, 0x0102030405060708ull));
}

TEST(RowIdsTest, SignedIdsKeepTheirBits) {
  auto ids = DecodeRowIds(EncodeRowIds(std::vector<int64_t>{-1, 7}), "x");
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ElementsAre(~uint64_t{0}, 7u));
  EXPECT_TRUE(DecodeRowIds("", "x")->empty());
}

TEST(RowIdsTest, RaggedBytesAreInvalidArgument) {
  auto ids = DecodeRowIds(std::string(12, '\0'), "lookup of 'x'");
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ids.status().message()),
              AllOf(HasSubstr("lookup of 'x'"), HasSubstr("12 bytes"), HasSubstr("multiple of 8")));
}

}  // namespace
}  // namespace pscluster
