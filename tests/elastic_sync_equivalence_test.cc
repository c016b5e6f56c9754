// Elastic sync equivalence: a central_storage job whose replicas are
// re-formed while it trains (a worker joins: 2 -> 3 replicas; then one
// leaves: 3 -> 2) trains the same weights as one_device with the job's
// global batch on the same data order, because each step keeps the global
// batch and the PS applies its example-weighted mean (docs/elastic_workers.md).
// The real cores — JobRunner with a WorkerRoster, WorkerState/Trainer (CPU
// backend), JobStores with SyncSteps — wired in process on Fashion-MNIST; the
// join and the leave are triggered by the closures the workers run. After 51
// SGD steps every variable must match to a relative error of 1e-5.
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "client/in_process_worker.h"
#include "common/job_spec.h"
#include "common/tensor.h"
#include "coordinator/core/fake_clock.h"
#include "coordinator/core/job_runner.h"
#include "coordinator/core/worker_client.h"
#include "coordinator/core/worker_roster.h"
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

// An in-process worker whose closures call `hook` first (on the closure's
// thread): the test's progress triggers.
class HookedWorker final : public WorkerClient {
 public:
  HookedWorker(WorkerState* state, std::string address, const JobSpec* spec)
      : inner_(state, address, spec) {}
  std::string address() const override { return inner_.address(); }
  absl::Status SetupJob(const SetupJobRequest& q, SetupJobResponse* r) override {
    return inner_.SetupJob(q, r);
  }
  absl::Status RunClosure(const RunClosureRequest& q, absl::Duration timeout,
                          RunClosureResponse* r) override {
    if (hook) hook(q);
    return inner_.RunClosure(q, timeout, r);
  }
  absl::Status Ping(const PingRequest& q, PingResponse* r) override { return inner_.Ping(q, r); }
  absl::Status ReleaseJob(const ReleaseJobRequest& q, ReleaseJobResponse* r) override {
    return inner_.ReleaseJob(q, r);
  }
  // Set before the worker's first closure.
  std::function<void(const RunClosureRequest&)> hook;

 private:
  InProcessWorkerClient inner_;
};

std::string Yaml(const std::string& strategy, int devices = 1) {
  return absl::StrCat(R"(
name: elastic-equivalence
devices: )",
                      devices, R"(
strategy: )",
                      strategy, R"(
model:
  inputs: {dense: 784}
  layers: [{dense: {units: 32, activation: relu}}, {dense: {units: 10}}]
  loss: softmax_cross_entropy
optimizer: {type: sgd, learning_rate: 0.1}
variable_partitioner: {type: min_size, min_shard_bytes: 16384, max_shards: 4}
data:
  train: {format: idx, images: )",
                      kImages, ", labels: ", kLabels, R"(, limit: 3020}
  eval: {format: idx, images: )",
                      kImages, ", labels: ", kLabels, R"(, limit: 200}
  global_batch: 60
train: {epochs: 1, steps_per_closure: 7, closures_per_worker: 1}
)");
}

struct Trained {
  JobStatusProto status;
  std::vector<JobEvent> events;
  // Logical variable -> its values (shards joined in row order).
  std::map<std::string, std::vector<float>> variables;
};

// Bounded wait for `done` (the other threads' progress).
enum class Change {
  kNone,
  // While the third split trains, a worker joins (it is set up before that
  // split ends); its first share of a split with one replica more makes
  // worker 1 leave.
  kJoinThenLeave,
  // While the third split trains, the last worker leaves.
  kLeave,
};

// A fresh real directory for the checkpoints of the running test.
std::string CheckpointRoot() {
  const std::string dir = ::testing::TempDir() + "/elastic_sync_equivalence/" +
                          std::to_string(std::hash<std::string>()(
                              ::testing::UnitTest::GetInstance()->current_test_info()->name()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return std::filesystem::canonical(dir).string();
}

// Runs the job on `workers` in-process workers and 2 PS (multi_worker_mirrored:
// each worker's copy, with checkpoints, which a joiner's copy is restored
// from), changing them as `change` says.
Trained Train(const std::string& yaml, int workers, Change change, bool checkpoints = true) {
  Trained out;
  absl::StatusOr<JobSpec> spec = ParseJobSpec(yaml, "equivalence.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return out;
  absl::Status resolved = ResolveReplicas(ReplicasFor(*spec, workers), &*spec);
  EXPECT_TRUE(resolved.ok()) << resolved;
  if (!resolved.ok()) return out;
  constexpr int kPs = 2;
  std::vector<std::unique_ptr<JobStores>> stores;
  std::vector<std::unique_ptr<KeepAfterEnd>> ps;
  std::vector<PsClient*> ps_ptrs;
  JobRunnerOptions options;
  for (int p = 0; p < kPs; ++p) {
    stores.push_back(std::make_unique<JobStores>());
    ps.push_back(std::make_unique<KeepAfterEnd>(stores.back().get()));
    ps_ptrs.push_back(ps.back().get());
    options.ps_addresses.push_back(absl::StrCat("ps", p));
  }
  auto factory = [&stores](const std::string& address) -> std::unique_ptr<PsClient> {
    const int p = std::stoi(address.substr(2));
    return std::make_unique<InProcessPsClient>(stores[p].get());
  };
  // multi_worker_mirrored: every worker's copy and mailbox (the joiner's
  // too, made before anything runs), by address; a worker's ring is the one
  // its SetupJob names.
  const bool mirrored = spec->strategy == Strategy::kMultiWorkerMirrored;
  const std::string joiner_address = "127.0.0.1:7100";
  std::map<std::string, std::unique_ptr<JobStores>> copies;
  std::map<std::string, std::unique_ptr<CollectiveMailbox>> mailboxes;
  std::vector<std::unique_ptr<KeepAfterEnd>> copy_clients;
  if (mirrored) {
    const std::string root = CheckpointRoot();
    options.checkpoint_root = root;
    if (checkpoints) options.checkpoint_dir = root + "/ckpt";
    VariableStore::Options store_options;
    store_options.checkpoint_root = root;
    for (int w = 0; w <= workers; ++w) {
      const std::string a = w < workers ? absl::StrCat("127.0.0.1:", 7000 + w) : joiner_address;
      copies[a] = std::make_unique<JobStores>(store_options);
      mailboxes[a] = std::make_unique<CollectiveMailbox>();
    }
    options.connect_copy = [&copies](const std::string& a) -> std::unique_ptr<PsClient> {
      return std::make_unique<KeepAfterEnd>(copies.at(a).get());
    };
  }
  auto set_mirror = [&](WorkerState* state, const std::string& address) {
    if (!mirrored) return;
    JobStores* copy = copies.at(address).get();
    CollectiveMailbox* mailbox = mailboxes.at(address).get();
    state->set_mirror_factory([copy, mailbox, &mailboxes](const SetupJobRequest& request)
                                  -> absl::StatusOr<std::unique_ptr<PsClient>> {
      std::vector<CollectiveMailbox*> ring;
      for (const std::string& a : request.worker_addresses()) {
        auto it = mailboxes.find(a);
        if (it == mailboxes.end()) return absl::InvalidArgumentError("no worker at " + a);
        ring.push_back(it->second.get());
      }
      MirroredPsClient::Options o;
      o.job_id = request.job_id();
      o.bucket_elements = 10000;  // several buckets per step
      return std::make_unique<MirroredPsClient>(std::make_unique<InProcessPsClient>(copy), mailbox,
                                                std::make_shared<InProcessPeers>(ring), o);
    });
  };
  std::vector<std::unique_ptr<WorkerState>> states;
  std::vector<std::unique_ptr<HookedWorker>> clients;
  std::vector<WorkerClient*> worker_ptrs;
  for (int w = 0; w < workers; ++w) {
    states.push_back(std::make_unique<WorkerState>(factory));
    const std::string address = absl::StrCat("127.0.0.1:", 7000 + w);
    set_mirror(states.back().get(), address);
    clients.push_back(std::make_unique<HookedWorker>(states.back().get(), address, &*spec));
    worker_ptrs.push_back(clients.back().get());
    options.worker_addresses.push_back(address);
    if (mirrored) {
      copy_clients.push_back(std::make_unique<KeepAfterEnd>(copies.at(address).get()));
      options.worker_ps.push_back(copy_clients.back().get());
    }
  }
  // The joiner: its state and client, made by the roster's connect.
  auto joiner_state = std::make_unique<WorkerState>(factory);
  set_mirror(joiner_state.get(), joiner_address);
  std::atomic<HookedWorker*> joiner{nullptr};
  std::atomic<bool> join_started{false};
  std::atomic<bool> leave_started{false};
  std::thread leave;
  absl::StatusOr<int> left = -1;
  WorkerRoster* roster_ptr = nullptr;  // set before any closure runs
  WorkerRoster::Options r;
  r.connect = [&](const std::string& address, int) {
    auto client = std::make_unique<HookedWorker>(joiner_state.get(), address, &*spec);
    client->hook = [&](const RunClosureRequest& q) {
      if (q.split().replicas() == workers + 1 && !leave_started.exchange(true)) {
        // Left from another thread: the leave waits for this call.
        leave = std::thread([&] { left = roster_ptr->Leave("127.0.0.1:7001", absl::Seconds(60)); });
      }
    };
    joiner = client.get();
    return std::unique_ptr<WorkerClient>(std::move(client));
  };
  WorkerRoster roster(worker_ptrs, r);
  roster_ptr = &roster;
  options.roster = &roster;
  JobRunner runner("job", *spec, ps_ptrs, worker_ptrs, options);
  const std::string last = absl::StrCat("127.0.0.1:", 7000 + workers - 1);
  for (int w = 0; w < workers; ++w) {
    clients[static_cast<size_t>(w)]->hook = [&](const RunClosureRequest& q) {
      // Split 2 (examples [840, 1260)).
      if (q.split().begin() != 840 || join_started.exchange(true)) return;
      if (change == Change::kJoinThenLeave) {
        // Waits until the joiner is set up.
        EXPECT_TRUE(roster.Join(joiner_address).ok());
        EXPECT_TRUE(WaitUntil(
            [&] {
              for (const JobEvent& e : runner.Events()) {
                if (e.kind() == "worker_joined") return true;
              }
              return false;
            },
            absl::Seconds(60)));
      } else if (change == Change::kLeave) {
        // From another thread: the leave waits for the calls in flight.
        leave = std::thread([&] { left = roster.Leave(last, absl::Seconds(60)); });
        EXPECT_TRUE(WaitUntil([&] { return !roster.active(workers - 1); }, absl::Seconds(60)));
      }
    };
  }
  absl::Status s = runner.Run();
  if (leave.joinable()) leave.join();
  EXPECT_TRUE(s.ok()) << s;
  if (change != Change::kNone) {
    EXPECT_TRUE(left.ok()) << left.status();
  }
  if (change == Change::kJoinThenLeave) {
    EXPECT_NE(joiner.load(), nullptr);
  }
  out.status = runner.Status();
  out.events = runner.Events();
  // A mirrored job's variables: worker 0's copy, which the joiner's (in
  // the ring to the end) must equal bit for bit.
  std::vector<JobStores*> read;
  for (auto& store : stores) read.push_back(store.get());
  if (mirrored) read = {copies.at("127.0.0.1:7000").get()};
  std::map<std::string, std::map<int, std::vector<float>>> parts;
  for (JobStores* store : read) {
    StatsRequest stats_request;
    stats_request.set_job("job");
    StatsResponse stats;
    EXPECT_TRUE(store->Stats(stats_request, &stats).ok());
    for (const VariableStats& v : stats.variables()) {
      PullRequest pull;
      pull.set_job("job");
      pull.add_names(v.name());
      PullResponse pulled;
      EXPECT_TRUE(store->Pull(pull, &pulled).ok());
      if (mirrored && change == Change::kJoinThenLeave && checkpoints) {
        PullResponse joiners;
        EXPECT_TRUE(copies.at(joiner_address)->Pull(pull, &joiners).ok());
        EXPECT_EQ(joiners.tensors(0).tensor().data(), pulled.tensors(0).tensor().data())
            << "the joiner's copy of " << v.name() << " differs from worker 0's";
      }
      std::vector<std::string> name = absl::StrSplit(v.name(), "/part_");
      const int part = name.size() == 2 ? std::stoi(name[1]) : 0;
      parts[name[0]][part] = DecodeTensor(pulled.tensors(0).tensor())->ToVector();
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
  Change change;
  // The replicas_reformed events' openings, in order.
  std::vector<std::string> reformed;
  // multi_worker_mirrored: the job checkpoints (without, a joiner gets no copy).
  bool checkpoints = true;
};

class ElasticSyncEquivalenceTest : public ::testing::TestWithParam<Case> {};

TEST_P(ElasticSyncEquivalenceTest, ReformedReplicasTrainAsOneDevice) {
  if (!std::ifstream(kImages).good()) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  const Case& c = GetParam();
  // Global batch 60; 3020 examples: 50 full steps and a last one of 20,
  // in 8 splits of 7 steps (the last of 2).
  const Trained one = Train(Yaml("one_device"), 1, Change::kNone);
  const Trained sync = Train(Yaml(c.strategy, c.devices), c.workers, c.change, c.checkpoints);
  ASSERT_EQ(one.status.state(), SUCCEEDED) << one.status.error();
  ASSERT_EQ(sync.status.state(), SUCCEEDED) << sync.status.error();
  EXPECT_EQ(one.status.steps(), 51);
  EXPECT_EQ(sync.status.steps(), 51);
  EXPECT_EQ(sync.status.examples(), 3020);
  for (int64_t applied : sync.status.ps_applied_steps()) EXPECT_EQ(applied, 51);
  EXPECT_EQ(sync.status.ps_applied_steps_size(), c.strategy == "central_storage" ? 2 : 1);
  std::vector<std::string> reformed;
  int join_failed = 0;
  for (const JobEvent& e : sync.events) {
    EXPECT_NE(e.kind(), "retry") << e.message();
    if (e.kind() == "replicas_reformed") reformed.push_back(e.message());
    if (e.kind() == "worker_join_failed") {
      ++join_failed;
      EXPECT_NE(e.message().find("the job has no checkpoint.dir"), std::string::npos)
          << e.message();
    }
  }
  EXPECT_EQ(join_failed, c.checkpoints ? 0 : 1);
  ASSERT_EQ(reformed.size(), c.reformed.size());
  for (size_t i = 0; i < reformed.size(); ++i) {
    EXPECT_EQ(reformed[i].rfind(c.reformed[i], 0), 0u) << reformed[i];
  }
  ASSERT_EQ(one.variables.size(), 4u);
  ASSERT_EQ(sync.variables.size(), one.variables.size());
  for (const auto& [name, values] : one.variables) {
    ASSERT_TRUE(sync.variables.count(name)) << name;
    const std::vector<float>& got = sync.variables.at(name);
    ASSERT_EQ(got.size(), values.size()) << name;
    const double err = RelativeError(got, values);
    std::cout << name << ": relative error " << err << " over " << values.size() << " elements\n";
    EXPECT_LE(err, 1e-5) << name;
  }
  EXPECT_NEAR(sync.status.train_loss(), one.status.train_loss(), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Changes, ElasticSyncEquivalenceTest,
                         ::testing::Values(
                             // 2 -> 3 -> 2 workers: shares of 30, 20, 30 examples.
                             Case{"central_storage",
                                  2,
                                  1,
                                  Change::kJoinThenLeave,
                                  {"3 replicas (were 2)", "2 replicas (were 3)"}},
                             // 3 workers of 2 devices (10 examples a device), one leaves: shares
                             // of 30, 15 a device.
                             Case{"central_storage", 3, 2, Change::kLeave, {"4 replicas (were 6)"}},
                             // The ring re-formed over the joiner (its copy restored from a
                             // checkpoint taken then) and without worker 1.
                             Case{"multi_worker_mirrored",
                                  2,
                                  1,
                                  Change::kJoinThenLeave,
                                  {"3 replicas (were 2)", "2 replicas (were 3)"}},
                             // Without checkpoints the joiner gets no copy: the ring stays
                             // [0, 1] (and worker 1 is not made to leave).
                             Case{"multi_worker_mirrored",
                                  2,
                                  1,
                                  Change::kJoinThenLeave,
                                  {},
                                  /*checkpoints=*/false}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return absl::StrCat(
                               info.param.strategy, "_", info.param.workers, "workers_",
                               info.param.devices, "devices_",
                               info.param.change == Change::kLeave ? "leave" : "join_then_leave",
                               info.param.checkpoints ? "" : "_no_checkpoints");
                         });

}  // namespace
}  // namespace pscluster
