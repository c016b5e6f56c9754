#include "coordinator/core/closure_deadline.h"

#include "gtest/gtest.h"

namespace pscluster {
namespace {

ClosureDeadlineOptions Options(absl::Duration floor, double multiple) {
  ClosureDeadlineOptions o;
  o.floor = floor;
  o.multiple = multiple;
  return o;
}

TEST(ClosureDeadlineTest, CapBeforeAnyClosureFinished) {
  ClosureDeadline d;
  EXPECT_EQ(d.For(1), absl::Seconds(300));
  EXPECT_EQ(d.longest(), absl::ZeroDuration());
}

TEST(ClosureDeadlineTest, FloorForFastClosures) {
  ClosureDeadline d;
  d.Observe(absl::Milliseconds(50), 1);
  EXPECT_EQ(d.For(1), absl::Seconds(10));
}

TEST(ClosureDeadlineTest, MultipleOfTheLongestClosure) {
  ClosureDeadline d(Options(absl::Seconds(1), 4));
  d.Observe(absl::Seconds(2), 1);
  d.Observe(absl::Seconds(5), 1);
  d.Observe(absl::Seconds(3), 1);  // a shorter one does not lower it
  EXPECT_EQ(d.longest(), absl::Seconds(5));
  EXPECT_EQ(d.For(1), absl::Seconds(20));
  // A call of 3 closures gets 3 closures' time.
  EXPECT_EQ(d.For(3), absl::Seconds(60));
}

TEST(ClosureDeadlineTest, BatchesAreMeasuredPerClosure) {
  ClosureDeadline d(Options(absl::Seconds(1), 2));
  d.Observe(absl::Seconds(8), 4);
  EXPECT_EQ(d.longest(), absl::Seconds(2));
  EXPECT_EQ(d.For(1), absl::Seconds(4));
}

TEST(ClosureDeadlineTest, NeverPastTheCap) {
  ClosureDeadline d;
  d.Observe(absl::Seconds(100), 1);
  EXPECT_EQ(d.For(1), absl::Seconds(300));
  EXPECT_EQ(d.For(10), absl::Seconds(300));
}

}  // namespace
}  // namespace pscluster
