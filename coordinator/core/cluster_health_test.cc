#include "coordinator/core/cluster_health.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

// A cluster whose tasks answer once they are marked up. Thread-safe.
class FakeHealth final : public HealthChecker {
 public:
  void SetPsUp(int i) {
    absl::MutexLock l(&mu_);
    ps_up_.insert(i);
  }
  void SetWorkerUp(int i) {
    absl::MutexLock l(&mu_);
    workers_up_.insert(i);
  }
  // Calls per worker index.
  int worker_checks(int i) {
    absl::MutexLock l(&mu_);
    return worker_checks_[i];
  }

  absl::StatusOr<uint64_t> CheckPs(int index) override {
    absl::MutexLock l(&mu_);
    if (ps_up_.count(index)) return 7;
    return absl::UnavailableError("connection refused");
  }
  absl::Status CheckWorker(int index) override {
    absl::MutexLock l(&mu_);
    ++worker_checks_[index];
    if (workers_up_.count(index)) return absl::OkStatus();
    return absl::DeadlineExceededError("deadline exceeded");
  }

 private:
  absl::Mutex mu_;
  std::set<int> ps_up_ ABSL_GUARDED_BY(mu_);
  std::set<int> workers_up_ ABSL_GUARDED_BY(mu_);
  std::map<int, int> worker_checks_ ABSL_GUARDED_BY(mu_);
};

const std::vector<std::string> kPs = {"10.0.0.3:2222", "10.0.0.4:2222"};
const std::vector<std::string> kWorkers = {"worker-0.ps:2222", "worker-1.ps:2222"};

TEST(WaitForClusterTest, OkWhenEveryTaskAnswers) {
  FakeHealth health;
  health.SetPsUp(0);
  health.SetPsUp(1);
  health.SetWorkerUp(0);
  health.SetWorkerUp(1);
  EXPECT_TRUE(WaitForCluster(health, 2, 2, kPs, kWorkers, absl::Now() + absl::Seconds(5),
                             absl::Milliseconds(10))
                  .ok());
}

TEST(WaitForClusterTest, NamesEveryMissingTaskWithItsAddress) {
  FakeHealth health;
  health.SetPsUp(1);
  health.SetWorkerUp(0);
  const absl::Time start = absl::Now();
  absl::Status s = WaitForCluster(health, 2, 2, kPs, kWorkers, start + absl::Milliseconds(300),
                                  absl::Milliseconds(20));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()),
              MatchesRegex("after 0\\.[345] s, not healthy: ps 0 \\(10\\.0\\.0\\.3:2222\\), "
                           "worker 1 \\(worker-1\\.ps:2222\\)"));
}

TEST(WaitForClusterTest, WaitsForALateWorker) {
  FakeHealth health;
  health.SetPsUp(0);
  health.SetWorkerUp(0);
  // Taken before the thread starts: it comes up no sooner than 200 ms after.
  const absl::Time start = absl::Now();
  std::thread late([&health] {
    absl::SleepFor(absl::Milliseconds(200));
    health.SetWorkerUp(1);
  });
  absl::Status s = WaitForCluster(health, 1, 2, {kPs[0]}, kWorkers, start + absl::Seconds(20),
                                  absl::Milliseconds(10));
  late.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  // A task that answered is not asked again.
  EXPECT_EQ(health.worker_checks(0), 1);
  EXPECT_GT(health.worker_checks(1), 1);
}

TEST(WaitForClusterTest, PastDeadlineChecksOnce) {
  FakeHealth health;
  health.SetPsUp(0);
  health.SetWorkerUp(0);
  EXPECT_TRUE(
      WaitForCluster(health, 1, 1, {}, {}, absl::Now() - absl::Seconds(1), absl::Milliseconds(10))
          .ok());
  absl::Status s =
      WaitForCluster(health, 1, 2, {}, {}, absl::Now() - absl::Seconds(1), absl::Milliseconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  // Without addresses the task is named by index alone.
  EXPECT_THAT(std::string(s.message()), HasSubstr("not healthy: worker 1"));
  EXPECT_THAT(std::string(s.message()), ::testing::Not(HasSubstr("(")));
}

TEST(WaitForClusterTest, CancelStopsTheWait) {
  FakeHealth health;
  std::atomic<bool> cancel{false};
  std::thread canceller([&cancel] {
    absl::SleepFor(absl::Milliseconds(100));
    cancel = true;
  });
  const absl::Time start = absl::Now();
  absl::Status s = WaitForCluster(health, 1, 1, kPs, kWorkers, start + absl::Seconds(30),
                                  absl::Milliseconds(10), [&cancel] { return cancel.load(); });
  canceller.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

}  // namespace
}  // namespace pscluster
