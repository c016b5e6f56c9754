// CheckpointManager against in-process PS stores: which directories count as
// checkpoints, pruning, falling back past damaged checkpoints, restoring
// into a different number of PS, and failed saves.
#include "coordinator/core/checkpoint_manager.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model_variables.h"
#include "common/partitioner.h"
#include "common/row_ids.h"
#include "common/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/variable_store.h"

namespace pscluster {
namespace {

namespace fs = std::filesystem;

const std::vector<uint64_t> kIds = {1, 2, 3, 17, 1000, uint64_t{1} << 40};

VariableSpecProto Spec(const std::string& name, Shape shape, VariableKind kind = DENSE) {
  VariableSpecProto spec;
  spec.set_name(name);
  spec.set_dtype(DT_FLOAT32);
  spec.set_kind(kind);
  spec.mutable_shape()->Assign(shape.begin(), shape.end());
  spec.mutable_initializer()->set_type("random_uniform");
  spec.mutable_initializer()->set_minval(-1.0f);
  spec.mutable_initializer()->set_maxval(1.0f);
  spec.mutable_initializer()->set_seed(3);
  spec.mutable_optimizer()->set_type("sgd");
  spec.mutable_optimizer()->set_learning_rate(0.5f);
  return spec;
}

// A [12, 4] embedding (partitioned over every PS by MinSize(32)), a hash
// table of width 3 and a bias.
VariablePlan Plan(int num_ps) {
  auto plan = PlanVariables({Spec("emb", {12, 4}), Spec("tags", {3}, HASH_TABLE), Spec("bias", {4})},
                            PartitionerSpec::MinSize(32, num_ps), num_ps);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *plan;
}

// The PS tasks' --checkpoint_root (a real path); every test's checkpoint
// directory is below it.
std::string Root() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return fs::canonical(tmp != nullptr ? tmp : "/tmp").string();
}

// A checkpoint directory's name prefix for the PS: `dir` relative to Root().
std::string Prefix(const std::string& dir) { return dir.substr(Root().size() + 1); }

// The PS tasks of one layout.
struct Cluster {
  explicit Cluster(int num_ps, bool create = true) : plan(Plan(num_ps)) {
    VariableStore::Options options;
    options.checkpoint_root = Root();
    for (int i = 0; i < num_ps; ++i) {
      stores.push_back(std::make_unique<VariableStore>(options));
      clients.push_back(std::make_unique<InProcessPsClient>(stores.back().get()));
      ps.push_back(clients.back().get());
      CreateVariablesResponse response;
      if (create) {
        EXPECT_TRUE(ps[i]->CreateVariables(plan.per_ps[i], &response).ok());
      }
    }
  }
  int num_ps() const { return static_cast<int>(ps.size()); }

  VariablePlan plan;
  std::vector<std::unique_ptr<VariableStore>> stores;
  std::vector<std::unique_ptr<InProcessPsClient>> clients;
  std::vector<PsClient*> ps;
};

const VariablePlacementProto& Placement(const Cluster& c, const std::string& name) {
  for (const VariablePlacementProto& p : c.plan.placement) {
    if (p.name() == name) return p;
  }
  ADD_FAILURE() << "no variable " << name;
  return c.plan.placement[0];
}

// The logical values of DENSE `name`, assembled from its shards.
std::vector<float> Dense(Cluster& c, const std::string& name) {
  std::vector<std::pair<std::string, int>> parts;
  const VariablePlacementProto& p = Placement(c, name);
  if (p.shards_size() == 0) parts.emplace_back(p.name(), p.ps_index());
  for (const ShardProto& s : p.shards()) parts.emplace_back(s.name(), s.ps_index());
  std::vector<float> out;
  for (const auto& [part, ps] : parts) {
    PullRequest request;
    request.add_names(part);
    PullResponse response;
    EXPECT_TRUE(c.ps[ps]->Pull(request, &response).ok()) << part;
    absl::StatusOr<Tensor> t = DecodeTensor(response.tensors(0).tensor());
    EXPECT_TRUE(t.ok());
    out.insert(out.end(), t->values().begin(), t->values().end());
  }
  return out;
}

// Rows of the hash table "tags" for kIds (a lookup creates missing rows).
std::map<uint64_t, std::vector<float>> Table(Cluster& c) {
  std::map<uint64_t, std::vector<float>> out;
  for (uint64_t id : kIds) {
    PullRequest request;
    RowIds* lookup = request.add_lookups();
    lookup->set_name(absl::StrCat("tags/part_", HashTableShard(id, c.num_ps())));
    lookup->set_ids(EncodeRowIds(std::vector<uint64_t>{id}));
    PullResponse response;
    EXPECT_TRUE(c.ps[HashTableShard(id, c.num_ps())]->Pull(request, &response).ok());
    const absl::StatusOr<Tensor> row = DecodeTensor(response.rows(0).tensor());
    out[id].assign(row->values().begin(), row->values().end());
  }
  return out;
}

// Hash-table rows held over all PS.
int64_t TableRows(Cluster& c) {
  int64_t rows = 0;
  for (PsClient* ps : c.ps) {
    StatsResponse stats;
    EXPECT_TRUE(ps->Stats(StatsRequest(), &stats).ok());
    for (const VariableStats& v : stats.variables()) {
      if (v.kind() == HASH_TABLE) rows += v.rows();
    }
  }
  return rows;
}

// One step: a gradient of `g` on every element of "emb" and "bias" and on the
// kIds rows of "tags" (which creates them).
void Train(Cluster& c, float g) {
  std::vector<PushRequest> push(c.num_ps());
  for (const VariablePlacementProto& p : c.plan.placement) {
    if (p.name() == "tags") {
      for (int i = 0; i < c.num_ps(); ++i) {
        std::vector<uint64_t> ids;
        for (uint64_t id : kIds) {
          if (HashTableShard(id, c.num_ps()) == i) ids.push_back(id);
        }
        SparseGradient* s = push[i].add_sparse();
        s->set_name(absl::StrCat("tags/part_", i));
        s->set_ids(EncodeRowIds(ids));
        const int64_t n = static_cast<int64_t>(ids.size());
        EncodeTensor({n, 3}, std::vector<float>(n * 3, g), s->mutable_rows());
      }
      continue;
    }
    const int64_t cols = p.name() == "emb" ? 4 : 1;
    auto add = [&](const std::string& name, int ps, int64_t rows) {
      NamedTensor* t = push[ps].add_gradients();
      t->set_name(name);
      const Shape shape = cols == 1 ? Shape{rows} : Shape{rows, cols};
      EncodeTensor(shape, std::vector<float>(rows * cols, g), t->mutable_tensor());
    };
    if (p.shards_size() == 0) add(p.name(), p.ps_index(), p.name() == "emb" ? 12 : 4);
    for (const ShardProto& s : p.shards()) add(s.name(), s.ps_index(), s.rows());
  }
  for (int i = 0; i < c.num_ps(); ++i) {
    PushResponse response;
    ASSERT_TRUE(c.ps[i]->Push(push[i], &response).ok());
  }
}

std::string FreshDir(const std::string& name) {
  const std::string dir = absl::StrCat(Root(), "/", name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

CheckpointManifest SaveOk(CheckpointManager& m, Cluster& c, int64_t step) {
  CheckpointManifest manifest;
  manifest.set_global_step(step);
  absl::StatusOr<CheckpointManifest> saved = m.Save(c.ps, {}, manifest);
  EXPECT_TRUE(saved.ok()) << saved.status();
  return saved.ok() ? *saved : CheckpointManifest();
}

std::vector<int64_t> Ids(const std::vector<CheckpointManifest>& list) {
  std::vector<int64_t> ids;
  for (const CheckpointManifest& m : list) ids.push_back(m.checkpoint_id());
  return ids;
}

void FlipByte(const std::string& path, int64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f) << path;
  f.seekg(offset);
  char b = 0;
  f.read(&b, 1);
  b = static_cast<char>(b ^ 0x40);
  f.seekp(offset);
  f.write(&b, 1);
}

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary) << contents;
}

TEST(CheckpointManagerTest, SaveWritesManifestAndFiles) {
  const std::string dir = FreshDir("save");
  Cluster c(2);
  CheckpointManager m(dir, 3, "job-1", Prefix(dir));
  const CheckpointManifest saved = SaveOk(m, c, 40);
  EXPECT_EQ(saved.checkpoint_id(), 0);
  EXPECT_EQ(saved.job_id(), "job-1");
  EXPECT_EQ(saved.num_ps(), 2);
  EXPECT_EQ(saved.global_step(), 40);
  ASSERT_EQ(saved.files_size(), 2);
  // The PS were sent names relative to their checkpoint root.
  EXPECT_EQ(saved.files(1).name(), "save/ckpt-0/ps-1.data");
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(dir + "/ckpt-0/ps-1.data")), saved.files(1).bytes());
  EXPECT_TRUE(fs::exists(dir + "/ckpt-0/MANIFEST"));
  EXPECT_EQ(Ids(m.List()), std::vector<int64_t>{0});
}

// The coordinator may reach the storage at another path than the PS (its
// own mount): the PS get names relative to their root, whatever the
// coordinator's path; a manifest of absolute paths (written before checkpoint
// names) restores through the files' base names.
TEST(CheckpointManagerTest, PsGetNamesRelativeToTheirRoot) {
  const std::string real = FreshDir("jobs/elsewhere");
  const std::string mount = Root() + "/coordinator-mount";
  fs::remove_all(mount);
  fs::create_directory_symlink(real, mount);
  Cluster c(2);
  CheckpointManager m(mount, 3, "job", "jobs/elsewhere");
  Train(c, 0.1f);
  CheckpointManifest saved = SaveOk(m, c, 5);
  EXPECT_EQ(saved.files(0).name(), "jobs/elsewhere/ckpt-0/ps-0.data");
  EXPECT_TRUE(fs::exists(real + "/ckpt-0/ps-0.data"));
  EXPECT_TRUE(fs::exists(mount + "/ckpt-0/MANIFEST"));

  for (CheckpointFile& f : *saved.mutable_files()) {
    f.set_name("/old/abs/ckpt-0/" + fs::path(f.name()).filename().string());
  }
  Cluster restored(2, /*create=*/false);
  ASSERT_TRUE(m.Restore(saved, restored.plan, restored.ps).ok());
  EXPECT_EQ(Dense(restored, "emb"), Dense(c, "emb"));
}

TEST(CheckpointManagerTest, ListIgnoresTornDirsAndUnreadableManifests) {
  const std::string dir = FreshDir("list");
  Cluster c(2);
  CheckpointManager m(dir, 10, "job", Prefix(dir));
  SaveOk(m, c, 10);  // ckpt-0
  SaveOk(m, c, 20);  // ckpt-1
  // Torn: data files but no MANIFEST (a crash before the commit).
  fs::create_directories(dir + "/ckpt-5");
  fs::copy_file(dir + "/ckpt-1/ps-0.data", dir + "/ckpt-5/ps-0.data");
  // A MANIFEST that does not parse, and one naming another checkpoint.
  fs::create_directories(dir + "/ckpt-6");
  WriteFile(dir + "/ckpt-6/MANIFEST", "\xff\xff\xff garbage");
  fs::create_directories(dir + "/ckpt-7");
  fs::copy_file(dir + "/ckpt-1/MANIFEST", dir + "/ckpt-7/MANIFEST");
  // Not checkpoint directories at all.
  fs::create_directories(dir + "/ckpt-x");
  WriteFile(dir + "/joblog", "");
  EXPECT_EQ(Ids(m.List()), (std::vector<int64_t>{1, 0}));
}

TEST(CheckpointManagerTest, SavePrunesToKeepAndRemovesTornDirs) {
  const std::string dir = FreshDir("prune");
  Cluster c(2);
  CheckpointManager m(dir, 2, "job", Prefix(dir));
  SaveOk(m, c, 10);
  SaveOk(m, c, 20);
  fs::create_directories(dir + "/ckpt-2");  // torn
  fs::copy_file(dir + "/ckpt-1/ps-0.data", dir + "/ckpt-2/ps-0.data");
  // The next id is past the torn one, and it is removed with the oldest.
  EXPECT_EQ(SaveOk(m, c, 30).checkpoint_id(), 3);
  EXPECT_EQ(Ids(m.List()), (std::vector<int64_t>{3, 1}));
  EXPECT_FALSE(fs::exists(dir + "/ckpt-0"));
  EXPECT_FALSE(fs::exists(dir + "/ckpt-2"));
  SaveOk(m, c, 40);
  EXPECT_EQ(Ids(m.List()), (std::vector<int64_t>{4, 3}));
  EXPECT_FALSE(fs::exists(dir + "/ckpt-1"));
  // A delete an earlier crash cut short (old checkpoints are renamed to
  // ".deleting-ckpt-N" first) is no checkpoint, and goes with the next commit.
  fs::create_directories(dir + "/.deleting-ckpt-1");
  fs::copy_file(dir + "/ckpt-3/ps-0.data", dir + "/.deleting-ckpt-1/ps-0.data");
  EXPECT_EQ(Ids(m.List()), (std::vector<int64_t>{4, 3}));
  SaveOk(m, c, 50);
  EXPECT_EQ(Ids(m.List()), (std::vector<int64_t>{5, 4}));
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(name == "ckpt-5" || name == "ckpt-4") << name << " left behind";
  }
}

TEST(CheckpointManagerTest, RestoreLatestFallsBackPastACorruptedCheckpoint) {
  const std::string dir = FreshDir("fallback");
  Cluster c(2);
  CheckpointManager m(dir, 3, "job", Prefix(dir));
  Train(c, 0.1f);
  SaveOk(m, c, 1);  // ckpt-0
  const std::vector<float> emb0 = Dense(c, "emb");
  Train(c, 0.2f);
  const CheckpointManifest newest = SaveOk(m, c, 2);  // ckpt-1
  ASSERT_NE(Dense(c, "emb"), emb0);
  FlipByte(dir + "/ckpt-1/ps-1.data", newest.files(1).bytes() / 2);

  Cluster restored(2, /*create=*/false);
  absl::StatusOr<CheckpointManifest> got = m.RestoreLatest(restored.plan, restored.ps);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->checkpoint_id(), 0);
  EXPECT_EQ(got->global_step(), 1);
  EXPECT_EQ(Dense(restored, "emb"), emb0);

  // A checkpoint missing a file falls back too; with nothing left: NOT_FOUND.
  fs::remove(dir + "/ckpt-0/ps-0.data");
  Cluster none(2, /*create=*/false);
  got = m.RestoreLatest(none.plan, none.ps);
  EXPECT_TRUE(absl::IsNotFound(got.status())) << got.status();
}

TEST(CheckpointManagerTest, RestoreLatestWithoutCheckpointsIsNotFound) {
  const std::string dir = FreshDir("empty");
  CheckpointManager m(dir, 3, "job", Prefix(dir));
  Cluster c(1, /*create=*/false);
  EXPECT_TRUE(absl::IsNotFound(m.RestoreLatest(c.plan, c.ps).status()));
  CheckpointManager missing(dir + "/does-not-exist", 3, "job");
  EXPECT_TRUE(missing.List().empty());
  EXPECT_TRUE(absl::IsNotFound(missing.RestoreLatest(c.plan, c.ps).status()));
}

TEST(CheckpointManagerTest, RestoresIntoADifferentNumberOfPs) {
  const std::string dir = FreshDir("reshard");
  CheckpointManager m(dir, 3, "job", Prefix(dir));
  Cluster two(2);
  ASSERT_EQ(Placement(two, "emb").shards_size(), 2);
  Train(two, 0.25f);
  Train(two, -0.5f);
  const std::vector<float> emb = Dense(two, "emb");
  const std::vector<float> bias = Dense(two, "bias");
  const auto table = Table(two);
  ASSERT_EQ(TableRows(two), static_cast<int64_t>(kIds.size()));
  SaveOk(m, two, 2);

  // 2 -> 3: three emb shards, three table shards.
  Cluster three(3, /*create=*/false);
  ASSERT_EQ(Placement(three, "emb").shards_size(), 3);
  absl::StatusOr<CheckpointManifest> got = m.RestoreLatest(three.plan, three.ps);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->num_ps(), 2);
  EXPECT_EQ(TableRows(three), static_cast<int64_t>(kIds.size()));
  EXPECT_EQ(Dense(three, "emb"), emb);
  EXPECT_EQ(Dense(three, "bias"), bias);
  EXPECT_EQ(Table(three), table);

  // Saved by 3 PS, restored into 1 (emb whole again).
  Train(three, 0.125f);
  const std::vector<float> emb3 = Dense(three, "emb");
  const auto table3 = Table(three);
  ASSERT_NE(emb3, emb);
  EXPECT_EQ(SaveOk(m, three, 3).num_ps(), 3);
  Cluster one(1, /*create=*/false);
  ASSERT_EQ(Placement(one, "emb").shards_size(), 0);
  got = m.RestoreLatest(one.plan, one.ps);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->checkpoint_id(), 1);
  EXPECT_EQ(TableRows(one), static_cast<int64_t>(kIds.size()));
  EXPECT_EQ(Dense(one, "emb"), emb3);
  EXPECT_EQ(Table(one), table3);
}

}  // namespace
}  // namespace pscluster

namespace pscluster {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A PS whose Save writes part of its file and then fails with `error`.
class FailingSavePs : public InProcessPsClient {
 public:
  FailingSavePs(VariableStore* store, absl::Status error)
      : InProcessPsClient(store), error_(std::move(error)) {}
  absl::Status Save(const SaveRequest& request, SaveResponse* response) override {
    if (error_.ok()) return InProcessPsClient::Save(request, response);
    WriteFile(Root() + "/" + request.name(), "partial");
    return error_;
  }
  absl::Status error_;
};

TEST(CheckpointManagerFailureTest, AFailedSaveRemovesItsDirectoryAndReusesTheId) {
  const std::string dir = FreshDir("failed-save");
  Cluster c(2);
  FailingSavePs full(c.stores[1].get(), absl::OkStatus());
  std::vector<PsClient*> ps = {c.ps[0], &full};
  CheckpointManager m(dir, 3, "job", Prefix(dir));
  CheckpointManifest manifest;
  ASSERT_TRUE(m.Save(ps, {}, manifest).ok());  // ckpt-0
  const std::string committed = ReadAll(dir + "/ckpt-0/ps-1.data");
  full.error_ = absl::ResourceExhaustedError("write ps-1.data.tmp: No space left on device");
  for (int attempt = 0; attempt < 3; ++attempt) {
    absl::StatusOr<CheckpointManifest> saved = m.Save(ps, {}, manifest);
    ASSERT_FALSE(saved.ok());
    EXPECT_TRUE(absl::IsResourceExhausted(saved.status())) << saved.status();
    EXPECT_FALSE(IsPsFailure(saved.status()));
    EXPECT_THAT(std::string(saved.status().message()), ::testing::HasSubstr("checkpoint 1: PS 1"));
    EXPECT_FALSE(fs::exists(dir + "/ckpt-1"));  // PS 0's file and PS 1's partial one went too
  }
  // The committed checkpoint is untouched.
  EXPECT_EQ(Ids(m.List()), std::vector<int64_t>{0});
  EXPECT_EQ(ReadAll(dir + "/ckpt-0/ps-1.data"), committed);
  full.error_ = absl::OkStatus();
  absl::StatusOr<CheckpointManifest> saved = m.Save(ps, {}, manifest);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->checkpoint_id(), 1);
}

TEST(CheckpointManagerFailureTest, AnUnreachablePsIsAPsFailure) {
  const std::string dir = FreshDir("unreachable-ps");
  Cluster c(2);
  FailingSavePs down(c.stores[0].get(), absl::UnavailableError("connection refused"));
  CheckpointManager m(dir, 3, "job", Prefix(dir));
  absl::StatusOr<CheckpointManifest> saved = m.Save({&down, c.ps[1]}, {}, CheckpointManifest());
  ASSERT_FALSE(saved.ok());
  EXPECT_TRUE(IsPsFailure(saved.status())) << saved.status();
  EXPECT_FALSE(fs::exists(dir + "/ckpt-0"));
}

TEST(CheckpointManagerFailureTest, ADirectoryThatIsAFileNamesTheErrno) {
  const std::string parent = FreshDir("not-a-dir");
  const std::string dir = parent + "/ckpt";
  WriteFile(dir, "a regular file");
  Cluster c(2);
  CheckpointManager m(dir, 3, "job", Prefix(dir));
  absl::StatusOr<CheckpointManifest> saved = m.Save(c.ps, {}, CheckpointManifest());
  ASSERT_FALSE(saved.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(saved.status())) << saved.status();  // ENOTDIR
  EXPECT_FALSE(IsPsFailure(saved.status()));
  EXPECT_THAT(std::string(saved.status().message()), ::testing::HasSubstr(dir));
  EXPECT_THAT(std::string(saved.status().message()), ::testing::HasSubstr("Not a directory"));
  EXPECT_TRUE(fs::is_regular_file(dir));
}

}  // namespace
}  // namespace pscluster
