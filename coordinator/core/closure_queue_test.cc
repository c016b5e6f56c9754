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

TEST(ClosureQueueTest, GetUpToTakesABatchFinishedOneByOne) {
  ClosureQueue q;
  for (int64_t id = 1; id <= 5; ++id) q.Put(Make(id));
  std::vector<Closure> batch = q.GetUpTo(3);
  ASSERT_EQ(batch.size(), 3u);
  EXPECT_EQ(batch[0].id, 1);
  EXPECT_EQ(batch[2].id, 3);
  q.Done();
  q.PutBack(batch[1]);  // retried: behind 4 and 5
  q.Done();
  EXPECT_TRUE(q.WaitUntilIdle(absl::ZeroDuration()));  // all three accounted for
  batch = q.GetUpTo(10);  // fewer queued than asked
  ASSERT_EQ(batch.size(), 3u);
  EXPECT_EQ(batch[0].id, 4);
  EXPECT_EQ(batch[2].id, 2);
  for (size_t i = 0; i < batch.size(); ++i) q.Done();
  EXPECT_TRUE(q.GetUpTo(4).empty());  // drained
  EXPECT_TRUE(q.Wait().ok());
}

TEST(ClosureQueueTest, FailInsideABatchStopsOnceTheRestAreAccountedFor) {
  ClosureQueue q;
  for (int64_t id = 1; id <= 4; ++id) q.Put(Make(id));
  std::vector<Closure> batch = q.GetUpTo(2);
  ASSERT_EQ(batch.size(), 2u);
  q.Fail(absl::InternalError("closure 1 broke"));
  // Stopped, but closure 2 is still in flight: Wait() must not return yet.
  EXPECT_FALSE(q.WaitFor(absl::ZeroDuration()));
  q.PutBack(batch[1]);  // dropped: the queue is stopped
  EXPECT_TRUE(q.WaitFor(absl::ZeroDuration()));
  EXPECT_TRUE(q.GetUpTo(2).empty());
  EXPECT_EQ(q.Wait().code(), absl::StatusCode::kInternal);
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

// Delay scheduling: a closure for worker 1 goes to worker 0 only after the
// locality wait (here to a thread that was already waiting when it was
// queued); a pinned one never does; an open queue keeps its takers waiting.
TEST(ClosureQueueTest, PreferredWorkerThenAnyAfterTheWaitAndPinnedNever) {
  ClosureQueue q(absl::Milliseconds(200));
  q.SetOpen(true);
  std::atomic<int64_t> taken_id{-1};
  absl::Time taken_at;
  std::thread w0([&] {
    std::vector<Closure> c = q.GetUpTo(1, /*worker=*/0);
    taken_at = absl::Now();
    if (!c.empty()) taken_id = c[0].id;
  });
  absl::SleepFor(absl::Milliseconds(50));  // w0 waits on an empty open queue
  const absl::Time put = absl::Now();
  Closure pinned;
  pinned.id = 1;
  pinned.preferred_worker = 1;
  pinned.pinned = true;
  q.Put(pinned);
  Closure preferred;
  preferred.id = 2;
  preferred.preferred_worker = 1;
  q.Put(preferred);
  w0.join();
  EXPECT_EQ(taken_id, 2);  // never the pinned one
  EXPECT_GE(taken_at - put, absl::Milliseconds(190));
  // Worker 1 takes its pinned closure at once.
  std::vector<Closure> c = q.GetUpTo(1, /*worker=*/1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].id, 1);
  q.Done();
  q.Done();
  EXPECT_TRUE(q.WaitUntilEmpty(absl::Seconds(1)));
  q.SetOpen(false);
  EXPECT_TRUE(q.Wait().ok());
}

}  // namespace
}  // namespace pscluster
