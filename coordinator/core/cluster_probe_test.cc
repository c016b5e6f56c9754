#include "coordinator/core/cluster_probe.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "coordinator/core/cluster_liveness.h"

namespace pscluster {
namespace {

class FakeHealth : public HealthChecker {
 public:
  std::atomic<bool> ps1_up{true};
  absl::StatusOr<uint64_t> CheckPs(int index) override {
    if (index == 1 && !ps1_up) return absl::UnavailableError("down");
    return uint64_t{7};
  }
  absl::Status CheckWorker(int) override { return absl::OkStatus(); }
};

TEST(ClusterProbeTest, ReportsReachabilityChangesAndHealthyCounts) {
  FakeHealth health;
  CoordinatorMetrics metrics;
  absl::Mutex mu;
  std::vector<bool> seen;
  ClusterProbe::Options o;
  o.num_ps = 2;
  o.num_workers = 3;
  o.interval = absl::Milliseconds(10);
  o.metrics = &metrics;
  o.on_reachable = [&](bool r) {
    absl::MutexLock lock(&mu);
    seen.push_back(r);
  };
  auto count_seen = [&](size_t n) {
    return [&, n] {
      mu.AssertReaderHeld();
      return seen.size() >= n;
    };
  };
  ClusterProbe probe(&health, o);
  {
    absl::MutexLock lock(&mu);
    auto c = count_seen(1);
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&c), absl::Seconds(10)));
  }
  health.ps1_up = false;
  {
    absl::MutexLock lock(&mu);
    auto c = count_seen(2);
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&c), absl::Seconds(10)));
  }
  EXPECT_FALSE(probe.CheckOnce());
  double ps = -1, workers = -1;
  for (const prometheus::MetricFamily& f : metrics.Collect()) {
    if (f.name != "pscluster_cluster_tasks_healthy") continue;
    for (const prometheus::ClientMetric& m : f.metric) {
      (m.label[0].value == "ps" ? ps : workers) = m.gauge.value;
    }
  }
  EXPECT_EQ(ps, 1);
  EXPECT_EQ(workers, 3);
  health.ps1_up = true;
  {
    absl::MutexLock lock(&mu);
    auto c = count_seen(3);
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&c), absl::Seconds(10)));
    EXPECT_EQ(seen, (std::vector<bool>{true, false, true}));  // changes only
  }
}

class CountedWorkers : public HealthChecker {
 public:
  absl::StatusOr<uint64_t> CheckPs(int) override { return uint64_t{1}; }
  absl::Status CheckWorker(int) override {
    ++checks;
    return absl::OkStatus();
  }
  std::atomic<int> checks{0};
};

// Over the shared ClusterLiveness, workers a job's health loop vouched for
// within the probe's interval cost the probe no RPC.
TEST(ClusterProbeTest, WorkersKnownAliveWithinTheIntervalAreNotAskedAgain) {
  CountedWorkers health;
  const absl::Time now = absl::FromUnixSeconds(1000);
  ClusterLiveness liveness(&health, ClusterLiveness::Options{[now] { return now; }});
  liveness.WorkerAnswered(0);
  liveness.WorkerAnswered(2);
  absl::Notification first;
  ClusterProbe::Options o;
  o.num_workers = 3;
  o.interval = absl::Hours(1);  // one round: the first
  o.on_reachable = [&](bool reachable) {
    EXPECT_TRUE(reachable);
    first.Notify();
  };
  ClusterProbe probe(&liveness, o);
  ASSERT_TRUE(first.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(health.checks.load(), 1);  // worker 1 only
  EXPECT_TRUE(probe.CheckOnce());
  EXPECT_EQ(health.checks.load(), 1);  // worker 1's answer is shared too
}

}  // namespace
}  // namespace pscluster
