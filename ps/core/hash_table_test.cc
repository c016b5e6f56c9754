#include "ps/core/hash_table.h"

#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::HasSubstr;

OptimizerProto OptimizerOf(const std::string& type, float lr) {
  OptimizerProto p;
  p.set_type(type);
  p.set_learning_rate(lr);
  p.set_momentum(0.9f);
  p.set_initial_accumulator_value(0.1f);
  p.set_beta1(0.9f);
  p.set_beta2(0.999f);
  p.set_epsilon(1e-7f);
  p.set_learning_rate_power(-0.5f);
  return p;
}

InitializerProto Constant(float value) {
  InitializerProto init;
  init.set_type("constant");
  init.set_value(value);
  return init;
}

InitializerProto Uniform() {
  InitializerProto init;
  init.set_type("random_uniform");
  init.set_minval(-1.0f);
  init.set_maxval(1.0f);
  init.set_seed(42);
  return init;
}

// A table and the optimizer it borrows.
struct TestTable {
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<HashTable> table;

  std::vector<float> Lookup(const std::vector<uint64_t>& ids) {
    std::vector<float> out(ids.size() * table->dim());
    table->Lookup(ids, absl::MakeSpan(out));
    return out;
  }
  void Push(int64_t step, const std::vector<uint64_t>& ids, const std::vector<float>& grads) {
    table->ApplyGradients(step, ids, grads);
  }
};

TestTable MakeTable(const std::string& name, int64_t dim, int64_t max_rows = 0,
                    EvictionPolicy eviction = LFU, InitializerProto init = Constant(0.5f),
                    OptimizerProto optimizer = OptimizerOf("sgd", 0.1f),
                    prometheus::Counter* counter = nullptr) {
  TestTable t;
  auto opt = Optimizer::Create(optimizer);
  EXPECT_TRUE(opt.ok()) << opt.status();
  t.optimizer = std::move(*opt);
  HashTable::Options options;
  options.name = name;
  options.dim = dim;
  options.max_rows = max_rows;
  options.eviction = eviction;
  options.initializer = init;
  options.optimizer = t.optimizer.get();
  options.evictions_counter = counter;
  auto table = HashTable::Create(options);
  EXPECT_TRUE(table.ok()) << table.status();
  t.table = std::move(*table);
  return t;
}

std::vector<float> Slice(const std::vector<float>& rows, int i, int dim) {
  return std::vector<float>(rows.begin() + i * dim, rows.begin() + (i + 1) * dim);
}

// What a call may add bounds what it adds (the memory budget relies on it).
TEST(HashTableTest, RowsToAddCountsDistinctMissingIdsUpToTheFreeRows) {
  TestTable t = MakeTable("t", 2, /*max_rows=*/5, LFU, Constant(0.5f), OptimizerOf("adam", 0.1f));
  EXPECT_EQ(t.table->row_bytes(), 2 * 4 * 3);  // weights and Adam's two slots
  EXPECT_EQ(t.table->FreeRows(), 5);
  const std::vector<uint64_t> ids = {1, 2, 2, 3};
  EXPECT_EQ(t.table->RowsToAdd(ids), 3);
  std::vector<float> out(ids.size() * 2);
  EXPECT_EQ(t.table->Lookup(ids, absl::MakeSpan(out)), 3);
  EXPECT_EQ(t.table->RowsToAdd(ids), 0);
  EXPECT_EQ(t.table->FreeRows(), 2);
  const std::vector<uint64_t> more = {3, 4, 5, 6};  // 3 new, room for 2: one evicts
  EXPECT_EQ(t.table->RowsToAdd(more), 2);
  EXPECT_EQ(t.table->ApplyGradients(1, more, std::vector<float>(8, 0.1f)), 2);
  EXPECT_EQ(t.table->FreeRows(), 0);
  EXPECT_EQ(t.table->RowsToAdd(std::vector<uint64_t>{7, 8}), 0);  // full: evicts
}

TEST(HashTableTest, SameIdGetsTheSameInitialRowOnEveryShard) {
  TestTable a = MakeTable("x/part_0", 4, 0, LFU, Uniform());
  TestTable b = MakeTable("x/part_1", 4, 0, LFU, Uniform());
  const std::vector<uint64_t> ids = {7, 1ull << 40, 3};
  const std::vector<float> rows_a = a.Lookup(ids);
  EXPECT_EQ(rows_a, b.Lookup({7, 1ull << 40, 3}));
  EXPECT_NE(Slice(rows_a, 0, 4), Slice(rows_a, 2, 4));
  // Created on first touch: rows are counted.
  EXPECT_EQ(a.table->GetStats().rows, 3);
  EXPECT_EQ(a.table->GetStats().parameter_bytes, 3 * 4 * 4);
}

TEST(HashTableTest, DuplicateIdsGetIdenticalRowsInRequestOrder) {
  TestTable t = MakeTable("t", 3, 0, LFU, Uniform());
  const std::vector<float> five = t.Lookup({5});
  const std::vector<float> three = t.Lookup({3});
  ASSERT_NE(five, three);
  const std::vector<float> rows = t.Lookup({5, 3, 5, 5, 3});
  EXPECT_EQ(Slice(rows, 0, 3), five);
  EXPECT_EQ(Slice(rows, 1, 3), three);
  EXPECT_EQ(Slice(rows, 2, 3), five);
  EXPECT_EQ(Slice(rows, 3, 3), five);
  EXPECT_EQ(Slice(rows, 4, 3), three);
  EXPECT_EQ(t.table->GetStats().rows, 2);
}

TEST(HashTableTest, ExportValuesListsEveryRowAsALookupReturnsItAndTouchesNothing) {
  TestTable t = MakeTable("t", 2, 0, LFU, Uniform(), OptimizerOf("adagrad", 0.1f));
  std::vector<uint64_t> ids;
  std::vector<float> values;
  t.table->ExportValues(&ids, &values);
  EXPECT_TRUE(ids.empty());
  EXPECT_TRUE(values.empty());
  const std::vector<uint64_t> keys = {9, ~uint64_t{0} - 4, 1};
  t.Lookup(keys);
  t.Push(1, {1}, {0.5f, -0.5f});
  t.table->ExportValues(&ids, &values);
  EXPECT_EQ(ids, keys);  // arena order: first touch
  ASSERT_EQ(values.size(), 3u * 2);
  const HashTable::Stats before = t.table->GetStats();
  for (int i = 0; i < 3; ++i) {
    // Contains first: a lookup of a missing id would create it.
    ASSERT_TRUE(t.table->Contains(ids[i]));
    EXPECT_EQ(Slice(values, i, 2), t.Lookup({ids[i]})) << "row " << i;
  }
  EXPECT_EQ(t.table->GetStats().rows, before.rows);
}

TEST(HashTableTest, NeverHoldsMoreThanMaxRowsAndCountsEvictions) {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::Counter& counter = prometheus::BuildCounter()
                                     .Name("pscluster_ps_hash_table_evictions_total")
                                     .Register(*registry)
                                     .Add({});
  TestTable t = MakeTable("t", 2, 100, LFU, Constant(0.5f), OptimizerOf("adam", 0.01f), &counter);
  uint64_t next = 0;
  // 1000 distinct ids, in calls of growing size (the last ones larger than
  // the table), alternating lookups and pushes.
  for (int size = 1; next < 1000; size = size * 2 % 250 + 1) {
    std::vector<uint64_t> ids;
    for (int i = 0; i < size && next < 1000; ++i) ids.push_back(next++);
    if (size % 2 == 0) {
      t.Lookup(ids);
    } else {
      t.Push(1, ids, std::vector<float>(ids.size() * 2, 1.0f));
    }
    const HashTable::Stats stats = t.table->GetStats();
    ASSERT_LE(stats.rows, 100);
    ASSERT_EQ(stats.evictions, std::max<int64_t>(0, static_cast<int64_t>(next) - 100));
  }
  const HashTable::Stats stats = t.table->GetStats();
  EXPECT_EQ(stats.rows, 100);
  EXPECT_EQ(stats.evictions, 900);
  EXPECT_EQ(stats.slot_bytes, 2 * 100 * 2 * 4);
  EXPECT_EQ(counter.Value(), 900);
}

TEST(HashTableTest, OversizedPushUpdatesTheRowsThatStay) {
  // 30 distinct ids into a 10-row table: the rows still resident afterwards
  // carry their update (none was reset by a later eviction in the same call).
  TestTable t = MakeTable("t", 2, 10);
  std::vector<uint64_t> ids;
  for (uint64_t id = 100; id < 130; ++id) ids.push_back(id);
  t.Push(1, ids, std::vector<float>(60, 1.0f));
  int resident = 0;
  for (uint64_t id : ids) {
    if (!t.table->Contains(id)) continue;
    ++resident;
    EXPECT_THAT(t.Lookup({id}), Each(FloatNear(0.4f, 1e-6f))) << id;
  }
  EXPECT_EQ(resident, 10);
}

// Touches hot ids 0..9 fifty times, then floods the 100-row table with 1000
// one-off ids (one call each); returns how many hot ids are still resident.
int HotIdsLeftAfterFlood(EvictionPolicy policy) {
  TestTable t = MakeTable("t", 2, 100, policy);
  const std::vector<uint64_t> hot = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  for (int i = 0; i < 50; ++i) t.Lookup(hot);
  for (uint64_t id = 1000; id < 2000; ++id) t.Lookup({id});
  int left = 0;
  for (uint64_t id : hot) left += t.table->Contains(id) ? 1 : 0;
  EXPECT_EQ(t.table->GetStats().rows, 100);
  return left;
}

TEST(HashTableTest, LfuKeepsHotIdsThroughAFloodOfOneOffIds) {
  EXPECT_EQ(HotIdsLeftAfterFlood(LFU), 10);
}

TEST(HashTableTest, AgeEvictsIdsNotTouchedRecentlyHowEverHot) {
  EXPECT_EQ(HotIdsLeftAfterFlood(AGE), 0);
}

TEST(HashTableTest, AgeKeepsRecentlyTouchedIds) {
  TestTable t = MakeTable("t", 2, 100, AGE);
  for (uint64_t id = 0; id < 100; ++id) t.Lookup({id});
  const std::vector<uint64_t> recent = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  for (uint64_t id = 1000; id < 2000; ++id) {
    t.Lookup(recent);
    t.Lookup({id});
  }
  for (uint64_t id : recent) EXPECT_TRUE(t.table->Contains(id)) << id;
  for (uint64_t id = 10; id < 100; ++id) EXPECT_FALSE(t.table->Contains(id)) << id;
}

TEST(HashTableTest, SgdAndAdagradUpdateOnlyTheTouchedRows) {
  TestTable sgd = MakeTable("t", 2);
  sgd.Push(1, {4, 9}, {1.0f, -2.0f, 0.5f, 0.0f});
  EXPECT_THAT(sgd.Lookup({4, 9, 1}), ElementsAre(FloatNear(0.4f, 1e-6f), FloatNear(0.7f, 1e-6f),
                                                 FloatNear(0.45f, 1e-6f), 0.5f, 0.5f, 0.5f));

  // accum 0.1 + 1 = 1.1, w = 0.5 - 0.1 / sqrt(1.1); then accum 1.35, w -= 0.05 / sqrt(1.35).
  TestTable adagrad = MakeTable("t", 1, 0, LFU, Constant(0.5f), OptimizerOf("adagrad", 0.1f));
  adagrad.Push(1, {3}, {1.0f});
  adagrad.Push(2, {3}, {0.5f});
  EXPECT_THAT(adagrad.Lookup({3}), ElementsAre(FloatNear(0.5f - 0.0953462f - 0.0430331f, 1e-6f)));
}

// Keras Adam on one element in double precision.
struct AdamReference {
  double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-7;
  double w = 0.5, m = 0, v = 0;
  void Step(int64_t t, double g) {
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double lr_t = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    w -= lr_t * m / (std::sqrt(v) + eps);
  }
};

TEST(HashTableTest, LazyAdamLeavesUntouchedRowsMomentsAlone) {
  TestTable t = MakeTable("t", 1, 0, LFU, Constant(0.5f), OptimizerOf("adam", 0.01f));
  AdamReference row1, row2;
  // Step 1 touches both rows, steps 2-4 only row 1, step 5 row 2 again: row
  // 2's m and v must not have decayed in between, but its bias correction
  // uses the variable's step (5).
  t.Push(1, {1, 2}, {0.3f, -0.2f});
  row1.Step(1, 0.3);
  row2.Step(1, -0.2);
  for (int64_t step = 2; step <= 4; ++step) {
    t.Push(step, {1}, {0.1f});
    row1.Step(step, 0.1);
  }
  t.Push(5, {2}, {0.4f});
  row2.Step(5, 0.4);
  EXPECT_THAT(t.Lookup({1, 2}), ElementsAre(FloatNear(row1.w, 1e-6), FloatNear(row2.w, 1e-6)));
  // The eager alternative (decaying row 2's moments at steps 2-4) differs.
  AdamReference eager;
  eager.Step(1, -0.2);
  for (int64_t step = 2; step <= 4; ++step) eager.Step(step, 0.0);
  eager.Step(5, 0.4);
  EXPECT_GT(std::abs(eager.w - row2.w), 1e-5);
}

TEST(HashTableTest, FtrlMatchesTfFormula) {
  OptimizerProto p = OptimizerOf("ftrl", 0.2f);
  p.set_l1(0.01f);
  p.set_l2(0.05f);
  p.set_beta(0.5f);
  TestTable t = MakeTable("t", 2, 0, LFU, Constant(0.5f), p);
  // TF ApplyFtrl with lr_power -0.5 and l2 += beta / (2 lr), in double.
  const double lr = 0.2, l1 = 0.01, l2 = 0.05 + 0.5 / (2 * 0.2);
  std::vector<double> w = {0.5, 0.5}, accum = {0.1, 0.1}, linear = {0, 0};
  const std::vector<std::vector<float>> grads = {{0.3f, -0.7f}, {-0.1f, 0.2f}, {0.6f, 0.0f}};
  for (size_t step = 0; step < grads.size(); ++step) {
    t.Push(static_cast<int64_t>(step + 1), {77}, grads[step]);
    for (int i = 0; i < 2; ++i) {
      const double g = grads[step][i];
      const double new_accum = accum[i] + g * g;
      linear[i] += g - (std::sqrt(new_accum) - std::sqrt(accum[i])) / lr * w[i];
      const double quadratic = std::sqrt(new_accum) / lr + 2 * l2;
      w[i] = std::abs(linear[i]) > l1 ? ((linear[i] > 0 ? l1 : -l1) - linear[i]) / quadratic : 0.0;
      accum[i] = new_accum;
    }
  }
  EXPECT_THAT(t.Lookup({77}), ElementsAre(FloatNear(w[0], 1e-6), FloatNear(w[1], 1e-6)));
  EXPECT_THAT(t.Lookup({78}), ElementsAre(0.5f, 0.5f));  // untouched: initial value
}

TEST(HashTableTest, ConcurrentPushesAndLookupsOnOneTable) {
  TestTable t = MakeTable("t", 4, 0, LFU, Constant(0.0f), OptimizerOf("sgd", 1.0f));
  TestTable bounded = MakeTable("b", 4, 50, AGE);
  constexpr int kThreads = 4;
  constexpr int kIterations = 300;
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      for (int i = 0; i < kIterations; ++i) {
        t.Push(i + 1, {0, 1, static_cast<uint64_t>(100 + th)}, std::vector<float>(12, 1.0f));
        const std::vector<float> rows = t.Lookup({0, 1, 0});
        EXPECT_EQ(Slice(rows, 0, 4), Slice(rows, 2, 4));
        const uint64_t fresh = static_cast<uint64_t>(th) * kIterations + i;
        bounded.Push(1, {fresh, fresh + 100000}, std::vector<float>(8, 1.0f));
        bounded.Lookup({fresh + 200000});  // every id is new: one row created each
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_THAT(t.Lookup({0, 1}), Each(static_cast<float>(-kThreads * kIterations)));
  for (int th = 0; th < kThreads; ++th) {
    EXPECT_THAT(t.Lookup({static_cast<uint64_t>(100 + th)}),
                Each(static_cast<float>(-kIterations)));
  }
  const HashTable::Stats stats = bounded.table->GetStats();
  EXPECT_EQ(stats.rows, 50);
  EXPECT_EQ(stats.evictions, 3 * kThreads * kIterations - 50);
}

TEST(HashTableTest, CreateRejectsBadOptions) {
  auto opt = Optimizer::Create(OptimizerOf("sgd", 0.1f));
  ASSERT_TRUE(opt.ok());
  HashTable::Options options;
  options.name = "t";
  options.initializer = Constant(0.0f);
  options.optimizer = opt->get();
  options.dim = 0;
  auto table = HashTable::Create(options);
  EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(table.status().message()), HasSubstr("'t'"));
  options.dim = 2;
  options.max_rows = -1;
  EXPECT_THAT(std::string(HashTable::Create(options).status().message()), HasSubstr("max_rows"));
  options.max_rows = HashTable::kMaxRows + 1;
  EXPECT_THAT(std::string(HashTable::Create(options).status().message()), HasSubstr("max_rows"));
}

}  // namespace
}  // namespace pscluster
