#include "coordinator/core/job_runner.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

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
  absl::Status RunClosure(const RunClosureRequest& request, RunClosureResponse* response) override {
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
  absl::Status RunClosures(const RunClosuresRequest& request,
                           RunClosuresResponse* response) override {
    {
      absl::MutexLock lock(&mu_);
      batches_.push_back(request.closures_size());
    }
    return WorkerClient::RunClosures(request, response);
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
