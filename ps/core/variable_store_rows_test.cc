// VariableStore by row: lookups and sparse gradients on rank-2 DENSE
// variables and HASH_TABLEs, their validation, stats and metrics.
#include <prometheus/registry.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "common/row_ids.h"
#include "common/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/core/variable_store.h"

namespace pscluster {
namespace {

using ::testing::AllOf;
using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::FloatEq;
using ::testing::FloatNear;
using ::testing::HasSubstr;

VariableSpecProto Spec(const std::string& name, Shape shape, const std::string& optimizer = "sgd",
                       VariableKind kind = DENSE, int64_t max_rows = 0) {
  VariableSpecProto spec;
  spec.set_name(name);
  spec.set_dtype(DT_FLOAT32);
  spec.mutable_shape()->Assign(shape.begin(), shape.end());
  spec.mutable_initializer()->set_type("random_uniform");
  spec.mutable_initializer()->set_minval(-1.0f);
  spec.mutable_initializer()->set_maxval(1.0f);
  spec.mutable_initializer()->set_seed(3);
  spec.mutable_optimizer()->set_type(optimizer);
  spec.mutable_optimizer()->set_learning_rate(0.1f);
  spec.mutable_optimizer()->set_initial_accumulator_value(0.1f);
  spec.mutable_optimizer()->set_learning_rate_power(-0.5f);
  spec.mutable_optimizer()->set_beta1(0.9f);
  spec.mutable_optimizer()->set_beta2(0.999f);
  spec.mutable_optimizer()->set_epsilon(1e-7f);
  spec.set_kind(kind);
  spec.set_max_rows(max_rows);
  return spec;
}

VariableSpecProto Table(const std::string& name, int64_t dim, int64_t max_rows = 0,
                        const std::string& optimizer = "sgd") {
  return Spec(name, {dim}, optimizer, HASH_TABLE, max_rows);
}

absl::Status Create(VariableStore& store, std::vector<VariableSpecProto> specs) {
  CreateVariablesRequest req;
  for (auto& s : specs) *req.add_variables() = std::move(s);
  CreateVariablesResponse resp;
  return store.CreateVariables(req, &resp);
}

RowIds Ids(const std::string& name, std::vector<int64_t> ids) {
  RowIds r;
  r.set_name(name);
  r.set_ids(EncodeRowIds(ids));
  return r;
}

// The rows of one lookup, or its error.
absl::StatusOr<std::vector<float>> Lookup(VariableStore& store, const std::string& name,
                                          std::vector<int64_t> ids) {
  PullRequest req;
  *req.add_lookups() = Ids(name, ids);
  PullResponse resp;
  if (absl::Status s = store.Pull(req, &resp); !s.ok()) return s;
  EXPECT_EQ(resp.rows(0).name(), name);
  auto t = DecodeTensor(resp.rows(0).tensor());
  if (!t.ok()) return t.status();
  EXPECT_EQ(t->shape()[0], static_cast<int64_t>(ids.size()));
  return t->ToVector();
}

std::vector<float> PullWhole(VariableStore& store, const std::string& name) {
  PullRequest req;
  req.add_names(name);
  PullResponse resp;
  EXPECT_TRUE(store.Pull(req, &resp).ok());
  return DecodeTensor(resp.tensors(0).tensor())->ToVector();
}

SparseGradient Sparse(const std::string& name, std::vector<int64_t> ids, int64_t dim,
                      std::vector<float> rows) {
  SparseGradient g;
  g.set_name(name);
  g.set_ids(EncodeRowIds(ids));
  EncodeTensor({static_cast<int64_t>(ids.size()), dim}, rows, g.mutable_rows());
  return g;
}

absl::Status Push(VariableStore& store, std::vector<SparseGradient> sparse,
                  std::vector<NamedTensor> dense = {}) {
  PushRequest req;
  for (auto& g : sparse) *req.add_sparse() = std::move(g);
  for (auto& g : dense) *req.add_gradients() = std::move(g);
  PushResponse resp;
  return store.Push(req, &resp);
}

VariableStats StatsOf(VariableStore& store, const std::string& name) {
  StatsResponse resp;
  EXPECT_TRUE(store.Stats(StatsRequest(), &resp).ok());
  for (const VariableStats& s : resp.variables()) {
    if (s.name() == name) return s;
  }
  ADD_FAILURE() << "no stats for " << name;
  return VariableStats();
}

std::vector<float> Row(const std::vector<float>& values, int64_t row, int64_t dim) {
  return std::vector<float>(values.begin() + row * dim, values.begin() + (row + 1) * dim);
}

TEST(VariableStoreRowsTest, DenseLookupGathersRowsInIdOrder) {
  VariableStore store;
  ASSERT_TRUE(Create(store, {Spec("emb", {5, 2})}).ok());
  const std::vector<float> whole = PullWhole(store, "emb");
  auto rows = Lookup(store, "emb", {3, 0, 3});
  ASSERT_TRUE(rows.ok()) << rows.status();
  std::vector<float> want = Row(whole, 3, 2);
  for (float x : Row(whole, 0, 2)) want.push_back(x);
  for (float x : Row(whole, 3, 2)) want.push_back(x);
  EXPECT_EQ(*rows, want);
}

TEST(VariableStoreRowsTest, DenseSparsePushTouchesOnlyThoseRowsAndTheirSlots) {
  VariableStore store;
  ASSERT_TRUE(Create(store, {Spec("emb", {5, 2}, "adagrad")}).ok());
  const std::vector<float> before = PullWhole(store, "emb");
  ASSERT_TRUE(Push(store, {Sparse("emb", {4, 1}, 2, {1.0f, -1.0f, 0.5f, 0.0f})}).ok());
  const std::vector<float> after = PullWhole(store, "emb");
  // accum 0.1 + g^2; w -= 0.1 * g / sqrt(accum).
  const float step1 = 0.1f / std::sqrt(1.1f);
  const float step_half = 0.1f * 0.5f / std::sqrt(0.35f);
  EXPECT_THAT(Row(after, 4, 2), ElementsAre(FloatNear(before[8] - step1, 1e-6f),
                                            FloatNear(before[9] + step1, 1e-6f)));
  EXPECT_THAT(Row(after, 1, 2),
              ElementsAre(FloatNear(before[2] - step_half, 1e-6f), FloatEq(before[3])));
  for (int64_t r : {0, 2, 3}) EXPECT_EQ(Row(after, r, 2), Row(before, r, 2)) << r;
  // Row 0's accumulator is untouched: its first update is a first step too.
  ASSERT_TRUE(Push(store, {Sparse("emb", {0}, 2, {1.0f, 1.0f})}).ok());
  EXPECT_THAT(Row(PullWhole(store, "emb"), 0, 2), ElementsAre(FloatNear(before[0] - step1, 1e-6f),
                                                              FloatNear(before[1] - step1, 1e-6f)));
  const VariableStats stats = StatsOf(store, "emb");
  EXPECT_EQ(stats.kind(), DENSE);
  EXPECT_EQ(stats.rows(), 5);
  EXPECT_EQ(stats.updates(), 2);
  EXPECT_EQ(stats.parameter_bytes(), 40);
  EXPECT_EQ(stats.slot_bytes(), 40);
}

TEST(VariableStoreRowsTest, FtrlIsAcceptedForWholeVariables) {
  VariableStore store;
  ASSERT_TRUE(Create(store, {Spec("w", {3}, "ftrl")}).ok());
  const std::vector<float> w0 = PullWhole(store, "w");
  NamedTensor g;
  g.set_name("w");
  EncodeTensor({3}, {1.0f, 1.0f, 1.0f}, g.mutable_tensor());
  ASSERT_TRUE(Push(store, {}, {g}).ok());
  // l1 = l2 = 0: linear = 1 - (sqrt(1.1) - sqrt(0.1)) / 0.1 * w0 and
  // w = -linear / (sqrt(1.1) / 0.1).
  const std::vector<float> w = PullWhole(store, "w");
  for (int i = 0; i < 3; ++i) {
    const double linear = 1 - (std::sqrt(1.1) - std::sqrt(0.1)) / 0.1 * w0[i];
    EXPECT_NEAR(w[i], -linear / (std::sqrt(1.1) / 0.1), 1e-6) << i;
  }
  EXPECT_EQ(StatsOf(store, "w").slot_bytes(), 2 * 12);
  EXPECT_EQ(StatsOf(store, "w").updates(), 1);
}

TEST(VariableStoreRowsTest, HashTableLookupPushAndStats) {
  auto registry = std::make_shared<prometheus::Registry>();
  VariableStore::Options options;
  options.registry = registry;
  VariableStore store(options);
  ASSERT_TRUE(
      Create(store, {Table("t/part_0", 3, 4, "adam"), Table("t/part_1", 3, 4, "adam")}).ok());
  auto first = Lookup(store, "t/part_0", {10, -1, 10});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(Row(*first, 0, 3), Row(*first, 2, 3));
  // The same id starts with the same row on the other shard.
  EXPECT_EQ(*Lookup(store, "t/part_1", {10}), Row(*first, 0, 3));

  ASSERT_TRUE(Push(store, {Sparse("t/part_0", {10}, 3, {1.0f, -1.0f, 0.0f})}).ok());
  auto pushed = Lookup(store, "t/part_0", {10});
  ASSERT_TRUE(pushed.ok());
  // Adam's first step moves each element by ~lr * sign(g).
  EXPECT_NEAR((*pushed)[0], (*first)[0] - 0.1f, 1e-5f);
  EXPECT_NEAR((*pushed)[1], (*first)[1] + 0.1f, 1e-5f);
  EXPECT_EQ((*pushed)[2], (*first)[2]);

  VariableStats stats = StatsOf(store, "t/part_0");
  EXPECT_EQ(stats.kind(), HASH_TABLE);
  EXPECT_THAT(stats.shape(), ElementsAre(3));
  EXPECT_EQ(stats.rows(), 2);
  EXPECT_EQ(stats.parameter_bytes(), 2 * 3 * 4);
  EXPECT_EQ(stats.slot_bytes(), 2 * 2 * 3 * 4);
  EXPECT_EQ(stats.updates(), 1);
  EXPECT_EQ(stats.evictions(), 0);

  ASSERT_TRUE(Lookup(store, "t/part_0", {100, 101, 102, 103, 104}).ok());
  stats = StatsOf(store, "t/part_0");
  EXPECT_EQ(stats.rows(), 4);
  EXPECT_EQ(stats.evictions(), 3);
  double exported = -1;
  for (const auto& family : registry->Collect()) {
    if (family.name != "pscluster_ps_hash_table_evictions_total") continue;
    for (const auto& metric : family.metric) {
      if (metric.label.size() == 1 && metric.label[0].value == "t/part_0") {
        exported = metric.counter.value;
      }
    }
  }
  EXPECT_EQ(exported, 3);
}

TEST(VariableStoreRowsTest, ReadTableListsEveryKeyAndRowAndCreatesNone) {
  VariableStore store;
  ASSERT_TRUE(Create(store, {Table("t/part_0", 2, 0, "adam"), Spec("emb", {3, 2})}).ok());
  std::vector<uint64_t> keys = {99};
  std::vector<float> values = {1.0f};
  ASSERT_TRUE(store.ReadTable("t/part_0", &keys, &values).ok());
  EXPECT_TRUE(keys.empty());
  EXPECT_TRUE(values.empty());

  auto looked_up = Lookup(store, "t/part_0", {7, -3});
  ASSERT_TRUE(looked_up.ok()) << looked_up.status();
  ASSERT_TRUE(Push(store, {Sparse("t/part_0", {7}, 2, {1.0f, -1.0f})}).ok());
  auto trained = Lookup(store, "t/part_0", {7});
  ASSERT_TRUE(trained.ok());
  ASSERT_NE(*trained, Row(*looked_up, 0, 2));

  ASSERT_TRUE(store.ReadTable("t/part_0", &keys, &values).ok());
  EXPECT_THAT(keys, ElementsAre(7u, static_cast<uint64_t>(int64_t{-3})));
  ASSERT_EQ(values.size(), 4u);
  EXPECT_EQ(Row(values, 0, 2), *trained);                // the trained row
  EXPECT_EQ(Row(values, 1, 2), Row(*looked_up, 1, 2));  // looked up, never trained
  EXPECT_EQ(StatsOf(store, "t/part_0").rows(), 2);

  EXPECT_EQ(store.ReadTable("nope", &keys, &values).code(), absl::StatusCode::kNotFound);
  const absl::Status dense = store.ReadTable("emb", &keys, &values);
  EXPECT_EQ(dense.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(dense.message()), HasSubstr("'emb' is not a HASH_TABLE"));
}

TEST(VariableStoreRowsTest, BadRowRequestsAreRejectedWithoutSideEffects) {
  VariableStore store;
  ASSERT_TRUE(
      Create(store, {Spec("emb", {5, 2}), Spec("bias", {4}), Table("t", 2), Spec("w", {2})}).ok());
  const std::vector<float> emb = PullWhole(store, "emb");
  struct Case {
    PullRequest pull;
    PushRequest push;
    absl::StatusCode code;
    std::vector<std::string> message;
  };
  std::vector<Case> cases;
  auto lookup = [&](RowIds ids, absl::StatusCode code, std::vector<std::string> message) {
    Case c{{}, {}, code, std::move(message)};
    *c.pull.add_lookups() = Ids("t", {1, 2});  // valid, but must create nothing
    *c.pull.add_lookups() = std::move(ids);
    cases.push_back(std::move(c));
  };
  auto push = [&](SparseGradient g, absl::StatusCode code, std::vector<std::string> message) {
    Case c{{}, {}, code, std::move(message)};
    NamedTensor* dense = c.push.add_gradients();  // valid, but must not be applied
    dense->set_name("w");
    EncodeTensor({2}, {1.0f, 1.0f}, dense->mutable_tensor());
    *c.push.add_sparse() = Sparse("t", {1}, 2, {1.0f, 1.0f});
    *c.push.add_sparse() = Sparse("emb", {0}, 2, {1.0f, 1.0f});
    *c.push.add_sparse() = std::move(g);
    cases.push_back(std::move(c));
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  RowIds ragged = Ids("emb", {1});
  ragged.mutable_ids()->resize(12);
  lookup(ragged, kInvalid, {"'emb'", "12 bytes", "multiple of 8"});
  lookup(Ids("emb", {2, 5}), kInvalid, {"id 5 outside [0, 5) of variable 'emb'"});
  lookup(Ids("emb", {-1}), kInvalid, {"id -1 outside [0, 5) of variable 'emb'"});
  lookup(Ids("bias", {0}), kInvalid, {"'bias'", "rank-2"});
  lookup(Ids("missing", {0}), absl::StatusCode::kNotFound, {"'missing'"});
  SparseGradient g = Sparse("t", {1, 2}, 2, {1, 1, 1, 1});
  g.mutable_ids()->resize(9);
  push(g, kInvalid, {"'t'", "9 bytes", "multiple of 8"});
  push(Sparse("t", {7, 3, 7}, 2, {1, 1, 1, 1, 1, 1}), kInvalid, {"'t'", "id 7", "more than once"});
  push(Sparse("emb", {2, 2}, 2, {1, 1, 1, 1}), kInvalid, {"'emb'", "id 2", "more than once"});
  push(Sparse("t", {1, 2}, 3, {1, 1, 1, 1, 1, 1}), kInvalid, {"'t'", "[2, 3]", "[2, 2]"});
  push(Sparse("emb", {1}, 2, {1, 1, 1, 1}), kInvalid, {"'emb'", "bytes"});
  push(Sparse("emb", {9}, 2, {1, 1}), kInvalid, {"id 9 outside [0, 5) of variable 'emb'"});
  push(Sparse("bias", {0}, 1, {1}), kInvalid, {"'bias'", "rank-2"});
  push(Sparse("missing", {0}, 2, {1, 1}), absl::StatusCode::kNotFound, {"'missing'"});
  {
    Case c{{}, {}, kInvalid, {"'t'", "HASH_TABLE"}};
    c.pull.add_names("t");
    cases.push_back(std::move(c));
    Case d{{}, {}, kInvalid, {"'t'", "HASH_TABLE"}};
    NamedTensor* dense = d.push.add_gradients();
    dense->set_name("t");
    EncodeTensor({2}, {1.0f, 1.0f}, dense->mutable_tensor());
    cases.push_back(std::move(d));
  }
  for (const Case& c : cases) {
    PullResponse pull_resp;
    PushResponse push_resp;
    const absl::Status s = c.pull.lookups_size() + c.pull.names_size() > 0
                               ? store.Pull(c.pull, &pull_resp)
                               : store.Push(c.push, &push_resp);
    EXPECT_EQ(s.code(), c.code) << s;
    for (const std::string& m : c.message) EXPECT_THAT(std::string(s.message()), HasSubstr(m));
  }
  // Nothing was applied or created.
  EXPECT_EQ(PullWhole(store, "emb"), emb);
  EXPECT_EQ(StatsOf(store, "t").rows(), 0);
  EXPECT_EQ(StatsOf(store, "w").updates(), 0);
  EXPECT_EQ(StatsOf(store, "emb").updates(), 0);
}

TEST(VariableStoreRowsTest, HashTableSpecsAreChecked) {
  VariableStore store;
  struct Case {
    VariableSpecProto spec;
    std::string message;
  };
  std::vector<Case> cases = {{Table("t", 0), "[dim]"},
                             {Spec("t", {4, 2}, "sgd", HASH_TABLE), "[dim]"},
                             {Table("t", 2, -1), "max_rows"},
                             {Spec("e", {4, 2}, "sgd", DENSE, 10), "max_rows"}};
  VariableSpecProto bad_kind = Table("t", 2);
  bad_kind.set_kind(static_cast<VariableKind>(7));
  cases.push_back({bad_kind, "kind"});
  for (const Case& c : cases) {
    const absl::Status s = Create(store, {c.spec});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message));
  }
  ASSERT_TRUE(Create(store, {Table("t", 2, 10)}).ok());
  EXPECT_TRUE(Create(store, {Table("t", 2, 10)}).ok());
  EXPECT_EQ(Create(store, {Table("t", 2, 20)}).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(Create(store, {Spec("t", {2})}).code(), absl::StatusCode::kAlreadyExists);
}

TEST(VariableStoreRowsTest, ConcurrentSparsePushesAndLookups) {
  VariableStore store;
  VariableSpecProto table = Table("t", 4);
  VariableSpecProto emb = Spec("emb", {8, 4});
  for (VariableSpecProto* spec : {&table, &emb}) {
    spec->mutable_initializer()->set_type("zeros");
    spec->mutable_optimizer()->set_learning_rate(1.0f);
  }
  ASSERT_TRUE(Create(store, {table, emb}).ok());
  constexpr int kThreads = 4;
  constexpr int kIterations = 200;
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&store, th] {
      for (int i = 0; i < kIterations; ++i) {
        const std::vector<float> ones(8, 1.0f);
        EXPECT_TRUE(
            Push(store, {Sparse("t", {5, 1000 + th}, 4, ones), Sparse("emb", {0, 1 + th}, 4, ones)})
                .ok());
        EXPECT_TRUE(Lookup(store, "t", {5, 5, 1000 + th}).ok());
        EXPECT_TRUE(Lookup(store, "emb", {0, 1 + th}).ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_THAT(*Lookup(store, "t", {5}), Each(static_cast<float>(-kThreads * kIterations)));
  EXPECT_THAT(*Lookup(store, "emb", {0}), Each(static_cast<float>(-kThreads * kIterations)));
  for (int th = 0; th < kThreads; ++th) {
    EXPECT_THAT(*Lookup(store, "t", {1000 + th}), Each(static_cast<float>(-kIterations)));
    EXPECT_THAT(*Lookup(store, "emb", {1 + th}), Each(static_cast<float>(-kIterations)));
  }
  EXPECT_EQ(StatsOf(store, "t").rows(), 1 + kThreads);
  EXPECT_EQ(StatsOf(store, "t").updates(), kThreads * kIterations);
}

}  // namespace
}  // namespace pscluster
