#include "coordinator/core/phase_runner.h"

#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

// A resolved spec for `workers` workers: batch 10, 3 steps per closure.
JobSpec Spec(const std::string& strategy, int workers) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(R"(
name: t
strategy: )" + strategy + R"(
model:
  inputs: {dense: 4}
  layers: [{dense: {units: 3}}]
optimizer: {type: sgd}
data:
  train: {images: a, labels: b}
  eval: {images: a, labels: b}
  per_replica_batch: 10
train: {epochs: 1, steps_per_closure: 3, closures_per_worker: 2}
)",
                                              "t.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ResolveReplicas(ReplicasFor(*spec, workers), &*spec).ok());
  return *spec;
}

// A worker that runs every closure at once: ceil(examples / 10) steps, and
// counts the closures in flight.
class FakeWorker : public WorkerClient {
 public:
  explicit FakeWorker(std::string name) : name_(std::move(name)) {}
  std::string address() const override { return name_; }
  absl::Status SetupJob(const SetupJobRequest&, SetupJobResponse*) override {
    return absl::OkStatus();
  }
  absl::Status RunClosure(const RunClosureRequest& request, absl::Duration,
                          RunClosureResponse* response) override {
    {
      absl::MutexLock lock(&mu_);
      ++in_flight_;
    }
    const int64_t n = request.split().end() - request.split().begin();
    response->set_examples(n);
    response->set_steps((n + 9) / 10);
    response->set_loss_sum(0.5 * n);
    response->set_correct(request.mode() == EVAL ? n / 2 : 0);
    absl::MutexLock lock(&mu_);
    --in_flight_;
    runs_[{request.mode(), request.split().begin()}]++;
    return absl::OkStatus();
  }
  absl::Status Ping(const PingRequest&, PingResponse*) override { return absl::OkStatus(); }
  int in_flight() {
    absl::MutexLock lock(&mu_);
    return in_flight_;
  }
  std::map<std::pair<int, int64_t>, int> runs() {
    absl::MutexLock lock(&mu_);
    return runs_;
  }

 private:
  const std::string name_;
  absl::Mutex mu_;
  int in_flight_ = 0;
  std::map<std::pair<int, int64_t>, int> runs_;
};

// Worker 1 does not answer; the PS and worker 0 do.
class Worker1Down : public HealthChecker {
 public:
  absl::StatusOr<uint64_t> CheckPs(int) override { return 1; }
  absl::Status CheckWorker(int index) override {
    return index == 1 ? absl::UnavailableError("connection refused") : absl::OkStatus();
  }
};

struct Fixture {
  // `health`: the job's health checks (null: none); `now`: the job's clock.
  explicit Fixture(const std::string& strategy = "parameter_server",
                   HealthWatch* health = nullptr,
                   std::function<absl::Time()> now = [] { return absl::Now(); })
      : spec(Spec(strategy, 2)) {
    PhaseRunner::Options o;
    o.job_id = "j";
    o.spec = &spec;
    o.workers = {&w0, &w1};
    o.retry_backoff = absl::Milliseconds(1);
    o.board = &board;
    o.health = health;
    o.now = std::move(now);
    PhaseRunner::Control c;
    c.ps_failed = [this] { return ps_failed.load(); };
    c.mark_ps_failed = [this] { return ps_failed.exchange(true); };
    c.checkpoint_due = [this] { return due(); };
    c.checkpoint = [this] { return checkpoint(); };
    c.recover = [this] { return recover(); };
    phases = std::make_unique<PhaseRunner>(o, c);
  }
  int64_t Steps() const { return board.Status().steps(); }

  JobSpec spec;
  JobStatusBoard board{"j", JobStatusProto()};
  FakeWorker w0{"w0"}, w1{"w1"};
  std::atomic<bool> ps_failed{false};
  std::function<bool()> due = [] { return false; };
  std::function<absl::Status()> checkpoint = [] { return absl::OkStatus(); };
  std::function<absl::Status()> recover = [] { return absl::OkStatus(); };
  std::unique_ptr<PhaseRunner> phases;
};

TEST(PhaseRunnerTest, RunsEverySplitOnceAndRecordsTheSteps) {
  Fixture f;
  PhaseTotals totals;
  absl::StatusOr<PhaseEnd> end = f.phases->RunPhase(TRAIN, 0, 95, 30, &totals);
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(*end, PhaseEnd::kDone);
  EXPECT_EQ(totals.examples, 95);
  // Splits of 30, 30, 30 and 5 examples: 3 + 3 + 3 + 1 steps.
  EXPECT_EQ(f.Steps(), 10);
  EXPECT_EQ(f.board.Status().examples(), 95);
  EXPECT_DOUBLE_EQ(f.phases->TrainLoss(), 0.5);
  EXPECT_EQ(f.phases->finished_splits(), (std::set<int64_t>{0, 1, 2, 3}));
  std::map<int64_t, int> runs;
  for (FakeWorker* w : {&f.w0, &f.w1}) {
    for (const auto& [key, n] : w->runs()) runs[key.second] += n;
  }
  EXPECT_EQ(runs, (std::map<int64_t, int>{{0, 1}, {30, 1}, {60, 1}, {90, 1}}));
}

TEST(PhaseRunnerTest, EvalAddsToTheTotalsButNotToTheSteps) {
  Fixture f;
  PhaseTotals totals;
  ASSERT_TRUE(f.phases->RunPhase(EVAL, 0, 20, 7, &totals).ok());
  EXPECT_EQ(totals.examples, 20);
  EXPECT_EQ(totals.correct, 3 + 3 + 3);  // splits of 7, 7 and 6
  EXPECT_EQ(f.Steps(), 0);
  EXPECT_TRUE(f.phases->finished_splits().empty());
}

TEST(PhaseRunnerTest, FinishedSplitsOfARewoundPositionAreNotRunAgain) {
  Fixture f;
  f.phases->Rewind(3, {0, 2});
  EXPECT_EQ(f.phases->epoch(), 3);
  PhaseTotals totals;
  ASSERT_TRUE(f.phases->RunPhase(TRAIN, 3, 95, 30, &totals).ok());
  EXPECT_EQ(totals.examples, 35);  // splits 1 (30) and 3 (5)
  EXPECT_EQ(f.phases->finished_splits(), (std::set<int64_t>{0, 1, 2, 3}));
}

TEST(PhaseRunnerTest, FinishEpochMovesThePositionAndRecordsTheResult) {
  Fixture f;
  PhaseTotals totals;
  ASSERT_TRUE(f.phases->RunPhase(TRAIN, 0, 95, 30, &totals).ok());
  EpochResult r;
  r.set_epoch(1);
  r.set_eval_accuracy(0.75);
  f.phases->FinishEpoch(r);
  EXPECT_EQ(f.phases->epoch(), 1);
  EXPECT_TRUE(f.phases->finished_splits().empty());
  EXPECT_EQ(f.phases->TrainLoss(), 0);
  const JobStatusProto s = f.board.Status();
  ASSERT_EQ(s.epochs_size(), 1);
  EXPECT_DOUBLE_EQ(s.eval_accuracy(), 0.75);
  f.phases->RestartFromFirstStep();
  EXPECT_EQ(f.phases->epoch(), 0);
  EXPECT_EQ(f.Steps(), 0);
}

TEST(PhaseRunnerTest, ASynchronousSplitCountsItsStepsOnceEveryReplicaIsDone) {
  Fixture f("central_storage");
  ASSERT_EQ(SyncShares(f.spec), 2);
  PhaseTotals totals;
  Closure c;
  c.split_index = 4;
  c.replica = 0;
  RunClosureResponse r;
  r.set_steps(3);
  r.set_examples(60);
  bool done = true;
  f.phases->RecordSuccess(TRAIN, c, r, &totals, &done);
  EXPECT_FALSE(done);
  EXPECT_EQ(f.Steps(), 0);
  c.replica = 1;
  const auto [steps, lost] = f.phases->RecordSuccess(TRAIN, c, r, &totals, &done);
  EXPECT_TRUE(done);
  EXPECT_EQ(steps, 3);
  EXPECT_EQ(lost, 0);
  EXPECT_EQ(f.phases->finished_splits(), (std::set<int64_t>{4}));
}

TEST(PhaseRunnerTest, ASynchronousPhaseRunsEveryReplicaOfEverySplit) {
  Fixture f("central_storage");
  PhaseTotals totals;
  // A global batch of 20 (2 replicas x 10): closures of 3 steps, 60 examples.
  ASSERT_TRUE(f.phases->RunPhase(TRAIN, 0, 120, 60, &totals).ok());
  EXPECT_EQ(f.phases->finished_splits(), (std::set<int64_t>{0, 1}));
  EXPECT_EQ(f.Steps(), 2 * 6);  // each replica reports its 60 examples as 6 steps of 10
}

// Worker 1 is down: its replicas do not wait the locality wait for it at
// every split (on this frozen clock that wait would never end), worker 0
// runs them all at once.
TEST(PhaseRunnerTest, ASynchronousReplicaDoesNotWaitForAWorkerThatIsDown) {
  Worker1Down checker;
  FakeWorker hw0{"w0"}, hw1{"w1"};
  HealthWatch::Options h;
  h.health = &checker;
  h.workers = {&hw0, &hw1};
  h.worker_timeout = absl::Hours(1);
  h.check_ps = [] {};
  h.on_worker_lost = [] {};
  h.event = [](const std::string&, const std::string&) {};
  const absl::Time frozen = absl::FromUnixSeconds(1'700'000'000);
  h.now = [frozen] { return frozen; };
  HealthWatch watch(h);
  watch.CheckOnce();
  ASSERT_TRUE(watch.worker_down(1)->load());
  Fixture f("central_storage", &watch, [frozen] { return frozen; });
  PhaseTotals totals;
  absl::Notification done;
  absl::Status status;
  std::thread run([&] {
    status = f.phases->RunPhase(TRAIN, 0, 120, 60, &totals).status();
    done.Notify();
  });
  const bool finished = done.WaitForNotificationWithTimeout(absl::Seconds(20));
  if (!finished) f.phases->Cancel(absl::CancelledError("a replica waited for worker 1"));
  watch.Stop();  // worker 1's dispatch threads stop waiting for it
  run.join();
  ASSERT_TRUE(finished) << "a replica waited for the down worker";
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(f.phases->finished_splits(), (std::set<int64_t>{0, 1}));
  EXPECT_EQ(f.w1.runs().size(), 0u);
}

TEST(PhaseRunnerTest, CheckpointsRunWithNoClosureInFlight) {
  Fixture f;
  int taken = 0;
  int in_flight_at_checkpoint = -1;
  f.due = [&] { return f.Steps() >= 3 && taken == 0; };
  f.checkpoint = [&] {
    ++taken;
    in_flight_at_checkpoint = f.w0.in_flight() + f.w1.in_flight();
    return absl::OkStatus();
  };
  PhaseTotals totals;
  ASSERT_TRUE(f.phases->RunPhase(TRAIN, 0, 95, 30, &totals).ok());
  EXPECT_EQ(taken, 1);
  EXPECT_EQ(in_flight_at_checkpoint, 0);
  EXPECT_EQ(totals.examples, 95);
}

TEST(PhaseRunnerTest, ACheckpointThatFailsTheJobEndsThePhase) {
  Fixture f;
  f.due = [] { return true; };
  f.checkpoint = [] { return absl::UnavailableError("disk full"); };
  PhaseTotals totals;
  absl::StatusOr<PhaseEnd> end = f.phases->RunPhase(TRAIN, 0, 95, 30, &totals);
  EXPECT_EQ(end.status(), absl::UnavailableError("disk full"));
}

TEST(PhaseRunnerTest, APsFailureIsRecoveredAndThePhaseRolledBack) {
  Fixture f;
  int recoveries = 0;
  f.ps_failed = true;
  f.recover = [&] {
    ++recoveries;
    f.ps_failed = false;
    return absl::OkStatus();
  };
  PhaseTotals totals;
  absl::StatusOr<PhaseEnd> end = f.phases->RunPhase(TRAIN, 0, 95, 30, &totals);
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(*end, PhaseEnd::kRolledBack);
  EXPECT_EQ(recoveries, 1);
}

TEST(PhaseRunnerTest, ACancelledRunnerRunsNoMorePhases) {
  Fixture f;
  f.phases->Cancel(absl::CancelledError("job cancelled"));
  EXPECT_TRUE(f.phases->cancelled());
  PhaseTotals totals;
  EXPECT_TRUE(absl::IsCancelled(f.phases->RunPhase(TRAIN, 0, 95, 30, &totals).status()));
  EXPECT_TRUE(f.w0.runs().empty());
}

TEST(PhaseRunnerTest, ResumeFromLogTakesTheFinishedEpochsAndClosures) {
  Fixture f;
  std::vector<JobLogRecord> history(3);
  EpochResult e;
  e.set_epoch(1);
  e.set_eval_accuracy(0.5);
  history[0].mutable_epoch_finished()->set_epoch(0);
  history[0].mutable_epoch_finished()->set_result(e.SerializeAsString());
  history[1].mutable_closure_finished()->set_epoch(1);
  history[1].mutable_closure_finished()->set_split(2);
  history[1].mutable_closure_finished()->set_steps(3);
  history[1].mutable_closure_finished()->set_examples(30);
  history[2] = history[1];  // logged twice: counted once
  f.phases->ResumeFromLog(history);
  EXPECT_EQ(f.phases->epoch(), 1);
  EXPECT_EQ(f.phases->finished_splits(), (std::set<int64_t>{2}));
  const JobStatusProto s = f.board.Status();
  EXPECT_EQ(s.steps(), 3);
  EXPECT_EQ(s.examples(), 30);
  EXPECT_EQ(s.epochs_size(), 1);
}

TEST(PhaseRunnerTest, ClosureIdsDifferByModeEpochAndSplit) {
  EXPECT_NE(ClosureId(TRAIN, 0, 1), ClosureId(EVAL, 0, 1));
  EXPECT_NE(ClosureId(PREDICT, 0, 1), ClosureId(EVAL, 0, 1));
  EXPECT_NE(ClosureId(PREDICT, 0, 1), ClosureId(TRAIN, 0, 1));
  EXPECT_NE(ClosureId(TRAIN, 0, 1), ClosureId(TRAIN, 1, 1));
  EXPECT_LT(ClosureId(TRAIN, 1, 1000), ClosureId(TRAIN, 2, 0));
}

}  // namespace
}  // namespace pscluster
