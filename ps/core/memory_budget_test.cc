#include "ps/core/memory_budget.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(MemoryBudgetTest, ReservesUpToTheLimitAndNamesTheBytesWhenFull) {
  MemoryBudget budget(100);
  EXPECT_TRUE(budget.Reserve(60, "first").ok());
  EXPECT_TRUE(budget.Reserve(40, "second").ok());  // exactly the limit
  absl::Status s = budget.Reserve(1, "third");
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("third"), HasSubstr("1 bytes requested"),
                                 HasSubstr("100 held"), HasSubstr("limit 100")));
  EXPECT_EQ(budget.held(), 100);
  budget.Release(60);
  EXPECT_EQ(budget.held(), 40);
  EXPECT_TRUE(budget.TryReserve(60));
  EXPECT_FALSE(budget.TryReserve(1));
}

TEST(MemoryBudgetTest, CreditCountsBytesAboutToBeFreed) {
  MemoryBudget budget(100);
  ASSERT_TRUE(budget.TryReserve(80));
  EXPECT_FALSE(budget.TryReserve(50));
  EXPECT_TRUE(budget.TryReserve(50, /*credit=*/80));  // a restore replacing 80 bytes
  EXPECT_EQ(budget.held(), 130);                      // until the old ones are released
  budget.Release(80);
  EXPECT_EQ(budget.held(), 50);
}

TEST(MemoryBudgetTest, ZeroIsUnlimitedButCounts) {
  MemoryBudget budget(0);
  EXPECT_EQ(budget.limit(), 0);
  EXPECT_TRUE(budget.Reserve(int64_t{1} << 50, "huge").ok());
  EXPECT_EQ(budget.held(), int64_t{1} << 50);
  budget.Charge(5);
  EXPECT_EQ(budget.held(), (int64_t{1} << 50) + 5);
}

}  // namespace
}  // namespace pscluster
