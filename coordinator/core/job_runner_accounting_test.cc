// JobRunner's step accounting (step_accounting.h) wired in: a job whose
// updates are dropped, or whose PS state is ended, behind the coordinator's
// back never ends SUCCEEDED, and never claims fewer lost steps than it lost.
#include <string>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "coordinator/core/job_runner.h"
#include "coordinator/core/job_runner_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/job_stores.h"

namespace pscluster {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using job_runner_test_util::Cluster;
using job_runner_test_util::FakeHealth;
using job_runner_test_util::FakeWorker;
using job_runner_test_util::FastRetries;
using job_runner_test_util::ForWorkers;
using job_runner_test_util::FreshDir;
using job_runner_test_util::Spec;
using job_runner_test_util::StoreOptions;
using job_runner_test_util::WithCheckpoints;

// The events of `kind` that mention `text`.
int EventsWith(const JobRunner& runner, const std::string& kind, const std::string& text) {
  int n = 0;
  for (const JobEvent& e : runner.Events()) {
    n += e.kind() == kind && absl::StrContains(e.message(), text);
  }
  return n;
}

// PruneKeys(below 2^62) on a PS: every later push of the job is dropped there
// as a "duplicate".
void PruneEverything(PsClient* ps) {
  PruneKeysRequest request;
  request.set_job("t-1");
  request.set_below_closure_id(int64_t{1} << 62);
  PruneKeysResponse response;
  ASSERT_TRUE(ps->PruneKeys(request, &response).ok());
}

TEST(JobRunnerAccountingTest, HonestRetriesAgree) {
  Cluster c;
  c.w0.FailNext(2, absl::UnavailableError("connection refused"));
  JobRunner runner("t-1", ForWorkers(Spec(2), 2), {&c.ps0, &c.ps1}, {&c.w0, &c.w1}, FastRetries());
  ASSERT_TRUE(runner.Run().ok()) << runner.Status().error();
  EXPECT_THAT(runner.Status().ps_applied_steps(), ElementsAre(20, 20));
  EXPECT_EQ(EventsWith(runner, "accounting", ""), 0);
}

TEST(JobRunnerAccountingTest, KeysPrunedBehindItsBackFailTheJobNamingThePs) {
  Cluster c;
  JobSpec spec = Spec(2);
  spec.train.closures_per_worker = 1;  // closures in queue order
  // Before the third training closure pushes: 6 steps applied, 14 to go.
  c.w0.on_closure_ = [&](int n) {
    if (n == 3) PruneEverything(&c.ps1);
  };
  JobRunner runner("t-1", ForWorkers(spec, 1), {&c.ps0, &c.ps1}, {&c.w0}, FastRetries());
  const absl::Status s = runner.Run();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_EQ(std::string(s.message()),
            "PS 1 applied 6 of 20 steps (duplicates 14, lost 0): updates were dropped behind "
            "the coordinator's back");
  const JobStatusProto status = runner.Status();
  EXPECT_EQ(status.state(), FAILED);
  EXPECT_THAT(status.ps_applied_steps(), ElementsAre(20, 6));
  EXPECT_EQ(EventsWith(runner, "accounting", "PS 1 applied 6 of 20"), 1);
  EXPECT_EQ(EventsWith(runner, "succeeded", ""), 0);
}

TEST(JobRunnerAccountingTest, KeysPrunedBehindItsBackRollBackToTheLastCheckpoint) {
  Cluster c;
  // Checkpoints every 3 steps: at steps 3 and 6, then the next one finds
  // PS 1 at 6 of 9 and rolls back to step 6, losing 3.
  c.w0.on_closure_ = [&](int n) {
    if (n == 3) PruneEverything(&c.ps1);
  };
  JobRunner runner("t-1", ForWorkers(WithCheckpoints(FreshDir("pruned"), 3, 2), 1),
                   {&c.ps0, &c.ps1}, {&c.w0}, FastRetries());
  ASSERT_TRUE(runner.Run().ok()) << runner.Status().error();
  const JobStatusProto s = runner.Status();
  EXPECT_EQ(s.ps_recoveries(), 1);
  EXPECT_EQ(s.lost_steps(), 3);
  EXPECT_EQ(s.steps(), 20);
  EXPECT_EQ(s.steps_trained() - s.steps(), s.lost_steps());
  EXPECT_THAT(s.ps_applied_steps(), ElementsAre(20, 20));
  EXPECT_EQ(EventsWith(runner, "accounting", "PS 1 applied 6 of 9 steps"), 1);
  EXPECT_EQ(EventsWith(runner, "ps_recovered", "restored the newest checkpoint; 3 steps lost"), 1);
}

// PS with job namespaces (as ps_server holds them), so that a job can be
// ended on them.
struct NamespacedCluster {
  NamespacedCluster() { w0.ps_ = {&ps0, &ps1}; }
  JobStores jobs0{StoreOptions()}, jobs1{StoreOptions()};
  InProcessPsClient ps0{&jobs0}, ps1{&jobs1};
  FakeWorker w0{"w0", 95, 20};
};

TEST(JobRunnerAccountingTest, AJobEndedBehindItsBackWithoutACheckpointLosesEveryStep) {
  NamespacedCluster c;
  JobSpec spec = Spec(2);
  spec.train.closures_per_worker = 1;
  c.w0.on_closure_ = [&](int n) {
    if (n != 3) return;
    for (PsClient* ps : {&c.ps0, &c.ps1}) {
      EndJobRequest request;
      request.set_job("t-1");
      EndJobResponse response;
      ASSERT_TRUE(ps->EndJob(request, &response).ok());
      ASSERT_TRUE(response.existed());
    }
  };
  JobRunner runner("t-1", ForWorkers(spec, 1), {&c.ps0, &c.ps1}, {&c.w0}, FastRetries());
  ASSERT_TRUE(runner.Run().ok()) << runner.Status().error();
  const JobStatusProto s = runner.Status();
  // Not "0 steps lost": the 6 steps done were gone with the namespaces, and
  // were trained again from the initializers.
  EXPECT_EQ(s.ps_recoveries(), 1);
  EXPECT_EQ(s.lost_steps(), 6);
  EXPECT_EQ(s.steps(), 20);
  EXPECT_EQ(s.steps_trained() - s.steps(), s.lost_steps());
  EXPECT_THAT(s.ps_applied_steps(), ElementsAre(20, 20));
  EXPECT_EQ(EventsWith(runner, "ps_recovered",
                       "PS 1 holds nothing of the job although it did not restart"),
            1);
  EXPECT_EQ(EventsWith(runner, "ps_recovered", "training restarted from the first step; 6 steps "
                                               "lost"),
            1);
}

TEST(JobRunnerAccountingTest, APsThatWasOnlyUnreachableLosesNothingWithoutACheckpoint) {
  Cluster c;
  FakeHealth health;
  JobRunnerOptions o = FastRetries();
  o.health = &health;
  JobSpec spec = Spec(2);
  spec.train.closures_per_worker = 1;
  spec.fault_tolerance.health_check_interval_s = 0.01;
  spec.fault_tolerance.ps_recovery_timeout_s = 5;
  JobRunner* running = nullptr;
  c.w0.on_closure_ = [&](int n) {
    if (n != 3) return;
    health.Trigger(3);
    // Holds the closure until the health checks noticed.
    for (int i = 0; i < 500 && EventsWith(*running, "ps_down", "PS 0") == 0; ++i) {
      absl::SleepFor(absl::Milliseconds(10));
    }
  };
  JobRunner runner("t-1", ForWorkers(spec, 1), {&c.ps0, &c.ps1}, {&c.w0}, o);
  running = &runner;
  ASSERT_TRUE(runner.Run().ok()) << runner.Status().error();
  const JobStatusProto s = runner.Status();
  EXPECT_EQ(s.ps_recoveries(), 1);
  EXPECT_EQ(s.lost_steps(), 0);
  EXPECT_EQ(s.steps_trained(), s.steps());
  EXPECT_THAT(s.ps_applied_steps(), ElementsAre(20, 20));
  EXPECT_EQ(EventsWith(runner, "ps_recovered", "nothing rolled back; 0 steps lost"), 1);
}

}  // namespace
}  // namespace pscluster
