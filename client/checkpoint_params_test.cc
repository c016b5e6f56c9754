// RestoredCheckpoint on a real checkpoint written by two VariableStores
// through CheckpointManager: a fixed vocabulary split over both PS comes back
// whole and in row order, a hash table with every key of both shards and its
// row, and a lookup behaves as a worker's (creating a missing key's row).
#include "client/checkpoint_params.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/model_variables.h"
#include "common/row_ids.h"
#include "coordinator/core/checkpoint_manager.h"
#include "coordinator/core/job_log.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/variable_store.h"

namespace pscluster {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAreArray;

// user: [64, 4] in two row shards (one per PS); tag: a hash table.
constexpr char kSpec[] = R"(
name: params-test
seed: 3
model:
  inputs:
    dense: 2
    categorical:
      - {name: user, vocab_size: 64, embedding_dim: 4}
      - {name: tag, hashed: true, embedding_dim: 3}
  layers:
    - dense: {units: 8, activation: relu}
    - dense: {units: 1}
  loss: sigmoid_cross_entropy
optimizer: {type: sgd, learning_rate: 0.5}
variable_partitioner: {type: fixed, num_shards: 2}
data:
  train: {format: synthetic_ctr, num_examples: 256, id_space: 64, seed: 5}
  eval: {format: synthetic_ctr, num_examples: 64, id_space: 64, seed: 6}
)";
constexpr char kJobId[] = "job-3";
// Keys on both shards, one past 2^63 (negative as int64).
const std::vector<uint64_t> kTagKeys = {55, 3, uint64_t{1} << 63 | 9, 21, 8, 13};

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/params-", name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// The rows of `name` on `ps` for `ids` (a lookup).
std::vector<float> LookUp(PsClient* ps, const std::string& name, const std::vector<uint64_t>& ids) {
  PullRequest request;
  RowIds* lookup = request.add_lookups();
  lookup->set_name(name);
  lookup->set_ids(EncodeRowIds(ids));
  PullResponse response;
  EXPECT_TRUE(ps->Pull(request, &response).ok());
  absl::StatusOr<Tensor> rows = DecodeTensor(response.rows(0).tensor());
  EXPECT_TRUE(rows.ok());
  return rows.ok() ? rows->ToVector() : std::vector<float>();
}

// A variable (or shard) pulled whole by name.
std::vector<float> PullWhole(PsClient* ps, const std::string& name) {
  PullRequest request;
  request.add_names(name);
  PullResponse response;
  const absl::Status pulled = ps->Pull(request, &response);
  EXPECT_TRUE(pulled.ok()) << pulled;
  if (!pulled.ok()) return {};
  absl::StatusOr<Tensor> t = DecodeTensor(response.tensors(0).tensor());
  EXPECT_TRUE(t.ok());
  return t.ok() ? t->ToVector() : std::vector<float>();
}

// Two PS holding the spec's variables, some user rows and every tag key
// trained once, saved through a CheckpointManager with a job log; what they
// held at the save is kept for comparison.
struct SavedJob {
  explicit SavedJob(const std::string& dir) {
    absl::StatusOr<JobSpec> spec = ParseJobSpec(kSpec, "params-test.yaml");
    EXPECT_TRUE(spec.ok()) << spec.status();
    VariablePlan plan = *PlanVariables(ModelVariables(*spec), spec->partitioner, 2);
    std::vector<std::unique_ptr<VariableStore>> stores;
    std::vector<std::unique_ptr<InProcessPsClient>> clients;
    std::vector<PsClient*> ps;
    VariableStore::Options options;
    options.checkpoint_root = dir;
    for (int i = 0; i < 2; ++i) {
      stores.push_back(std::make_unique<VariableStore>(options));
      clients.push_back(std::make_unique<InProcessPsClient>(stores.back().get()));
      ps.push_back(clients.back().get());
      CreateVariablesResponse response;
      EXPECT_TRUE(ps[i]->CreateVariables(plan.per_ps[i], &response).ok());
    }
    // The user shards, in row order, and the PS of each.
    const VariablePlacementProto& user_placement = plan.placement[0];
    EXPECT_EQ(user_placement.name(), "embedding/user");
    EXPECT_EQ(user_placement.shards_size(), 2);
    // One sparse step on local row 1 of each user shard and on every tag
    // key (created by it), so no row is only its initial value.
    for (const ShardProto& shard : user_placement.shards()) {
      PushRequest push;
      SparseGradient* g = push.add_sparse();
      g->set_name(shard.name());
      g->set_ids(EncodeRowIds(std::vector<int64_t>{1}));
      EncodeTensor(Tensor(Shape{1, 4}, {1, 2, 3, 4}), g->mutable_rows());
      PushResponse response;
      EXPECT_TRUE(ps[shard.ps_index()]->Push(push, &response).ok());
    }
    for (int i = 0; i < 2; ++i) {
      PushRequest push;
      std::vector<uint64_t> keys;
      for (uint64_t k : kTagKeys) {
        if (HashTableShard(k, 2) == i) keys.push_back(k);
      }
      EXPECT_FALSE(keys.empty()) << "no key on shard " << i;
      SparseGradient* tag = push.add_sparse();
      tag->set_name(absl::StrCat("embedding/tag/part_", i));
      tag->set_ids(EncodeRowIds(keys));
      EncodeTensor(Tensor(Shape{static_cast<int64_t>(keys.size()), 3},
                          std::vector<float>(keys.size() * 3, 1.0f)),
                   tag->mutable_rows());
      PushResponse response;
      EXPECT_TRUE(ps[i]->Push(push, &response).ok());
    }
    for (const ShardProto& shard : user_placement.shards()) {
      const std::vector<float> rows = PullWhole(ps[shard.ps_index()], shard.name());
      user.insert(user.end(), rows.begin(), rows.end());
    }
    for (uint64_t k : kTagKeys) {
      const int i = HashTableShard(k, 2);
      tag[k] = LookUp(ps[i], absl::StrCat("embedding/tag/part_", i), {k});
    }
    for (const VariablePlacementProto& p : plan.placement) {
      if (p.name() != "dense_0/kernel") continue;
      if (p.shards_size() == 0) kernel = PullWhole(ps[p.ps_index()], p.name());
      for (const ShardProto& shard : p.shards()) {  // the partitioner splits it too
        const std::vector<float> rows = PullWhole(ps[shard.ps_index()], shard.name());
        kernel.insert(kernel.end(), rows.begin(), rows.end());
      }
    }

    absl::StatusOr<std::unique_ptr<JobLog>> log = JobLog::Open(dir + "/joblog");
    EXPECT_TRUE(log.ok()) << log.status();
    JobLogRecord r;
    r.mutable_started()->set_job_id(kJobId);
    r.mutable_started()->set_spec_yaml(kSpec);
    EXPECT_TRUE((*log)->Append(r).ok());
    CheckpointManager manager(dir, /*keep=*/2, kJobId);
    CheckpointManifest m;
    m.set_global_step(1);
    EXPECT_TRUE(manager.Save(ps, {}, m).ok());
  }

  std::vector<float> user;                     // [64, 4], rows in order
  std::map<uint64_t, std::vector<float>> tag;  // key -> row
  std::vector<float> kernel;                   // dense_0/kernel
};

TEST(RestoredCheckpointTest, ReadsEveryRowOfBothKindsOfTable) {
  const std::string dir = FreshDir("tables");
  const SavedJob saved(dir);
  ASSERT_EQ(saved.user.size(), 64u * 4);
  ASSERT_EQ(saved.kernel.size(), (2u + 4 + 3) * 8);
  absl::StatusOr<CheckpointParams> loaded = LoadCheckpointParams(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->job_id, kJobId);
  ASSERT_EQ(loaded->tables.size(), 2u);

  const EmbeddingTable& user = loaded->tables[0];
  EXPECT_EQ(user.feature, "user");
  EXPECT_FALSE(user.hashed);
  EXPECT_EQ(user.dim, 4);
  EXPECT_TRUE(user.keys.empty());
  EXPECT_EQ(user.values.shape(), (Shape{64, 4}));
  EXPECT_EQ(user.values.ToVector(), saved.user);
  // The trained row 1 of the second shard is row 32 + 1 of the table.
  EXPECT_NE(user.values.data()[33 * 4], 0.0f);

  const EmbeddingTable& tag = loaded->tables[1];
  EXPECT_EQ(tag.feature, "tag");
  EXPECT_TRUE(tag.hashed);
  EXPECT_EQ(tag.dim, 3);
  std::vector<uint64_t> sorted = kTagKeys;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_THAT(tag.keys, ElementsAreArray(sorted));
  ASSERT_EQ(tag.values.shape(), (Shape{6, 3}));
  for (size_t i = 0; i < tag.keys.size(); ++i) {
    const std::vector<float> row(tag.values.data() + i * 3, tag.values.data() + (i + 1) * 3);
    EXPECT_EQ(row, saved.tag.at(tag.keys[i])) << "key " << tag.keys[i];
  }

  // Whole-read variables as before; the tables' entries stay empty.
  ASSERT_EQ(loaded->params.size(), loaded->variables.size());
  EXPECT_EQ(loaded->params[0].num_elements(), 0);  // embedding/user
  EXPECT_EQ(loaded->params[2].ToVector(), saved.kernel);
}

TEST(RestoredCheckpointTest, LookupIsAWorkersAndCreatesMissingKeys) {
  const std::string dir = FreshDir("lookup");
  const SavedJob saved(dir);
  absl::StatusOr<std::unique_ptr<RestoredCheckpoint>> ckpt = RestoredCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  std::vector<Tensor> rows;
  int64_t created = -1;
  ASSERT_TRUE((*ckpt)->Lookup({{40, 1}, {21, 999}}, &rows, &created).ok());
  EXPECT_EQ(created, 1);  // 999
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(std::vector<float>(rows[0].data(), rows[0].data() + 4),
            std::vector<float>(saved.user.begin() + 40 * 4, saved.user.begin() + 41 * 4));
  EXPECT_EQ(std::vector<float>(rows[1].data(), rows[1].data() + 3), saved.tag.at(21));
  // What the stores hold now: the created key too.
  absl::StatusOr<std::vector<EmbeddingTable>> tables = (*ckpt)->ReadTables();
  ASSERT_TRUE(tables.ok()) << tables.status();
  EXPECT_EQ((*tables)[1].keys.size(), kTagKeys.size() + 1);

  EXPECT_EQ((*ckpt)->Lookup({{64}, {}}, &rows, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

TEST(RestoredCheckpointTest, NoCheckpointIsNotFound) {
  EXPECT_EQ(RestoredCheckpoint::Open(FreshDir("empty")).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(LoadCheckpointParams(FreshDir("empty") + "/missing").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace pscluster
