// VariableStore's guards: pushes holding NaN or Inf are refused whole (their
// update key stays free for the real retry), and the memory budget refuses
// variables and hash-table rows past its limit before anything is allocated.
#include <prometheus/registry.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/row_ids.h"
#include "common/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/core/memory_budget.h"
#include "ps/core/variable_store.h"

namespace pscluster {
namespace {

using ::testing::AllOf;
using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

VariableSpecProto ConstSpec(const std::string& name, Shape shape, const std::string& optimizer,
                            VariableKind kind = DENSE, int64_t max_rows = 0) {
  VariableSpecProto spec;
  spec.set_name(name);
  spec.set_dtype(DT_FLOAT32);
  spec.mutable_shape()->Assign(shape.begin(), shape.end());
  spec.mutable_initializer()->set_type("constant");
  spec.mutable_initializer()->set_value(1.0f);
  spec.mutable_optimizer()->set_type(optimizer);
  spec.mutable_optimizer()->set_learning_rate(0.5f);
  spec.mutable_optimizer()->set_beta1(0.9f);
  spec.mutable_optimizer()->set_beta2(0.999f);
  spec.mutable_optimizer()->set_epsilon(1e-7f);
  spec.set_kind(kind);
  spec.set_max_rows(max_rows);
  return spec;
}

absl::Status CreateIn(VariableStore& store, std::vector<VariableSpecProto> specs) {
  CreateVariablesRequest req;
  req.set_job("j");
  for (auto& s : specs) *req.add_variables() = std::move(s);
  CreateVariablesResponse resp;
  return store.CreateVariables(req, &resp);
}

std::vector<float> PullWhole(VariableStore& store, const std::string& name) {
  PullRequest req;
  req.add_names(name);
  PullResponse resp;
  EXPECT_TRUE(store.Pull(req, &resp).ok());
  if (resp.tensors_size() != 1) return {};
  return DecodeTensor(resp.tensors(0).tensor())->ToVector();
}

void AddDense(PushRequest& req, const std::string& name, std::vector<float> grad) {
  NamedTensor* g = req.add_gradients();
  g->set_name(name);
  EncodeTensor({static_cast<int64_t>(grad.size())}, grad, g->mutable_tensor());
}

void AddSparse(PushRequest& req, const std::string& name, std::vector<int64_t> ids,
               std::vector<float> rows) {
  SparseGradient* g = req.add_sparse();
  g->set_name(name);
  g->set_ids(EncodeRowIds(ids));
  const int64_t n = static_cast<int64_t>(ids.size());
  EncodeTensor({n, static_cast<int64_t>(rows.size()) / n}, rows, g->mutable_rows());
}

void Key(PushRequest& req, int64_t closure, int64_t step) {
  req.mutable_update()->set_closure_id(closure);
  req.mutable_update()->set_step(step);
}

double Counter(prometheus::Registry& registry, const std::string& name, const std::string& reason) {
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& m : family.metric) {
      for (const auto& l : m.label) {
        if (l.name == "reason" && l.value == reason) return m.counter.value;
      }
    }
  }
  return -1;
}

StatsResponse StatsOf(VariableStore& store) {
  StatsResponse stats;
  EXPECT_TRUE(store.Stats(StatsRequest(), &stats).ok());
  return stats;
}

int64_t HeldBytes(VariableStore& store) {
  int64_t bytes = 0;
  const StatsResponse stats = StatsOf(store);
  for (const VariableStats& v : stats.variables()) {
    bytes += v.parameter_bytes() + v.slot_bytes();
  }
  return bytes;
}

class NonFiniteTest : public ::testing::Test {
 protected:
  NonFiniteTest() : registry_(std::make_shared<prometheus::Registry>()) {
    VariableStore::Options options;
    options.registry = registry_;
    store_ = std::make_unique<VariableStore>(options);
    EXPECT_TRUE(CreateIn(*store_, {ConstSpec("a", {4}, "adam"), ConstSpec("b", {3}, "sgd"),
                                   ConstSpec("emb", {5, 2}, "sgd"),
                                   ConstSpec("table", {2}, "sgd", HASH_TABLE)})
                    .ok());
  }

  double Rejected() {
    return Counter(*registry_, "pscluster_ps_rejected_pushes_total", "non_finite");
  }

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<VariableStore> store_;
};

TEST_F(NonFiniteTest, DenseNanIsRefusedWholeNamingJobVariableAndElement) {
  PushRequest req;
  req.set_job("j");
  AddDense(req, "a", {1, 1, 1, 1});     // fine, but must not apply either
  AddDense(req, "b", {0.5f, 2, kNan});  // element 2
  req.mutable_pull()->add_names("a");   // a fused pull is not answered
  Key(req, 7, 3);
  PushResponse resp;
  absl::Status s = store_->Push(req, &resp);
  ASSERT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("job 'j'"), HasSubstr("variable 'b'"), HasSubstr("non-finite"),
                    HasSubstr("nan"), HasSubstr("element 2 of 3")));
  EXPECT_EQ(resp.pulled().tensors_size(), 0);
  EXPECT_THAT(PullWhole(*store_, "a"), Each(1.0f));
  EXPECT_THAT(PullWhole(*store_, "b"), Each(1.0f));
  const StatsResponse stats = StatsOf(*store_);
  EXPECT_EQ(stats.applied_updates(), 0);
  EXPECT_EQ(stats.applied_steps(), 0);
  EXPECT_EQ(stats.held_keys(), 0);
  EXPECT_EQ(Rejected(), 1);

  // The key was not recorded: the real retry applies.
  PushRequest retry;
  retry.set_job("j");
  AddDense(retry, "b", {1, 1, 1});
  Key(retry, 7, 3);
  PushResponse retried;
  ASSERT_TRUE(store_->Push(retry, &retried).ok());
  EXPECT_FALSE(retried.duplicate());
  EXPECT_THAT(PullWhole(*store_, "b"), Each(0.5f));
  EXPECT_EQ(Rejected(), 1);
}

TEST_F(NonFiniteTest, PlusAndMinusInfAreRefused) {
  for (float bad : {kInf, -kInf}) {
    PushRequest req;
    req.set_job("j");
    AddDense(req, "a", {bad, 0, 0, 0});
    PushResponse resp;
    absl::Status s = store_->Push(req, &resp);
    ASSERT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_THAT(s.message(), AllOf(HasSubstr(bad > 0 ? "(inf)" : "(-inf)"),
                                   HasSubstr("element 0 of 4"), HasSubstr("variable 'a'")));
  }
  EXPECT_THAT(PullWhole(*store_, "a"), Each(1.0f));
  EXPECT_EQ(Rejected(), 2);
}

TEST_F(NonFiniteTest, SparseRowsWithNonFiniteValuesAreRefusedAndCreateNoRows) {
  // A DENSE embedding's rows.
  PushRequest dense;
  dense.set_job("j");
  AddSparse(dense, "emb", {1, 3}, {0, 0, 0, kInf});
  Key(dense, 1, 0);
  PushResponse resp;
  absl::Status s = store_->Push(dense, &resp);
  ASSERT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("variable 'emb'"), HasSubstr("element 3 of 4")));
  EXPECT_THAT(PullWhole(*store_, "emb"), Each(1.0f));

  // A hash table's: refused before any row is created.
  PushRequest table;
  table.set_job("j");
  AddSparse(table, "table", {10, 20}, {1, 1, kNan, 1});
  Key(table, 1, 0);
  s = store_->Push(table, &resp);
  ASSERT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("variable 'table'"), HasSubstr("element 2 of 4")));
  const StatsResponse stats = StatsOf(*store_);
  for (const VariableStats& v : stats.variables()) {
    EXPECT_EQ(v.updates(), 0) << v.name();
    if (v.name() == "table") {
      EXPECT_EQ(v.rows(), 0);
    }
  }
  EXPECT_EQ(StatsOf(*store_).held_keys(), 0);
  EXPECT_EQ(Rejected(), 2);

  // Key (1, 0) is still free.
  PushRequest fine;
  fine.set_job("j");
  AddSparse(fine, "table", {10, 20}, {1, 1, 1, 1});
  Key(fine, 1, 0);
  ASSERT_TRUE(store_->Push(fine, &resp).ok());
  EXPECT_FALSE(resp.duplicate());
}

TEST_F(NonFiniteTest, FirstBadElementOfALargeGradientIsNamed) {
  ASSERT_TRUE(CreateIn(*store_, {ConstSpec("big", {100000}, "sgd")}).ok());
  std::vector<float> grad(100000, 1e30f);  // huge but finite
  grad[70001] = kNan;
  grad[90000] = kInf;
  PushRequest req;
  req.set_job("j");
  AddDense(req, "big", grad);
  PushResponse resp;
  absl::Status s = store_->Push(req, &resp);
  ASSERT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("element 70001 of 100000"));
  // Finite extremes pass.
  std::fill(grad.begin(), grad.end(), std::numeric_limits<float>::max());
  grad[5] = std::numeric_limits<float>::denorm_min();
  grad[6] = -std::numeric_limits<float>::max();
  PushRequest ok;
  ok.set_job("j");
  AddDense(ok, "big", grad);
  EXPECT_TRUE(store_->Push(ok, &resp).ok());
}

// --- memory budget ---

TEST(MemoryBudgetStoreTest, CreateVariablesPastTheLimitCreatesNothing) {
  auto budget = std::make_shared<MemoryBudget>(1000);
  {
    VariableStore::Options options;
    options.memory_budget = budget;
    VariableStore store(options);
    ASSERT_TRUE(CreateIn(store, {ConstSpec("a", {100}, "sgd")}).ok());  // 400 bytes
    EXPECT_EQ(budget->held(), 400);
    // Adam: 100 floats of values and two slots, 1200 bytes.
    absl::Status s = CreateIn(store, {ConstSpec("c", {10}, "sgd"), ConstSpec("b", {100}, "adam")});
    ASSERT_TRUE(absl::IsResourceExhausted(s)) << s;
    EXPECT_THAT(s.message(), AllOf(HasSubstr("job 'j'"), HasSubstr("1240 bytes requested"),
                                   HasSubstr("400 held"), HasSubstr("limit 1000")));
    ASSERT_EQ(StatsOf(store).variables_size(), 1);  // neither b nor c
    EXPECT_EQ(budget->held(), 400);
    // The same variable again counts nothing; one that fits goes in.
    ASSERT_TRUE(CreateIn(store, {ConstSpec("a", {100}, "sgd"), ConstSpec("c", {10}, "sgd")}).ok());
    EXPECT_EQ(budget->held(), 440);
    EXPECT_EQ(budget->held(), HeldBytes(store));
  }
  EXPECT_EQ(budget->held(), 0);  // a store gives its bytes back when destroyed
}

TEST(MemoryBudgetStoreTest, HashTableGrowthPastTheLimitAppliesNothing) {
  // dim 4, sgd: 16 bytes a row; room for w (4 bytes) and 10 rows.
  auto budget = std::make_shared<MemoryBudget>(164);
  auto registry = std::make_shared<prometheus::Registry>();
  VariableStore::Options options;
  options.memory_budget = budget;
  options.registry = registry;
  VariableStore store(options);
  ASSERT_TRUE(
      CreateIn(store, {ConstSpec("t", {4}, "sgd", HASH_TABLE), ConstSpec("w", {1}, "sgd")}).ok());
  ASSERT_EQ(budget->held(), 4);  // w
  std::vector<float> rows8(8 * 4, 1.0f);
  PushRequest first;
  first.set_job("j");
  AddSparse(first, "t", {0, 1, 2, 3, 4, 5, 6, 7}, rows8);
  Key(first, 1, 0);
  PushResponse resp;
  ASSERT_TRUE(store.Push(first, &resp).ok());
  EXPECT_EQ(budget->held(), 4 + 8 * 16);
  EXPECT_EQ(budget->held(), HeldBytes(store));

  // Three new rows (and one held) would pass the limit: nothing applies,
  // neither the dense gradient, the rows, nor the key.
  PushRequest over;
  over.set_job("j");
  AddDense(over, "w", {1});
  AddSparse(over, "t", {7, 8, 9, 10}, std::vector<float>(16, 1.0f));
  Key(over, 1, 1);
  absl::Status s = store.Push(over, &resp);
  ASSERT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("job 'j'"), HasSubstr("3 rows"),
                                 HasSubstr("hash table 't'"), HasSubstr("48 bytes requested"),
                                 HasSubstr("132 held"), HasSubstr("limit 164")));
  EXPECT_EQ(Counter(*registry, "pscluster_ps_rejected_pushes_total", "memory_limit"), 1);
  StatsResponse stats = StatsOf(store);
  EXPECT_EQ(stats.held_keys(), 1);
  for (const VariableStats& v : stats.variables()) {
    EXPECT_EQ(v.updates(), v.name() == "t" ? 1 : 0) << v.name();
    if (v.name() == "t") {
      EXPECT_EQ(v.rows(), 8);
    }
  }
  EXPECT_EQ(budget->held(), HeldBytes(store));

  // A lookup that would create rows past it is refused too; rows held are
  // still read, and growth up to the limit is fine.
  PullRequest lookup;
  RowIds* ids = lookup.add_lookups();
  ids->set_name("t");
  ids->set_ids(EncodeRowIds(std::vector<int64_t>{0, 100, 101, 102}));
  PullResponse pulled;
  s = store.Pull(lookup, &pulled);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  ids->set_ids(EncodeRowIds(std::vector<int64_t>{0, 100, 0, 100}));  // one new row, repeated
  ASSERT_TRUE(store.Pull(lookup, &pulled).ok());
  EXPECT_EQ(budget->held(), 4 + 9 * 16);
  AddSparse(over, "t", {7, 8}, std::vector<float>(8, 1.0f));
  over.mutable_sparse()->DeleteSubrange(0, 1);
  ASSERT_TRUE(store.Push(over, &resp).ok());  // row 8 is the 10th
  EXPECT_EQ(budget->held(), 164);
  EXPECT_EQ(budget->held(), HeldBytes(store));
}

TEST(MemoryBudgetStoreTest, AFullBoundedTableEvictsWithoutNeedingMore) {
  auto budget = std::make_shared<MemoryBudget>(4 * 16);
  VariableStore::Options options;
  options.memory_budget = budget;
  VariableStore store(options);
  ASSERT_TRUE(CreateIn(store, {ConstSpec("t", {4}, "sgd", HASH_TABLE, /*max_rows=*/4)}).ok());
  for (int64_t round = 0; round < 5; ++round) {
    PushRequest req;
    req.set_job("j");
    AddSparse(req, "t", {round * 4, round * 4 + 1, round * 4 + 2, round * 4 + 3},
              std::vector<float>(16, 1.0f));
    PushResponse resp;
    ASSERT_TRUE(store.Push(req, &resp).ok()) << round;
  }
  EXPECT_EQ(budget->held(), 64);
  EXPECT_EQ(budget->held(), HeldBytes(store));
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

TEST(MemoryBudgetStoreTest, RestoreIsCheckedAgainstTheLimitAndReplacesItsOwnBytes) {
  auto budget = std::make_shared<MemoryBudget>(1000);
  VariableStore::Options options;
  options.memory_budget = budget;
  options.checkpoint_root = TempPath("");  // checkpoint names are relative to it
  VariableStore store(options);
  CreateVariablesRequest create;
  create.set_job("j");
  *create.add_variables() = ConstSpec("v", {50}, "adam");  // 600 bytes
  *create.add_variables() = ConstSpec("t/part_0", {2}, "sgd", HASH_TABLE);
  CreateVariablesResponse created;
  ASSERT_TRUE(store.CreateVariables(create, &created).ok());
  PushRequest push;
  push.set_job("j");
  AddSparse(push, "t/part_0", {1, 2, 3}, std::vector<float>(6, 1.0f));
  PushResponse pushed;
  ASSERT_TRUE(store.Push(push, &pushed).ok());
  ASSERT_EQ(budget->held(), 600 + 3 * 8);

  SaveRequest save;
  save.set_name("guards-restore.data");
  SaveResponse saved;
  ASSERT_TRUE(store.Save(save, &saved).ok());
  RestoreRequest restore;
  restore.set_job("j");
  CheckpointFile* f = restore.add_files();
  f->set_name(saved.name());
  f->set_bytes(saved.bytes());
  f->set_checksum(saved.checksum());
  *restore.mutable_variables() = create;
  restore.set_num_ps(1);
  RestoreResponse restored;

  // Into itself: its own bytes count as freed, so it fits.
  ASSERT_TRUE(store.Restore(restore, &restored).ok()) << store.Restore(restore, &restored);
  EXPECT_EQ(budget->held(), 624);
  EXPECT_EQ(budget->held(), HeldBytes(store));

  // Into another store of the same PS: 624 more bytes do not fit.
  VariableStore other(options);
  absl::Status s = other.Restore(restore, &restored);
  ASSERT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("Restore of job 'j'"), HasSubstr("limit 1000")));
  EXPECT_EQ(StatsOf(other).variables_size(), 0);
  EXPECT_EQ(budget->held(), 624);
  // Hash rows are checked once loaded: the dense part fits, the rows not.
  auto tight = std::make_shared<MemoryBudget>(620);
  options.memory_budget = tight;
  VariableStore third(options);
  s = third.Restore(restore, &restored);
  ASSERT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("3 rows of its hash tables"));
  EXPECT_EQ(StatsOf(third).variables_size(), 0);
  EXPECT_EQ(tight->held(), 0);
}

}  // namespace
}  // namespace pscluster
