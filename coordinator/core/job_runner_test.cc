#include "coordinator/core/job_runner.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include <prometheus/registry.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/variable_store.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;

JobSpec Spec(int epochs) {
  auto spec = ParseJobSpec(R"(
name: t
model:
  inputs: {dense: 4}
  layers: [{dense: {units: 3}}]
optimizer: {type: sgd}
data:
  train: {images: a, labels: b}
  eval: {images: a, labels: b}
  per_replica_batch: 10
train: {epochs: 2, steps_per_closure: 3, closures_per_worker: 2}
)",
                           "t.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->train.epochs = epochs;
  return *spec;
}

// A worker that records the splits it ran and fails on demand.
class FakeWorker : public WorkerClient {
 public:
  FakeWorker(std::string name, int64_t train, int64_t eval)
      : name_(std::move(name)), train_(train), eval_(eval) {}
  std::string address() const override { return name_; }
  absl::Status SetupJob(const SetupJobRequest& request, SetupJobResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++setups_;
    placement_size_ = request.placement_size();
    response->set_backend("fake");
    response->set_train_examples(train_);
    response->set_eval_examples(eval_);
    return absl::OkStatus();
  }
  absl::Status RunClosure(const RunClosureRequest& request, absl::Duration,
                          RunClosureResponse* response) override {
    std::function<void(int)> hook;
    int count;
    {
      absl::MutexLock lock(&mu_);
      count = ++closures_;
      hook = on_closure_;
    }
    if (hook) hook(count);
    absl::MutexLock lock(&mu_);
    if (failures_left_ > 0) {
      --failures_left_;
      return failure_;
    }
    if (fail_after_ > 0 && count > fail_after_) return absl::InvalidArgumentError("broken on purpose");
    const DataSplit& s = request.split();
    runs_[{request.mode(), s.epoch(), s.begin()}]++;
    const int64_t n = s.end() - s.begin();
    response->set_examples(n);
    response->set_steps((n + 9) / 10);
    response->set_loss_sum(0.5 * n);
    response->set_correct(request.mode() == EVAL ? n / 2 : 0);
    if (request.mode() == EVAL && with_histograms_) {
      // Positives score 0.9, negatives 0.1 — except one negative at 0.95.
      response->mutable_positive_histogram()->Resize(1000, 0);
      response->mutable_negative_histogram()->Resize(1000, 0);
      response->set_positive_histogram(900, n / 2);
      response->set_negative_histogram(100, n - n / 2 - 1);
      response->set_negative_histogram(950, 1);
    }
    return absl::OkStatus();
  }
  absl::Status RunClosures(const RunClosuresRequest& request, absl::Duration timeout,
                           RunClosuresResponse* response) override {
    {
      absl::MutexLock lock(&mu_);
      batches_.push_back(request.closures_size());
    }
    return WorkerClient::RunClosures(request, timeout, response);
  }
  absl::Status Ping(const PingRequest&, PingResponse*) override { return absl::OkStatus(); }

  void FailNext(int n, absl::Status s) {
    absl::MutexLock lock(&mu_);
    failures_left_ = n;
    failure_ = s;
  }

  std::string name_;
  int64_t train_, eval_;
  absl::Mutex mu_;
  bool with_histograms_ = false;
  int closures_ = 0;
  int fail_after_ = 0;
  std::function<void(int)> on_closure_;
  int failures_left_ = 0;
  absl::Status failure_;
  int setups_ = 0;
  int placement_size_ = 0;
  std::map<std::tuple<int, int64_t, int64_t>, int> runs_;
  std::vector<int> batches_;  // closures per RunClosures call
};

struct Cluster {
  VariableStore store0, store1;
  InProcessPsClient ps0{&store0}, ps1{&store1};
  FakeWorker w0{"w0", 95, 20}, w1{"w1", 95, 20};
};

JobRunnerOptions FastRetries() {
  JobRunnerOptions o;
  o.retry_backoff = absl::Milliseconds(1);
  o.eval_closure_examples = 7;
  return o;
}

TEST(JobRunnerTest, RunsEverySplitOnceAndReportsProgress) {
  Cluster c;
  JobRunner runner("t-1", Spec(2), {&c.ps0, &c.ps1}, {&c.w0, &c.w1}, FastRetries());
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

TEST(JobRunnerTest, UnavailableWorkerClosuresAreRetriedOnTheSameSplit) {
  Cluster c;
  c.w0.FailNext(3, absl::UnavailableError("connection refused"));
  JobRunner runner("t-1", Spec(1), {&c.ps0, &c.ps1}, {&c.w0, &c.w1}, FastRetries());
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
  JobRunner runner("t-1", spec, {&c.ps0, &c.ps1}, {&c.w0, &c.w1}, FastRetries());
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
  JobRunner runner("t-1", Spec(1), {&c.ps0, &c.ps1}, {&c.w0}, FastRetries());
  ASSERT_TRUE(runner.Run().ok());
  EXPECT_EQ(c.w0.setups_, 2);
}

TEST(JobRunnerTest, ExhaustedRetriesFailTheJobNamingTheClosure) {
  Cluster c;
  c.w0.FailNext(1000, absl::UnavailableError("connection refused"));
  JobRunnerOptions o = FastRetries();
  o.max_attempts = 3;
  JobRunner runner("t-1", Spec(1), {&c.ps0, &c.ps1}, {&c.w0}, o);
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
  JobRunner runner("t-1", Spec(1), {&c.ps0, &c.ps1}, {&c.w0}, FastRetries());
  absl::Status s = runner.Run();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("after 1 attempt(s)"));
}

TEST(JobRunnerTest, WorkersDisagreeingOnTheDataFailSetup) {
  Cluster c;
  FakeWorker odd("w2", 90, 20);
  JobRunner runner("t-1", Spec(1), {&c.ps0}, {&c.w0, &odd}, FastRetries());
  absl::Status s = runner.Run();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("disagree"));
}

TEST(JobRunnerTest, CancelStopsTheJob) {
  Cluster c;
  JobRunner runner("t-1", Spec(1000), {&c.ps0}, {&c.w0}, FastRetries());
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
  JobRunner runner("t-1", Spec(1), {&c.ps0}, {&c.w0}, FastRetries());
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
  JobRunner runner("t-1", spec, {&c.ps0, &c.ps1}, {&c.w0}, FastRetries());
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

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

// Health that reports PS 0 down for the first `down_checks` PS checks after
// `Trigger()`.
class FakeHealth : public HealthChecker {
 public:
  absl::StatusOr<uint64_t> CheckPs(int index) override {
    absl::MutexLock lock(&mu_);
    if (index == 0 && down_checks_ > 0) {
      --down_checks_;
      return absl::UnavailableError("connection refused");
    }
    return incarnation_[index];
  }
  // The PS restarted (quickly): a new incarnation, no outage seen.
  void Restart(int index) {
    absl::MutexLock lock(&mu_);
    incarnation_[index] += 100;
  }
  uint64_t incarnation_[2] = {1, 2};
  absl::Status CheckWorker(int) override { return absl::OkStatus(); }
  void Trigger(int checks) {
    absl::MutexLock lock(&mu_);
    down_checks_ = checks;
  }
  absl::Mutex mu_;
  int down_checks_ = 0;
};

JobSpec WithCheckpoints(const std::string& dir, int every_steps, int epochs) {
  JobSpec spec = Spec(epochs);
  spec.checkpoint.dir = dir;
  spec.checkpoint.every_steps = every_steps;
  spec.checkpoint.keep = 2;
  spec.fault_tolerance.health_check_interval_s = 0.01;
  spec.fault_tolerance.ps_recovery_timeout_s = 5;
  spec.train.closures_per_worker = 1;
  return spec;
}

TEST(JobRunnerCheckpointTest, PeriodicAndFinalCheckpointsKeepTheNewest) {
  Cluster c;
  const std::string dir = FreshDir("periodic");
  JobRunner runner("t-1", WithCheckpoints(dir, 3, 2), {&c.ps0, &c.ps1}, {&c.w0}, FastRetries());
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

TEST(JobRunnerCheckpointTest, ANewJobOnTheSameDirectoryResumesWhereTheLastStopped) {
  const std::string dir = FreshDir("resume");
  {
    Cluster c;
    // Fails for good in epoch 1, after some checkpoints.
    JobSpec spec = WithCheckpoints(dir, 3, 2);
    c.w0.fail_after_ = 6;
    JobRunner runner("t-1", spec, {&c.ps0, &c.ps1}, {&c.w0}, FastRetries());
    EXPECT_FALSE(runner.Run().ok());
  }
  CheckpointManager m(dir, 2, "t-1");
  ASSERT_FALSE(m.List().empty());
  const CheckpointManifest last = m.List()[0];
  Cluster c;
  JobRunner runner("t-2", WithCheckpoints(dir, 3, 2), {&c.ps0, &c.ps1}, {&c.w0}, FastRetries());
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
    JobRunner runner("t-1", WithCheckpoints(dir, 7, 3), {&c.ps0, &c.ps1}, {&c.w0}, FastRetries());
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
  JobRunner runner("t-1", WithCheckpoints(dir, 7, 3), {&c.ps0, &c.ps1}, {&c.w0}, o);
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
  JobRunner runner("t-1", WithCheckpoints(FreshDir("psfail"), 3, 2), {&c.ps0, &c.ps1}, {&c.w0}, o);
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
  JobRunner runner("t-1", WithCheckpoints(FreshDir("psrestart"), 3, 2), {&c.ps0, &c.ps1}, {&c.w0}, o);
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
  HangHealth health(&hanging);
  JobRunnerOptions o = FastRetries();
  o.health = &health;
  o.max_attempts = 1;  // a counted attempt of the hung closure would fail the job
  JobSpec spec = Spec(2);
  spec.train.closures_per_worker = 1;
  spec.fault_tolerance.health_check_interval_s = 0.01;
  spec.fault_tolerance.worker_timeout_s = 0.2;
  JobRunner runner("t-1", spec, {&c.ps0, &c.ps1}, {&hanging, &c.w1}, o);
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
  JobRunner runner("t-1", spec, {&c.ps0, &c.ps1}, {&c.w0}, o);
  absl::Status s = runner.Run();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("PS 0 did not come back"));
}

}  // namespace
}  // namespace pscluster

// Checkpoint storage that fails: bounded retries with backoff while training
// goes on, on_failure continue / fail, no torn directories left, and a job
// log that names each kind of failure once.
namespace pscluster {
namespace {

// A PS whose Save fails like a full disk for the first `fail_saves` calls
// (< 0: always), after writing part of its file; records the training
// closures run before each call.
class FullDiskPs : public InProcessPsClient {
 public:
  FullDiskPs(VariableStore* store, FakeWorker* worker)
      : InProcessPsClient(store), worker_(worker) {}
  absl::Status Save(const SaveRequest& request, SaveResponse* response) override {
    {
      absl::MutexLock lock(&mu_);
      closures_at_save_.push_back(ClosuresRun());
      if (fail_saves_ == 0) return InProcessPsClient::Save(request, response);
      if (fail_saves_ > 0) --fail_saves_;
    }
    std::ofstream(request.path() + ".tmp.1") << "partial";
    return absl::ResourceExhaustedError(absl::StrCat("checkpoint file ", request.path(), ": write ",
                                                     request.path(), ".tmp.1: No space left on device"));
  }
  int64_t ClosuresRun() {
    absl::MutexLock lock(&worker_->mu_);
    return worker_->closures_;
  }
  std::vector<int64_t> SaveCalls() {
    absl::MutexLock lock(&mu_);
    return closures_at_save_;
  }

  FakeWorker* worker_;
  absl::Mutex mu_;
  int fail_saves_ = -1;
  std::vector<int64_t> closures_at_save_;
};

struct DiskCluster {
  DiskCluster() : full0(&store0, &w0) {}
  VariableStore store0, store1;
  FakeWorker w0{"w0", 95, 20};
  FullDiskPs full0;
  InProcessPsClient ps1{&store1};
};

JobSpec FailingCheckpoints(const std::string& dir, CheckpointSpec::OnFailure on_failure,
                           int max_retries, double backoff_s) {
  JobSpec spec = WithCheckpoints(dir, 3, 2);
  spec.checkpoint.on_failure = on_failure;
  spec.checkpoint.max_retries = max_retries;
  spec.checkpoint.retry_backoff_s = backoff_s;
  return spec;
}

std::vector<std::string> CheckpointDirs(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) == 0) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

int CountEvents(const JobRunner& runner, const std::string& kind) {
  int n = 0;
  for (const JobEvent& e : runner.Events()) n += e.kind() == kind;
  return n;
}

// The value of metric `name` (one without labels) in `registry`; -1 if none.
double MetricValue(prometheus::Registry& registry, const std::string& name) {
  for (const prometheus::MetricFamily& f : registry.Collect()) {
    if (f.name != name || f.metric.empty()) continue;
    return f.type == prometheus::MetricType::Gauge ? f.metric[0].gauge.value
                                                   : f.metric[0].counter.value;
  }
  return -1;
}

TEST(JobRunnerCheckpointFailureTest, ContinueGivesUpAfterTheRetriesAndSucceeds) {
  DiskCluster c;
  const std::string dir = FreshDir("full-continue");
  JobRunnerOptions o = FastRetries();
  o.registry = std::make_shared<prometheus::Registry>();
  std::atomic<double> disabled_while_running{-1};
  c.w0.on_closure_ = [&](int) {
    disabled_while_running = MetricValue(*o.registry, "pscluster_checkpoints_disabled");
  };
  JobRunner runner("t-1",
                   FailingCheckpoints(dir, CheckpointSpec::OnFailure::kContinue, 3, 0),
                   {&c.full0, &c.ps1}, {&c.w0}, o);
  ASSERT_TRUE(runner.Run().ok()) << runner.Status().error();
  EXPECT_EQ(MetricValue(*o.registry, "pscluster_checkpoint_failures_total"), 4);
  EXPECT_EQ(disabled_while_running, 1);  // the last closures ran without checkpoints
  EXPECT_EQ(MetricValue(*o.registry, "pscluster_checkpoints_disabled"), 0);  // ended
  const JobStatusProto s = runner.Status();
  EXPECT_EQ(s.state(), SUCCEEDED);
  EXPECT_EQ(s.steps(), 20);
  EXPECT_EQ(s.checkpoints(), 0);
  EXPECT_TRUE(s.checkpoints_disabled());
  EXPECT_EQ(s.checkpoint_failures(), 4);  // the first attempt and 3 retries
  EXPECT_THAT(s.checkpoint_error(), HasSubstr("No space left on device"));
  EXPECT_THAT(s.checkpoint_error(), HasSubstr(dir + "/ckpt-0/ps-0.data"));
  // Never a hot loop: each retry waited for the trigger, i.e. for more
  // training; and nothing after giving up (no final checkpoint either).
  const std::vector<int64_t> calls = c.full0.SaveCalls();
  ASSERT_EQ(calls.size(), 4u);
  for (size_t i = 1; i < calls.size(); ++i) EXPECT_GT(calls[i], calls[i - 1]);
  // The torn directories went with the PS's partial files, and each retry
  // reused the id.
  EXPECT_THAT(CheckpointDirs(dir), ::testing::IsEmpty());
  // Two lines: the first failure and giving up.
  EXPECT_EQ(CountEvents(runner, "checkpoint_failed"), 2);
  std::vector<std::string> messages;
  for (const JobEvent& e : runner.Events()) {
    if (e.kind() == "checkpoint_failed") messages.push_back(e.message());
  }
  EXPECT_THAT(messages[0], HasSubstr("retry 1 of 3"));
  EXPECT_THAT(messages[1], HasSubstr("checkpoint failed 4 times"));
  EXPECT_THAT(messages[1], HasSubstr("without checkpoints"));
}

TEST(JobRunnerCheckpointFailureTest, FailFailsTheJobNamingTheError) {
  DiskCluster c;
  const std::string dir = FreshDir("full-fail");
  JobRunner runner("t-1", FailingCheckpoints(dir, CheckpointSpec::OnFailure::kFail, 2, 0.001),
                   {&c.full0, &c.ps1}, {&c.w0}, FastRetries());
  const absl::Status s = runner.Run();
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  const JobStatusProto st = runner.Status();
  EXPECT_EQ(st.state(), FAILED);
  EXPECT_THAT(st.error(), HasSubstr("checkpoint failed 3 times"));
  EXPECT_THAT(st.error(), HasSubstr(dir + "/ckpt-0/ps-0.data"));
  EXPECT_THAT(st.error(), HasSubstr("No space left on device"));
  EXPECT_EQ(st.checkpoint_failures(), 3);
  EXPECT_FALSE(st.checkpoints_disabled());
  EXPECT_EQ(c.full0.SaveCalls().size(), 3u);
  EXPECT_THAT(CheckpointDirs(dir), ::testing::IsEmpty());
  EXPECT_EQ(CountEvents(runner, "checkpoint_failed"), 2);
}

TEST(JobRunnerCheckpointFailureTest, TransientFailuresAreRetriedAndCheckpointsResume) {
  DiskCluster c;
  c.full0.fail_saves_ = 2;
  const std::string dir = FreshDir("full-transient");
  JobRunner runner("t-1", FailingCheckpoints(dir, CheckpointSpec::OnFailure::kFail, 2, 0),
                   {&c.full0, &c.ps1}, {&c.w0}, FastRetries());
  ASSERT_TRUE(runner.Run().ok()) << runner.Status().error();
  const JobStatusProto s = runner.Status();
  EXPECT_EQ(s.checkpoint_failures(), 2);
  EXPECT_FALSE(s.checkpoints_disabled());
  EXPECT_GE(s.checkpoints(), 2);
  // Only committed checkpoints are left (keep: 2), the newest the final one.
  CheckpointManager m(dir, 2, "t-1");
  EXPECT_EQ(CheckpointDirs(dir).size(), m.List().size());
  ASSERT_FALSE(m.List().empty());
  EXPECT_EQ(m.List()[0].global_step(), 20);
  EXPECT_EQ(CountEvents(runner, "checkpoint_failed"), 1);
}

TEST(JobRunnerCheckpointFailureTest, FinalCheckpointRetriesWithBackoffThenSkips) {
  // No periodic checkpoints: every attempt is the final one's.
  DiskCluster c;
  const std::string dir = FreshDir("full-final");
  JobSpec spec = FailingCheckpoints(dir, CheckpointSpec::OnFailure::kContinue, 2, 0.02);
  spec.checkpoint.every_steps = 0;
  JobRunner runner("t-1", spec, {&c.full0, &c.ps1}, {&c.w0}, FastRetries());
  const absl::Time start = absl::Now();
  ASSERT_TRUE(runner.Run().ok()) << runner.Status().error();
  // Backoff 20 ms then 40 ms between the three attempts.
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(60));
  EXPECT_EQ(runner.Status().checkpoint_failures(), 3);
  EXPECT_TRUE(runner.Status().checkpoints_disabled());
  EXPECT_EQ(c.full0.SaveCalls().size(), 3u);
  EXPECT_THAT(CheckpointDirs(dir), ::testing::IsEmpty());
}

TEST(JobRunnerCheckpointFailureTest, ManyFailuresOfOneKindAreLoggedAsACount) {
  DiskCluster c;
  const std::string dir = FreshDir("full-many");
  JobRunner runner("t-1", FailingCheckpoints(dir, CheckpointSpec::OnFailure::kContinue, 40, 0),
                   {&c.full0, &c.ps1}, {&c.w0}, FastRetries());
  ASSERT_TRUE(runner.Run().ok()) << runner.Status().error();
  EXPECT_EQ(runner.Status().checkpoint_failures(), 41);
  EXPECT_EQ(c.full0.SaveCalls().size(), 41u);
  EXPECT_EQ(CountEvents(runner, "checkpoint_failed"), 2);
}

TEST(JobRunnerCheckpointFailureTest, DirectoryReplacedByAFileMidJob) {
  Cluster c;
  const std::string dir = FreshDir("enotdir");
  c.w0.on_closure_ = [&](int n) {
    if (n == 4) {
      std::filesystem::rename(dir, dir + ".moved");
      std::ofstream(dir) << "not a directory";
    }
  };
  JobRunner runner("t-1", FailingCheckpoints(dir, CheckpointSpec::OnFailure::kContinue, 1, 0),
                   {&c.ps0, &c.ps1}, {&c.w0}, FastRetries());
  ASSERT_TRUE(runner.Run().ok()) << runner.Status().error();
  const JobStatusProto s = runner.Status();
  EXPECT_GE(s.checkpoints(), 1);
  EXPECT_TRUE(s.checkpoints_disabled());
  EXPECT_EQ(s.checkpoint_failures(), 2);
  EXPECT_THAT(s.checkpoint_error(), HasSubstr(dir));
  EXPECT_THAT(s.checkpoint_error(), HasSubstr("Not a directory"));
  EXPECT_TRUE(std::filesystem::is_regular_file(dir));
  // The checkpoints committed before are untouched.
  CheckpointManager moved(dir + ".moved", 2, "t-1");
  EXPECT_EQ(static_cast<int64_t>(moved.List().size()), std::min<int64_t>(s.checkpoints(), 2));
  std::filesystem::remove(dir);
  std::filesystem::remove_all(dir + ".moved");
}

}  // namespace
}  // namespace pscluster
