#include "common/backoff.h"

#include <gtest/gtest.h>

namespace pscluster {
namespace {

TEST(ExponentialBackoffTest, DoublesPerAttemptUpToItsCap) {
  const ExponentialBackoff backoff{absl::Milliseconds(200), 3};
  EXPECT_EQ(backoff.Before(0), absl::Milliseconds(200));
  EXPECT_EQ(backoff.Before(1), absl::Milliseconds(200));
  EXPECT_EQ(backoff.Before(2), absl::Milliseconds(400));
  EXPECT_EQ(backoff.Before(4), absl::Milliseconds(1600));
  EXPECT_EQ(backoff.Before(5), absl::Milliseconds(1600));
  EXPECT_EQ(backoff.Before(1000), absl::Milliseconds(1600));
  EXPECT_EQ((ExponentialBackoff{absl::Seconds(1), 20}).Before(40), absl::Seconds(1 << 20));
}

}  // namespace
}  // namespace pscluster
