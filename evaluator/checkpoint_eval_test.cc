// CheckpointEval against a real job's checkpoints: a CTR model with a
// fixed-vocabulary and a hashed embedding table trained by the real
// JobRunner on 2 in-process PS stores and an in-process worker, with the
// coordinator's inline eval. The evaluator's metrics of the final checkpoint
// must equal that inline eval (same data, same closures, same PS state).
#include "evaluator/checkpoint_eval.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/core/checkpoint_manager.h"
#include "coordinator/core/job_runner.h"
#include "coordinator/core/worker_client.h"
#include "gtest/gtest.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/variable_store.h"
#include "worker/core/worker_state.h"

namespace pscluster {
namespace {

namespace fs = std::filesystem;

// A WorkerState in this process behind the coordinator's WorkerClient.
class LocalWorker final : public WorkerClient {
 public:
  explicit LocalWorker(WorkerState* state) : state_(state) {}
  std::string address() const override { return "local"; }
  absl::Status SetupJob(const SetupJobRequest& r, SetupJobResponse* out) override {
    return state_->SetupJob(r, out);
  }
  absl::Status RunClosure(const RunClosureRequest& r, absl::Duration,
                          RunClosureResponse* out) override {
    return state_->RunClosure(r, out);
  }
  absl::Status Ping(const PingRequest& r, PingResponse* out) override {
    return state_->Ping(r, out);
  }
  absl::Status ReleaseJob(const ReleaseJobRequest& r, ReleaseJobResponse* out) override {
    return state_->ReleaseJob(r, out);
  }

 private:
  WorkerState* const state_;
};

std::string Yaml(const std::string& dir) {
  return absl::StrCat(R"(name: ctr
device: cpu
model:
  inputs:
    dense: 3
    categorical:
      - {name: user, vocab_size: 50, embedding_dim: 4, combiner: sum}
      - {name: tags, hashed: true, embedding_dim: 2, combiner: mean}
  layers:
    - dense: {units: 8, activation: relu}
    - dense: {units: 1}
  loss: sigmoid_cross_entropy
optimizer: {type: adam, learning_rate: 0.01}
variable_partitioner: {type: fixed, num_shards: 2}
data:
  train: {format: synthetic_ctr, num_examples: 3000, id_space: 200, seed: 3}
  eval: {format: synthetic_ctr, num_examples: 4500, id_space: 200, seed: 4}
  per_replica_batch: 50
train: {epochs: 2, steps_per_closure: 10, closures_per_worker: 1}
checkpoint: {dir: )",
                      dir, R"(, every_steps: 30, keep: 100}
)");
}

struct TrainedJob {
  std::string root;
  std::string dir;
  JobSpec spec;
  JobStatusProto status;
};

TrainedJob Train(const std::string& name) {
  TrainedJob job;
  const char* tmp = std::getenv("TEST_TMPDIR");
  job.root = fs::canonical(tmp != nullptr ? tmp : "/tmp").string() + "/" + name;
  fs::remove_all(job.root);
  fs::create_directories(job.root);
  job.dir = job.root + "/ckpt";
  absl::StatusOr<JobSpec> spec = ParseJobSpec(Yaml(job.dir), "ctr.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  job.spec = *spec;
  JobSpec resolved = *spec;
  EXPECT_TRUE(ResolveReplicas(1, &resolved).ok());

  VariableStore::Options store_options;
  store_options.checkpoint_root = job.root;
  VariableStore store0(store_options), store1(store_options);
  InProcessPsClient ps0(&store0), ps1(&store1);
  WorkerState state([&](const std::string& address) {
    return std::make_unique<InProcessPsClient>(address == "ps-0" ? &store0 : &store1);
  });
  LocalWorker worker(&state);
  JobRunnerOptions options;
  options.ps_addresses = {"ps-0", "ps-1"};
  options.checkpoint_root = job.root;
  JobRunner runner("ctr-1", resolved, {&ps0, &ps1}, {&worker}, options);
  absl::Status run = runner.Run();
  EXPECT_TRUE(run.ok()) << run;
  job.status = runner.Status();
  return job;
}

std::unique_ptr<CheckpointEval> MakeEval(const TrainedJob& job) {
  CheckpointEval::Options o;
  o.checkpoint_dir = job.dir;
  o.spec = job.spec;
  o.job_id = "ctr-1";
  absl::StatusOr<std::unique_ptr<CheckpointEval>> eval = CheckpointEval::Create(o);
  EXPECT_TRUE(eval.ok()) << eval.status();
  return eval.ok() ? *std::move(eval) : nullptr;
}

TEST(CheckpointEvalTest, EqualsTheCoordinatorsInlineEvalOfTheFinalCheckpoint) {
  const TrainedJob job = Train("inline");
  ASSERT_EQ(job.status.state(), SUCCEEDED) << job.status.error();
  ASSERT_GT(job.status.eval_auc(), 0);
  std::vector<CheckpointManifest> committed = CheckpointManager(job.dir, 1, "").List();
  ASSERT_GE(committed.size(), 3u);
  ASSERT_EQ(committed[0].num_ps(), 2);
  std::unique_ptr<CheckpointEval> eval = MakeEval(job);
  ASSERT_NE(eval, nullptr);
  absl::StatusOr<EvalMetrics> m = eval->Evaluate(committed[0]);  // the final one
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->examples, 4500);
  EXPECT_NEAR(m->loss, job.status.eval_loss(), 1e-9);
  EXPECT_NEAR(m->accuracy, job.status.eval_accuracy(), 1e-12);
  ASSERT_TRUE(m->has_auc);
  EXPECT_NEAR(m->auc, job.status.eval_auc(), 1e-12);
  // An older checkpoint restores into the same stores (replacing them) and
  // gives its own numbers; the newest again gives the same as before.
  absl::StatusOr<EvalMetrics> first = eval->Evaluate(committed.back());
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_NE(first->loss, m->loss);
  absl::StatusOr<EvalMetrics> again = eval->Evaluate(committed[0]);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->loss, m->loss);
  EXPECT_EQ(again->auc, m->auc);
}

TEST(CheckpointEvalTest, DamagedAndVanishedCheckpointsAreRefused) {
  const TrainedJob job = Train("damaged");
  std::vector<CheckpointManifest> committed = CheckpointManager(job.dir, 1, "").List();
  ASSERT_GE(committed.size(), 2u);
  std::unique_ptr<CheckpointEval> eval = MakeEval(job);
  ASSERT_NE(eval, nullptr);
  // A flipped byte: the same size, another checksum.
  const std::string file =
      absl::StrCat(job.dir, "/ckpt-", committed[0].checkpoint_id(), "/ps-1.data");
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    char c = 0;
    f.read(&c, 1);
    f.seekp(40);
    c ^= 0x5a;
    f.write(&c, 1);
  }
  absl::StatusOr<EvalMetrics> m = eval->Evaluate(committed[0]);
  EXPECT_TRUE(absl::IsDataLoss(m.status())) << m.status();
  // Pruned away.
  fs::remove_all(absl::StrCat(job.dir, "/ckpt-", committed[1].checkpoint_id()));
  m = eval->Evaluate(committed[1]);
  EXPECT_TRUE(absl::IsNotFound(m.status())) << m.status();
  // And one that is whole still evaluates after both.
  m = eval->Evaluate(committed.back());
  EXPECT_TRUE(m.ok()) << m.status();
}

TEST(CheckpointEvalTest, BadSpecIsRefusedAtCreate) {
  CheckpointEval::Options o;
  o.checkpoint_dir = "/nonexistent";
  absl::StatusOr<JobSpec> spec = ParseJobSpec(Yaml("/tmp/x"), "ctr.yaml");
  ASSERT_TRUE(spec.ok());
  o.spec = *spec;
  o.eval_closure_examples = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(CheckpointEval::Create(o).status()));
  o.eval_closure_examples = 100;
  o.spec.data.eval.format = "idx";
  o.spec.data.eval.images = "/etc/passwd";
  o.spec.data.eval.labels = "/etc/passwd";
  o.data_roots = std::vector<std::string>{"/usr/share/datasets"};
  absl::StatusOr<std::unique_ptr<CheckpointEval>> e = CheckpointEval::Create(o);
  EXPECT_TRUE(absl::IsInvalidArgument(e.status())) << e.status();
}

}  // namespace
}  // namespace pscluster
