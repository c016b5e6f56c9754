// Fakes shared by the JobRunner tests (job_runner_test.cc,
// job_runner_checkpoint_failure_test.cc): a job spec, a worker that records
// the splits it runs and fails on demand, a two-PS in-process cluster, fast
// retries, a fresh directory, a scriptable health checker, and a spec with
// checkpoints. Test-only.
#ifndef PSCLUSTER_COORDINATOR_CORE_JOB_RUNNER_TEST_UTIL_H_
#define PSCLUSTER_COORDINATOR_CORE_JOB_RUNNER_TEST_UTIL_H_

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/core/job_runner.h"
#include "gtest/gtest.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/variable_store.h"

namespace pscluster {
namespace job_runner_test_util {

inline JobSpec Spec(int epochs) {
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

// `spec` resolved for `workers` workers, as JobManager resolves a submitted
// job once (JobRunner takes it resolved).
inline JobSpec ForWorkers(JobSpec spec, int workers) {
  absl::Status s = ResolveReplicas(ReplicasFor(spec, workers), &spec);
  EXPECT_TRUE(s.ok()) << s;
  return spec;
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
    std::vector<PsClient*> ps;
    {
      absl::MutexLock lock(&mu_);
      if (failures_left_ > 0) {
        --failures_left_;
        return failure_;
      }
      if (fail_after_ > 0 && count > fail_after_) {
        return absl::InvalidArgumentError("broken on purpose");
      }
      ps = ps_;
    }
    const DataSplit& s = request.split();
    const int64_t n = s.end() - s.begin();
    if (request.mode() == TRAIN) {
      // One keyed push per step to every PS, as a worker's Trainer pushes: a
      // PS error fails the closure with the worker's "ps " prefix.
      for (int64_t step = 0; step < (n + 9) / 10; ++step) {
        for (size_t p = 0; p < ps.size(); ++p) {
          PushRequest push;
          push.set_job(request.job_id());
          push.mutable_update()->set_closure_id(request.closure_id());
          push.mutable_update()->set_step(step);
          PushResponse pushed;
          absl::Status st = ps[p]->Push(push, &pushed);
          if (!st.ok()) {
            return absl::Status(st.code(), absl::StrCat("ps ", p, ": push: ", st.message()));
          }
        }
      }
    }
    absl::MutexLock lock(&mu_);
    runs_[{request.mode(), s.epoch(), s.begin()}]++;
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
  // The PS each training step is pushed to (one keyed push per step, no
  // gradients); empty: none.
  std::vector<PsClient*> ps_;
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

// The PS's and the runner's checkpoint root: every FreshDir is below it.
inline std::string TestRoot() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::filesystem::canonical(tmp ? tmp : "/tmp").string();
}

inline VariableStore::Options StoreOptions() {
  VariableStore::Options options;
  options.checkpoint_root = TestRoot();
  return options;
}

struct Cluster {
  Cluster() {
    w0.ps_ = {&ps0, &ps1};
    w1.ps_ = {&ps0, &ps1};
  }
  VariableStore store0{StoreOptions()}, store1{StoreOptions()};
  InProcessPsClient ps0{&store0}, ps1{&store1};
  FakeWorker w0{"w0", 95, 20}, w1{"w1", 95, 20};
};

inline JobRunnerOptions FastRetries() {
  JobRunnerOptions o;
  o.checkpoint_root = TestRoot();
  o.retry_backoff = absl::Milliseconds(1);
  o.eval_closure_examples = 7;
  return o;
}

inline std::string FreshDir(const std::string& name) {
  const std::string dir = TestRoot() + "/" + name;
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

inline JobSpec WithCheckpoints(const std::string& dir, int every_steps, int epochs) {
  JobSpec spec = Spec(epochs);
  spec.checkpoint.dir = dir;
  spec.checkpoint.every_steps = every_steps;
  spec.checkpoint.keep = 2;
  spec.fault_tolerance.health_check_interval_s = 0.01;
  spec.fault_tolerance.ps_recovery_timeout_s = 5;
  spec.train.closures_per_worker = 1;
  return spec;
}

}  // namespace job_runner_test_util
}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_JOB_RUNNER_TEST_UTIL_H_
