// Sync equivalence: strategy central_storage with R replicas (workers x
// devices) and mirrored with R devices, global batch B, train the same
// weights as one_device with batch B on the same data order. The real cores — JobRunner,
// WorkerState/Trainer (CPU backend), JobStores with SyncSteps — wired in process, on Fashion-MNIST;
// after 51 SGD steps (the last a short batch: a replica's slice may be empty) every variable must
// match to a relative error of 1e-5.
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/in_process_worker.h"
#include "common/job_spec.h"
#include "common/tensor.h"
#include "coordinator/core/job_runner.h"
#include "coordinator/core/worker_client.h"
#include "gtest/gtest.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/job_stores.h"
#include "tests/sync_equivalence_util.h"
#include "worker/core/collective.h"
#include "worker/core/mirrored_ps_client.h"
#include "worker/core/worker_state.h"

namespace pscluster {
namespace {

using sync_equivalence::KeepAfterEnd;
using sync_equivalence::kImages;
using sync_equivalence::kLabels;
using sync_equivalence::RelativeError;

std::string Yaml(const std::string& strategy, const std::string& optimizer, int64_t batch,
                 int devices = 1) {
  return absl::StrCat(R"(
name: equivalence
devices: )", devices, R"(
strategy: )",
                      strategy, R"(
model:
  inputs: {dense: 784}
  layers: [{dense: {units: 32, activation: relu}}, {dense: {units: 10}}]
  loss: softmax_cross_entropy
optimizer: )",
                      optimizer, R"(
variable_partitioner: {type: min_size, min_shard_bytes: 16384, max_shards: 4}
data:
  train: {format: idx, images: )",
                      kImages, ", labels: ", kLabels, R"(, limit: 3020}
  eval: {format: idx, images: )",
                      kImages, ", labels: ", kLabels, R"(, limit: 200}
  global_batch: )",
                      batch, R"(
train: {epochs: 1, steps_per_closure: 7}
)");
}

struct Trained {
  JobStatusProto status;
  // Logical variable -> its values (shards joined in row order).
  std::map<std::string, std::vector<float>> variables;
};

// Runs the job on `workers` in-process workers and `num_ps` PS, then reads
// every variable back.
Trained Train(const std::string& yaml, int workers, int num_ps) {
  Trained out;
  absl::StatusOr<JobSpec> spec = ParseJobSpec(yaml, "equivalence.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return out;
  // Resolved for the cluster once, as JobManager resolves a submitted job.
  absl::Status resolved = ResolveReplicas(ReplicasFor(*spec, workers), &*spec);
  EXPECT_TRUE(resolved.ok()) << resolved;
  if (!resolved.ok()) return out;
  // One device runs one closure at a time (as psctl local does).
  if (spec->strategy == Strategy::kOneDevice || spec->strategy == Strategy::kMirrored) {
    spec->train.closures_per_worker = 1;
  }
  std::vector<std::unique_ptr<JobStores>> stores;
  std::vector<std::unique_ptr<KeepAfterEnd>> ps;
  std::vector<PsClient*> ps_ptrs;
  JobRunnerOptions options;
  for (int p = 0; p < num_ps; ++p) {
    stores.push_back(std::make_unique<JobStores>());
    ps.push_back(std::make_unique<KeepAfterEnd>(stores.back().get()));
    ps_ptrs.push_back(ps.back().get());
    options.ps_addresses.push_back(absl::StrCat("ps", p));
  }
  auto factory = [&stores](const std::string& address) -> std::unique_ptr<PsClient> {
    const int p = std::stoi(address.substr(2));
    return std::make_unique<InProcessPsClient>(stores[p].get());
  };
  // multi_worker_mirrored: each worker's own copy and mailbox, a ring of
  // in-process peers, and the copies given to the coordinator.
  const bool mirrored = spec->strategy == Strategy::kMultiWorkerMirrored;
  std::vector<std::unique_ptr<JobStores>> copies;
  std::vector<std::unique_ptr<KeepAfterEnd>> copy_clients;
  std::vector<CollectiveMailbox> mailboxes(workers);
  std::vector<CollectiveMailbox*> boxes;
  for (auto& m : mailboxes) boxes.push_back(&m);
  auto peers = std::make_shared<InProcessPeers>(boxes);
  std::vector<std::unique_ptr<WorkerState>> states;
  std::vector<std::unique_ptr<InProcessWorkerClient>> clients;
  std::vector<WorkerClient*> worker_ptrs;
  for (int w = 0; w < workers; ++w) {
    states.push_back(std::make_unique<WorkerState>(factory));
    clients.push_back(
        std::make_unique<InProcessWorkerClient>(states.back().get(), absl::StrCat("w", w), &*spec));
    worker_ptrs.push_back(clients.back().get());
    options.worker_addresses.push_back(absl::StrCat("w", w));
    if (!mirrored) continue;
    copies.push_back(std::make_unique<JobStores>());
    copy_clients.push_back(std::make_unique<KeepAfterEnd>(copies.back().get()));
    options.worker_ps.push_back(copy_clients.back().get());
    JobStores* copy = copies.back().get();
    CollectiveMailbox* mailbox = &mailboxes[w];
    states.back()->set_mirror_factory(
        [copy, mailbox, peers](const SetupJobRequest& request)
            -> absl::StatusOr<std::unique_ptr<PsClient>> {
          MirroredPsClient::Options o;
          o.job_id = request.job_id();
          o.bucket_elements = 10000;  // several buckets per step
          return std::make_unique<MirroredPsClient>(std::make_unique<InProcessPsClient>(copy),
                                                    mailbox, peers, o);
        });
  }
  JobRunner runner("job", *spec, ps_ptrs, worker_ptrs, options);
  absl::Status s = runner.Run();
  EXPECT_TRUE(s.ok()) << s;
  out.status = runner.Status();
  // A mirrored job's variables: replica 0's copy, which every other copy
  // must equal bit for bit.
  std::vector<JobStores*> read;
  for (auto& st : stores) read.push_back(st.get());
  if (mirrored) read = {copies[0].get()};
  // Shards "<name>/part_<i>" are joined in order of i.
  std::map<std::string, std::map<int, std::vector<float>>> parts;
  for (size_t p = 0; p < read.size(); ++p) {
    StatsRequest stats_request;
    stats_request.set_job("job");
    StatsResponse stats;
    EXPECT_TRUE(read[p]->Stats(stats_request, &stats).ok());
    for (const VariableStats& v : stats.variables()) {
      PullRequest pull;
      pull.set_job("job");
      pull.add_names(v.name());
      PullResponse pulled;
      EXPECT_TRUE(read[p]->Pull(pull, &pulled).ok());
      std::vector<float> values = DecodeTensor(pulled.tensors(0).tensor())->ToVector();
      for (size_t c = 1; c < copies.size(); ++c) {
        PullResponse other;
        EXPECT_TRUE(copies[c]->Pull(pull, &other).ok());
        EXPECT_EQ(other.tensors(0).tensor().data(), pulled.tensors(0).tensor().data())
            << "replica " << c << "'s copy of " << v.name() << " differs from replica 0's";
      }
      std::vector<std::string> name = absl::StrSplit(v.name(), "/part_");
      const int part = name.size() == 2 ? std::stoi(name[1]) : 0;
      parts[name[0]][part] = std::move(values);
    }
  }
  for (auto& [name, shards] : parts) {
    for (auto& [i, values] : shards) {
      out.variables[name].insert(out.variables[name].end(), values.begin(), values.end());
    }
  }
  return out;
}

struct Case {
  std::string strategy;
  int workers;
  int devices;
  int num_ps;
  std::string optimizer;
  double tolerance;
};

class SyncEquivalenceTest : public ::testing::TestWithParam<Case> {};

TEST_P(SyncEquivalenceTest, MatchesOneDevice) {
  if (!std::ifstream(kImages).good()) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  const Case& c = GetParam();
  // Global batch 60 over 2 or 3 replicas; 3020 examples: 50 full steps and
  // a last one of 20 (over 2 replicas of 30: the second replica's slice is
  // empty).
  const Trained one = Train(Yaml("one_device", c.optimizer, 60), 1, 1);
  const Trained sync =
      Train(Yaml(c.strategy, c.optimizer, 60, c.devices), c.workers, c.num_ps);
  const int replicas = c.workers * c.devices;
  ASSERT_EQ(one.status.state(), SUCCEEDED) << one.status.error();
  ASSERT_EQ(sync.status.state(), SUCCEEDED) << sync.status.error();
  EXPECT_EQ(one.status.steps(), 51);
  EXPECT_EQ(sync.status.steps(), 51);
  EXPECT_EQ(sync.status.replicas(), replicas);
  EXPECT_EQ(sync.status.per_replica_batch(), 60 / replicas);
  EXPECT_EQ(sync.status.examples(), 3020);
  for (int64_t applied : sync.status.ps_applied_steps()) EXPECT_EQ(applied, 51);
  EXPECT_EQ(sync.status.ps_applied_steps_size(), c.num_ps > 0 ? c.num_ps : 1);
  ASSERT_EQ(one.variables.size(), 4u);
  ASSERT_EQ(sync.variables.size(), one.variables.size());
  for (const auto& [name, values] : one.variables) {
    ASSERT_TRUE(sync.variables.count(name)) << name;
    const std::vector<float>& got = sync.variables.at(name);
    ASSERT_EQ(got.size(), values.size()) << name;
    const double err = RelativeError(got, values);
    std::cout << name << ": relative error " << err << " over " << values.size() << " elements\n";
    EXPECT_LE(err, c.tolerance) << name;
  }
  // Training moved the weights: the loss fell well below ln(10).
  EXPECT_LT(sync.status.train_loss(), 1.5);
  EXPECT_NEAR(sync.status.train_loss(), one.status.train_loss(), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, SyncEquivalenceTest,
    ::testing::Values(
        Case{"central_storage", 2, 1, 2, "{type: sgd, learning_rate: 0.1}", 1e-5},
        Case{"central_storage", 3, 1, 2, "{type: sgd, learning_rate: 0.1}", 1e-5},
        Case{"central_storage", 2, 1, 1, "{type: momentum, learning_rate: 0.05, momentum: 0.9}",
             1e-5},
        Case{"mirrored", 1, 2, 1, "{type: sgd, learning_rate: 0.1}", 1e-5},
        Case{"mirrored", 1, 3, 1, "{type: sgd, learning_rate: 0.1}", 1e-5},
        Case{"central_storage", 2, 2, 2, "{type: sgd, learning_rate: 0.1}", 1e-5},
        Case{"multi_worker_mirrored", 2, 1, 0, "{type: sgd, learning_rate: 0.1}", 1e-5},
        Case{"multi_worker_mirrored", 3, 1, 0, "{type: sgd, learning_rate: 0.1}", 1e-5},
        Case{"multi_worker_mirrored", 2, 2, 0,
             "{type: momentum, learning_rate: 0.05, momentum: 0.9}", 1e-5}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return absl::StrCat(info.param.strategy, "_", info.param.workers, "workers_",
                          info.param.devices, "devices_", info.param.num_ps, "ps_",
                          info.param.optimizer.find("momentum") != std::string::npos ? "momentum"
                                                                                     : "sgd");
    });

}  // namespace
}  // namespace pscluster
