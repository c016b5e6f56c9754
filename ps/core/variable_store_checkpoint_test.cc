// VariableStore::Save / Restore: bit-exact round trips, rollback of applied
// keys, re-sharding into other layouts, and torn or mismatched checkpoints.
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_file.h"
#include "common/model_variables.h"
#include "common/partitioner.h"
#include "common/row_ids.h"
#include "common/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "protos/checkpoint_data.pb.h"
#include "ps/core/variable_store.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;

const std::vector<uint64_t> kIds = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1000, uint64_t{1} << 40};

VariableSpecProto Spec(const std::string& name, Shape shape, const std::string& optimizer,
                       VariableKind kind = DENSE) {
  VariableSpecProto spec;
  spec.set_name(name);
  spec.set_dtype(DT_FLOAT32);
  spec.set_kind(kind);
  spec.mutable_shape()->Assign(shape.begin(), shape.end());
  spec.mutable_initializer()->set_type("random_uniform");
  spec.mutable_initializer()->set_minval(-1.0f);
  spec.mutable_initializer()->set_maxval(1.0f);
  spec.mutable_initializer()->set_seed(5);
  OptimizerProto* opt = spec.mutable_optimizer();
  opt->set_type(optimizer);
  opt->set_learning_rate(0.1f);
  opt->set_momentum(0.9f);
  opt->set_beta1(0.9f);
  opt->set_beta2(0.999f);
  opt->set_epsilon(1e-7f);
  return spec;
}

// A partitioned [10, 4] embedding with Adam, a hash table with Adam, and a
// plain bias with momentum.
std::vector<VariableSpecProto> Model(int64_t table_max_rows = 0) {
  VariableSpecProto table = Spec("tags", {3}, "adam", HASH_TABLE);
  table.set_max_rows(table_max_rows);
  return {Spec("emb", {10, 4}, "adam"), table, Spec("bias", {4}, "momentum")};
}

// The stores' checkpoint root (a real path: messages name resolved paths).
std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::filesystem::canonical(dir != nullptr ? dir : "/tmp").string();
}

VariableStore::Options StoreOptions() {
  VariableStore::Options options;
  options.checkpoint_root = TempDir();
  return options;
}

// Every PS of one layout.
struct Cluster {
  VariablePlan plan;
  std::vector<std::unique_ptr<VariableStore>> ps;
};

// MinSize(32 bytes, num_ps): "emb" (160 bytes) has num_ps shards (it is whole
// with one PS), "bias" (16 bytes) is never partitioned.
VariablePlan Plan(int num_ps, int64_t table_max_rows = 0) {
  auto plan = PlanVariables(Model(table_max_rows), PartitionerSpec::MinSize(32, num_ps), num_ps);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *plan;
}

Cluster Build(int num_ps, bool create = true) {
  Cluster c;
  c.plan = Plan(num_ps);
  for (int i = 0; i < num_ps; ++i) {
    c.ps.push_back(std::make_unique<VariableStore>(StoreOptions()));
    CreateVariablesResponse resp;
    if (create) {
      EXPECT_TRUE(c.ps[i]->CreateVariables(c.plan.per_ps[i], &resp).ok());
    }
  }
  return c;
}

float GradValue(int step, int64_t a, int64_t b) {
  return 0.01f * static_cast<float>((step * 7 + a * 3 + b * 5) % 11) - 0.05f;
}

// One training step keyed (closure 0, step): the same logical gradients
// whatever the layout; every shard (tables too, possibly with no ids) gets one
// update, so every shard's update counter is `step + 1`.
void Train(Cluster& c, int step) {
  const int n = static_cast<int>(c.ps.size());
  std::vector<PushRequest> push(n);
  for (const VariablePlacementProto& p : c.plan.placement) {
    if (p.name() == "tags") {
      for (int i = 0; i < n; ++i) {
        std::vector<uint64_t> ids;
        std::vector<float> rows;
        for (uint64_t id : kIds) {
          if (HashTableShard(id, n) != i) continue;
          ids.push_back(id);
          for (int k = 0; k < 3; ++k) rows.push_back(GradValue(step, static_cast<int64_t>(id % 97), k));
        }
        SparseGradient* g = push[i].add_sparse();
        g->set_name(absl::StrCat("tags/part_", i));
        g->set_ids(EncodeRowIds(ids));
        EncodeTensor({static_cast<int64_t>(ids.size()), 3}, rows, g->mutable_rows());
      }
      continue;
    }
    const int64_t cols = 4;
    auto add = [&](const std::string& name, int ps, int64_t offset, int64_t rows, Shape shape) {
      std::vector<float> values;
      for (int64_t r = offset; r < offset + rows; ++r) {
        for (int64_t k = 0; k < (p.name() == "emb" ? cols : 1); ++k) values.push_back(GradValue(step, r, k));
      }
      NamedTensor* g = push[ps].add_gradients();
      g->set_name(name);
      EncodeTensor(shape, values, g->mutable_tensor());
    };
    const bool emb = p.name() == "emb";
    if (p.shards_size() == 0) {
      add(p.name(), p.ps_index(), 0, emb ? 10 : 4, emb ? Shape{10, 4} : Shape{4});
    }
    for (const ShardProto& s : p.shards()) {
      add(s.name(), s.ps_index(), s.row_offset(), s.rows(), emb ? Shape{s.rows(), 4} : Shape{s.rows()});
    }
  }
  for (int i = 0; i < n; ++i) {
    push[i].mutable_update()->set_closure_id(0);
    push[i].mutable_update()->set_step(step);
    PushResponse resp;
    ASSERT_TRUE(c.ps[i]->Push(push[i], &resp).ok());
    EXPECT_FALSE(resp.duplicate());
  }
}

std::vector<CheckpointFile> Save(Cluster& c, const std::string& name) {
  // A committed file is never replaced: every save gets names of its own.
  static int saves = 0;
  const int serial = saves++;
  std::vector<CheckpointFile> files;
  for (size_t i = 0; i < c.ps.size(); ++i) {
    SaveRequest req;
    req.set_name(absl::StrCat(name, "-", serial, "-ps-", i, ".data"));
    req.set_ps_index(static_cast<int>(i));
    SaveResponse resp;
    EXPECT_TRUE(c.ps[i]->Save(req, &resp).ok());
    CheckpointFile* f = &files.emplace_back();
    f->set_name(resp.name());
    f->set_bytes(resp.bytes());
    f->set_checksum(resp.checksum());
  }
  return files;
}

absl::Status Restore(Cluster& c, const std::vector<CheckpointFile>& files) {
  for (size_t i = 0; i < c.ps.size(); ++i) {
    RestoreRequest req;
    for (const CheckpointFile& f : files) *req.add_files() = f;
    *req.mutable_variables() = c.plan.per_ps[i];
    req.set_num_ps(static_cast<int>(c.ps.size()));
    RestoreResponse resp;
    if (absl::Status s = c.ps[i]->Restore(req, &resp); !s.ok()) return s;
  }
  return absl::OkStatus();
}

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// The logical state a checkpoint holds, assembled from all its files.
struct State {
  std::map<std::string, std::map<int64_t, std::vector<float>>> dense;  // name -> row -> values+slots
  std::map<std::string, int64_t> updates;
  std::map<uint64_t, std::vector<float>> table;  // id -> values+slots+touches
  std::map<uint64_t, int> table_file;            // id -> index of the file holding it
  std::vector<std::pair<int64_t, int64_t>> keys;
  bool operator==(const State& o) const {
    return dense == o.dense && updates == o.updates && table == o.table && keys == o.keys;
  }
};

State Read(const std::vector<CheckpointFile>& files) {
  State state;
  for (size_t f = 0; f < files.size(); ++f) {
    const std::string path = TempDir() + "/" + files[f].name();
    EXPECT_TRUE(VerifyCheckpointFile(path, files[f]).ok());
    auto reader = CheckpointFileReader::Open(path);
    std::string bytes;
    EXPECT_TRUE(*(*reader)->Next(&bytes));  // header
    while (*(*reader)->Next(&bytes)) {
      CheckpointDataRecord r;
      EXPECT_TRUE(r.ParseFromString(bytes));
      if (r.has_dense()) {
        const DenseSlice& d = r.dense();
        const int64_t width = d.rows() == 0 ? 0 : Floats(d.values()).size() / d.rows();
        state.updates[d.name()] = std::max(state.updates[d.name()], d.updates());
        for (int64_t i = 0; i < d.rows(); ++i) {
          std::vector<float>& row = state.dense[d.name()][d.row_offset() + i];
          for (int s = -1; s < d.slots_size(); ++s) {
            const std::vector<float> all = Floats(s < 0 ? d.values() : d.slots(s));
            row.insert(row.end(), all.begin() + i * width, all.begin() + (i + 1) * width);
          }
        }
      } else if (r.has_hash_table()) {
        const HashTableChunk& t = r.hash_table();
        state.updates[t.name()] = std::max(state.updates[t.name()], t.updates());
        for (size_t i = 0; i < t.ids().size() / 8; ++i) {
          uint64_t id;
          std::memcpy(&id, t.ids().data() + 8 * i, 8);
          std::vector<float>& row = state.table[id];
          for (int s = -1; s < t.slots_size(); ++s) {
            const std::vector<float> all = Floats(s < 0 ? t.values() : t.slots(s));
            row.insert(row.end(), all.begin() + i * 3, all.begin() + (i + 1) * 3);
          }
          row.push_back(static_cast<float>(t.touches(i)));
          state.table_file[id] = static_cast<int>(f);
        }
      } else {
        for (int i = 0; i < r.applied_keys().steps_size(); ++i) {
          state.keys.emplace_back(r.applied_keys().closure_ids(i), r.applied_keys().steps(i));
        }
      }
    }
  }
  std::sort(state.keys.begin(), state.keys.end());
  state.keys.erase(std::unique(state.keys.begin(), state.keys.end()), state.keys.end());
  return state;
}

std::vector<float> PullWhole(VariableStore& store, const std::string& name) {
  PullRequest req;
  req.add_names(name);
  PullResponse resp;
  EXPECT_TRUE(store.Pull(req, &resp).ok()) << name;
  return DecodeTensor(resp.tensors(0).tensor())->ToVector();
}

TEST(CheckpointTest, SameLayoutRoundTripIsBitExactAndTrainsOnIdentically) {
  Cluster a = Build(2);
  for (int step = 0; step < 3; ++step) Train(a, step);
  const std::vector<CheckpointFile> files = Save(a, "same");
  Cluster b = Build(2, /*create=*/false);
  ASSERT_TRUE(Restore(b, files).ok());
  // Saving again gives the very same bytes: values, slots, counters, hash
  // rows in arena order with their eviction state, and applied keys.
  const std::vector<CheckpointFile> again = Save(b, "same-again");
  for (int i = 0; i < 2; ++i) EXPECT_EQ(again[i].checksum(), files[i].checksum()) << i;
  EXPECT_EQ(Read(files).keys.size(), 3u);

  // The next (Adam) step lands on the same bits as in the uninterrupted stores.
  Train(a, 3);
  Train(b, 3);
  EXPECT_EQ(PullWhole(*a.ps[0], "emb/part_0"), PullWhole(*b.ps[0], "emb/part_0"));
  EXPECT_EQ(PullWhole(*a.ps[0], "bias"), PullWhole(*b.ps[0], "bias"));
  EXPECT_TRUE(Read(Save(a, "same-a4")) == Read(Save(b, "same-b4")));
}

TEST(CheckpointTest, AppliedKeysRollBackWithTheCheckpoint) {
  Cluster c = Build(1);
  Train(c, 0);
  const std::vector<CheckpointFile> files = Save(c, "rollback");
  Train(c, 1);
  ASSERT_TRUE(Restore(c, files).ok());
  Train(c, 1);  // applies again (Train expects duplicate == false)
  PushRequest push;
  push.mutable_update()->set_step(0);
  PushResponse resp;
  ASSERT_TRUE(c.ps[0]->Push(push, &resp).ok());
  EXPECT_TRUE(resp.duplicate());
}

void ExpectReshardedEqually(int to) {
  Cluster old = Build(2);
  for (int step = 0; step < 3; ++step) Train(old, step);
  const std::vector<CheckpointFile> files = Save(old, "old");
  const State saved = Read(files);
  ASSERT_EQ(saved.table.size(), kIds.size());

  Cluster now = Build(to, /*create=*/false);
  ASSERT_TRUE(Restore(now, files).ok());
  const State restored = Read(Save(now, absl::StrCat("new", to)));
  EXPECT_TRUE(restored == saved);
  // Each hash row sits on the PS its id hashes to in the new layout.
  for (const auto& [id, file] : restored.table_file) EXPECT_EQ(file, HashTableShard(id, to)) << id;
  // Each dense shard holds its rows of the logical variable.
  for (const VariablePlacementProto& p : now.plan.placement) {
    if (p.name() != "emb") continue;
    EXPECT_EQ(p.shards_size(), to == 1 ? 0 : to);
    for (const ShardProto& s : p.shards()) {
      const std::vector<float> got = PullWhole(*now.ps[s.ps_index()], s.name());
      ASSERT_EQ(got.size(), static_cast<size_t>(s.rows() * 4));
      for (int64_t r = 0; r < s.rows(); ++r) {
        const std::vector<float>& row = saved.dense.at("emb").at(s.row_offset() + r);
        EXPECT_TRUE(std::equal(got.begin() + r * 4, got.begin() + r * 4 + 4, row.begin()));
      }
    }
  }
  // Both layouts train on to the same logical state.
  Train(old, 3);
  Train(now, 3);
  EXPECT_TRUE(Read(Save(old, "old4")) == Read(Save(now, absl::StrCat("new4-", to))));
}

TEST(CheckpointTest, ReshardsTwoPsIntoThree) { ExpectReshardedEqually(3); }
TEST(CheckpointTest, ReshardsTwoPsIntoOne) { ExpectReshardedEqually(1); }

TEST(CheckpointTest, RowsPastMaxRowsAreEvictedByPolicyOnRestore) {
  Cluster old = Build(2);
  for (int step = 0; step < 2; ++step) Train(old, step);
  // Touch ids 1 and 2 once more, so LFU keeps them.
  for (uint64_t id : {1, 2}) {
    PullRequest pull;
    RowIds* lookup = pull.add_lookups();
    lookup->set_name(absl::StrCat("tags/part_", HashTableShard(id, 2)));
    lookup->set_ids(EncodeRowIds(std::vector<uint64_t>{id}));
    PullResponse resp;
    ASSERT_TRUE(old.ps[HashTableShard(id, 2)]->Pull(pull, &resp).ok());
  }
  Cluster small;
  small.plan = Plan(1, /*table_max_rows=*/2);
  small.ps.push_back(std::make_unique<VariableStore>(StoreOptions()));
  ASSERT_TRUE(Restore(small, Save(old, "evict")).ok());
  const State state = Read(Save(small, "evicted"));
  ASSERT_EQ(state.table.size(), 2u);
  EXPECT_TRUE(state.table.count(1) && state.table.count(2));
  StatsResponse stats;
  ASSERT_TRUE(small.ps[0]->Stats(StatsRequest(), &stats).ok());
  for (const VariableStats& v : stats.variables()) {
    if (v.name() == "tags/part_0") {
      EXPECT_EQ(v.evictions(), static_cast<int64_t>(kIds.size()) - 2);
    }
  }
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(CheckpointTest, BadCheckpointsFailAndLeaveTheStoreAsItWas) {
  Cluster old = Build(2);
  Train(old, 0);
  const std::vector<CheckpointFile> files = Save(old, "bad");
  Cluster c = Build(1);
  const std::vector<float> before = PullWhole(*c.ps[0], "emb");

  // Slices that miss rows; a variable missing altogether.
  absl::Status s = Restore(c, {files[0]});
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("'emb'"));
  s = Restore(c, {files[1]});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("'bias'"));

  // A flipped byte or a truncated file, anywhere: DATA_LOSS naming the file.
  const std::string good = ReadBytes(TempDir() + "/" + files[1].name());
  const std::string copy = TempDir() + "/bad-copy.data";
  for (size_t cut : {size_t{0}, size_t{5}, good.size() / 3, good.size() - 1}) {
    for (bool flip : {false, true}) {
      std::string bytes = flip ? good : good.substr(0, cut);
      if (flip) bytes[cut] ^= 0x20;
      std::ofstream(copy, std::ios::binary | std::ios::trunc) << bytes;
      CheckpointFile f = files[1];
      f.set_name("bad-copy.data");
      s = Restore(c, {files[0], f});
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << cut << flip;
      EXPECT_THAT(std::string(s.message()), HasSubstr(copy));
    }
  }

  // A file that matches its checksum but holds bad records: DATA_LOSS too.
  auto write = [&](const std::vector<std::string>& records) {
    auto writer = CheckpointFileWriter::Create(copy);
    for (const std::string& r : records) EXPECT_TRUE((*writer)->Append(r).ok());
    CheckpointFile file = *(*writer)->Commit();
    file.set_name("bad-copy.data");  // the name under the root
    return file;
  };
  CheckpointDataHeader header;
  header.set_format_version(1);
  CheckpointDataRecord slice;
  slice.mutable_dense()->set_name("bias");
  slice.mutable_dense()->add_full_shape(4);
  slice.mutable_dense()->set_rows(4);
  slice.mutable_dense()->set_values("short");
  for (const std::vector<std::string>& records :
       {std::vector<std::string>{}, {"garbage"}, {header.SerializeAsString(), "\xff\xff"},
        {header.SerializeAsString(), slice.SerializeAsString()},
        {header.SerializeAsString()}}) {
    s = Restore(c, {files[0], write(records)});
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  }

  // A different optimizer: FAILED_PRECONDITION naming the variable.
  Cluster other = Build(1, /*create=*/false);
  other.plan.per_ps[0].mutable_variables(2)->mutable_optimizer()->set_type("sgd");
  s = Restore(other, files);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("'bias'"));

  // Nothing changed.
  EXPECT_EQ(PullWhole(*c.ps[0], "emb"), before);
  StatsResponse stats;
  ASSERT_TRUE(c.ps[0]->Stats(StatsRequest(), &stats).ok());
  EXPECT_EQ(stats.variables_size(), 3);
}

TEST(CheckpointTest, ShardSliceInfoIsValidatedAndPartOfTheSpec) {
  VariableStore store;
  auto create = [&](Shape full, int64_t offset) {
    VariableSpecProto spec = Spec("emb/part_1", {4, 4}, "sgd");
    spec.mutable_full_shape()->Assign(full.begin(), full.end());
    spec.set_row_offset(offset);
    CreateVariablesRequest req;
    *req.add_variables() = spec;
    CreateVariablesResponse resp;
    return store.CreateVariables(req, &resp);
  };
  EXPECT_EQ(create({10, 4}, 7).code(), absl::StatusCode::kInvalidArgument);  // past the end
  EXPECT_EQ(create({10, 3}, 0).code(), absl::StatusCode::kInvalidArgument);  // other row shape
  EXPECT_EQ(create({}, 2).code(), absl::StatusCode::kInvalidArgument);       // offset alone
  EXPECT_TRUE(create({10, 4}, 6).ok());
  EXPECT_TRUE(create({10, 4}, 6).ok());
  EXPECT_EQ(create({10, 4}, 5).code(), absl::StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace pscluster
