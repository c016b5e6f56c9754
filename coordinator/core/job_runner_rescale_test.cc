// Elastic PS (JobRunner::Rescale, job_runner_rescale.cc): a job on 2 of 3
// in-process PS is moved to 3 PS, then to 1, mid-job, triggered by its
// closures; and the refusals.
#include <prometheus/registry.h>

#include <atomic>
#include <thread>

#include "common/status_macros.h"
#include "coordinator/core/fake_clock.h"
#include "coordinator/core/job_runner.h"
#include "coordinator/core/job_runner_test_util.h"
#include "gtest/gtest.h"
#include "ps/core/job_stores.h"

namespace pscluster {
namespace {

using job_runner_test_util::FakeWorker;
using job_runner_test_util::FastRetries;
using job_runner_test_util::ForWorkers;
using job_runner_test_util::FreshDir;
using job_runner_test_util::StoreOptions;
using job_runner_test_util::WithCheckpoints;

// A FakeWorker that pushes each step to the PS of the layout it was last
// set up for (the first N of `all`, N from the placement), as a worker's
// Trainer connects to the SetupJob's PS addresses.
class LayoutWorker : public FakeWorker {
 public:
  LayoutWorker(std::string name, std::vector<PsClient*> all)
      : FakeWorker(std::move(name), 95, 20), all_(std::move(all)) {}
  absl::Status SetupJob(const SetupJobRequest& request, SetupJobResponse* response) override {
    RETURN_IF_ERROR(FakeWorker::SetupJob(request, response));
    int num_ps = 0;
    for (const VariablePlacementProto& p : request.placement()) {
      num_ps = std::max(num_ps, p.ps_index() + 1);
    }
    absl::MutexLock lock(&mu_);
    ps_.assign(all_.begin(), all_.begin() + num_ps);
    return absl::OkStatus();
  }

 private:
  const std::vector<PsClient*> all_;
};

// PS processes' stores: job namespaces, freed by EndJob.
struct ThreePs {
  JobStores store0{StoreOptions()}, store1{StoreOptions()}, store2{StoreOptions()};
  InProcessPsClient ps0{&store0}, ps1{&store1}, ps2{&store2};
  std::vector<PsClient*> all{&ps0, &ps1, &ps2};
  LayoutWorker w0{"w0", all}, w1{"w1", all};
};

// Two dense layers: four variables, so that each of 3 PS holds one.
JobSpec TwoLayers(JobSpec spec) {
  spec.model.layers.push_back(spec.model.layers.front());
  return spec;
}

int CountEvents(const JobRunner& runner, const std::string& kind, const std::string& part) {
  int n = 0;
  for (const JobEvent& e : runner.Events()) {
    if (e.kind() == kind && e.message().find(part) != std::string::npos) ++n;
  }
  return n;
}

bool HoldsJob(InProcessPsClient* ps) {
  StatsRequest request;
  request.set_job("job-1");
  StatsResponse stats;
  return ps->Stats(request, &stats).ok() && stats.variables_size() > 0;
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

TEST(JobRunnerRescaleTest, TwoToThreeToOneMidJob) {
  ThreePs c;
  JobRunnerOptions o = FastRetries();
  o.job_ps = 2;
  o.registry = std::make_shared<prometheus::Registry>();
  JobSpec spec = ForWorkers(TwoLayers(WithCheckpoints(FreshDir("rescale"), 1000, 6)), 2);
  JobRunner runner("job-1", spec, c.all, {&c.w0, &c.w1}, o);
  EXPECT_EQ(runner.Status().num_ps(), 2);
  // The closures at which each rescale is asked for hold (bounded) until it
  // is: the job cannot end before the test's trigger, and dispatch pauses
  // after them.
  constexpr int kFirst = 6, kSecond = 16;
  std::atomic<int> closures{0};
  auto hook = [&](int) {
    const int n = ++closures;
    const int asked = n == kFirst ? 1 : n == kSecond ? 2 : 0;
    if (asked > 0) {
      WaitUntil([&] { return CountEvents(runner, "rescale", "asked for") >= asked; },
                absl::Seconds(20));
    }
  };
  c.w0.on_closure_ = hook;
  c.w1.on_closure_ = hook;
  absl::Status result;
  std::thread run([&] { result = runner.Run(); });

  ASSERT_TRUE(WaitUntil([&] { return closures.load() >= kFirst; }, absl::Seconds(20)));
  absl::StatusOr<RescaleJobResponse> up = runner.Rescale(3, absl::Seconds(20));
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ(up->old_num_ps(), 2);
  EXPECT_EQ(up->num_ps(), 3);
  EXPECT_GT(up->step(), 0);
  EXPECT_GE(up->pause_ms(), 0);
  EXPECT_EQ(runner.Status().num_ps(), 3);
  EXPECT_TRUE(HoldsJob(&c.ps2));  // restored onto the new PS

  // Already on 3 PS: answered at once, nothing moves.
  absl::StatusOr<RescaleJobResponse> same = runner.Rescale(3, absl::Seconds(20));
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->old_num_ps(), 3);
  EXPECT_EQ(same->pause_ms(), 0);

  ASSERT_TRUE(WaitUntil([&] { return closures.load() >= kSecond; }, absl::Seconds(20)));
  absl::StatusOr<RescaleJobResponse> down = runner.Rescale(1, absl::Seconds(20));
  ASSERT_TRUE(down.ok()) << down.status();
  EXPECT_EQ(down->old_num_ps(), 3);
  EXPECT_EQ(down->num_ps(), 1);
  EXPECT_GT(down->step(), up->step());
  EXPECT_GT(down->checkpoint_id(), up->checkpoint_id());
  // The PS no longer used let the job go.
  EXPECT_FALSE(HoldsJob(&c.ps1));
  EXPECT_FALSE(HoldsJob(&c.ps2));

  run.join();
  ASSERT_TRUE(result.ok()) << result;
  const JobStatusProto s = runner.Status();
  EXPECT_EQ(s.state(), SUCCEEDED);
  EXPECT_EQ(s.num_ps(), 1);
  EXPECT_EQ(s.ps_rescales(), 2);
  EXPECT_DOUBLE_EQ(s.last_rescale_pause_ms(), down->pause_ms());
  EXPECT_EQ(MetricValue(*o.registry, "pscluster_ps_rescales_total"), 2);
  EXPECT_DOUBLE_EQ(MetricValue(*o.registry, "pscluster_ps_rescale_last_pause_seconds"),
                   down->pause_ms() / 1000);
  // Nothing applied before a rescale's checkpoint is lost: every step
  // scheduled was applied once on the PS at the end.
  EXPECT_EQ(s.lost_steps(), 0);
  EXPECT_EQ(s.steps(), s.total_steps());
  ASSERT_EQ(s.ps_applied_steps_size(), 1);
  EXPECT_EQ(s.ps_applied_steps(0), s.steps());
  EXPECT_EQ(CountEvents(runner, "ps_rescaled", "PS at step"), 2);
  // Each worker was set up for each layout.
  EXPECT_GE(c.w0.setups_, 3);
  EXPECT_GE(c.w1.setups_, 3);
}

TEST(JobRunnerRescaleTest, RefusesBadInput) {
  ThreePs c;
  JobRunnerOptions o = FastRetries();
  o.job_ps = 2;
  JobSpec spec = ForWorkers(TwoLayers(WithCheckpoints(FreshDir("rescale_bad"), 1000, 1)), 2);
  JobRunner runner("job-1", spec, c.all, {&c.w0, &c.w1}, o);
  absl::StatusOr<RescaleJobResponse> r = runner.Rescale(0, absl::Seconds(1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("at least 1, got 0"), std::string::npos) << r.status();
  r = runner.Rescale(4, absl::Seconds(1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("more than the 3 PS"), std::string::npos) << r.status();
  // Not running yet.
  r = runner.Rescale(3, absl::Seconds(1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("QUEUED, not RUNNING"), std::string::npos) << r.status();
  ASSERT_TRUE(runner.Run().ok());
  r = runner.Rescale(3, absl::Seconds(1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("SUCCEEDED, not RUNNING"), std::string::npos) << r.status();
}

TEST(JobRunnerRescaleTest, RefusesMirroredJobs) {
  ThreePs c;
  JobSpec spec = TwoLayers(WithCheckpoints(FreshDir("rescale_mirrored"), 1000, 1));
  spec.strategy = Strategy::kMultiWorkerMirrored;
  JobRunner runner("job-1", ForWorkers(spec, 2), c.all, {&c.w0, &c.w1}, FastRetries());
  absl::StatusOr<RescaleJobResponse> r = runner.Rescale(2, absl::Seconds(1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("multi_worker_mirrored keeps its variables on the workers"),
            std::string::npos)
      << r.status();
}

// A synchronous job moves between two splits (nothing in flight), where its
// checkpoints are taken.
TEST(JobRunnerRescaleTest, CentralStorageMovesBetweenSplits) {
  ThreePs c;
  JobRunnerOptions o = FastRetries();
  o.job_ps = 2;
  JobSpec spec = TwoLayers(WithCheckpoints(FreshDir("rescale_central"), 1000, 6));
  spec.strategy = Strategy::kCentralStorage;
  JobRunner runner("job-1", ForWorkers(spec, 2), c.all, {&c.w0, &c.w1}, o);
  constexpr int kAt = 6;
  std::atomic<int> closures{0};
  auto hook = [&](int) {
    if (++closures == kAt) {
      WaitUntil([&] { return CountEvents(runner, "rescale", "asked for") >= 1; },
                absl::Seconds(20));
    }
  };
  c.w0.on_closure_ = hook;
  c.w1.on_closure_ = hook;
  absl::Status result;
  std::thread run([&] { result = runner.Run(); });
  ASSERT_TRUE(WaitUntil([&] { return closures.load() >= kAt; }, absl::Seconds(20)));
  absl::StatusOr<RescaleJobResponse> up = runner.Rescale(3, absl::Seconds(20));
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ(up->old_num_ps(), 2);
  EXPECT_EQ(up->num_ps(), 3);
  EXPECT_TRUE(HoldsJob(&c.ps2));
  run.join();
  ASSERT_TRUE(result.ok()) << result;
  const JobStatusProto s = runner.Status();
  EXPECT_EQ(s.state(), SUCCEEDED);
  EXPECT_EQ(s.num_ps(), 3);
  EXPECT_EQ(s.lost_steps(), 0);
  // (The fake workers count steps of 10 examples, not of the global batch:
  // tests/elastic_ps_test.sh checks a real central_storage job's steps.)
  EXPECT_EQ(CountEvents(runner, "ps_rescaled", "from 2 to 3 PS"), 1);
}

TEST(JobRunnerRescaleTest, RefusesAJobWithoutCheckpoints) {
  ThreePs c;
  JobSpec spec = TwoLayers(job_runner_test_util::Spec(2));
  JobRunner runner("job-1", ForWorkers(spec, 2), c.all, {&c.w0, &c.w1}, FastRetries());
  // Asked from inside the running job's first closure (the refusal does not
  // wait for a quiesced point).
  absl::Status refused;
  std::atomic<bool> asked{false};
  c.w0.on_closure_ = [&](int) {
    if (!asked.exchange(true)) refused = runner.Rescale(1, absl::Seconds(1)).status();
  };
  c.w1.on_closure_ = c.w0.on_closure_;
  ASSERT_TRUE(runner.Run().ok());
  ASSERT_TRUE(asked.load());
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("no checkpoint directory"), std::string::npos) << refused;
}

TEST(JobRunnerRescaleTest, ARestartedCoordinatorResumesOnTheRescaledCount) {
  const std::string dir = FreshDir("rescale_restart");
  const JobSpec spec = ForWorkers(TwoLayers(WithCheckpoints(dir, 1000, 6)), 2);
  {
    // The first coordinator: 2 PS, rescaled to 3, then shut down mid-job.
    ThreePs c;
    JobRunnerOptions o = FastRetries();
    o.job_ps = 2;
    JobRunner runner("job-1", spec, c.all, {&c.w0, &c.w1}, o);
    constexpr int kRescale = 6, kStop = 10;
    std::atomic<int> closures{0};
    auto hook = [&](int) {
      const int n = ++closures;
      if (n == kRescale) {
        WaitUntil([&] { return CountEvents(runner, "rescale", "asked for") >= 1; },
                  absl::Seconds(20));
      }
      // Holds the job (bounded) until the test has shut it down.
      if (n >= kStop) WaitUntil([&] { return runner.interrupted(); }, absl::Seconds(20));
    };
    c.w0.on_closure_ = hook;
    c.w1.on_closure_ = hook;
    std::thread run([&] { runner.Run().IgnoreError(); });
    ASSERT_TRUE(WaitUntil([&] { return closures.load() >= kRescale; }, absl::Seconds(20)));
    absl::StatusOr<RescaleJobResponse> up = runner.Rescale(3, absl::Seconds(20));
    ASSERT_TRUE(up.ok()) << up.status();
    ASSERT_TRUE(WaitUntil([&] { return closures.load() >= kStop; }, absl::Seconds(20)));
    runner.Interrupt();
    run.join();
  }
  // The restarted coordinator (restarted PS too: fresh stores), still told
  // --job_ps=2, resumes on the 3 PS the job was rescaled to, from the
  // rescale's checkpoint or a later one.
  ThreePs c;
  JobRunnerOptions o = FastRetries();
  o.job_ps = 2;
  o.resume = true;
  JobRunner runner("job-1", spec, c.all, {&c.w0, &c.w1}, o);
  ASSERT_TRUE(runner.Run().ok()) << runner.Status().error();
  const JobStatusProto s = runner.Status();
  EXPECT_EQ(s.state(), SUCCEEDED);
  EXPECT_EQ(s.num_ps(), 3);
  EXPECT_EQ(s.ps_rescales(), 1);
  EXPECT_GE(s.resumed_from_checkpoint(), 0);
  EXPECT_EQ(s.steps(), s.total_steps());
  ASSERT_EQ(s.ps_applied_steps_size(), 3);
  for (int p = 0; p < 3; ++p) EXPECT_EQ(s.ps_applied_steps(p), s.steps()) << "PS " << p;
  EXPECT_EQ(CountEvents(runner, "rescale", "resumed on 3 PS"), 1);
}

}  // namespace
}  // namespace pscluster
