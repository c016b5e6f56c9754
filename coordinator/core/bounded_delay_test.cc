#include "coordinator/core/bounded_delay.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/core/closure_queue.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

TEST(BoundedDelayTest, ZeroRunsClosuresOneAfterAnother) {
  BoundedDelay d(0);
  const int64_t a = d.Add();
  const int64_t b = d.Add();
  EXPECT_TRUE(d.MayStart(a));
  EXPECT_FALSE(d.MayStart(b));
  EXPECT_EQ(d.Start(a), 0);
  EXPECT_FALSE(d.MayStart(b));
  d.Finish(a);
  EXPECT_TRUE(d.MayStart(b));
  EXPECT_EQ(d.Start(b), 0);
  EXPECT_EQ(d.max_observed(), 0);
}

TEST(BoundedDelayTest, WindowFollowsTheOldestUnfinished) {
  BoundedDelay d(2);
  std::vector<int64_t> seq;
  for (int i = 0; i < 6; ++i) seq.push_back(d.Add());
  EXPECT_TRUE(d.MayStart(seq[0]));
  EXPECT_TRUE(d.MayStart(seq[2]));
  EXPECT_FALSE(d.MayStart(seq[3]));  // 0 is unfinished: 3 - 0 > 2
  EXPECT_EQ(d.Start(seq[0]), 0);
  EXPECT_EQ(d.Start(seq[1]), 1);
  EXPECT_EQ(d.Start(seq[2]), 2);
  // 1 finishing first does not move the window: 0 still holds it.
  d.Finish(seq[1]);
  EXPECT_FALSE(d.MayStart(seq[3]));
  d.Finish(seq[0]);
  EXPECT_TRUE(d.MayStart(seq[3]));
  EXPECT_TRUE(d.MayStart(seq[4]));
  EXPECT_FALSE(d.MayStart(seq[5]));
  // 3's staleness counts the unfinished closures below it: 2 only.
  EXPECT_EQ(d.Start(seq[3]), 1);
  EXPECT_EQ(d.max_observed(), 2);
  d.Finish(seq[0]);  // repeated: ignored
  EXPECT_EQ(d.unfinished(), 4);
}

// A closure of a lost worker is put back and retried: it keeps its number,
// so it may start again at once, and it holds the window until it finishes.
TEST(BoundedDelayTest, ARetryKeepsItsPlace) {
  BoundedDelay d(1);
  const int64_t a = d.Add();
  const int64_t b = d.Add();
  const int64_t c = d.Add();
  d.Start(a);
  d.Start(b);
  d.Finish(b);
  EXPECT_FALSE(d.MayStart(c));  // a's worker hangs
  // a's worker is declared lost: a is started again elsewhere.
  EXPECT_TRUE(d.MayStart(a));
  EXPECT_EQ(d.Start(a), 0);
  d.Finish(a);
  EXPECT_TRUE(d.MayStart(c));
  EXPECT_EQ(d.Start(c), 0);
}

// Random schedules of starts, finishes and retries: every start is within
// the bound, measured as the unfinished closures below it, and the oldest
// unfinished closure can always start (no deadlock).
TEST(BoundedDelayTest, RandomSchedulesStayWithinTheBound) {
  for (int64_t bound : {0, 1, 3, 8}) {
    std::mt19937 rng(static_cast<uint32_t>(bound + 7));
    BoundedDelay d(bound);
    std::vector<int64_t> queued;
    std::vector<int64_t> running;
    std::vector<bool> finished;
    for (int i = 0; i < 200; ++i) {
      queued.push_back(d.Add());
      finished.push_back(false);
    }
    int64_t finishes = 0;
    for (int turn = 0; turn < 100000 && finishes < 200; ++turn) {
      const int action = static_cast<int>(rng() % 3);
      if (action == 0 && !queued.empty()) {
        std::vector<int64_t> startable;
        for (int64_t s : queued) {
          if (d.MayStart(s)) startable.push_back(s);
        }
        // Nothing may start only while an older closure runs.
        if (startable.empty()) {
          ASSERT_FALSE(running.empty()) << "nothing runs and nothing may start: deadlock";
          continue;
        }
        const int64_t s = startable[rng() % startable.size()];
        int64_t below = 0;
        for (int64_t u = 0; u < s; ++u) below += finished[u] ? 0 : 1;
        const int64_t staleness = d.Start(s);
        EXPECT_EQ(staleness, below);
        EXPECT_LE(staleness, bound);
        queued.erase(std::find(queued.begin(), queued.end(), s));
        running.push_back(s);
      } else if (!running.empty()) {
        const size_t k = rng() % running.size();
        const int64_t s = running[k];
        running.erase(running.begin() + static_cast<long>(k));
        if (action == 1) {
          d.Finish(s);
          finished[s] = true;
          ++finishes;
        } else {
          queued.push_back(s);  // failed: retried later
        }
      }
    }
    EXPECT_EQ(finishes, 200) << "bound " << bound;
    EXPECT_LE(d.max_observed(), bound);
    EXPECT_EQ(d.unfinished(), 0);
  }
}

TEST(BoundedDelayTest, UnboundedOnlyMeasures) {
  BoundedDelay d(BoundedDelay::kUnbounded);
  std::vector<int64_t> seq;
  for (int i = 0; i < 100; ++i) seq.push_back(d.Add());
  for (int64_t s : seq) {
    ASSERT_TRUE(d.MayStart(s));
    EXPECT_EQ(d.Start(s), s);  // every closure before it still runs
  }
  EXPECT_EQ(d.max_observed(), 99);
}

Closure Make(int64_t id) {
  Closure c;
  c.id = id;
  return c;
}

TEST(ClosureQueueBoundedDelayTest, HandsOutOnlyTheWindow) {
  ClosureQueue q;
  q.BoundStaleness(1);
  for (int i = 0; i < 4; ++i) q.Put(Make(i));
  std::vector<Closure> first = q.GetUpTo(10);
  ASSERT_EQ(first.size(), 2u);  // closures 0 and 1
  EXPECT_EQ(first[0].id, 0);
  EXPECT_EQ(first[0].staleness, 0);
  EXPECT_EQ(first[1].id, 1);
  EXPECT_EQ(first[1].staleness, 1);
  // 1 finishing does not let 2 in while 0 runs (2 - 0 > 1)...
  q.Done(first[1]);
  // ... 0 finishing does: 2 and 3.
  std::vector<Closure> next;
  std::thread taker([&] { next = q.GetUpTo(10); });
  // The taker blocks on the window (an event, not a sleep; bounded by a
  // safety deadline).
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (q.waiting_takers() == 0 && absl::Now() < deadline) std::this_thread::yield();
  EXPECT_EQ(q.waiting_takers(), 1);
  q.Done(first[0]);
  taker.join();
  ASSERT_EQ(next.size(), 2u);
  EXPECT_EQ(next[0].id, 2);
  EXPECT_EQ(next[0].staleness, 0);
  EXPECT_EQ(next[1].staleness, 1);
  q.Done(next[0]);
  q.Done(next[1]);
  EXPECT_TRUE(q.GetUpTo(1).empty());  // drained
  EXPECT_EQ(q.max_staleness_observed(), 1);
}

// A worker declared lost: its closure is put back (ClosureQueue::PutBack)
// and taken by another worker at once; the closures behind it wait for it.
TEST(ClosureQueueBoundedDelayTest, APutBackClosureIsRetriedFirst) {
  ClosureQueue q;
  q.BoundStaleness(0);
  q.Put(Make(10));
  q.Put(Make(11));
  std::vector<Closure> a = q.GetUpTo(5, /*worker=*/0);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].id, 10);
  q.PutBack(a[0]);  // worker 0 lost
  std::vector<Closure> retry = q.GetUpTo(5, /*worker=*/1);
  ASSERT_EQ(retry.size(), 1u);
  EXPECT_EQ(retry[0].id, 10);  // not 11: it would be 1 closure stale
  EXPECT_EQ(retry[0].staleness, 0);
  q.Done(retry[0]);
  std::vector<Closure> b = q.GetUpTo(5, /*worker=*/1);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].id, 11);
  q.Done(b[0]);
  EXPECT_TRUE(q.WaitFor(absl::ZeroDuration()));
  EXPECT_EQ(q.max_staleness_observed(), 0);
}

TEST(ClosureQueueBoundedDelayTest, UnboundedByDefault) {
  ClosureQueue q;
  for (int i = 0; i < 5; ++i) q.Put(Make(i));
  std::vector<Closure> all = q.GetUpTo(10);
  ASSERT_EQ(all.size(), 5u);
  EXPECT_EQ(all[4].staleness, -1);  // not measured
  for (const Closure& c : all) q.Done(c);
  EXPECT_EQ(q.max_staleness_observed(), 0);
}

}  // namespace
}  // namespace pscluster
