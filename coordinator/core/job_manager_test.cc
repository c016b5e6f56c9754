// JobManager: the FIFO job queue, cancel, the queue across a coordinator
// restart, and each job's PS namespace freed when it ends.
#include "coordinator/core/job_manager.h"

#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/job_stores.h"

namespace pscluster {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Job(const std::string& name, int units) {
  return absl::StrCat(R"(
name: )",
                      name, R"(
model:
  inputs: {dense: 4}
  layers: [{dense: {units: )",
                      units, R"(}}]
optimizer: {type: sgd}
data:
  train: {images: a, labels: b}
  eval: {images: a, labels: b}
  per_replica_batch: 10
train: {epochs: 1, steps_per_closure: 3, closures_per_worker: 1}
)");
}

// A worker that records which jobs ran closures, in order, and can hold a
// job's closures until released.
class Worker : public WorkerClient {
 public:
  std::string address() const override { return "w"; }
  absl::Status SetupJob(const SetupJobRequest& request, SetupJobResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (setups_.empty() || setups_.back() != request.job_id()) setups_.push_back(request.job_id());
    response->set_backend("fake");
    response->set_train_examples(30);
    response->set_eval_examples(10);
    return absl::OkStatus();
  }
  absl::Status RunClosure(const RunClosureRequest& request, absl::Duration,
                          RunClosureResponse* response) override {
    {
      absl::MutexLock lock(&mu_);
      auto released = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !hold_; };
      mu_.Await(absl::Condition(&released));
    }
    const int64_t n = request.split().end() - request.split().begin();
    if (request.mode() == TRAIN) {
      // Its one step, pushed keyed to every PS as a worker's Trainer does.
      for (PsClient* ps : ps_) {
        PushRequest push;
        push.set_job(request.job_id());
        push.mutable_update()->set_closure_id(request.closure_id());
        PushResponse pushed;
        if (absl::Status s = ps->Push(push, &pushed); !s.ok()) {
          return absl::Status(s.code(), absl::StrCat("ps: push: ", s.message()));
        }
      }
    }
    if (request.mode() == PREDICT) {
      // Row r's outputs: (2r, 2r + 1).
      response->set_first_row(request.split().begin());
      TensorProto* t = response->mutable_predictions();
      t->set_dtype(DT_FLOAT32);
      t->add_shape(n);
      t->add_shape(2);
      for (int64_t r = request.split().begin(); r < request.split().end(); ++r) {
        const float v[2] = {2.0f * r, 2.0f * r + 1};
        t->mutable_data()->append(reinterpret_cast<const char*>(v), sizeof(v));
      }
    }
    response->set_examples(n);
    response->set_steps(1);
    response->set_loss_sum(n);
    return absl::OkStatus();
  }
  absl::Status Ping(const PingRequest&, PingResponse*) override { return absl::OkStatus(); }

  void Hold(bool hold) {
    absl::MutexLock lock(&mu_);
    hold_ = hold;
  }
  std::vector<std::string> setups() {
    absl::MutexLock lock(&mu_);
    return setups_;
  }
  // The PS each training step is pushed to. Set before any job runs.
  std::vector<PsClient*> ps_;

 private:
  absl::Mutex mu_;
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::string> setups_ ABSL_GUARDED_BY(mu_);
};

JobState WaitForState(JobManager& jobs, const std::string& id, std::set<JobState> states) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    absl::StatusOr<JobStatusProto> s = jobs.Get(id);
    if (s.ok() && states.count(s->state())) return s->state();
    absl::SleepFor(absl::Milliseconds(5));
  }
  return JOB_STATE_UNKNOWN;
}

// The PS's and the coordinator's --checkpoint_root (a fresh real directory).
// One root per test: with a state directory, jobs checkpoint (and keep their
// job logs) in <root>/<job id>, and job ids repeat from test to test.
std::string CheckpointRoot() {
  const std::string dir = ::testing::TempDir() + "/job_manager_ckpt/" +
                          ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::filesystem::create_directories(dir);
  return std::filesystem::canonical(dir).string();
}

VariableStore::Options WithRoot(const std::string& root) {
  VariableStore::Options options;
  options.checkpoint_root = root;
  return options;
}

struct Cluster {
  Cluster() {
    w.ps_ = {&ps0, &ps1};
    options.checkpoint_root = root;
    // The jobs' data files ("a", "b") are relative to the working directory.
    options.data_roots = {std::filesystem::current_path().string()};
  }
  const std::string root = CheckpointRoot();
  JobStores ps0_state{WithRoot(root)}, ps1_state{WithRoot(root)};
  InProcessPsClient ps0{&ps0_state}, ps1{&ps1_state};
  Worker w;
  JobRunnerOptions options;
  std::unique_ptr<JobManager> Manager(const std::string& state_dir = "") {
    options.retry_backoff = absl::Milliseconds(1);
    return std::make_unique<JobManager>(std::vector<PsClient*>{&ps0, &ps1},
                                        std::vector<WorkerClient*>{&w}, options, state_dir);
  }
  std::vector<std::string> HeldJobs() {
    std::vector<std::string> jobs;
    for (JobStores* s : {&ps0_state, &ps1_state}) {
      StatsResponse stats;
      EXPECT_TRUE(s->Stats(StatsRequest(), &stats).ok());
      jobs.insert(jobs.end(), stats.jobs().begin(), stats.jobs().end());
    }
    return jobs;
  }
};

TEST(JobManagerTest, JobsRunOneAtATimeInSubmissionOrderAndQueuedOnesCanBeCancelled) {
  Cluster c;
  c.w.Hold(true);
  auto jobs = c.Manager();
  absl::StatusOr<SubmitJobResponse> a = jobs->Submit(Job("a", 3), "a.yaml");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->queue_position(), 0);
  ASSERT_EQ(WaitForState(*jobs, a->job_id(), {RUNNING}), RUNNING);
  absl::StatusOr<SubmitJobResponse> b = jobs->Submit(Job("b", 5), "b.yaml");
  absl::StatusOr<SubmitJobResponse> d = jobs->Submit(Job("d", 2), "d.yaml");
  ASSERT_TRUE(b.ok() && d.ok());
  EXPECT_EQ(b->queue_position(), 1);
  EXPECT_EQ(d->queue_position(), 2);
  EXPECT_EQ(jobs->Get(d->job_id())->state(), QUEUED);
  EXPECT_EQ(jobs->Get(d->job_id())->queue_position(), 2);
  EXPECT_EQ(jobs->QueueDepth(), 2);

  // b is cancelled while queued: it never runs; d moves up.
  ASSERT_TRUE(jobs->Cancel(b->job_id()).ok());
  EXPECT_EQ(jobs->Get(b->job_id())->state(), CANCELLED);
  EXPECT_EQ(jobs->Get(d->job_id())->queue_position(), 1);
  absl::Status again = jobs->Cancel(b->job_id());
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(again.message()), HasSubstr("already ended (CANCELLED)"));
  EXPECT_EQ(jobs->Cancel("nobody").code(), absl::StatusCode::kNotFound);

  c.w.Hold(false);
  EXPECT_EQ(WaitForState(*jobs, d->job_id(), {SUCCEEDED, FAILED}), SUCCEEDED);
  EXPECT_EQ(jobs->Get(a->job_id())->state(), SUCCEEDED);
  EXPECT_THAT(c.w.setups(), ElementsAre(a->job_id(), d->job_id()));
  // Nothing of either job is left on the PS tasks.
  EXPECT_TRUE(c.HeldJobs().empty());

  std::vector<std::string> listed;
  for (const JobStatusProto& s : jobs->List()) listed.push_back(s.job_id());
  EXPECT_THAT(listed, ElementsAre(a->job_id(), b->job_id(), d->job_id()));

  absl::StatusOr<std::vector<JobEvent>> events = jobs->Events(b->job_id());
  ASSERT_TRUE(events.ok());
  std::vector<std::string> kinds;
  for (const JobEvent& e : *events) kinds.push_back(e.kind());
  EXPECT_THAT(kinds, ElementsAre("queued", "cancelled"));
  events = jobs->Events(a->job_id());
  ASSERT_TRUE(events.ok());
  kinds.clear();
  for (const JobEvent& e : *events) kinds.push_back(e.kind());
  EXPECT_EQ(kinds.front(), "queued");
  EXPECT_EQ(kinds.back(), "succeeded");
}

TEST(JobManagerTest, OnlyTheSubmitterMayCancelAJobAndOwnersSurviveARestart) {
  Cluster c;
  c.w.Hold(true);
  const std::string state = std::string(std::getenv("TEST_TMPDIR")) + "/owners";
  std::string a_id;
  {
    auto jobs = c.Manager(state);
    absl::StatusOr<SubmitJobResponse> a = jobs->Submit(Job("a", 3), "a.yaml", "alice");
    ASSERT_TRUE(a.ok()) << a.status();
    a_id = a->job_id();
    EXPECT_EQ(jobs->Get(a_id)->owner(), "alice");
    absl::Status bob = jobs->Cancel(a_id, "bob");
    EXPECT_EQ(bob.code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(std::string(bob.message()), HasSubstr("belongs to 'alice'"));
    EXPECT_EQ(jobs->Cancel(a_id, "").code(), absl::StatusCode::kPermissionDenied);
    // Elastic PS: RescaleJob is authorised as CancelJob.
    absl::StatusOr<RescaleJobResponse> rescale = jobs->Rescale(a_id, 1, "bob");
    EXPECT_EQ(rescale.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(std::string(rescale.status().message()), HasSubstr("only they may rescale it"));
    EXPECT_EQ(jobs->Rescale("no-such-job", 1, "alice").status().code(),
              absl::StatusCode::kNotFound);
    EXPECT_EQ(jobs->List().front().owner(), "alice");
  }
  // A restarted coordinator still knows whose job it is.
  auto jobs = c.Manager(state);
  ASSERT_TRUE(jobs->Recover().ok());
  EXPECT_EQ(jobs->Get(a_id)->owner(), "alice");
  EXPECT_EQ(jobs->Cancel(a_id, "bob").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(jobs->Cancel(a_id, "alice").ok());
  c.w.Hold(false);
  EXPECT_EQ(WaitForState(*jobs, a_id, {CANCELLED, SUCCEEDED, FAILED}), CANCELLED);
}

TEST(JobManagerTest, AJobThatDoesNotFitIsRefusedBeforeItIsQueued) {
  Cluster c;
  c.options.ps_memory_limit_bytes = 1000;
  auto jobs = c.Manager();
  absl::StatusOr<SubmitJobResponse> big = jobs->Submit(Job("big", 1000), "big.yaml");
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(jobs->List().empty());
  absl::StatusOr<SubmitJobResponse> bad = jobs->Submit("model: [", "bad.yaml");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("bad.yaml:"));
}

// Issue 12: a job names only files under the coordinator's roots; one that
// names others is refused before it is queued, and the error never holds a
// byte of the file.
TEST(JobManagerTest, JobsOutsideTheRootsAreRefusedBeforeTheyAreQueued) {
  Cluster c;
  auto jobs = c.Manager();
  auto replace = [](std::string yaml, const std::string& from, const std::string& to) {
    yaml.replace(yaml.find(from), from.size(), to);
    return yaml;
  };
  absl::StatusOr<SubmitJobResponse> shadow =
      jobs->Submit(replace(Job("shadow", 3), "train: {images: a", "train: {images: /etc/shadow"),
                   "shadow.yaml");
  ASSERT_FALSE(shadow.ok());
  EXPECT_EQ(shadow.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(shadow.status().message()), HasSubstr("data.train.images"));
  EXPECT_THAT(std::string(shadow.status().message()), HasSubstr("'/etc/shadow'"));
  EXPECT_THAT(std::string(shadow.status().message()), HasSubstr("--data_root"));
  EXPECT_THAT(std::string(shadow.status().message()), ::testing::Not(HasSubstr("root:")));

  for (const std::string& dir : {std::string("/tmp/elsewhere"), std::string("../x"),
                                 c.root + "/../elsewhere"}) {
    absl::StatusOr<SubmitJobResponse> elsewhere =
        jobs->Submit(Job("elsewhere", 3) + "checkpoint: {dir: \"" + dir + "\"}\n", "e.yaml");
    ASSERT_FALSE(elsewhere.ok()) << dir;
    EXPECT_EQ(elsewhere.status().code(), absl::StatusCode::kInvalidArgument) << dir;
    EXPECT_THAT(std::string(elsewhere.status().message()), HasSubstr("checkpoint.dir"));
    EXPECT_THAT(std::string(elsewhere.status().message()), HasSubstr(dir));
    EXPECT_THAT(std::string(elsewhere.status().message()), HasSubstr("--checkpoint_root"));
  }
  EXPECT_TRUE(jobs->List().empty());

  // Inside the root (relative to it): accepted, and its checkpoints land there.
  absl::StatusOr<SubmitJobResponse> inside =
      jobs->Submit(Job("inside", 3) + "checkpoint: {dir: runs/inside}\n", "i.yaml");
  ASSERT_TRUE(inside.ok()) << inside.status();
  EXPECT_EQ(WaitForState(*jobs, inside->job_id(), {SUCCEEDED, FAILED}), SUCCEEDED)
      << jobs->Get(inside->job_id())->error();
  EXPECT_TRUE(std::filesystem::exists(c.root + "/runs/inside/ckpt-0/MANIFEST"));
}

TEST(JobManagerTest, WithoutACheckpointRootJobsAskingForCheckpointsAreRefused) {
  Cluster c;
  c.options.checkpoint_root.clear();
  auto jobs = c.Manager();
  absl::StatusOr<SubmitJobResponse> job =
      jobs->Submit(Job("ckpt", 3) + "checkpoint: {dir: ckpt}\n", "c.yaml");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(job.status().message()), HasSubstr("--checkpoint_root"));
  // A job without checkpoints still runs.
  absl::StatusOr<SubmitJobResponse> plain = jobs->Submit(Job("plain", 3), "p.yaml");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(WaitForState(*jobs, plain->job_id(), {SUCCEEDED, FAILED}), SUCCEEDED);
}

// Issue 22: a job asking for checkpoints on PS started without
// --checkpoint_root is refused at submission, naming the PS, instead of
// retrying its checkpoints and running without them.
TEST(JobManagerTest, PsWithoutACheckpointRootRefuseJobsAskingForCheckpoints) {
  Cluster c;
  JobStores rootless{VariableStore::Options()};
  InProcessPsClient ps1{&rootless};
  c.w.ps_ = {&c.ps0, &ps1};
  c.options.retry_backoff = absl::Milliseconds(1);
  c.options.ps_addresses = {"ps-0:2222", "ps-1:2222"};
  JobManager jobs({&c.ps0, &ps1}, {&c.w}, c.options);
  absl::StatusOr<SubmitJobResponse> job =
      jobs.Submit(Job("ckpt", 3) + "checkpoint: {dir: ckpt}\n", "c.yaml");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(job.status().message()),
              HasSubstr("PS 1 (ps-1:2222) was started without --checkpoint_root"));
  EXPECT_THAT(std::string(job.status().message()), ::testing::Not(HasSubstr("ps-0")));
  EXPECT_TRUE(jobs.List().empty());
  // A job without a checkpoint section still runs there.
  absl::StatusOr<SubmitJobResponse> plain = jobs.Submit(Job("plain", 3), "p.yaml");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(WaitForState(jobs, plain->job_id(), {SUCCEEDED, FAILED}), SUCCEEDED)
      << jobs.Get(plain->job_id())->error();
}

TEST(JobManagerTest, TheQueueSurvivesACoordinatorRestart) {
  const std::string dir = ::testing::TempDir() + "/job_manager_restart";
  std::filesystem::remove_all(dir);
  Cluster c;
  c.w.Hold(true);
  std::string a, b, d;
  {
    auto jobs = c.Manager(dir);
    ASSERT_TRUE(jobs->Recover().ok());
    a = jobs->Submit(Job("a", 3), "a.yaml")->job_id();
    ASSERT_EQ(WaitForState(*jobs, a, {RUNNING}), RUNNING);
    b = jobs->Submit(Job("b", 3), "b.yaml")->job_id();
    d = jobs->Submit(Job("d", 3), "d.yaml")->job_id();
    ASSERT_TRUE(jobs->Cancel(b).ok());
    // The coordinator stops while a runs (interrupted, not ended).
    std::thread release([&] {
      absl::SleepFor(absl::Milliseconds(50));
      c.w.Hold(false);
    });
    jobs.reset();
    release.join();
  }
  c.w.Hold(false);
  auto jobs = c.Manager(dir);
  absl::StatusOr<int> queued = jobs->Recover();
  ASSERT_TRUE(queued.ok()) << queued.status();
  EXPECT_EQ(*queued, 2);  // a (interrupted) and d; b had ended
  EXPECT_EQ(jobs->Get(b)->state(), CANCELLED);
  EXPECT_EQ(WaitForState(*jobs, d, {SUCCEEDED, FAILED}), SUCCEEDED);
  EXPECT_EQ(jobs->Get(a)->state(), SUCCEEDED);
  // New ids continue after the recorded ones.
  const std::string e = jobs->Submit(Job("e", 3), "e.yaml")->job_id();
  EXPECT_EQ(e, "e-4");
  EXPECT_EQ(WaitForState(*jobs, e, {SUCCEEDED, FAILED}), SUCCEEDED);
  jobs.reset();
  std::filesystem::remove_all(dir);
}

// Predict: the rows of a finished job's checkpoint come back in input order
// (streamed as they are ready, between progress reports), then the summary;
// refused while a job runs.
TEST(JobManagerTest, PredictStreamsEveryRowInOrderAndIsRefusedWhileAJobRuns) {
  Cluster c;
  auto jobs = c.Manager();
  const std::string job = Job("p", 3) + "checkpoint: {dir: ck}\n";
  absl::StatusOr<SubmitJobResponse> trained = jobs->Submit(job, "p.yaml");
  ASSERT_TRUE(trained.ok()) << trained.status();
  ASSERT_EQ(WaitForState(*jobs, trained->job_id(), {SUCCEEDED, FAILED}), SUCCEEDED);

  PredictRequest request;
  request.set_spec_yaml(job);
  request.set_closure_rows(3);  // 10 eval rows: 4 closures
  std::vector<PredictResponse> stream;
  absl::Mutex mu;
  const absl::Status s = jobs->Predict(request, [&](const PredictResponse& r) {
    absl::MutexLock lock(&mu);
    stream.push_back(r);
    return true;
  });
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_GE(stream.size(), 3u);
  EXPECT_TRUE(stream.front().has_progress());
  EXPECT_EQ(stream.front().progress().closures(), 4);
  ASSERT_TRUE(stream.back().has_summary());
  EXPECT_EQ(stream.back().summary().rows(), 10);
  EXPECT_EQ(stream.back().summary().outputs(), 2);
  EXPECT_EQ(stream.back().summary().closures(), 4);
  int64_t next = 0;
  for (const PredictResponse& r : stream) {
    if (!r.has_rows()) continue;
    EXPECT_EQ(r.rows().first_row(), next);
    const TensorProto& t = r.rows().values();
    ASSERT_EQ(t.shape(1), 2);
    std::vector<float> v(t.data().size() / sizeof(float));
    std::memcpy(v.data(), t.data().data(), t.data().size());
    for (int64_t i = 0; i < t.shape(0); ++i) {
      EXPECT_EQ(v[2 * i], 2.0f * (next + i));
      EXPECT_EQ(v[2 * i + 1], 2.0f * (next + i) + 1);
    }
    next += t.shape(0);
  }
  EXPECT_EQ(next, 10);
  // The prediction's namespace is freed on the PS like a job's.
  EXPECT_TRUE(c.HeldJobs().empty());

  // While a job runs the cluster is busy.
  c.w.Hold(true);
  absl::StatusOr<SubmitJobResponse> busy = jobs->Submit(Job("q", 2), "q.yaml");
  ASSERT_TRUE(busy.ok()) << busy.status();
  ASSERT_EQ(WaitForState(*jobs, busy->job_id(), {RUNNING}), RUNNING);
  const absl::Status refused = jobs->Predict(request, [](const PredictResponse&) { return true; });
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr(busy->job_id()));
  c.w.Hold(false);
  EXPECT_EQ(WaitForState(*jobs, busy->job_id(), {SUCCEEDED, FAILED}), SUCCEEDED);

  // A spec that does not parse, a directory with no checkpoint.
  request.set_spec_yaml("model: [");
  EXPECT_EQ(jobs->Predict(request, [](const PredictResponse&) { return true; }).code(),
            absl::StatusCode::kInvalidArgument);
  request.set_spec_yaml(job);
  std::filesystem::create_directories(c.root + "/empty");
  request.set_checkpoint_dir("empty");
  const absl::Status none = jobs->Predict(request, [](const PredictResponse&) { return true; });
  EXPECT_EQ(none.code(), absl::StatusCode::kNotFound) << none;
  EXPECT_THAT(std::string(none.message()), HasSubstr("no committed checkpoint"));
}

}  // namespace
}  // namespace pscluster
