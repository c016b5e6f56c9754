#include "coordinator/core/closure_queue.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

Closure Make(int64_t id) {
  Closure c;
  c.id = id;
  return c;
}

TEST(ClosureQueueTest, FifoAndDrain) {
  ClosureQueue q;
  q.Put(Make(1));
  q.Put(Make(2));
  auto a = q.Get();
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->id, 1);
  q.Done();
  auto b = q.Get();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->id, 2);
  q.Done();
  EXPECT_FALSE(q.Get().has_value());  // drained
  EXPECT_TRUE(q.Wait().ok());
}

TEST(ClosureQueueTest, PutBackGoesToTheTailAndIsRunAgain) {
  ClosureQueue q;
  q.Put(Make(1));
  q.Put(Make(2));
  auto a = q.Get();
  a->attempts = 1;
  q.PutBack(*a);
  EXPECT_EQ(q.Get()->id, 2);
  q.Done();
  auto again = q.Get();
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->id, 1);
  EXPECT_EQ(again->attempts, 1);
  q.Done();
  EXPECT_TRUE(q.Wait().ok());
}

TEST(ClosureQueueTest, GetWaitsWhileAClosureIsInFlight) {
  // A getter must not give up while another closure may still be put back.
  ClosureQueue q;
  q.Put(Make(1));
  auto a = q.Get();
  std::atomic<bool> got{false};
  std::thread t([&] {
    auto c = q.Get();
    got = c.has_value() && c->id == 1;
    if (c) q.Done();
  });
  q.PutBack(*a);
  t.join();
  EXPECT_TRUE(got);
  EXPECT_TRUE(q.Wait().ok());
}

TEST(ClosureQueueTest, FirstErrorWinsAndStopsTheQueue) {
  ClosureQueue q;
  for (int i = 0; i < 5; ++i) q.Put(Make(i));
  q.Get();
  q.Get();
  q.Fail(absl::UnavailableError("first"));
  q.Fail(absl::InternalError("second"));
  EXPECT_FALSE(q.Get().has_value());
  absl::Status s = q.Wait();
  EXPECT_TRUE(absl::IsUnavailable(s));
  EXPECT_EQ(s.message(), "first");
}

TEST(ClosureQueueTest, ManyThreadsRunEveryClosureOnce) {
  ClosureQueue q;
  constexpr int kClosures = 500;
  for (int i = 0; i < kClosures; ++i) q.Put(Make(i));
  std::vector<std::atomic<int>> runs(kClosures);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      while (auto c = q.Get()) {
        // Every closure fails once and is retried.
        if (c->attempts == 0) {
          ++c->attempts;
          q.PutBack(*c);
          continue;
        }
        runs[c->id]++;
        q.Done();
      }
    });
  }
  EXPECT_TRUE(q.Wait().ok());
  for (auto& t : threads) t.join();
  for (int i = 0; i < kClosures; ++i) EXPECT_EQ(runs[i], 1) << i;
}

TEST(ClosureQueueTest, StopWakesWaiters) {
  ClosureQueue q;
  q.Put(Make(1));
  q.Get();
  std::thread t([&] { EXPECT_FALSE(q.Get().has_value()); });
  q.Stop(absl::CancelledError("cancelled"));
  q.Done();
  t.join();
  EXPECT_TRUE(absl::IsCancelled(q.Wait()));
}

}  // namespace
}  // namespace pscluster

namespace pscluster {
namespace {

TEST(ClosureQueuePauseTest, PausedQueueHandsOutNothingUntilResumed) {
  ClosureQueue q;
  q.Put(Make(1));
  q.Put(Make(2));
  auto a = q.Get();
  q.Pause();
  std::atomic<bool> got{false};
  std::thread t([&] {
    auto c = q.Get();
    got = c.has_value();
    if (c) q.Done();
  });
  EXPECT_FALSE(q.WaitUntilIdle(absl::Milliseconds(50)));  // closure 1 is in flight
  q.Done();
  EXPECT_TRUE(q.WaitUntilIdle(absl::Milliseconds(1000)));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(got);  // still paused
  q.Resume();
  t.join();
  EXPECT_TRUE(got);
  EXPECT_TRUE(q.WaitFor(absl::Seconds(1)));
  EXPECT_TRUE(q.Wait().ok());
}

}  // namespace
}  // namespace pscluster
