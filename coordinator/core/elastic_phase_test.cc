// The job's parts with a WorkerRoster (elastic workers): in PhaseRunner, a
// worker that joins during a phase is set up and takes closures, one that
// leaves finishes its call in flight and gets no more, and a call cut off by
// a leave is handed back without counting an attempt; HealthWatch and
// ClusterProbe check the members only.
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "coordinator/core/cluster_probe.h"
#include "coordinator/core/health_watch.h"
#include "coordinator/core/job_runner_test_util.h"
#include "coordinator/core/phase_runner.h"
#include "coordinator/core/worker_roster.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

JobSpec Spec() {
  JobSpec spec = job_runner_test_util::Spec(/*epochs=*/1);
  spec.train.closures_per_worker = 1;
  EXPECT_TRUE(ResolveReplicas(ReplicasFor(spec, 2), &spec).ok());
  return spec;
}

// Runs every closure at once, after `before_run` (may block or fail it).
class HookedWorker : public WorkerClient {
 public:
  explicit HookedWorker(std::string name) : name_(std::move(name)) {}
  std::string address() const override { return name_; }
  absl::Status SetupJob(const SetupJobRequest&, SetupJobResponse*) override {
    return absl::OkStatus();
  }
  absl::Status RunClosure(const RunClosureRequest& request, absl::Duration,
                          RunClosureResponse* response) override {
    calls_++;
    if (before_run) {
      absl::Status s = before_run();
      if (!s.ok()) return s;
    }
    const int64_t n = request.split().end() - request.split().begin();
    response->set_examples(n);
    response->set_steps((n + 9) / 10);
    runs_++;
    return absl::OkStatus();
  }
  absl::Status Ping(const PingRequest&, PingResponse*) override { return absl::OkStatus(); }
  int runs() const { return runs_; }
  int calls() const { return calls_; }

  std::function<absl::Status()> before_run;

 private:
  const std::string name_;
  std::atomic<int> runs_{0};
  std::atomic<int> calls_{0};
};

// Waits (bounded) until `done`.
bool WaitUntil(const std::function<bool()>& done) {
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (!done()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

struct Fixture {
  explicit Fixture(std::vector<WorkerClient*> initial) : spec(Spec()) {
    WorkerRoster::Options r;
    r.connect = [this](const std::string& address, int) {
      auto w = std::make_unique<HookedWorker>(address);
      joined = w.get();
      return std::unique_ptr<WorkerClient>(std::move(w));
    };
    roster = std::make_unique<WorkerRoster>(initial, r);
    PhaseRunner::Options o;
    o.job_id = "j";
    o.spec = &spec;
    o.workers = initial;
    o.max_attempts = 1;  // any counted attempt fails the phase
    o.retry_backoff = absl::Milliseconds(1);
    o.board = &board;
    o.roster = roster.get();
    o.setup_worker = [this](int w) {
      setups.push_back(w);
      return absl::OkStatus();
    };
    PhaseRunner::Control c;
    c.ps_failed = [] { return false; };
    c.mark_ps_failed = [] { return false; };
    c.checkpoint_due = [] { return false; };
    c.checkpoint = [] { return absl::OkStatus(); };
    c.recover = [] { return absl::OkStatus(); };
    phases = std::make_unique<PhaseRunner>(o, c);
    for (size_t w = 0; w < initial.size(); ++w) phases->MarkSetUp(static_cast<int>(w));
  }
  int Retries() const {
    int n = 0;
    for (const JobEvent& e : board.Events()) n += e.kind() == "retry";
    return n;
  }

  JobSpec spec;
  JobStatusBoard board{"j", JobStatusProto()};
  std::atomic<HookedWorker*> joined{nullptr};
  std::vector<int> setups;            // by the joiner's one dispatch thread
  std::unique_ptr<WorkerRoster> roster;
  std::unique_ptr<PhaseRunner> phases;
};

TEST(ElasticPhaseTest, AWorkerThatJoinsMidPhaseIsSetUpAndTakesClosures) {
  HookedWorker w0("w0");
  Fixture f({&w0});
  // w0 holds its first closure until the joiner has run one: the phase
  // cannot end without the joiner.
  std::atomic<bool> first{true};
  w0.before_run = [&] {
    if (first.exchange(false)) {
      EXPECT_TRUE(WaitUntil([&] { return f.joined != nullptr && f.joined.load()->runs() > 0; }));
    }
    return absl::OkStatus();
  };
  std::thread joiner([&] {
    ASSERT_TRUE(WaitUntil([&] { return w0.calls() > 0; }));
    absl::StatusOr<int> i = f.roster->Join("127.0.0.1:7001");
    ASSERT_TRUE(i.ok()) << i.status();
    EXPECT_EQ(*i, 1);
  });
  PhaseTotals totals;
  absl::StatusOr<PhaseEnd> end = f.phases->RunPhase(TRAIN, 0, 300, 30, &totals);
  joiner.join();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(totals.examples, 300);
  EXPECT_EQ(f.board.Status().steps(), 30);
  ASSERT_NE(f.joined.load(), nullptr);
  EXPECT_GT(f.joined.load()->runs(), 0);
  EXPECT_EQ(w0.runs() + f.joined.load()->runs(), 10);
  EXPECT_EQ(f.setups, std::vector<int>({1}));
  EXPECT_EQ(f.Retries(), 0);
}

TEST(ElasticPhaseTest, AWorkerThatLeavesFinishesItsCallAndGetsNoMore) {
  HookedWorker w0("127.0.0.1:7000"), w1("127.0.0.1:7001");
  Fixture f({&w0, &w1});
  // w0 takes no closure before w1 took one.
  w0.before_run = [&] {
    EXPECT_TRUE(WaitUntil([&] { return w1.calls() > 0; }));
    return absl::OkStatus();
  };
  std::atomic<bool> release{false};
  w1.before_run = [&] {
    EXPECT_TRUE(WaitUntil([&] { return release.load(); }));
    return absl::OkStatus();
  };
  absl::StatusOr<int> left = -1;
  std::thread leaver([&] {
    ASSERT_TRUE(WaitUntil([&] { return w1.calls() > 0; }));
    std::thread leave([&] { left = f.roster->Leave("127.0.0.1:7001", absl::Seconds(20)); });
    // Once it is leaving, its closure in flight is let go.
    ASSERT_TRUE(WaitUntil([&] { return !f.roster->active(1); }));
    release = true;
    leave.join();
  });
  PhaseTotals totals;
  absl::StatusOr<PhaseEnd> end = f.phases->RunPhase(TRAIN, 0, 300, 30, &totals);
  leaver.join();
  ASSERT_TRUE(end.ok()) << end.status();
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(*left, 0);  // the leave waited for the call in flight
  EXPECT_EQ(w1.calls(), 1);
  EXPECT_EQ(w1.runs(), 1);
  EXPECT_EQ(w0.runs(), 9);
  EXPECT_EQ(totals.examples, 300);
  EXPECT_EQ(f.Retries(), 0);
}

TEST(ElasticPhaseTest, ACallCutOffByALeaveIsHandedBackWithoutAnAttempt) {
  HookedWorker w0("127.0.0.1:7000"), w1("127.0.0.1:7001");
  Fixture f({&w0, &w1});
  // w0 takes no closure before w1 took one.
  w0.before_run = [&] {
    EXPECT_TRUE(WaitUntil([&] { return w1.calls() > 0; }));
    return absl::OkStatus();
  };
  std::atomic<bool> release{false};
  // w1 exits while its call is in flight (its leave wait ran out).
  w1.before_run = [&] {
    EXPECT_TRUE(WaitUntil([&] { return release.load(); }));
    return absl::UnavailableError("Socket closed");
  };
  std::thread leaver([&] {
    ASSERT_TRUE(WaitUntil([&] { return w1.calls() > 0; }));
    absl::StatusOr<int> left = f.roster->Leave("127.0.0.1:7001", absl::Milliseconds(5));
    ASSERT_TRUE(left.ok());
    EXPECT_EQ(*left, 1);
    release = true;
  });
  PhaseTotals totals;
  // max_attempts 1: a counted attempt would fail the phase.
  absl::StatusOr<PhaseEnd> end = f.phases->RunPhase(TRAIN, 0, 300, 30, &totals);
  leaver.join();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(w1.runs(), 0);
  EXPECT_EQ(w0.runs(), 10);
  EXPECT_EQ(totals.examples, 300);
  EXPECT_EQ(f.Retries(), 0);
}

// Workers 1 and 2 do not answer (they left, or never came).
class OnlyWorker0Answers : public HealthChecker {
 public:
  absl::StatusOr<uint64_t> CheckPs(int) override { return 1; }
  absl::Status CheckWorker(int index) override {
    absl::MutexLock lock(&mu);
    checked.push_back(index);
    return index == 0 ? absl::OkStatus() : absl::UnavailableError("connection refused");
  }
  std::vector<int> Checked() {
    absl::MutexLock lock(&mu);
    return checked;
  }
  absl::Mutex mu;
  std::vector<int> checked ABSL_GUARDED_BY(mu);
};

TEST(ElasticHealthTest, HealthWatchAndProbeCheckMembersOnly) {
  HookedWorker w0("127.0.0.1:7000"), w1("127.0.0.1:7001");
  WorkerRoster::Options r;
  r.connect = [](const std::string& address, int) {
    return std::unique_ptr<WorkerClient>(std::make_unique<HookedWorker>(address));
  };
  WorkerRoster roster({&w0, &w1}, r);
  OnlyWorker0Answers health;
  std::vector<std::string> events;
  HealthWatch::Options o;
  o.health = &health;
  o.workers = {&w0, &w1};
  o.roster = &roster;
  o.event = [&](const std::string& kind, const std::string&) { events.push_back(kind); };
  HealthWatch watch(o);
  // Worker 1 left: not checked, not down.
  ASSERT_TRUE(roster.Leave("127.0.0.1:7001", absl::ZeroDuration()).ok());
  // Worker 2 joined: checked (and down here) under its roster index.
  ASSERT_EQ(*roster.Join("127.0.0.1:7002"), 2);
  watch.CheckOnce();
  EXPECT_EQ(health.Checked(), std::vector<int>({0, 2}));
  EXPECT_EQ(events, std::vector<std::string>({"worker_down"}));
  EXPECT_FALSE(watch.worker_down(1)->load());
  EXPECT_TRUE(watch.worker_down(2)->load());

  ClusterProbe::Options p;
  p.num_workers = 2;
  p.interval = absl::Hours(1);
  p.worker_indices = [&roster] { return roster.ActiveIndices(); };
  ClusterProbe probe(&health, p);
  ASSERT_TRUE(roster.Leave("127.0.0.1:7002", absl::ZeroDuration()).ok());
  // Only worker 0 is a member now, and it answers.
  EXPECT_TRUE(probe.CheckOnce());
}

}  // namespace
}  // namespace pscluster
