// The job's parts with a WorkerRoster (elastic workers): in PhaseRunner, a
// worker that joins during a phase is set up and takes closures, one that
// leaves finishes its call in flight and gets no more, and a call cut off by
// a leave is handed back without counting an attempt; a central_storage
// phase re-forms its replicas between splits as workers join and leave;
// HealthWatch and ClusterProbe check the members only.
#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "coordinator/core/cluster_probe.h"
#include "coordinator/core/fake_clock.h"
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
    if (on_request) {
      absl::Status s = on_request(request);
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
  std::function<absl::Status(const RunClosureRequest&)> on_request;

 private:
  const std::string name_;
  std::atomic<int> runs_{0};
  std::atomic<int> calls_{0};
};

struct Fixture {
  explicit Fixture(std::vector<WorkerClient*> initial, JobSpec job_spec = Spec(),
                   std::function<std::vector<int>(const std::vector<int>&)> reform_ring = nullptr)
      : spec(std::move(job_spec)) {
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
    o.reform_ring = std::move(reform_ring);
    o.setup_worker = [this](int w) {
      if (on_setup) on_setup(w);
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
  std::function<void(int)> on_setup;  // before a joiner's setup
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

// One replica's share of a synchronous split, as a worker was asked for it.
struct Share {
  int64_t begin;
  int32_t replicas;
  int32_t replica;
  std::string worker;
};

// central_storage: any worker runs any replica. multi_worker_mirrored with
// reform_ring (JobRunner::ReformRing, here a fake that keeps the members'
// ring order): replica r is pinned to ring[r].
class ElasticSyncPhaseTest : public ::testing::TestWithParam<Strategy> {};

TEST_P(ElasticSyncPhaseTest, ASplitHasOneReplicaPerWorkerHoldingTheJob) {
  const bool mirrored = GetParam() == Strategy::kMultiWorkerMirrored;
  JobSpec spec = job_runner_test_util::Spec(/*epochs=*/1);
  spec.strategy = GetParam();
  spec.train.closures_per_worker = 1;
  ASSERT_TRUE(ResolveReplicas(ReplicasFor(spec, 2), &spec).ok());
  ASSERT_EQ(StepExamples(spec), 20);  // global batch: 2 x 10
  HookedWorker w0("127.0.0.1:7000"), w1("127.0.0.1:7001");
  std::vector<int> ring = {0, 1};
  std::vector<std::vector<int>> reforms;  // on the phase's thread only
  auto reform_ring = [&](const std::vector<int>& members) {
    reforms.push_back(members);
    std::vector<int> formed;
    for (int w : ring) {
      if (std::count(members.begin(), members.end(), w) > 0) formed.push_back(w);
    }
    for (int w : members) {
      if (std::count(ring.begin(), ring.end(), w) == 0) formed.push_back(w);
    }
    ring = formed;
    return formed;
  };
  Fixture f(
      {&w0, &w1}, spec,
      mirrored ? std::function<std::vector<int>(const std::vector<int>&)>(reform_ring) : nullptr);
  absl::Mutex mu;
  std::vector<Share> shares;
  std::atomic<bool> joined{false};
  std::atomic<bool> leaving{false};
  std::thread leave;
  absl::StatusOr<int> left = -1;
  auto record = [&](const RunClosureRequest& r, const std::string& worker) {
    absl::MutexLock lock(&mu);
    shares.push_back({r.split().begin(), r.split().replicas(), r.replica(), worker});
  };

  // Progress triggers: a worker joins while the third split (examples
  // [120, 180)) runs, which waits until the joiner is being set up; once
  // the joiner runs a share of a 3-replica split, worker 1 leaves.
  // The joiner's hook, installed as it is set up (before its first closure).
  std::atomic<bool> set_up{false};
  f.on_setup = [&](int) {
    f.joined.load()->on_request = [&](const RunClosureRequest& q) {
      record(q, "127.0.0.1:7002");
      if (q.split().replicas() == 3 && !leaving.exchange(true)) {
        // (Whether or not worker 1 took its share of this split yet: a
        // mirrored one is pinned to it, and it still runs it as it leaves.)
        leave = std::thread([&] { left = f.roster->Leave("127.0.0.1:7001", absl::Seconds(20)); });
        EXPECT_TRUE(WaitUntil([&] { return !f.roster->active(1); }));
      }
      return absl::OkStatus();
    };
    set_up = true;
  };
  auto cluster_worker = [&](const RunClosureRequest& r, const std::string& name) {
    record(r, name);
    if (r.split().begin() == 120 && !joined.exchange(true)) {
      absl::StatusOr<int> i = f.roster->Join("127.0.0.1:7002");
      EXPECT_TRUE(i.ok()) << i.status();
      EXPECT_TRUE(WaitUntil([&] { return set_up.load(); }));
    }
    return absl::OkStatus();
  };
  w0.on_request = [&](const RunClosureRequest& r) { return cluster_worker(r, "127.0.0.1:7000"); };
  w1.on_request = [&](const RunClosureRequest& r) { return cluster_worker(r, "127.0.0.1:7001"); };
  PhaseTotals totals;
  // 10 splits of 60 examples (3 global batches).
  absl::StatusOr<PhaseEnd> end = f.phases->RunPhase(TRAIN, 0, 600, 60, &totals);
  if (leave.joinable()) leave.join();
  ASSERT_TRUE(end.ok()) << end.status();
  ASSERT_TRUE(left.ok()) << left.status();
  // A split's steps count once, not once per replica (the fake worker
  // reports 6 for a split of 60 examples).
  EXPECT_EQ(f.board.Status().steps(), 60);
  EXPECT_EQ(f.Retries(), 0);
  EXPECT_EQ(f.setups, std::vector<int>({2}));

  // Each split ran once per replica of its count, every replica once; the
  // counts went 2, then 3 (the joiner held the job), then 2 (worker 1 left).
  std::map<int64_t, std::vector<Share>> by_split;
  for (const Share& s : shares) by_split[s.begin].push_back(s);
  ASSERT_EQ(by_split.size(), 10u);
  std::vector<int32_t> counts;
  for (const auto& [begin, of_split] : by_split) {
    const int32_t n = of_split.front().replicas;
    ASSERT_EQ(static_cast<int32_t>(of_split.size()), n) << "split at " << begin;
    std::set<int32_t> replicas;
    for (const Share& s : of_split) {
      EXPECT_EQ(s.replicas, n);
      replicas.insert(s.replica);
    }
    EXPECT_EQ(replicas.size(), static_cast<size_t>(n));
    EXPECT_EQ(*replicas.rbegin(), n - 1);
    counts.push_back(n);
  }
  EXPECT_EQ(counts.front(), 2);
  EXPECT_EQ(counts.back(), 2);
  auto threes = std::count(counts.begin(), counts.end(), 3);
  EXPECT_GE(threes, 1);
  // One run of 3s: formed once up, once down.
  const auto first3 = std::find(counts.begin(), counts.end(), 3);
  EXPECT_EQ(std::count(first3, first3 + threes, 3), threes);
  std::vector<std::string> reformed;
  for (const JobEvent& e : f.board.Events()) {
    if (e.kind() == "replicas_reformed") reformed.push_back(e.message());
  }
  ASSERT_EQ(reformed.size(), 2u);
  EXPECT_NE(reformed[0].find("3 replicas (were 2)"), std::string::npos) << reformed[0];
  EXPECT_NE(reformed[1].find("2 replicas (were 3)"), std::string::npos) << reformed[1];
  EXPECT_NE(reformed[0].find("global batch of 20 examples (7 a replica)"), std::string::npos)
      << reformed[0];
  EXPECT_EQ(f.board.Status().replicas(), 2);
  if (!mirrored) return;
  // The ring went [0, 1] -> [0, 1, 2] -> [0, 2], each replica on its member.
  EXPECT_EQ(reforms, (std::vector<std::vector<int>>{{0, 1, 2}, {0, 2}}));
  bool after = false;
  for (const auto& [begin, of_split] : by_split) {
    const int32_t n = of_split.front().replicas;
    after = after || n == 3;
    const std::vector<std::string> members =
        n == 3  ? std::vector<std::string>{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"}
        : after ? std::vector<std::string>{"127.0.0.1:7000", "127.0.0.1:7002"}
                : std::vector<std::string>{"127.0.0.1:7000", "127.0.0.1:7001"};
    for (const Share& s : of_split) {
      EXPECT_EQ(s.worker, members[static_cast<size_t>(s.replica)])
          << "replica " << s.replica << " of the split at " << begin;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, ElasticSyncPhaseTest,
                         ::testing::Values(Strategy::kCentralStorage,
                                           Strategy::kMultiWorkerMirrored),
                         [](const ::testing::TestParamInfo<Strategy>& info) {
                           return std::string(StrategyName(info.param));
                         });

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
