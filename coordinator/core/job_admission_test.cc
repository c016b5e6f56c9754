// Oversized and overflowing job values: every one is refused at submit time
// (by ParseJobSpec's stated limits or by AdmitJob against the cluster), with
// a message naming the field, and never reaches a process that would
// allocate or spawn threads for it.
#include "coordinator/core/job_admission.h"

#include <string>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;

constexpr char kJob[] = R"(
name: t
model:
  inputs: {dense: DENSE}
  layers: [{dense: {units: UNITS, activation: relu}}, {dense: {units: 10}}]
optimizer: {type: OPTIMIZER}
data:
  train: {images: a, labels: b, limit: LIMIT}
  eval: {images: a, labels: b}
  per_replica_batch: BATCH
train: {epochs: EPOCHS, steps_per_closure: STEPS, closures_per_worker: CPW, closures_per_rpc: CPR}
checkpoint: {dir: ckpt, keep: KEEP}
fault_tolerance: {max_attempts: ATTEMPTS}
)";

struct Case {
  const char* name;
  std::vector<std::pair<std::string, std::string>> values;  // placeholder -> value
  absl::StatusCode code;
  const char* message;  // a substring of the error; "" for OK
};

std::string Job(const Case& c) {
  std::vector<std::pair<std::string, std::string>> v = {
      {"DENSE", "784"}, {"UNITS", "256"}, {"OPTIMIZER", "adam"}, {"LIMIT", "0"},
      {"BATCH", "64"},  {"EPOCHS", "3"},  {"STEPS", "20"},       {"CPW", "2"},
      {"CPR", "1"},     {"KEEP", "3"},    {"ATTEMPTS", "5"}};
  for (const auto& [key, value] : c.values) {
    for (auto& [k, old] : v) {
      if (k == key) old = value;
    }
  }
  std::string yaml = kJob;
  for (const auto& [k, value] : v) yaml = absl::StrReplaceAll(yaml, {{k, value}});
  return yaml;
}

TEST(JobAdmissionTest, OversizedAndOverflowingValuesAreRefusedWithTheirName) {
  const int64_t kLimit = int64_t{64} << 20;  // 64 MiB per PS
  const Case cases[] = {
      {"fits", {}, absl::StatusCode::kOk, ""},
      {"int64 max batch",
       {{"BATCH", "9223372036854775807"}},
       absl::StatusCode::kInvalidArgument,
       "data.per_replica_batch must be <= 65536"},
      {"batch past int64",
       {{"BATCH", "9223372036854775808"}},
       absl::StatusCode::kInvalidArgument,
       "data.per_replica_batch must be an integer"},
      {"a billion closures per worker",
       {{"CPW", "1000000000"}},
       absl::StatusCode::kInvalidArgument,
       "train.closures_per_worker must be <= 64"},
      {"negative closures per worker",
       {{"CPW", "-1"}},
       absl::StatusCode::kInvalidArgument,
       "train.closures_per_worker must be >= 1"},
      {"closures per rpc",
       {{"CPR", "100000"}},
       absl::StatusCode::kInvalidArgument,
       "train.closures_per_rpc must be <= 1024"},
      {"epochs",
       {{"EPOCHS", "4611686018427387904"}},
       absl::StatusCode::kInvalidArgument,
       "train.epochs must be <= 100000"},
      {"steps per closure",
       {{"STEPS", "9223372036854775807"}},
       absl::StatusCode::kInvalidArgument,
       "train.steps_per_closure must be <= 1000000"},
      {"units",
       {{"UNITS", "1000000"}},
       absl::StatusCode::kInvalidArgument,
       "dense.units must be <= 65536"},
      {"dense inputs",
       {{"DENSE", "1000000000"}},
       absl::StatusCode::kInvalidArgument,
       "model.inputs.dense must be <= 16777216"},
      {"data limit",
       {{"LIMIT", "9223372036854775807"}},
       absl::StatusCode::kInvalidArgument,
       "limit must be <= 1099511627776"},
      {"checkpoints kept",
       {{"KEEP", "1000000000000"}},
       absl::StatusCode::kInvalidArgument,
       "checkpoint.keep must be <= 1000"},
      {"attempts",
       {{"ATTEMPTS", "2147483648"}},
       absl::StatusCode::kInvalidArgument,
       "fault_tolerance.max_attempts must be <= 100"},
      {"activations of one batch",
       {{"BATCH", "65536"}, {"UNITS", "65536"}},
       absl::StatusCode::kInvalidArgument,
       "activations, over the limit"},
      {"one variable past what a PS accepts",
       {{"DENSE", "16777216"}, {"UNITS", "64"}, {"BATCH", "8"}},
       absl::StatusCode::kInvalidArgument,
       "split it with variable_partitioner"},
      // 784x8192 floats with Adam's two slots: 77 MB on one PS.
      {"past the per-PS memory limit",
       {{"UNITS", "8192"}, {"BATCH", "16"}},
       absl::StatusCode::kResourceExhausted,
       "over the per-PS memory limit of 67108864"},
      {"the same model with SGD fits",
       {{"UNITS", "8192"}, {"BATCH", "16"}, {"OPTIMIZER", "sgd"}},
       absl::StatusCode::kOk,
       ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<JobSpec> spec = ParseJobSpec(Job(c), "job.yaml");
    absl::Status s = spec.status();
    if (s.ok()) s = AdmitJob(*spec, /*num_ps=*/2, kLimit);
    EXPECT_EQ(s.code(), c.code) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message));
  }
}

TEST(JobAdmissionTest, PlannedBytesCountSlotsAndBoundedHashTables) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(R"(
model:
  inputs:
    categorical:
      - {name: item, column: item, hashed: true, embedding_dim: 8, max_rows: 1000}
  layers: [{dense: {units: 1}}]
  loss: sigmoid_cross_entropy
optimizer: {type: adagrad}
data:
  train: {format: csv, path: a, columns: [{item: int}, {y: float}], label: {column: y, threshold: 0.5}}
  eval: {format: csv, path: a, columns: [{item: int}, {y: float}], label: {column: y, threshold: 0.5}}
)",
                                              "ctr.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<VariablePlan> plan = PlanVariables(ModelVariables(*spec), spec->partitioner, 2);
  ASSERT_TRUE(plan.ok());
  const std::vector<int64_t> bytes = PlannedBytesPerPs(*plan);
  ASSERT_EQ(bytes.size(), 2u);
  // Each PS: one hash-table shard of 1000 rows x 8, plus dense variables
  // (kernel [8,1] and bias [1] placed round-robin); adagrad has one slot.
  int64_t total = bytes[0] + bytes[1];
  EXPECT_EQ(total, (2 * 1000 * 8 + 8 + 1) * 4 * 2);
}

// A PS that answers Stats (no job) with or without a checkpoint root, or
// not at all.
class RootPs : public PsClient {
 public:
  RootPs(bool root, absl::Status error = absl::OkStatus()) : root_(root), error_(error) {}
  absl::Status CreateVariables(const CreateVariablesRequest&, CreateVariablesResponse*) override {
    return absl::UnimplementedError("");
  }
  absl::Status Pull(const PullRequest&, PullResponse*) override {
    return absl::UnimplementedError("");
  }
  absl::Status Push(const PushRequest&, PushResponse*) override {
    return absl::UnimplementedError("");
  }
  absl::Status Stats(const StatsRequest& request, StatsResponse* response) override {
    ++calls_;
    EXPECT_EQ(request.job(), "");  // asks the process, needs no proof
    if (!error_.ok()) return error_;
    response->set_checkpoint_root(root_);
    return absl::OkStatus();
  }
  int calls_ = 0;

 private:
  bool root_;
  absl::Status error_;
};

// Says PS `down` does not answer.
class DownHealth : public HealthChecker {
 public:
  explicit DownHealth(int down) : down_(down) {}
  absl::StatusOr<uint64_t> CheckPs(int index) override {
    if (index == down_) return absl::UnavailableError("connection refused");
    return 1;
  }
  absl::Status CheckWorker(int) override { return absl::OkStatus(); }

 private:
  int down_;
};

TEST(AdmitCheckpointRootsTest, PsWithoutARootAreNamedWithTheirAddresses) {
  RootPs with(true), without0(false), without1(false);
  EXPECT_TRUE(AdmitCheckpointRoots({&with, &with}, {"a:1", "b:2"}, nullptr).ok());
  const absl::Status s =
      AdmitCheckpointRoots({&without0, &with, &without1}, {"a:1", "b:2", "c:3"}, nullptr);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("PS 0 (a:1), PS 2 (c:3) were started without "
                                                  "--checkpoint_root"));
  EXPECT_THAT(std::string(s.message()), ::testing::Not(HasSubstr("b:2")));
  // Without addresses (in-process PS): by index.
  const absl::Status one = AdmitCheckpointRoots({&with, &without0}, {}, nullptr);
  EXPECT_THAT(std::string(one.message()), HasSubstr("PS 1 was started without"));
}

TEST(AdmitCheckpointRootsTest, PsThatDoNotAnswerDoNotHoldTheJobBack) {
  RootPs unreachable(false, absl::UnavailableError("connection refused"));
  RootPs with(true), without(false);
  EXPECT_TRUE(AdmitCheckpointRoots({&unreachable, &with}, {"a:1", "b:2"}, nullptr).ok());
  // A PS its health check finds down is not even asked (a call could wait
  // for it for its whole deadline).
  DownHealth health(1);
  EXPECT_TRUE(AdmitCheckpointRoots({&with, &without}, {"a:1", "b:2"}, &health).ok());
  EXPECT_EQ(without.calls_, 0);
  DownHealth none_down(-1);
  EXPECT_TRUE(absl::IsFailedPrecondition(
      AdmitCheckpointRoots({&with, &without}, {"a:1", "b:2"}, &none_down)));
}

}  // namespace
}  // namespace pscluster
