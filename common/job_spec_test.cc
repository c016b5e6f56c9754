#include "common/job_spec.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;

constexpr char kGood[] = R"(name: mlp
strategy: parameter_server
device: cpu
seed: 9
model:
  inputs: {dense: 784}
  layers:
    - dense: {units: 128, activation: relu}
    - dense: {units: 10}
optimizer: {type: momentum, learning_rate: 0.05, momentum: 0.8, nesterov: true}
data:
  train: {format: idx, images: tr.gz, labels: trl.gz, limit: 100}
  eval: {images: te.gz, labels: tel.gz}
  per_replica_batch: 32
train: {epochs: 2, steps_per_closure: 5, closures_per_worker: 3, closures_per_rpc: 4}
)";

TEST(JobSpecTest, ParsesAFullSpec) {
  auto spec = ParseJobSpec(kGood, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "mlp");
  EXPECT_EQ(spec->strategy, Strategy::kParameterServer);
  EXPECT_EQ(spec->device, DevicePreference::kCpu);
  EXPECT_EQ(spec->seed, 9u);
  EXPECT_EQ(spec->model.dense_inputs, 784);
  ASSERT_EQ(spec->model.layers.size(), 2u);
  EXPECT_EQ(spec->model.layers[0].units, 128);
  EXPECT_EQ(spec->model.layers[0].activation, Activation::kRelu);
  EXPECT_EQ(spec->model.layers[1].activation, Activation::kNone);
  EXPECT_EQ(spec->optimizer.type(), "momentum");
  EXPECT_FLOAT_EQ(spec->optimizer.learning_rate(), 0.05f);
  EXPECT_FLOAT_EQ(spec->optimizer.momentum(), 0.8f);
  EXPECT_TRUE(spec->optimizer.nesterov());
  EXPECT_EQ(spec->data.train.limit, 100);
  EXPECT_EQ(spec->data.eval.format, "idx");
  EXPECT_EQ(spec->data.per_replica_batch, 32);
  EXPECT_EQ(spec->train.epochs, 2);
  EXPECT_EQ(spec->train.closures_per_worker, 3);
  EXPECT_EQ(spec->train.closures_per_rpc, 4);
  EXPECT_EQ(spec->model.kernel_initializer.type(), "glorot_uniform");
  EXPECT_EQ(spec->model.kernel_initializer.seed(), 9u);
  EXPECT_EQ(spec->yaml, kGood);
}

TEST(JobSpecTest, UnlabelledSourcesAreForPredictionOnly) {
  // No `labels` (idx) / `label` (csv): rows to predict. They parse, and
  // name no label file; a job cannot train or evaluate on them.
  std::string text = kGood;
  text.replace(text.find("{format: idx, images: tr.gz, labels: trl.gz, limit: 100}"),
               std::string("{format: idx, images: tr.gz, labels: trl.gz, limit: 100}").size(),
               "{format: idx, images: tr.gz}");
  auto spec = ParseJobSpec(text, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->data.train.labelled);
  EXPECT_TRUE(spec->data.eval.labelled);
  EXPECT_EQ(DataFiles(*spec), (std::vector<std::string>{"tr.gz", "te.gz", "tel.gz"}));
  absl::Status s = CheckLabelled(*spec);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(s.message(), HasSubstr("data.train has no labels"));
  EXPECT_THAT(s.message(), HasSubstr("psctl predict --data"));

  spec = ParseJobSpec(kGood, "job.yaml");
  ASSERT_TRUE(spec.ok());
  EXPECT_TRUE(CheckLabelled(*spec).ok());
  spec->data.eval.labelled = false;
  EXPECT_THAT(CheckLabelled(*spec).message(), HasSubstr("data.eval has no labels"));
  spec->eval.mode = EvalSpec::Mode::kNone;  // nothing reads eval's labels
  EXPECT_TRUE(CheckLabelled(*spec).ok());

  const std::string csv = R"(name: ctr
model:
  inputs: {dense: 1}
  layers: [{dense: {units: 1}}]
  loss: sigmoid_cross_entropy
optimizer: {type: sgd, learning_rate: 0.1}
data:
  train: {format: csv, path: t.csv, columns: [{x: float}, {y: int}], label: {column: y}, dense_columns: [x]}
  eval: {format: csv, path: e.csv, columns: [{x: float}], dense_columns: [x]}
eval: none
)";
  spec = ParseJobSpec(csv, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->data.train.labelled);
  EXPECT_FALSE(spec->data.eval.labelled);
  EXPECT_TRUE(spec->data.eval.label_column.empty());
  EXPECT_TRUE(CheckLabelled(*spec).ok());
}

TEST(JobSpecTest, StrategyIsOneField) {
  std::string yaml = kGood;
  yaml.replace(yaml.find("parameter_server"), 16, "one_device");
  auto spec = ParseJobSpec(yaml, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->strategy, Strategy::kOneDevice);
}

// Each case: a YAML, and the "file:line:column: message" it must produce.
struct BadCase {
  const char* yaml;
  const char* where;
  const char* message;
};

class JobSpecErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(JobSpecErrorTest, NamesLineColumnAndProblem) {
  auto spec = ParseJobSpec(GetParam().yaml, "bad.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(spec.status()));
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr(GetParam().where));
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr(GetParam().message));
}

constexpr char kTail[] = R"(
optimizer: {type: sgd}
data:
  train: {images: a, labels: b}
  eval: {images: a, labels: b}
)";

std::string WithModel(const std::string& model) { return "model:\n" + model + kTail; }

const std::string kUnknownLayer = WithModel("  inputs: {dense: 4}\n  layers:\n    - conv: {units: 3}\n");
const std::string kBadUnits = WithModel("  inputs: {dense: 4}\n  layers:\n    - dense: {units: -3}\n");
const std::string kUnitsType = WithModel("  inputs: {dense: 4}\n  layers:\n    - dense: {units: many}\n");
const std::string kBadActivation =
    WithModel("  inputs: {dense: 4}\n  layers:\n    - dense: {units: 3, activation: tanhh}\n");
const std::string kBadOptimizer =
    "model:\n  inputs: {dense: 4}\n  layers: [{dense: {units: 3}}]\noptimizer: {type: adamm}\n";
const std::string kBadStrategy = "strategy: mirroredd\n" + WithModel("  inputs: {dense: 4}\n  layers: [relu, {dense: {units: 2}}]\n");
const std::string kTypo = WithModel("  inputs: {dense: 4}\n  layerz: []\n");
const std::string kOptionForOtherOptimizer =
    "model:\n  inputs: {dense: 4}\n  layers: [{dense: {units: 3}}]\noptimizer: {type: sgd, beta1: 0.9}\n";

INSTANTIATE_TEST_SUITE_P(
    Cases, JobSpecErrorTest,
    ::testing::Values(
        BadCase{"name: [unclosed\n", "bad.yaml:", "end of sequence flow not found"},
        BadCase{"name: x\n  model: 3\n bad: indentation\n", "bad.yaml:", "map"},
        BadCase{"", "bad.yaml", "empty"},
        BadCase{"- a list\n", "bad.yaml:1:1", "must be a mapping"},
        BadCase{kUnknownLayer.c_str(), "bad.yaml:4:7", "unknown layer 'conv'"},
        BadCase{kBadUnits.c_str(), "bad.yaml:4:22", "must be >= 1"},
        BadCase{kUnitsType.c_str(), "bad.yaml:4:22", "must be an integer"},
        BadCase{kBadActivation.c_str(), "bad.yaml:4:37", "unknown activation 'tanhh'"},
        BadCase{kBadOptimizer.c_str(), "bad.yaml:4:19", "unknown optimizer 'adamm'"},
        BadCase{kBadStrategy.c_str(), "bad.yaml:1:11", "unknown strategy 'mirroredd'"},
        BadCase{kTypo.c_str(), "bad.yaml:3:3", "unknown key 'layerz'"},
        BadCase{kOptionForOtherOptimizer.c_str(), "bad.yaml:4:31", "has no option 'beta1'"},
        BadCase{"model:\n  inputs: {dense: 4}\n", "bad.yaml:2:3", "missing required key 'layers'"}));

TEST(JobSpecTest, CheckpointFailurePolicy) {
  auto spec = ParseJobSpec(kGood, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->checkpoint.on_failure, CheckpointSpec::OnFailure::kContinue);
  EXPECT_EQ(spec->checkpoint.max_retries, 3);
  EXPECT_EQ(spec->checkpoint.retry_backoff_s, 1);
  spec = ParseJobSpec(std::string(kGood) +
                          "checkpoint: {dir: /c, on_failure: fail, max_retries: 0, retry_backoff_s: 0.5}\n",
                      "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->checkpoint.on_failure, CheckpointSpec::OnFailure::kFail);
  EXPECT_EQ(spec->checkpoint.max_retries, 0);
  EXPECT_EQ(spec->checkpoint.retry_backoff_s, 0.5);
  for (const auto& [field, message] : std::vector<std::pair<std::string, std::string>>{
           {"on_failure: ignore", "unknown checkpoint.on_failure 'ignore'"},
           {"max_retries: 101", "checkpoint.max_retries must be <= 100"},
           {"max_retries: -1", "checkpoint.max_retries must be >= 0"},
           {"retry_backoff_s: -1", "checkpoint.retry_backoff_s must be in [0, 3600]"}}) {
    auto bad = ParseJobSpec(std::string(kGood) + "checkpoint: {dir: /c, " + field + "}\n", "bad.yaml");
    ASSERT_FALSE(bad.ok()) << field;
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr("bad.yaml:16:")) << field;
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr(message)) << field;
  }
}

TEST(JobSpecTest, WorkerTimeout) {
  auto spec = ParseJobSpec(kGood, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->fault_tolerance.worker_timeout_s, 3);
  spec = ParseJobSpec(std::string(kGood) +
                          "fault_tolerance: {health_check_interval_s: 0.2, worker_timeout_s: 2}\n",
                      "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_DOUBLE_EQ(spec->fault_tolerance.worker_timeout_s, 2);
  for (const auto& [fields, message] : std::vector<std::pair<std::string, std::string>>{
           {"worker_timeout_s: 0", "fault_tolerance.worker_timeout_s must be > 0"},
           {"worker_timeout_s: 3601", "fault_tolerance.worker_timeout_s must be <= 3600"},
           {"health_check_interval_s: 1, worker_timeout_s: 1",
            "worker_timeout_s (1) must be > health_check_interval_s (1)"},
           {"health_check_interval_s: 5", "worker_timeout_s (3) must be > health_check_interval_s (5)"}}) {
    auto bad = ParseJobSpec(std::string(kGood) + "fault_tolerance: {" + fields + "}\n", "bad.yaml");
    ASSERT_FALSE(bad.ok()) << fields;
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr("bad.yaml:16:")) << fields;
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr(message)) << fields;
  }
}

TEST(JobSpecTest, Summaries) {
  auto spec = ParseJobSpec(kGood, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->summaries.logdir.empty());
  spec = ParseJobSpec(std::string(kGood) + "summaries: {logdir: tb/run1, every_steps: 50}\n",
                      "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->summaries.logdir, "tb/run1");
  EXPECT_EQ(spec->summaries.every_steps, 50);
  spec = ParseJobSpec(std::string(kGood) + "summaries: {logdir: tb}\n", "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->summaries.every_steps, 100);
  for (const auto& [fields, message] : std::vector<std::pair<std::string, std::string>>{
           {"{every_steps: 5}", "missing required key 'logdir'"},
           {"{logdir: ''}", "summaries.logdir must not be empty"},
           {"{logdir: tb, every_steps: -1}", "summaries.every_steps must be >= 0"},
           {"{logdir: tb, flush_secs: 5}", "unknown key 'flush_secs' in summaries"},
           {"tb", "summaries must be a mapping"}}) {
    auto bad = ParseJobSpec(std::string(kGood) + "summaries: " + fields + "\n", "bad.yaml");
    ASSERT_FALSE(bad.ok()) << fields;
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr("bad.yaml:16:")) << fields;
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr(message)) << fields;
  }
}

TEST(JobSpecTest, MissingFileIsNotFound) {
  auto spec = LoadJobSpec("/nonexistent/job.yaml");
  EXPECT_TRUE(absl::IsNotFound(spec.status()));
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("/nonexistent/job.yaml"));
}

TEST(JobSpecTest, ExampleJobsParse) {
  for (const char* path :
       {"examples/fashion_mnist_mlp.yaml", "examples/fashion_mnist_mlp_one_device.yaml",
        "examples/movielens_ctr.yaml", "examples/fashion_mnist_mlp_sync.yaml",
        "examples/fashion_mnist_mlp_schedule.yaml", "examples/fashion_mnist_cnn.yaml",
        "examples/movielens_dcn.yaml", "examples/movielens_deepfm.yaml",
        "examples/movielens_wide_deep.yaml", "examples/movielens_dlrm.yaml"}) {
    auto spec = LoadJobSpec(path);
    ASSERT_TRUE(spec.ok()) << spec.status();
  }
}

}  // namespace
}  // namespace pscluster
