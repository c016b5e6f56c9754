#include "coordinator/core/cluster_liveness.h"

#include <map>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

// The tasks themselves: answers the test sets, counting each check.
class CountedHealth : public HealthChecker {
 public:
  absl::StatusOr<uint64_t> CheckPs(int) override {
    ++ps_checks;
    return uint64_t{3};
  }
  absl::Status CheckWorker(int index) override {
    ++checks[index];
    if (during_check) during_check();
    return down[index] ? absl::UnavailableError("connection refused") : absl::OkStatus();
  }
  std::map<int, int> checks;
  std::map<int, bool> down;
  int ps_checks = 0;
  std::function<void()> during_check;
};

struct Fixture {
  Fixture() : liveness(&inner, ClusterLiveness::Options{[this] { return now; }}) {}
  CountedHealth inner;
  absl::Time now = absl::FromUnixSeconds(1000);
  ClusterLiveness liveness;
};

TEST(ClusterLivenessTest, AnAnswerIsSharedWithinItsAge) {
  Fixture f;
  EXPECT_TRUE(f.liveness.CheckWorkerWithin(0, absl::Seconds(2)).ok());
  f.now += absl::Seconds(1);
  // A second poller (or the same one sooner than its interval): no RPC.
  EXPECT_TRUE(f.liveness.CheckWorkerWithin(0, absl::Seconds(2)).ok());
  EXPECT_EQ(f.inner.checks[0], 1);
  // Older than this caller's interval: asked again.
  EXPECT_TRUE(f.liveness.CheckWorkerWithin(0, absl::Milliseconds(500)).ok());
  EXPECT_EQ(f.inner.checks[0], 2);
  EXPECT_EQ(f.liveness.worker_checks(), 2);
  EXPECT_EQ(f.liveness.worker_checks_saved(), 1);
}

TEST(ClusterLivenessTest, AFailureIsSharedTooAndCheckWorkerAlwaysAsks) {
  Fixture f;
  f.inner.down[1] = true;
  EXPECT_TRUE(absl::IsUnavailable(f.liveness.CheckWorker(1)));
  f.inner.down[1] = false;
  EXPECT_TRUE(absl::IsUnavailable(f.liveness.CheckWorkerWithin(1, absl::Seconds(1))));
  EXPECT_EQ(f.inner.checks[1], 1);
  EXPECT_TRUE(f.liveness.CheckWorker(1).ok());  // asks, whatever is known
  EXPECT_EQ(f.inner.checks[1], 2);
  EXPECT_TRUE(f.liveness.CheckWorkerWithin(1, absl::Seconds(1)).ok());
  EXPECT_EQ(f.inner.checks[1], 2);
}

TEST(ClusterLivenessTest, AWorkerThatAnsweredAnRpcIsAliveWithoutACheck) {
  Fixture f;
  f.liveness.WorkerAnswered(4);  // grows the record to worker 4
  f.now += absl::Milliseconds(400);
  EXPECT_TRUE(f.liveness.CheckWorkerWithin(4, absl::Milliseconds(500)).ok());
  EXPECT_EQ(f.inner.checks[4], 0);
  // Silent for longer than the interval: checked, and found down.
  f.inner.down[4] = true;
  f.now += absl::Milliseconds(200);
  EXPECT_FALSE(f.liveness.CheckWorkerWithin(4, absl::Milliseconds(500)).ok());
  EXPECT_EQ(f.inner.checks[4], 1);
  // Never heard of: checked.
  EXPECT_TRUE(f.liveness.CheckWorkerWithin(2, absl::Hours(1)).ok());
  EXPECT_EQ(f.inner.checks[2], 1);
}

TEST(ClusterLivenessTest, ACheckThatEndsAfterNewerNewsDoesNotOverrideIt) {
  Fixture f;
  f.inner.down[0] = true;
  // While the (failing) check is on the wire, the worker answers a closure.
  f.inner.during_check = [&f] {
    f.now += absl::Milliseconds(300);
    f.liveness.WorkerAnswered(0);
  };
  EXPECT_FALSE(f.liveness.CheckWorker(0).ok());  // this caller hears its own answer
  f.inner.during_check = nullptr;
  EXPECT_TRUE(f.liveness.CheckWorkerWithin(0, absl::Seconds(1)).ok());  // the newer news
  EXPECT_EQ(f.inner.checks[0], 1);
}

TEST(ClusterLivenessTest, PsChecksPassThrough) {
  Fixture f;
  EXPECT_EQ(*f.liveness.CheckPs(0), 3u);
  EXPECT_EQ(*f.liveness.CheckPs(0), 3u);
  EXPECT_EQ(f.inner.ps_checks, 2);
}

TEST(ClusterLivenessTest, ANegativeIndexIsAskedAndNotRecorded) {
  Fixture f;
  EXPECT_TRUE(f.liveness.CheckWorkerWithin(-1, absl::Hours(1)).ok());
  f.liveness.WorkerAnswered(-1);
  EXPECT_TRUE(f.liveness.CheckWorkerWithin(-1, absl::Hours(1)).ok());
  EXPECT_EQ(f.inner.checks[-1], 2);
}

}  // namespace
}  // namespace pscluster
