#include "coordinator/core/job_runner.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include <prometheus/registry.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/core/job_runner_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/variable_store.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;
using job_runner_test_util::Cluster;
using job_runner_test_util::FakeHealth;
using job_runner_test_util::FakeWorker;
using job_runner_test_util::FastRetries;
using job_runner_test_util::ForWorkers;
using job_runner_test_util::FreshDir;
using job_runner_test_util::Spec;
using job_runner_test_util::WithCheckpoints;

TEST(JobRunnerTest, RunsEverySplitOnceAndReportsProgress) {
  Cluster c;
  JobRunner runner("t-1", ForWorkers(Spec(2), 2), {&c.ps0, &c.ps1}, {&c.w0, &c.w1}, FastRetries());
  ASSERT_TRUE(runner.Run().ok());
  JobStatusProto s = runner.Status();
  EXPECT_EQ(s.state(), SUCCEEDED);
  EXPECT_EQ(s.examples(), 2 * 95);
  // 95 examples in closures of 30: 3 full (3 steps each) + 5 (1 step).
  EXPECT_EQ(s.total_steps(), 2 * 10);
  EXPECT_EQ(s.steps(), 2 * 10);
  ASSERT_EQ(s.epochs_size(), 2);
  EXPECT_NEAR(s.epochs(1).eval_accuracy(), 9.0 / 20, 1e-9);  // 3+3+3+0 of 7,7,6
  EXPECT_DOUBLE_EQ(s.train_loss(), 0.5);
  // Variables were created round-robin on both PS.
  StatsResponse st0, st1;
  ASSERT_TRUE(c.ps0.Stats({}, &st0).ok());
  ASSERT_TRUE(c.ps1.Stats({}, &st1).ok());
  EXPECT_EQ(st0.variables_size(), 1);
  EXPECT_EQ(st1.variables_size(), 1);
  EXPECT_EQ(c.w0.placement_size_, 2);
  // Every (mode, epoch, split) ran exactly once across the two workers.
  std::map<std::tuple<int, int64_t, int64_t>, int> all = c.w0.runs_;
  for (auto& [k, v] : c.w1.runs_) all[k] += v;
  EXPECT_EQ(all.size(), 2u * (4 + 3));
  for (auto& [k, v] : all) EXPECT_EQ(v, 1);
}

// eval: sidecar and none: the coordinator runs no eval closure, and the
// status claims no eval metric (eval_mode says why).
TEST(JobRunnerTest, SidecarAndNoneEvalRunNoEvalClosures) {
  for (const EvalSpec::Mode mode : {EvalSpec::Mode::kSidecar, EvalSpec::Mode::kNone}) {
    Cluster c;
    JobSpec spec = Spec(2);
    spec.eval.mode = mode;
    JobRunner runner("t-1", ForWorkers(spec, 2), {&c.ps0, &c.ps1}, {&c.w0, &c.w1},
                     FastRetries());
    ASSERT_TRUE(runner.Run().ok());
    const JobStatusProto s = runner.Status();
    EXPECT_EQ(s.state(), SUCCEEDED);
    EXPECT_EQ(s.eval_mode(), EvalModeName(mode));
    EXPECT_EQ(s.examples(), 2 * 95);
    ASSERT_EQ(s.epochs_size(), 2);
    EXPECT_EQ(s.epochs(1).eval_accuracy(), 0);
    EXPECT_EQ(s.eval_accuracy(), 0);
    EXPECT_EQ(s.eval_loss(), 0);
    std::map<std::tuple<int, int64_t, int64_t>, int> all = c.w0.runs_;
    for (auto& [k, v] : c.w1.runs_) all[k] += v;
    EXPECT_EQ(all.size(), 2u * 4);  // the training splits only
    for (auto& [k, v] : all) EXPECT_EQ(std::get<0>(k), TRAIN);
  }
  Cluster c;
  JobRunner inline_runner("t-1", ForWorkers(Spec(1), 2), {&c.ps0, &c.ps1}, {&c.w0, &c.w1},
                          FastRetries());
  ASSERT_TRUE(inline_runner.Run().ok());
  EXPECT_EQ(inline_runner.Status().eval_mode(), "inline");
  EXPECT_GT(inline_runner.Status().eval_accuracy(), 0);
}

TEST(JobRunnerTest, UnavailableWorkerClosuresAreRetriedOnTheSameSplit) {
  Cluster c;
  c.w0.FailNext(3, absl::UnavailableError("connection refused"));
  JobRunner runner("t-1", ForWorkers(Spec(1), 2), {&c.ps0, &c.ps1}, {&c.w0, &c.w1}, FastRetries());
  ASSERT_TRUE(runner.Run().ok());
  std::map<std::tuple<int, int64_t, int64_t>, int> all = c.w0.runs_;
  for (auto& [k, v] : c.w1.runs_) all[k] += v;
  EXPECT_EQ(all.size(), 4u + 3u);
  for (auto& [k, v] : all) EXPECT_EQ(v, 1);
  EXPECT_EQ(runner.Status().examples(), 95);
}

// closures_per_rpc > 1: closures travel in batches, results and retries
// stay per closure (each split still runs exactly once).
TEST(JobRunnerTest, BatchedDispatchRunsEverySplitOnceAndRetriesEachClosure) {
  Cluster c;
  c.w0.FailNext(2, absl::UnavailableError("connection refused"));
  JobSpec spec = Spec(2);
  spec.train.steps_per_closure = 1;  // 10 closures of 10 examples per epoch
  spec.train.closures_per_rpc = 3;
  JobRunner runner("t-1", ForWorkers(spec, 2), {&c.ps0, &c.ps1}, {&c.w0, &c.w1}, FastRetries());
  ASSERT_TRUE(runner.Run().ok());
  JobStatusProto s = runner.Status();
  EXPECT_EQ(s.examples(), 2 * 95);
  EXPECT_EQ(s.steps(), 2 * 10);
  std::map<std::tuple<int, int64_t, int64_t>, int> all = c.w0.runs_;
  for (auto& [k, v] : c.w1.runs_) all[k] += v;
  EXPECT_EQ(all.size(), 2u * (10 + 3));
  for (auto& [k, v] : all) EXPECT_EQ(v, 1);
  std::vector<int> batches = c.w0.batches_;
  batches.insert(batches.end(), c.w1.batches_.begin(), c.w1.batches_.end());
  ASSERT_FALSE(batches.empty());
  for (int b : batches) EXPECT_LE(b, 3);
  EXPECT_TRUE(std::count(batches.begin(), batches.end(), 3) > 0);
}

TEST(JobRunnerTest, WorkerThatLostTheJobIsSetUpAgain) {
  Cluster c;
  c.w0.FailNext(1, absl::FailedPreconditionError("job 't-1' is not set up on this worker"));
  JobRunner runner("t-1", ForWorkers(Spec(1), 1), {&c.ps0, &c.ps1}, {&c.w0}, FastRetries());
  ASSERT_TRUE(runner.Run().ok());
  EXPECT_EQ(c.w0.setups_, 2);
}

TEST(JobRunnerTest, ExhaustedRetriesFailTheJobNamingTheClosure) {
  Cluster c;
  c.w0.FailNext(1000, absl::UnavailableError("connection refused"));
  JobRunnerOptions o = FastRetries();
  o.max_attempts = 3;
  JobRunner runner("t-1", ForWorkers(Spec(1), 1), {&c.ps0, &c.ps1}, {&c.w0}, o);
  absl::Status s = runner.Run();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("training closure"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("failed after 3 attempt(s)"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("connection refused"));
  EXPECT_EQ(runner.Status().state(), FAILED);
}

TEST(JobRunnerTest, NonRetryableErrorFailsAtOnce) {
  Cluster c;
  c.w0.FailNext(1, absl::InvalidArgumentError("split outside the data"));
  JobRunner runner("t-1", ForWorkers(Spec(1), 1), {&c.ps0, &c.ps1}, {&c.w0}, FastRetries());
  absl::Status s = runner.Run();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("after 1 attempt(s)"));
}

// A diverged model: the worker fails the closure with ABORTED naming the
// step (worker/core/trainer.h). It is retried like any closure failure, and
// after its attempts the job is FAILED, never SUCCEEDED, with the step named.
TEST(JobRunnerTest, NonFiniteLossIsRetriedThenFailsTheJobNamingTheStep) {
  Cluster c;
  c.w0.FailNext(
      1000, absl::AbortedError("non-finite loss (nan) at global step 1234 (epoch 1, closure 0)"));
  JobRunnerOptions o = FastRetries();
  o.max_attempts = 3;
  JobSpec spec = Spec(1);
  spec.train.closures_per_worker = 1;  // one closure at a time, in queue order
  JobRunner runner("t-1", ForWorkers(spec, 1), {&c.ps0, &c.ps1}, {&c.w0}, o);
  absl::Status s = runner.Run();
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("failed after 3 attempt(s)"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("non-finite loss (nan) at global step 1234"));
  const JobStatusProto status = runner.Status();
  EXPECT_EQ(status.state(), FAILED);
  EXPECT_THAT(status.error(), HasSubstr("at global step 1234"));
  {
    absl::MutexLock lock(&c.w0.mu_);
    // Each of the epoch's 4 closures fails twice and goes to the back of the
    // queue; closure 0's third attempt ends the job: bounded, not forever.
    EXPECT_EQ(c.w0.closures_, 9);
  }
  int retries = 0;
  bool failed_named_step = false;
  for (const JobEvent& e : runner.Events()) {
    if (e.kind() == "retry") ++retries;
    if (e.kind() == "failed") {
      failed_named_step = absl::StrContains(e.message(), "global step 1234");
    }
  }
  EXPECT_EQ(retries, 8);
  EXPECT_TRUE(failed_named_step);
}

TEST(JobRunnerTest, WorkersDisagreeingOnTheDataFailSetup) {
  Cluster c;
  FakeWorker odd("w2", 90, 20);
  JobRunner runner("t-1", ForWorkers(Spec(1), 2), {&c.ps0}, {&c.w0, &odd}, FastRetries());
  absl::Status s = runner.Run();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("disagree"));
}

TEST(JobRunnerTest, CancelStopsTheJob) {
  Cluster c;
  JobRunner runner("t-1", ForWorkers(Spec(1000), 1), {&c.ps0}, {&c.w0}, FastRetries());
  runner.Cancel();
  EXPECT_TRUE(absl::IsCancelled(runner.Run()));
  EXPECT_EQ(runner.Status().state(), CANCELLED);
}

}  // namespace
}  // namespace pscluster

namespace pscluster {
namespace {

TEST(JobRunnerAucTest, MergesEvalHistogramsIntoTheAuc) {
  Cluster c;
  c.w0.with_histograms_ = true;
  JobRunner runner("t-1", ForWorkers(Spec(1), 1), {&c.ps0}, {&c.w0}, FastRetries());
  ASSERT_TRUE(runner.Run().ok());
  // 3 eval closures (7, 7, 6 examples): 9 positives at 0.9; 8 negatives at
  // 0.1 and 3 at 0.95. AUC = (9 * 8) / (9 * 11).
  EXPECT_NEAR(runner.Status().eval_auc(), 72.0 / 99.0, 1e-9);
  EXPECT_NEAR(runner.Status().epochs(0).eval_auc(), 72.0 / 99.0, 1e-9);
}

TEST(JobRunnerDescribeTest, ShowsShardsOnBothPsWithBytes) {
  Cluster c;
  JobSpec spec = Spec(1);
  spec.partitioner = PartitionerSpec::Fixed(2);
  JobRunner runner("t-1", ForWorkers(spec, 1), {&c.ps0, &c.ps1}, {&c.w0}, FastRetries());
  EXPECT_TRUE(absl::IsFailedPrecondition(runner.Describe().status()));
  ASSERT_TRUE(runner.Run().ok());
  auto d = runner.Describe();
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->variables_size(), 2);
  const VariableLayout& kernel = d->variables(0);
  EXPECT_EQ(kernel.name(), "dense_0/kernel");
  EXPECT_EQ(kernel.kind(), "dense");
  EXPECT_EQ(kernel.partitioner(), "2 shards along axis 0");
  ASSERT_EQ(kernel.shards_size(), 2);
  EXPECT_EQ(kernel.shards(0).ps_index(), 0);
  EXPECT_EQ(kernel.shards(1).ps_index(), 1);
  EXPECT_EQ(kernel.shards(1).row_offset(), 2);
  EXPECT_EQ(kernel.shards(1).rows(), 2);
  EXPECT_EQ(kernel.shards(0).parameter_bytes(), 2 * 3 * 4);
  ASSERT_EQ(d->ps_size(), 2);
  EXPECT_GT(d->ps(0).parameter_bytes(), 0);
  EXPECT_GT(d->ps(1).parameter_bytes(), 0);
}

}  // namespace
}  // namespace pscluster

namespace pscluster {
namespace {

TEST(JobRunnerCheckpointTest, PeriodicAndFinalCheckpointsKeepTheNewest) {
  Cluster c;
  const std::string dir = FreshDir("periodic");
  JobRunner runner("t-1", ForWorkers(WithCheckpoints(dir, 3, 2), 1), {&c.ps0, &c.ps1}, {&c.w0},
                   FastRetries());
  ASSERT_TRUE(runner.Run().ok());
  CheckpointManager m(dir, 2, "t-1");
  std::vector<CheckpointManifest> all = m.List();
  ASSERT_EQ(all.size(), 2u);  // keep: 2
  EXPECT_GE(runner.Status().checkpoints(), 4);
  // The final checkpoint is at the end of the last epoch.
  EXPECT_EQ(all[0].epoch(), 2);
  EXPECT_EQ(all[0].global_step(), 20);
  EXPECT_EQ(all[0].files_size(), 2);
  EXPECT_TRUE(std::filesystem::exists(dir + "/joblog"));
}

// The time trigger (every_seconds) reads the job's clock
// (JobRunnerOptions::now), not the wall: frozen, only the final checkpoint
// is taken; moving an hour per reading, one is due at every chance.
TEST(JobRunnerCheckpointTest, TheTimeTriggerRunsOnTheJobsClock) {
  auto checkpoints = [](const std::string& name, absl::Duration tick) {
    Cluster c;
    JobSpec spec = WithCheckpoints(FreshDir(name), 0, 2);
    spec.checkpoint.every_seconds = 60;
    JobRunnerOptions o = FastRetries();
    auto now = std::make_shared<absl::Time>(absl::FromUnixSeconds(1'700'000'000));
    o.now = [now, tick] { return *now += tick; };
    JobRunner runner("t-1", ForWorkers(spec, 1), {&c.ps0, &c.ps1}, {&c.w0}, o);
    EXPECT_TRUE(runner.Run().ok());
    return runner.Status().checkpoints();
  };
  EXPECT_EQ(checkpoints("frozen-clock", absl::ZeroDuration()), 1);
  EXPECT_GE(checkpoints("hourly-clock", absl::Hours(1)), 4);
}

TEST(JobRunnerCheckpointTest, ANewJobOnTheSameDirectoryResumesWhereTheLastStopped) {
  const std::string dir = FreshDir("resume");
  {
    Cluster c;
    // Fails for good in epoch 1, after some checkpoints.
    JobSpec spec = WithCheckpoints(dir, 3, 2);
    c.w0.fail_after_ = 6;
    JobRunner runner("t-1", ForWorkers(spec, 1), {&c.ps0, &c.ps1}, {&c.w0}, FastRetries());
    EXPECT_FALSE(runner.Run().ok());
  }
  CheckpointManager m(dir, 2, "t-1");
  ASSERT_FALSE(m.List().empty());
  const CheckpointManifest last = m.List()[0];
  Cluster c;
  JobRunner runner("t-2", ForWorkers(WithCheckpoints(dir, 3, 2), 1), {&c.ps0, &c.ps1}, {&c.w0},
                   FastRetries());
  ASSERT_TRUE(runner.Run().ok());
  JobStatusProto s = runner.Status();
  EXPECT_EQ(s.resumed_from_checkpoint(), last.checkpoint_id());
  EXPECT_EQ(s.steps(), 20);
  // Only the closures the checkpoint had not seen finish ran again.
  std::set<int64_t> done(last.finished_splits().begin(), last.finished_splits().end());
  for (const auto& [key, runs] : c.w0.runs_) {
    const auto& [mode, epoch, begin] = key;
    if (mode == TRAIN && epoch == last.epoch()) {
      EXPECT_EQ(done.count(begin / 30), 0u) << "split " << begin / 30 << " ran again";
    }
    EXPECT_GE(epoch, last.epoch());
  }
}

TEST(JobRunnerCheckpointTest, ARestartedCoordinatorCountsTheStepsPastTheCheckpointAsLost) {
  const std::string dir = FreshDir("lost_on_restart");
  {
    // The first coordinator: stops for good in epoch 2, some steps past its
    // newest checkpoint.
    Cluster c;
    c.w0.fail_after_ = 7;
    JobRunner runner("t-1", ForWorkers(WithCheckpoints(dir, 7, 3), 1), {&c.ps0, &c.ps1}, {&c.w0},
                     FastRetries());
    EXPECT_FALSE(runner.Run().ok());
  }
  absl::StatusOr<std::vector<JobLogRecord>> log = ReadJobLog(dir + "/joblog");
  ASSERT_TRUE(log.ok());
  int64_t done = 0;
  for (const JobLogRecord& r : *log) {
    if (r.has_closure_finished()) done = r.closure_finished().global_steps();
  }
  const CheckpointManifest newest = CheckpointManager(dir, 2, "t-1").List()[0];
  ASSERT_GT(done, newest.global_step()) << "the scenario needs steps past the checkpoint";

  // The restarted coordinator (and restarted PS: fresh stores) resumes it.
  Cluster c;
  JobRunnerOptions o = FastRetries();
  o.resume = true;
  JobRunner runner("t-1", ForWorkers(WithCheckpoints(dir, 7, 3), 1), {&c.ps0, &c.ps1}, {&c.w0}, o);
  ASSERT_TRUE(runner.Run().ok());
  const JobStatusProto s = runner.Status();
  EXPECT_EQ(s.lost_steps(), done - newest.global_step());
  EXPECT_EQ(s.steps(), 30);
  EXPECT_EQ(s.steps_trained() - s.steps(), s.lost_steps());
  bool said = false;
  for (const JobEvent& e : runner.Events()) {
    said |= e.kind() == "resumed" && e.message().find("trained again") != std::string::npos;
  }
  EXPECT_TRUE(said);
}

TEST(JobRunnerCheckpointTest, PsFailureRestoresTheNewestCheckpointAndFinishes) {
  Cluster c;
  FakeHealth health;
  JobRunnerOptions o = FastRetries();
  o.health = &health;
  c.w0.on_closure_ = [&](int n) {
    if (n == 5) health.Trigger(3);
  };
  JobRunner runner("t-1", ForWorkers(WithCheckpoints(FreshDir("psfail"), 3, 2), 1),
                   {&c.ps0, &c.ps1}, {&c.w0}, o);
  ASSERT_TRUE(runner.Run().ok()) << runner.Status().error();
  JobStatusProto s = runner.Status();
  EXPECT_EQ(s.ps_recoveries(), 1);
  EXPECT_GE(s.lost_steps(), 0);
  EXPECT_EQ(s.steps(), 20);  // the rolled-back steps were run again
  EXPECT_EQ(s.steps_trained() - s.steps(), s.lost_steps());
  EXPECT_EQ(s.epochs_size(), 2);
}

TEST(JobRunnerCheckpointTest, AQuicklyRestartedPsIsNoticedByItsIncarnation) {
  Cluster c;
  FakeHealth health;
  JobRunnerOptions o = FastRetries();
  o.health = &health;
  c.w0.on_closure_ = [&](int n) {
    if (n == 5) health.Restart(1);
  };
  JobRunner runner("t-1", ForWorkers(WithCheckpoints(FreshDir("psrestart"), 3, 2), 1),
                   {&c.ps0, &c.ps1}, {&c.w0}, o);
  ASSERT_TRUE(runner.Run().ok()) << runner.Status().error();
  EXPECT_EQ(runner.Status().ps_recoveries(), 1);
  EXPECT_EQ(runner.Status().steps(), 20);
}

// A worker that hangs like a SIGSTOPped process on its `hang_at_`-th
// closure: the call blocks, and its health checks fail, until the
// coordinator cancels its calls (then it answers again).
class HangingWorker : public FakeWorker {
 public:
  using FakeWorker::FakeWorker;
  absl::Status RunClosure(const RunClosureRequest& request, absl::Duration timeout,
                          RunClosureResponse* response) override {
    {
      absl::MutexLock lock(&hang_mu_);
      if (++calls_ == hang_at_) {
        hung_ = true;
        auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(hang_mu_) { return !hung_; };
        hang_mu_.Await(absl::Condition(&woken));
        return absl::CancelledError("cancelled by the coordinator");
      }
    }
    return FakeWorker::RunClosure(request, timeout, response);
  }
  void CancelCalls() override {
    absl::MutexLock lock(&hang_mu_);
    if (hung_) hung_ = false;
  }
  bool hung() {
    absl::MutexLock lock(&hang_mu_);
    return hung_;
  }
  absl::Mutex hang_mu_;
  int calls_ = 0;
  int hang_at_ = 2;
  bool hung_ = false;
};

// Worker 0 fails its health checks while `worker` hangs.
class HangHealth : public HealthChecker {
 public:
  explicit HangHealth(HangingWorker* worker) : worker_(worker) {}
  absl::StatusOr<uint64_t> CheckPs(int) override { return 1; }
  absl::Status CheckWorker(int index) override {
    if (index == 0 && worker_->hung()) return absl::DeadlineExceededError("no answer");
    return absl::OkStatus();
  }

 private:
  HangingWorker* worker_;
};

TEST(JobRunnerTest, AHungWorkerIsDeclaredLostAndItsClosureRunsElsewhere) {
  Cluster c;
  HangingWorker hanging("hanging", 95, 20);
  hanging.ps_ = {&c.ps0, &c.ps1};
  HangHealth health(&hanging);
  JobRunnerOptions o = FastRetries();
  o.health = &health;
  o.max_attempts = 1;  // a counted attempt of the hung closure would fail the job
  JobSpec spec = Spec(2);
  spec.train.closures_per_worker = 1;
  spec.fault_tolerance.health_check_interval_s = 0.01;
  spec.fault_tolerance.worker_timeout_s = 0.2;
  JobRunner runner("t-1", ForWorkers(spec, 2), {&c.ps0, &c.ps1}, {&hanging, &c.w1}, o);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(runner.Run().ok()) << runner.Status().error();
  // Not before worker_timeout_s, and long before any closure deadline.
  EXPECT_GE(absl::Now() - start, absl::Seconds(0.2));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  const JobStatusProto s = runner.Status();
  EXPECT_EQ(s.workers_lost(), 1);
  EXPECT_EQ(s.steps(), 2 * 10);
  // Every split ran once to completion, the hung one on the other worker.
  std::map<std::tuple<int, int64_t, int64_t>, int> all = hanging.runs_;
  for (auto& [k, v] : c.w1.runs_) all[k] += v;
  EXPECT_EQ(all.size(), 2u * (4 + 3));
  for (auto& [k, v] : all) EXPECT_EQ(v, 1);
  int lost_events = 0, redispatched = 0;
  for (const JobEvent& e : runner.Events()) {
    lost_events += e.kind() == "worker_lost";
    redispatched += e.kind() == "retry" && e.message().find("declared lost") != std::string::npos;
  }
  EXPECT_EQ(lost_events, 1);
  EXPECT_EQ(redispatched, 1);
}

TEST(JobRunnerCheckpointTest, PsThatNeverComesBackFailsTheJob) {
  Cluster c;
  FakeHealth health;
  JobRunnerOptions o = FastRetries();
  o.health = &health;
  JobSpec spec = WithCheckpoints(FreshDir("psgone"), 3, 1);
  spec.fault_tolerance.ps_recovery_timeout_s = 0.3;
  c.w0.on_closure_ = [&](int n) {
    if (n == 2) health.Trigger(1000000);
  };
  JobRunner runner("t-1", ForWorkers(spec, 1), {&c.ps0, &c.ps1}, {&c.w0}, o);
  absl::Status s = runner.Run();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("PS 0 did not come back"));
}

}  // namespace
}  // namespace pscluster
