#include "coordinator/core/closure_queue.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/core/fake_clock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

Closure Make(int64_t id) {
  Closure c;
  c.id = id;
  return c;
}

// Ends a test's taker thread on every way out of the test (a failed ASSERT
// included): stops the queue, so that a waiting taker returns, and joins.
class StopAndJoin {
 public:
  StopAndJoin(ClosureQueue* q, std::thread* t) : q_(q), t_(t) {}
  ~StopAndJoin() {
    if (!t_->joinable()) return;
    q_->Stop(absl::CancelledError("the test ended"));
    t_->join();
  }

 private:
  ClosureQueue* q_;
  std::thread* t_;
};

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
  batch = q.GetUpTo(10);                               // fewer queued than asked
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
  absl::Notification returned;
  std::thread t([&] {
    auto c = q.Get();
    got = c.has_value();
    if (c) q.Done();
    returned.Notify();
  });
  StopAndJoin end_t(&q, &t);
  // The taker looked, found closure 2 queued but the queue paused, and waits.
  ASSERT_TRUE(WaitUntil([&] { return q.waiting_takers() == 1; }));
  EXPECT_FALSE(got);
  EXPECT_FALSE(q.WaitUntilIdle(absl::ZeroDuration()));  // closure 1 is in flight
  q.Done();  // wakes the taker to look again: still paused
  EXPECT_TRUE(q.WaitUntilIdle(absl::ZeroDuration()));
  EXPECT_EQ(q.waiting_takers(), 1);
  EXPECT_FALSE(got);
  q.Resume();
  ASSERT_TRUE(returned.WaitForNotificationWithTimeout(absl::Seconds(10)));
  t.join();
  EXPECT_TRUE(got);
  EXPECT_EQ(q.waiting_takers(), 0);
  EXPECT_TRUE(q.WaitFor(absl::ZeroDuration()));
  EXPECT_TRUE(q.Wait().ok());
}

// Delay scheduling, on a fake clock: a closure for worker 1 goes to worker 0
// once it has waited exactly the locality wait (here to a thread that was
// already waiting when it was queued); a pinned one never does; an open
// queue keeps its takers waiting.
TEST(ClosureQueueTest, PreferredWorkerThenAnyAfterTheWaitAndPinnedNever) {
  FakeClock clock;
  ClosureQueue q(absl::Milliseconds(200), clock.AsFunction());
  q.SetOpen(true);
  std::atomic<int64_t> taken_id{-1};
  absl::Time taken_at;
  absl::Notification returned;
  std::thread w0([&] {
    std::vector<Closure> c = q.GetUpTo(1, /*worker=*/0);
    taken_at = clock.Now();
    if (!c.empty()) taken_id = c[0].id;
    returned.Notify();
  });
  StopAndJoin end_w0(&q, &w0);
  // w0 waits on the empty open queue.
  ASSERT_TRUE(WaitUntil([&] { return q.waiting_takers() == 1; }));
  const absl::Time put = clock.Now();
  Closure pinned;
  pinned.id = 1;
  pinned.preferred_worker = 1;
  pinned.pinned = true;
  q.Put(pinned);
  Closure preferred;
  preferred.id = 2;
  preferred.preferred_worker = 1;
  q.Put(preferred);
  // Just short of the wait: w0 looks (reads the clock) and takes nothing.
  clock.Advance(absl::Milliseconds(199));
  const int64_t reads = clock.reads();
  ASSERT_TRUE(WaitUntil([&] { return clock.reads() > reads; }));
  EXPECT_EQ(taken_id, -1);
  EXPECT_EQ(q.waiting_takers(), 1);
  // At the wait: w0 takes the preferred closure, never the pinned one.
  clock.Advance(absl::Milliseconds(1));
  ASSERT_TRUE(returned.WaitForNotificationWithTimeout(absl::Seconds(10)));
  w0.join();
  EXPECT_EQ(taken_id, 2);
  EXPECT_EQ(taken_at - put, absl::Milliseconds(200));
  // Worker 1 takes its pinned closure at once.
  std::vector<Closure> c = q.GetUpTo(1, /*worker=*/1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].id, 1);
  q.Done();
  q.Done();
  EXPECT_TRUE(q.WaitUntilEmpty(absl::ZeroDuration()));
  q.SetOpen(false);
  EXPECT_TRUE(q.Wait().ok());
}

// TakeOrWatch: the non-blocking take of the asynchronous dispatch.
TEST(ClosureQueueWatchTest, APutWakesOneWatcherItsPreferredWorkersFirst) {
  ClosureQueue q;
  q.SetOpen(true);
  std::vector<int> woken;
  std::vector<Closure> out;
  absl::Duration recheck;
  for (int w = 0; w < 3; ++w) {
    EXPECT_EQ(q.TakeOrWatch(
                  1, w, w, [&woken, w] { woken.push_back(w); }, &out, &recheck),
              ClosureQueue::Take::kWatching);
    EXPECT_EQ(recheck, absl::InfiniteDuration());
  }
  EXPECT_EQ(q.waiting_takers(), 3);
  Closure c = Make(1);
  c.preferred_worker = 2;
  q.Put(c);
  EXPECT_EQ(woken, std::vector<int>({2}));  // one wake, to the preferred worker
  q.Put(Make(2));
  EXPECT_EQ(woken, std::vector<int>({2, 0}));  // any closure: the oldest watcher
  EXPECT_EQ(q.TakeOrWatch(
                5, 2, 2, [] {}, &out, &recheck),
            ClosureQueue::Take::kTaken);
  EXPECT_EQ(out.size(), 2u);
  // Closing a drained queue wakes everyone left (they end).
  q.Done();
  q.Done();
  q.SetOpen(false);
  EXPECT_EQ(woken, std::vector<int>({2, 0, 1}));
  EXPECT_EQ(q.TakeOrWatch(
                1, 1, 1, [] {}, &out, &recheck),
            ClosureQueue::Take::kEnded);
  EXPECT_EQ(q.waiting_takers(), 0);
}

TEST(ClosureQueueWatchTest, AClosureForAnotherWorkerSaysWhenToLookAgain) {
  FakeClock clock;
  ClosureQueue q(absl::Milliseconds(300), clock.AsFunction());
  Closure c = Make(1);
  c.preferred_worker = 0;
  q.Put(c);
  std::vector<Closure> out;
  absl::Duration recheck;
  int woken = 0;
  EXPECT_EQ(q.TakeOrWatch(
                1, 1, 7, [&] { ++woken; }, &out, &recheck),
            ClosureQueue::Take::kWatching);
  EXPECT_EQ(recheck, absl::Milliseconds(300));
  clock.Advance(absl::Milliseconds(100));
  q.Unwatch(7);  // its timer went off first: the watch is dropped
  EXPECT_EQ(q.waiting_takers(), 0);
  EXPECT_EQ(q.TakeOrWatch(
                1, 1, 7, [&] { ++woken; }, &out, &recheck),
            ClosureQueue::Take::kWatching);
  EXPECT_EQ(recheck, absl::Milliseconds(200));
  clock.Advance(absl::Milliseconds(200));
  q.Unwatch(7);
  EXPECT_EQ(q.TakeOrWatch(
                1, 1, 7, [&] { ++woken; }, &out, &recheck),
            ClosureQueue::Take::kTaken);
  EXPECT_EQ(woken, 0);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].id, 1);
}

TEST(ClosureQueueWatchTest, PauseWatchesResumeAndStopWakeEveryone) {
  ClosureQueue q;
  q.Put(Make(1));
  q.Pause();
  std::vector<Closure> out;
  absl::Duration recheck;
  int woken = 0;
  for (int w = 0; w < 2; ++w) {
    EXPECT_EQ(q.TakeOrWatch(
                  1, w, w, [&] { ++woken; }, &out, &recheck),
              ClosureQueue::Take::kWatching);
  }
  q.Resume();
  EXPECT_EQ(woken, 2);
  EXPECT_EQ(q.TakeOrWatch(
                1, 0, 0, [&] { ++woken; }, &out, &recheck),
            ClosureQueue::Take::kTaken);
  EXPECT_EQ(q.TakeOrWatch(
                1, 1, 1, [&] { ++woken; }, &out, &recheck),
            ClosureQueue::Take::kWatching);  // one in flight: not drained
  q.Stop(absl::CancelledError("stopped"));
  EXPECT_EQ(woken, 3);
  EXPECT_EQ(q.TakeOrWatch(
                1, 1, 1, [] {}, &out, &recheck),
            ClosureQueue::Take::kEnded);
}

}  // namespace
}  // namespace pscluster
