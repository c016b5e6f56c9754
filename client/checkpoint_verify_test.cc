// VerifyCheckpointDir on real checkpoints written by VariableStores through
// CheckpointManager: it restores the newest good checkpoint, reports torn
// directories as torn and corrupted checkpoints as failing verification.
#include "client/checkpoint_verify.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
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
using ::testing::HasSubstr;

// Two row-sharded embeddings, a hash table (one shard per PS), two layers.
constexpr char kSpec[] = R"(
name: verify-test
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
optimizer: {type: adam, learning_rate: 0.01}
variable_partitioner: {type: fixed, num_shards: 2}
data:
  train: {format: synthetic_ctr, num_examples: 256, id_space: 64, seed: 5}
  eval: {format: synthetic_ctr, num_examples: 64, id_space: 64, seed: 6}
)";
// The same without a partitioner: every variable whole on one PS.
constexpr char kWholeSpec[] = R"(
name: verify-test
seed: 3
model:
  inputs:
    dense: 2
    categorical:
      - {name: user, vocab_size: 64, embedding_dim: 4}
  layers:
    - dense: {units: 1}
  loss: sigmoid_cross_entropy
optimizer: {type: adam, learning_rate: 0.01}
data:
  train: {format: synthetic_ctr, num_examples: 256, id_space: 64, seed: 5}
  eval: {format: synthetic_ctr, num_examples: 64, id_space: 64, seed: 6}
)";
constexpr char kJobId[] = "job-7";
const std::vector<uint64_t> kTagIds = {3, 5, 8, 13, 21, 34, 55};

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/verify-", name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void WriteJobLog(const std::string& dir, const char* spec = kSpec) {
  absl::StatusOr<std::unique_ptr<JobLog>> log = JobLog::Open(dir + "/joblog");
  ASSERT_TRUE(log.ok()) << log.status();
  JobLogRecord r;
  r.mutable_started()->set_job_id(kJobId);
  r.mutable_started()->set_spec_yaml(spec);
  ASSERT_TRUE((*log)->Append(r).ok());
}

// Two PS training the spec's variables, saving through a CheckpointManager.
struct Job {
  explicit Job(const std::string& dir, const char* yaml = kSpec)
      : manager(dir, /*keep=*/10, kJobId), store_options(RootedAt(dir)) {
    absl::StatusOr<JobSpec> spec = ParseJobSpec(yaml, "verify-test.yaml");
    EXPECT_TRUE(spec.ok()) << spec.status();
    plan = *PlanVariables(ModelVariables(*spec), spec->partitioner, 2);
    for (int i = 0; i < 2; ++i) {
      stores.push_back(std::make_unique<VariableStore>(store_options));
      clients.push_back(std::make_unique<InProcessPsClient>(stores.back().get()));
      ps.push_back(clients.back().get());
      CreateVariablesResponse response;
      EXPECT_TRUE(ps[i]->CreateVariables(plan.per_ps[i], &response).ok());
    }
    // Create the hash-table rows (a lookup creates a missing row).
    for (uint64_t id : yaml == kSpec ? kTagIds : std::vector<uint64_t>()) {
      const int shard = HashTableShard(id, 2);
      PullRequest request;
      RowIds* lookup = request.add_lookups();
      lookup->set_name(absl::StrCat("embedding/tag/part_", shard));
      lookup->set_ids(EncodeRowIds(std::vector<uint64_t>{id}));
      PullResponse response;
      EXPECT_TRUE(ps[shard]->Pull(request, &response).ok());
    }
  }

  CheckpointManifest Save(int64_t step) {
    CheckpointManifest m;
    m.set_global_step(step);
    m.set_epoch(step / 100);
    absl::StatusOr<CheckpointManifest> saved = manager.Save(ps, {}, m);
    EXPECT_TRUE(saved.ok()) << saved.status();
    return saved.ok() ? *saved : m;
  }

  // Replaces PS `i` by an empty store, as a PS restarted by its supervisor
  // before anyone noticed.
  void RestartEmpty(int i) {
    stores[i] = std::make_unique<VariableStore>(store_options);
    clients[i] = std::make_unique<InProcessPsClient>(stores[i].get());
    ps[i] = clients[i].get();
  }

  // The PS's checkpoint root is the directory itself (the manager's names
  // are "ckpt-<id>/ps-<i>.data").
  static VariableStore::Options RootedAt(const std::string& dir) {
    VariableStore::Options options;
    options.checkpoint_root = dir;
    return options;
  }

  CheckpointManager manager;
  const VariableStore::Options store_options;
  VariablePlan plan;
  std::vector<std::unique_ptr<VariableStore>> stores;
  std::vector<std::unique_ptr<InProcessPsClient>> clients;
  std::vector<PsClient*> ps;
};

void FlipByte(const std::string& path, int64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f) << path;
  f.seekg(offset);
  char b = 0;
  f.read(&b, 1);
  b = static_cast<char>(b ^ 0x01);
  f.seekp(offset);
  f.write(&b, 1);
}

int64_t HashRows(const CheckpointVerifyReport& r) {
  int64_t rows = 0;
  for (const StatsResponse& s : r.stores) {
    for (const VariableStats& v : s.variables()) {
      if (v.kind() == HASH_TABLE) rows += v.rows();
    }
  }
  return rows;
}

// ckpt-0 good, ckpt-1 torn (data files, no MANIFEST), ckpt-2 committed but
// one of its data files corrupted.
std::string GoodTornCorrupted(const std::string& name) {
  const std::string dir = FreshDir(name);
  WriteJobLog(dir);
  Job job(dir);
  job.Save(40);
  job.Save(80);
  const CheckpointManifest corrupted = job.Save(120);
  fs::remove(dir + "/ckpt-1/MANIFEST");
  FlipByte(dir + "/" + corrupted.files(1).name(), corrupted.files(1).bytes() / 2);
  return dir;
}

TEST(CheckpointVerifyTest, RestoresTheGoodOneAndReportsTornAndCorrupted) {
  const std::string dir = GoodTornCorrupted("mixed");
  absl::StatusOr<CheckpointVerifyReport> r = VerifyCheckpointDir({dir, 0});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->restored) << r->error;
  EXPECT_EQ(r->restored_id, 0);
  EXPECT_EQ(r->num_ps, 2);
  EXPECT_EQ(r->job_id, kJobId);
  ASSERT_EQ(r->checkpoints.size(), 3u);

  const CheckpointDirEntry& bad = r->checkpoints[0];
  EXPECT_EQ(bad.id, 2);
  EXPECT_TRUE(bad.committed);
  EXPECT_FALSE(bad.restored);
  EXPECT_THAT(bad.problem, HasSubstr("ps-1.data"));
  EXPECT_THAT(bad.problem, HasSubstr("checksum"));
  EXPECT_FALSE(bad.files_verified);
  EXPECT_EQ(bad.manifest.global_step(), 120);

  const CheckpointDirEntry& torn = r->checkpoints[1];
  EXPECT_EQ(torn.id, 1);
  EXPECT_FALSE(torn.committed);
  EXPECT_FALSE(torn.restored);
  EXPECT_EQ(torn.problem, "no MANIFEST");
  EXPECT_EQ(torn.files, 2);
  EXPECT_GT(torn.bytes, 0);

  const CheckpointDirEntry& good = r->checkpoints[2];
  EXPECT_EQ(good.id, 0);
  EXPECT_TRUE(good.committed);
  EXPECT_TRUE(good.restored);
  EXPECT_EQ(good.problem, "");
  EXPECT_EQ(good.files, 2);
  EXPECT_EQ(good.manifest.global_step(), 40);

  ASSERT_EQ(r->stores.size(), 2u);
  EXPECT_EQ(HashRows(*r), static_cast<int64_t>(kTagIds.size()));
  for (const StatsResponse& s : r->stores) EXPECT_GT(s.variables_size(), 0);

  const std::string text = FormatCheckpointVerify(*r);
  EXPECT_THAT(text, HasSubstr("ckpt-1     torn (never loaded): no MANIFEST"));
  EXPECT_THAT(text, HasSubstr("FAILS verification"));
  EXPECT_THAT(text, HasSubstr("restored checkpoint 0 of job job-7"));
  EXPECT_THAT(text, HasSubstr("ps-1: "));

  const nlohmann::json j = CheckpointVerifyJson(*r);
  EXPECT_EQ(j["restored_id"], 0);
  EXPECT_EQ(j["checkpoints"][0]["verified"], false);
  EXPECT_EQ(j["checkpoints"][1]["state"], "torn");
  EXPECT_FALSE(j["checkpoints"][1].contains("verified"));
  EXPECT_EQ(j["checkpoints"][2]["restored"], true);
  EXPECT_EQ(j["stores"].size(), 2u);
}

TEST(CheckpointVerifyTest, RestoresIntoAnotherNumberOfPs) {
  const std::string dir = GoodTornCorrupted("reshard");
  for (int n : {3, 1}) {
    absl::StatusOr<CheckpointVerifyReport> r = VerifyCheckpointDir({dir, n});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->restored) << r->error;
    EXPECT_EQ(r->restored_id, 0);
    EXPECT_EQ(r->num_ps, n);
    EXPECT_EQ(r->stores.size(), static_cast<size_t>(n));
    EXPECT_EQ(HashRows(*r), static_cast<int64_t>(kTagIds.size()));
  }
}

TEST(CheckpointVerifyTest, NothingRestoresWhenEveryCheckpointIsDamaged) {
  const std::string dir = GoodTornCorrupted("all-bad");
  fs::remove(dir + "/ckpt-0/ps-0.data");
  absl::StatusOr<CheckpointVerifyReport> r = VerifyCheckpointDir({dir, 0});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->restored);
  EXPECT_EQ(r->restored_id, -1);
  EXPECT_TRUE(r->stores.empty());
  EXPECT_THAT(r->error, HasSubstr("no checkpoint restores"));
  EXPECT_THAT(r->checkpoints.back().problem, HasSubstr("ps-0.data"));
  EXPECT_THAT(FormatCheckpointVerify(*r), HasSubstr("NOT RESTORED: no checkpoint restores"));
}

// A PS that restarted empty between health checks and was then saved: the
// checkpoint commits and its files verify, but it lacks that PS's state.
// With every variable partitioned over both PS its rows are missing
// (DATA_LOSS): RestoreLatest falls back to the checkpoint before it.
TEST(CheckpointVerifyTest, FallsBackPastACheckpointOfAnEmptyPs) {
  const std::string dir = FreshDir("empty-ps-sharded");
  WriteJobLog(dir);
  Job job(dir);
  job.Save(10);
  job.RestartEmpty(1);
  job.Save(20);
  absl::StatusOr<CheckpointVerifyReport> r = VerifyCheckpointDir({dir, 0});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->restored) << r->error;
  EXPECT_EQ(r->restored_id, 0);
  ASSERT_EQ(r->checkpoints.size(), 2u);
  EXPECT_TRUE(r->checkpoints[0].files_verified);
  EXPECT_EQ(r->checkpoints[0].problem, "the restore passed over it (its contents do not restore)");
}

// The same with whole variables on the empty PS: they are absent from the
// checkpoint (FAILED_PRECONDITION, not DATA_LOSS); RestoreLatest passes over
// that checkpoint too.
TEST(CheckpointVerifyTest, ReportsACommittedCheckpointThatDoesNotRestore) {
  const std::string dir = FreshDir("empty-ps-whole");
  WriteJobLog(dir, kWholeSpec);
  Job job(dir, kWholeSpec);
  ASSERT_GT(job.plan.per_ps[1].variables_size(), 0);
  job.Save(10);
  job.RestartEmpty(1);
  job.Save(20);
  // The newer checkpoint lacks PS 1's variables: restoring falls back to the
  // older, complete one.
  absl::StatusOr<CheckpointVerifyReport> r = VerifyCheckpointDir({dir, 0});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->restored);
  EXPECT_EQ(r->restored_id, 0);
  ASSERT_EQ(r->checkpoints.size(), 2u);
  EXPECT_TRUE(r->checkpoints[0].files_verified);
  EXPECT_THAT(r->checkpoints[0].problem, HasSubstr("passed over"));
  EXPECT_EQ(r->checkpoints[1].problem, "");
  EXPECT_THAT(FormatCheckpointVerify(*r), HasSubstr("NOT RESTORABLE (its files verify)"));
}

TEST(CheckpointVerifyTest, NeedsAJobLogAndACommittedCheckpoint) {
  const std::string dir = FreshDir("no-log");
  {
    Job job(dir);
    job.Save(10);
  }
  absl::StatusOr<CheckpointVerifyReport> r = VerifyCheckpointDir({dir, 0});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->restored);
  EXPECT_THAT(r->error, HasSubstr("joblog"));
  ASSERT_EQ(r->checkpoints.size(), 1u);
  EXPECT_EQ(r->checkpoints[0].problem, "");  // it verifies; only the spec is missing

  const std::string torn_only = FreshDir("torn-only");
  WriteJobLog(torn_only);
  fs::create_directories(torn_only + "/ckpt-3");
  r = VerifyCheckpointDir({torn_only, 0});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->restored);
  EXPECT_THAT(r->error, HasSubstr("no committed checkpoint"));
  ASSERT_EQ(r->checkpoints.size(), 1u);
  EXPECT_FALSE(r->checkpoints[0].committed);
}

TEST(CheckpointVerifyTest, MissingDirectoryIsNotFound) {
  EXPECT_TRUE(absl::IsNotFound(VerifyCheckpointDir({FreshDir("x") + "/nope", 0}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(VerifyCheckpointDir({FreshDir("y"), -1}).status()));
}

}  // namespace
}  // namespace pscluster
