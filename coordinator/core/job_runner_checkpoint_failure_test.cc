// Checkpoint storage that fails: bounded retries with backoff while training
// goes on, on_failure continue / fail, no torn directories left, and a job
// log that names each kind of failure once.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <prometheus/registry.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/core/checkpoint_manager.h"
#include "coordinator/core/job_runner.h"
#include "coordinator/core/job_runner_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/variable_store.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;
using job_runner_test_util::Cluster;
using job_runner_test_util::FakeWorker;
using job_runner_test_util::FastRetries;
using job_runner_test_util::ForWorkers;
using job_runner_test_util::FreshDir;
using job_runner_test_util::StoreOptions;
using job_runner_test_util::TestRoot;
using job_runner_test_util::WithCheckpoints;

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
    const std::string path = TestRoot() + "/" + request.name();
    std::ofstream(path + ".tmp.1") << "partial";
    return absl::ResourceExhaustedError(absl::StrCat("checkpoint file ", path, ": write ", path,
                                                     ".tmp.1: No space left on device"));
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
  DiskCluster() : full0(&store0, &w0) { w0.ps_ = {&full0, &ps1}; }
  VariableStore store0{StoreOptions()}, store1{StoreOptions()};
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
  JobRunner runner(
      "t-1", ForWorkers(FailingCheckpoints(dir, CheckpointSpec::OnFailure::kContinue, 3, 0), 1),
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
  JobRunner runner(
      "t-1", ForWorkers(FailingCheckpoints(dir, CheckpointSpec::OnFailure::kFail, 2, 0.001), 1),
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
  JobRunner runner("t-1",
                   ForWorkers(FailingCheckpoints(dir, CheckpointSpec::OnFailure::kFail, 2, 0), 1),
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
  JobRunner runner("t-1", ForWorkers(spec, 1), {&c.full0, &c.ps1}, {&c.w0}, FastRetries());
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
  JobRunner runner(
      "t-1", ForWorkers(FailingCheckpoints(dir, CheckpointSpec::OnFailure::kContinue, 40, 0), 1),
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
  JobRunner runner(
      "t-1", ForWorkers(FailingCheckpoints(dir, CheckpointSpec::OnFailure::kContinue, 1, 0), 1),
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
