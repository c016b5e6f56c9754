#include "worker/core/worker_state.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/control_auth.h"
#include "common/job_spec.h"
#include "common/model_variables.h"
#include "common/update_lease.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/variable_store.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;

// A tiny job on synthetic data (nothing to read from disk).
constexpr char kTinyCtrJob[] = R"(
model:
  inputs:
    dense: 2
    categorical: [{name: tag, hashed: true, embedding_dim: 2}]
  layers: [{dense: {units: 1}}]
  loss: sigmoid_cross_entropy
optimizer: {type: sgd}
data:
  train: {format: synthetic_ctr, num_examples: 64, id_space: 16}
  eval: {format: synthetic_ctr, num_examples: 32, id_space: 16}
  per_replica_batch: 16
)";

// A tiny job on synthetic data (nothing to read from disk), its variables
// laid out over one in-process PS that counts the calls it gets.
class CountingPsClient : public InProcessPsClient {
 public:
  CountingPsClient(VariableStore* store, int* calls) : InProcessPsClient(store), calls_(calls) {}
  absl::Status Pull(const PullRequest& request, PullResponse* response) override {
    ++*calls_;
    return InProcessPsClient::Pull(request, response);
  }
  absl::Status Push(const PushRequest& request, PushResponse* response) override {
    ++*calls_;
    return InProcessPsClient::Push(request, response);
  }

 private:
  int* calls_;
};

class WorkerStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* yaml = kTinyCtrJob;
    auto spec = ParseJobSpec(yaml, "noop.yaml");
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto plan = PlanVariables(ModelVariables(*spec), spec->partitioner, 1);
    ASSERT_TRUE(plan.ok()) << plan.status();
    CreateVariablesResponse created;
    ASSERT_TRUE(InProcessPsClient(&store_).CreateVariables(plan->per_ps[0], &created).ok());
    SetupJobRequest setup;
    setup.set_job_id("job-1");
    setup.set_spec_yaml(yaml);
    setup.add_ps_addresses("in-process");
    for (const auto& p : plan->placement) *setup.add_placement() = p;
    SetupJobResponse response;
    const absl::Status s = state_.SetupJob(setup, &response);
    ASSERT_TRUE(s.ok()) << s;
  }

  static RunClosureRequest Closure(const std::string& job, ClosureMode mode, int64_t id) {
    RunClosureRequest r;
    r.set_job_id(job);
    r.set_closure_id(id);
    r.set_mode(mode);
    r.mutable_split()->set_end(32);
    return r;
  }

  VariableStore store_;
  int ps_calls_ = 0;
  WorkerState state_{[this](const std::string&) {
    return std::make_unique<CountingPsClient>(&store_, &ps_calls_);
  }};
};

TEST_F(WorkerStateTest, NoopClosureAnswersAtOnceWithoutCallingThePs) {
  RunClosureResponse r;
  const absl::Status s = state_.RunClosure(Closure("job-1", NOOP, 1), &r);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(r.steps(), 0);
  EXPECT_EQ(r.examples(), 0);
  EXPECT_EQ(ps_calls_, 0);
  // The same split as TRAIN does call the PS: the count above can move.
  ASSERT_TRUE(state_.RunClosure(Closure("job-1", TRAIN, 2), &r).ok());
  EXPECT_EQ(r.steps(), 2);
  EXPECT_GT(ps_calls_, 0);
}

TEST_F(WorkerStateTest, NoopClosureOfAnotherJobIsRefused) {
  RunClosureResponse r;
  const absl::Status s = state_.RunClosure(Closure("job-2", NOOP, 1), &r);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("it serves job 'job-1'"));
}

TEST_F(WorkerStateTest, RunClosuresAnswersEachClosureOnItsOwn) {
  RunClosuresRequest request;
  *request.add_closures() = Closure("job-1", NOOP, 1);
  *request.add_closures() = Closure("job-2", NOOP, 2);  // not this worker's job
  RunClosureRequest bad = Closure("job-1", EVAL, 3);
  bad.mutable_split()->set_end(1000);  // past the 32 eval examples
  *request.add_closures() = bad;
  *request.add_closures() = Closure("job-1", EVAL, 4);
  RunClosuresResponse response;
  ASSERT_TRUE(state_.RunClosures(request, &response).ok());
  ASSERT_EQ(response.results_size(), 4);
  EXPECT_EQ(response.results(0).code(), 0);
  EXPECT_EQ(response.results(1).code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(response.results(2).code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(response.results(2).message(), HasSubstr("outside the eval set"));
  EXPECT_EQ(response.results(3).code(), 0);  // errors before it did not stop it
  EXPECT_EQ(response.results(3).response().examples(), 32);
}

// Issue 22: a job its coordinator set up with a worker key holds the worker.
// A stranger's SetupJob (keyless, or keyed but without the held job's
// release) is refused, as are unsigned closures; the coordinator's release,
// or its silence past the hold timeout (an injected clock), lets it go.
TEST(WorkerStateHoldTest, OnlyTheHoldingCoordinatorSwitchesTheWorkerOrRunsItsClosures) {
  const char* yaml = kTinyCtrJob;
  VariableStore store;
  WorkerState state(
      [&store](const std::string&) { return std::make_unique<InProcessPsClient>(&store); });
  absl::Time now = absl::FromUnixSeconds(1000);
  state.set_clock([&now] { return now; });
  state.set_hold_timeout(absl::Minutes(10));
  const std::string secret = RandomSecret();
  absl::StatusOr<JobSpec> spec = ParseJobSpec(yaml, "hold.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<VariablePlan> plan = PlanVariables(ModelVariables(*spec), spec->partitioner, 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto setup = [&](const std::string& job, bool keyed) {
    SetupJobRequest r;
    r.set_job_id(job);
    r.set_spec_yaml(yaml);
    r.add_ps_addresses("in-process");
    for (const auto& p : plan->placement) *r.add_placement() = p;
    if (keyed) {
      r.set_worker_key(DeriveWorkerKey(DeriveJobKey(secret, job)));
      SignRequest(r.worker_key(), "SetupJob", &r);
    }
    return r;
  };
  SetupJobResponse response;
  const absl::Status first = state.SetupJob(setup("job-a", true), &response);
  ASSERT_TRUE(first.ok()) << first;
  const std::string key_a = DeriveWorkerKey(DeriveJobKey(secret, "job-a"));

  RunClosureRequest closure;
  closure.set_job_id("job-a");
  closure.set_closure_id(1);
  closure.set_mode(NOOP);
  RunClosureResponse ran;
  EXPECT_EQ(state.RunClosure(closure, &ran).code(), absl::StatusCode::kPermissionDenied);
  SignRequest(key_a, "RunClosure", &closure);
  EXPECT_TRUE(state.RunClosure(closure, &ran).ok());
  closure.set_closure_id(2);  // the MAC no longer fits
  EXPECT_EQ(state.RunClosure(closure, &ran).code(), absl::StatusCode::kPermissionDenied);

  // Strangers: keyless, keyed under their own key, a forged release.
  absl::Status s = state.SetupJob(setup("stranger", false), &response);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("job 'job-a'"));
  SetupJobRequest b = setup("job-b", true);
  EXPECT_EQ(state.SetupJob(b, &response).code(), absl::StatusCode::kPermissionDenied);
  b.set_release(RequestMac("not the key", "SetupJob.release", b));
  EXPECT_EQ(state.SetupJob(b, &response).code(), absl::StatusCode::kPermissionDenied);
  PingResponse held;
  ASSERT_TRUE(state.Ping(PingRequest(), &held).ok());
  EXPECT_EQ(held.job_id(), "job-a");
  // The same job again from its coordinator: fine. Its coordinator's release: switched.
  ASSERT_TRUE(state.SetupJob(setup("job-a", true), &response).ok());
  b.set_release(RequestMac(key_a, "SetupJob.release", b));
  ASSERT_TRUE(state.SetupJob(b, &response).ok());
  ASSERT_TRUE(state.Ping(PingRequest(), &held).ok());
  EXPECT_EQ(held.job_id(), "job-b");

  // job-b's coordinator goes silent: within the hold, strangers wait; past it, not.
  now += absl::Minutes(9);
  EXPECT_EQ(state.SetupJob(setup("stranger", false), &response).code(),
            absl::StatusCode::kPermissionDenied);
  now += absl::Minutes(2);
  EXPECT_TRUE(state.SetupJob(setup("stranger", false), &response).ok());
  // A keyless job holds nobody: the next coordinator's job takes the worker.
  EXPECT_TRUE(state.SetupJob(setup("job-c", true), &response).ok());
}

// Issue 12, defence in depth: a worker started with --data_root refuses a job
// whose data lies elsewhere before it opens anything; and a file that is not
// data (inside the roots) fails without its contents in the error.
TEST(WorkerStateDataRootTest, DataOutsideTheRootsIsRefusedAndContentsAreNeverQuoted) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string root = std::string(tmp != nullptr ? tmp : "/tmp") + "/worker-data-root";
  std::filesystem::create_directories(root);
  const std::string secret = root + "/secret.csv";
  std::ofstream(secret) << "root:$6$SECRETHASH:19000::::::\n";
  VariableStore store;
  WorkerState state(
      [&store](const std::string&) { return std::make_unique<InProcessPsClient>(&store); },
      std::vector<std::string>{root});
  auto yaml = [](const std::string& path) {
    return "model:\n  inputs: {dense: 784}\n  layers: [{dense: {units: 10}}]\n"
           "optimizer: {type: sgd}\ndata:\n  train: {images: " + path + ", labels: " + path +
           "}\n  eval: {images: " + path + ", labels: " + path + "}\n";
  };
  SetupJobRequest setup;
  setup.set_job_id("job-1");
  setup.set_spec_yaml(yaml("/etc/shadow"));
  setup.add_ps_addresses("in-process");
  SetupJobResponse response;
  absl::Status s = state.SetupJob(setup, &response);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("data.train.images: '/etc/shadow'"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("--data_root"));

  setup.set_spec_yaml(yaml(secret));
  absl::StatusOr<JobSpec> spec = ParseJobSpec(yaml(secret), "secret.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<VariablePlan> plan = PlanVariables(ModelVariables(*spec), spec->partitioner, 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const auto& p : plan->placement) *setup.add_placement() = p;
  s = state.SetupJob(setup, &response);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(secret));
  for (const char* leak : {"SECRET", "root:", "726f6f74"}) {
    EXPECT_THAT(std::string(s.message()), ::testing::Not(HasSubstr(leak)));
  }
}

}  // namespace
}  // namespace pscluster
