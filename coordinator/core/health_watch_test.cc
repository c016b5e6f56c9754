#include "coordinator/core/health_watch.h"

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "coordinator/core/cluster_liveness.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

// A worker that only counts CancelCalls.
class CountingWorker : public WorkerClient {
 public:
  explicit CountingWorker(std::string name) : name_(std::move(name)) {}
  std::string address() const override { return name_; }
  absl::Status SetupJob(const SetupJobRequest&, SetupJobResponse*) override {
    return absl::OkStatus();
  }
  absl::Status RunClosure(const RunClosureRequest&, absl::Duration, RunClosureResponse*) override {
    return absl::OkStatus();
  }
  absl::Status Ping(const PingRequest&, PingResponse*) override { return absl::OkStatus(); }
  void CancelCalls() override { ++cancels; }
  std::string name_;
  int cancels = 0;
};

// Health whose answers the test sets.
class ScriptedHealth : public HealthChecker {
 public:
  absl::StatusOr<uint64_t> CheckPs(int) override { return 1; }
  absl::Status CheckWorker(int index) override {
    absl::MutexLock lock(&mu_);
    ++checks_[index];
    return down_[index] ? absl::UnavailableError("connection refused") : absl::OkStatus();
  }
  void WorkerAnswered(int index) override {
    absl::MutexLock lock(&mu_);
    answered_.push_back(index);
  }
  int Checks(int index) {
    absl::MutexLock lock(&mu_);
    return checks_[index];
  }
  std::vector<int> Answered() {
    absl::MutexLock lock(&mu_);
    return answered_;
  }
  void SetDown(int index, bool down) {
    absl::MutexLock lock(&mu_);
    down_[index] = down;
  }
  absl::Mutex mu_;
  std::map<int, bool> down_;
  std::map<int, int> checks_;
  std::vector<int> answered_;
};

struct Fixture {
  Fixture() {
    HealthWatch::Options o;
    o.health = &health;
    o.workers = {&w0, &w1};
    o.worker_timeout = absl::Seconds(10);
    o.check_ps = [this] { ++ps_passes; };
    o.on_worker_lost = [this] { ++lost; };
    o.event = [this](const std::string& kind, const std::string& message) {
      events.emplace_back(kind, message);
    };
    o.now = [this] { return now; };
    watch = std::make_unique<HealthWatch>(o);
  }
  int Events(const std::string& kind) const {
    int n = 0;
    for (const auto& e : events) n += e.first == kind;
    return n;
  }
  ScriptedHealth health;
  CountingWorker w0{"w0"}, w1{"w1"};
  absl::Time now = absl::FromUnixSeconds(1000);
  int ps_passes = 0;
  int lost = 0;
  std::vector<std::pair<std::string, std::string>> events;
  std::unique_ptr<HealthWatch> watch;
};

TEST(HealthWatchTest, EachPassChecksThePsAndEveryWorker) {
  Fixture f;
  f.watch->CheckOnce();
  f.watch->CheckOnce();
  EXPECT_EQ(f.ps_passes, 2);
  EXPECT_FALSE(f.watch->worker_down(0)->load());
  EXPECT_FALSE(f.watch->worker_down(1)->load());
  EXPECT_TRUE(f.events.empty());
}

TEST(HealthWatchTest, AWorkerThatStopsAnsweringIsDownUntilItIsBack) {
  Fixture f;
  f.health.SetDown(1, true);
  f.watch->CheckOnce();
  EXPECT_TRUE(f.watch->worker_down(1)->load());
  EXPECT_FALSE(f.watch->worker_down(0)->load());
  f.watch->CheckOnce();  // still down: no second event
  EXPECT_EQ(f.Events("worker_down"), 1);
  EXPECT_EQ(f.events[0].second, "worker 1 (w1) is not answering");
  f.health.SetDown(1, false);
  f.watch->CheckOnce();
  EXPECT_FALSE(f.watch->worker_down(1)->load());
  EXPECT_EQ(f.Events("worker_up"), 1);
  EXPECT_EQ(f.watch->worker_losses(1)->load(), 0);
}

TEST(HealthWatchTest, AWorkerSilentForTheTimeoutIsLostOnceAndCancelledOnEveryPass) {
  Fixture f;
  f.health.SetDown(0, true);
  f.watch->CheckOnce();
  f.now += absl::Seconds(9);
  f.watch->CheckOnce();
  EXPECT_EQ(f.lost, 0);
  EXPECT_EQ(f.w0.cancels, 0);
  f.now += absl::Seconds(1);  // silent for worker_timeout
  f.watch->CheckOnce();
  EXPECT_EQ(f.lost, 1);
  EXPECT_EQ(f.watch->worker_losses(0)->load(), 1);
  EXPECT_EQ(f.w0.cancels, 1);
  EXPECT_EQ(f.Events("worker_lost"), 1);
  f.now += absl::Seconds(1);
  f.watch->CheckOnce();  // still lost: cancelled again, not counted again
  EXPECT_EQ(f.lost, 1);
  EXPECT_EQ(f.w0.cancels, 2);
  // Back, then silent again: a new loss after a new timeout.
  f.health.SetDown(0, false);
  f.watch->CheckOnce();
  f.health.SetDown(0, true);
  f.watch->CheckOnce();
  EXPECT_EQ(f.lost, 1);
  f.now += absl::Seconds(10);
  f.watch->CheckOnce();
  EXPECT_EQ(f.lost, 2);
  EXPECT_EQ(f.watch->worker_losses(0)->load(), 2);
  EXPECT_EQ(f.w1.cancels, 0);
}

TEST(HealthWatchTest, AWorkerThatAnsweredCallsSinceTheLastPassIsNotChecked) {
  Fixture f;
  f.watch->worker_answers(0)->fetch_add(1);  // dispatch: worker 0 answered a RunClosure
  f.watch->CheckOnce();
  EXPECT_EQ(f.health.Checks(0), 0);
  EXPECT_EQ(f.health.Checks(1), 1);
  EXPECT_EQ(f.health.Answered(), std::vector<int>{0});  // shared with the other pollers
  EXPECT_FALSE(f.watch->worker_down(0)->load());
  // Silent since: checked again, found hung, and lost after the timeout.
  f.health.SetDown(0, true);
  f.watch->CheckOnce();
  EXPECT_EQ(f.health.Checks(0), 1);
  EXPECT_TRUE(f.watch->worker_down(0)->load());
  f.now += absl::Seconds(10);
  f.watch->CheckOnce();
  EXPECT_EQ(f.lost, 1);
  EXPECT_EQ(f.w0.cancels, 1);
}

TEST(HealthWatchTest, AWorkerMarkedDownIsAskedItselfEvenIfItAnsweredCalls) {
  Fixture f;
  // Dispatch: one call answered, the next UNAVAILABLE from the worker itself.
  f.watch->worker_answers(1)->fetch_add(1);
  f.watch->worker_down(1)->store(true);
  f.health.SetDown(1, true);
  f.watch->CheckOnce();
  EXPECT_EQ(f.health.Checks(1), 1);
  EXPECT_TRUE(f.watch->worker_down(1)->load());
  EXPECT_TRUE(f.health.Answered().empty());
  f.health.SetDown(1, false);
  f.watch->CheckOnce();
  EXPECT_FALSE(f.watch->worker_down(1)->load());
  EXPECT_EQ(f.Events("worker_up"), 1);
}

// Two jobs' loops over the coordinator's one ClusterLiveness: each worker is
// asked once per interval, not once per loop.
TEST(HealthWatchTest, LoopsSharingOneLivenessAskEachWorkerOnceAnInterval) {
  ScriptedHealth health;
  absl::Time now = absl::FromUnixSeconds(1000);
  ClusterLiveness liveness(&health, ClusterLiveness::Options{[&now] { return now; }});
  CountingWorker w0{"w0"}, w1{"w1"};
  std::vector<std::unique_ptr<HealthWatch>> watches;
  for (int i = 0; i < 2; ++i) {
    HealthWatch::Options o;
    o.health = &liveness;
    o.workers = {&w0, &w1};
    o.interval = absl::Seconds(1);
    o.event = [](const std::string&, const std::string&) {};
    o.now = [&now] { return now; };
    watches.push_back(std::make_unique<HealthWatch>(o));
  }
  watches[1]->worker_answers(1)->fetch_add(1);  // worker 1 answers job 1's closures
  for (auto& w : watches) w->CheckOnce();
  EXPECT_EQ(health.Checks(0), 1);
  EXPECT_EQ(health.Checks(1), 1);  // job 0's loop asked before job 1's heard of the answer
  now += absl::Milliseconds(500);
  for (auto& w : watches) w->CheckOnce();
  EXPECT_EQ(health.Checks(0), 1);
  EXPECT_EQ(health.Checks(1), 1);
  now += absl::Milliseconds(1500);
  for (auto& w : watches) w->CheckOnce();
  EXPECT_EQ(health.Checks(0), 2);
  EXPECT_EQ(health.Checks(1), 2);
}

TEST(HealthWatchTest, StopEndsTheLoopAndIsSeenByDispatch) {
  Fixture f;
  EXPECT_FALSE(f.watch->stopped()->load());
  f.watch->Start();
  f.watch->Join();
  EXPECT_TRUE(f.watch->stopped()->load());
  f.watch->Join();  // idempotent
}

TEST(HealthWatchTest, WithoutAHealthCheckerNothingStarts) {
  HealthWatch::Options o;
  HealthWatch watch(o);
  watch.Start();
  watch.Stop();
  EXPECT_TRUE(watch.stopped()->load());
}

}  // namespace
}  // namespace pscluster
