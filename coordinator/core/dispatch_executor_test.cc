#include "coordinator/core/dispatch_executor.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "coordinator/core/fake_clock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

TEST(DispatchExecutorTest, RunsEveryTaskPostedOnItsFixedPool) {
  DispatchExecutor::Options o;
  o.threads = 3;
  DispatchExecutor executor(o);
  EXPECT_EQ(executor.threads(), 3);
  std::atomic<int> ran{0};
  for (int i = 0; i < 1000; ++i) executor.Post([&] { ++ran; });
  EXPECT_TRUE(WaitUntil([&] { return ran == 1000; }));
}

TEST(DispatchExecutorTest, DefaultsToAtLeastTwoThreads) {
  DispatchExecutor executor;
  EXPECT_GE(executor.threads(), 2);
}

TEST(DispatchExecutorTest, ATimerRunsOnlyOnceTheInjectedClockReachesIt) {
  FakeClock clock;
  DispatchExecutor::Options o;
  o.threads = 2;
  o.now = [&] { return clock.Now(); };
  DispatchExecutor executor(o);
  std::atomic<int> order{0}, first{0}, second{0};
  executor.PostAfter(absl::Seconds(2), [&] { second = ++order; });
  executor.PostAfter(absl::Seconds(1), [&] { first = ++order; });
  EXPECT_EQ(executor.pending_timers(), 2);
  // The pool looks at its timers (a wake, then a task behind it) while the
  // clock stands still: neither is due.
  executor.Wake();
  absl::Notification looked;
  executor.Post([&] { looked.Notify(); });
  ASSERT_TRUE(looked.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(order, 0);
  clock.Advance(absl::Seconds(1));
  executor.Wake();
  EXPECT_TRUE(WaitUntil([&] { return first == 1; }));
  EXPECT_EQ(second, 0);
  clock.Advance(absl::Seconds(1));
  executor.Wake();
  EXPECT_TRUE(WaitUntil([&] { return second == 2; }));
  EXPECT_EQ(executor.pending_timers(), 0);
}

TEST(DispatchExecutorTest, ARealClockTimerRunsWithoutAWake) {
  DispatchExecutor executor;
  absl::Notification ran;
  const absl::Time start = absl::Now();
  executor.PostAfter(absl::Milliseconds(30), [&] { ran.Notify(); });
  ASSERT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(30));
}

TEST(DispatchExecutorTest, RunBlockingDoesNotHoldThePool) {
  DispatchExecutor::Options o;
  o.threads = 1;
  DispatchExecutor executor(o);
  absl::Notification release, posted_ran;
  executor.RunBlocking([&] { release.WaitForNotification(); });
  executor.Post([&] { posted_ran.Notify(); });
  EXPECT_TRUE(posted_ran.WaitForNotificationWithTimeout(absl::Seconds(10)));
  release.Notify();  // the destructor joins it
}

}  // namespace
}  // namespace pscluster
