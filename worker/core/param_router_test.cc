#include "worker/core/param_router.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model_variables.h"
#include "common/partitioner.h"
#include "common/ps_client.h"
#include "common/row_ids.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/variable_store.h"

namespace pscluster {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::vector<uint64_t> DecodeIds(const std::string& bytes) {
  auto ids = DecodeRowIds(bytes, "ids");
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<uint64_t>();
}

// A real in-process PS client that also counts and logs its requests.
class RecordingPsClient : public PsClient {
 public:
  explicit RecordingPsClient(VariableStore* store) : inner_(store) {}

  int pulls = 0;
  int pushes = 0;
  std::vector<PullRequest> pull_log;
  std::vector<PushRequest> push_log;

  absl::Status CreateVariables(const CreateVariablesRequest& request,
                               CreateVariablesResponse* response) override {
    return inner_.CreateVariables(request, response);
  }
  absl::Status Pull(const PullRequest& request, PullResponse* response) override {
    ++pulls;
    pull_log.push_back(request);
    return inner_.Pull(request, response);
  }
  absl::Status Push(const PushRequest& request, PushResponse* response) override {
    ++pushes;
    push_log.push_back(request);
    return inner_.Push(request, response);
  }
  absl::Status Stats(const StatsRequest& request, StatsResponse* response) override {
    return inner_.Stats(request, response);
  }

 private:
  InProcessPsClient inner_;
};

VariableSpecProto Var(const std::string& name, Shape shape, VariableKind kind = DENSE) {
  VariableSpecProto v;
  v.set_name(name);
  v.set_dtype(DT_FLOAT32);
  v.set_kind(kind);
  v.mutable_shape()->Assign(shape.begin(), shape.end());
  v.mutable_initializer()->set_type("zeros");
  v.mutable_optimizer()->set_type("sgd");
  v.mutable_optimizer()->set_learning_rate(1.0f);
  return v;
}

// A value per element of a logical variable, so every row is recognisable.
float Value(int var, int64_t row, int64_t col) { return 1000.0f * var + 10.0f * row + col; }

// Two real PS (VariableStore) holding `vars` laid out by PlanVariables, each
// element set to Value() through SGD pushes.
class TwoPs {
 public:
  TwoPs(const std::vector<VariableSpecProto>& vars, const PartitionerSpec& partitioner) {
    auto plan = PlanVariables(vars, partitioner, 2);
    EXPECT_TRUE(plan.ok()) << plan.status();
    placement = plan->placement;
    for (int ps = 0; ps < 2; ++ps) {
      stores_.push_back(std::make_unique<VariableStore>());
      clients.push_back(std::make_unique<RecordingPsClient>(stores_.back().get()));
      CreateVariablesResponse created;
      EXPECT_TRUE(clients[ps]->CreateVariables(plan->per_ps[ps], &created).ok());
    }
    // Set the values: with zeros and SGD(1), pushing -v leaves v. (Hash
    // tables start empty; their rows appear on first lookup.)
    for (size_t v = 0; v < vars.size(); ++v) {
      if (vars[v].kind() == HASH_TABLE) continue;
      const VariablePlacementProto& p = placement[v];
      const Shape shape(vars[v].shape().begin(), vars[v].shape().end());
      const int64_t cols = shape.size() > 1 ? shape[1] : 1;
      auto set = [&](const std::string& name, int ps, int64_t offset, int64_t rows) {
        std::vector<float> g;
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < cols; ++c) g.push_back(-Value(v, offset + r, c));
        }
        Shape piece = shape;
        piece[0] = rows;
        PushRequest req;
        NamedTensor* t = req.add_gradients();
        t->set_name(name);
        EncodeTensor(piece, g, t->mutable_tensor());
        PushResponse resp;
        EXPECT_TRUE(clients[ps]->Push(req, &resp).ok());
      };
      if (p.shards_size() == 0) {
        set(p.name(), p.ps_index(), 0, shape[0]);
      } else {
        for (const ShardProto& s : p.shards()) set(s.name(), s.ps_index(), s.row_offset(), s.rows());
      }
    }
    for (auto& c : clients) {
      c->pulls = c->pushes = 0;
      c->pull_log.clear();
      c->push_log.clear();
    }
  }

  // One pull per PS with work, as the trainer does.
  std::vector<PullResponse> Pull(const RoutedStep& step) {
    std::vector<PullResponse> responses(2);
    for (int ps = 0; ps < 2; ++ps) {
      if (HasWork(step.pull[ps])) {
        EXPECT_TRUE(clients[ps]->Pull(step.pull[ps], &responses[ps]).ok());
      }
    }
    return responses;
  }
  void Push(const std::vector<PushRequest>& push) {
    for (int ps = 0; ps < 2; ++ps) {
      PushResponse resp;
      if (HasWork(push[ps])) {
        absl::Status s = clients[ps]->Push(push[ps], &resp);
        EXPECT_TRUE(s.ok()) << s;
      }
    }
  }

  std::vector<VariablePlacementProto> placement;
  std::vector<std::unique_ptr<RecordingPsClient>> clients;

 private:
  std::vector<std::unique_ptr<VariableStore>> stores_;
};

TEST(DedupeIdsTest, FirstOccurrenceOrder) {
  std::vector<uint64_t> unique;
  std::vector<int64_t> index;
  DedupeIds(std::vector<uint64_t>{7, 2, 7, 9, 2, 2}, &unique, &index);
  EXPECT_THAT(unique, ElementsAre(7, 2, 9));
  EXPECT_THAT(index, ElementsAre(0, 1, 0, 2, 1, 1));
  DedupeIds({}, &unique, &index);
  EXPECT_TRUE(unique.empty());
  EXPECT_TRUE(index.empty());
}

// THE must-show: a [10, 3] embedding split in two row shards over two PS.
// The batch's ids are shuffled across the shards and repeated; every id
// still gets its own row, in request order (TF returns shard order here).
TEST(ParamRouterTest, LookupsReturnRowsInRequestOrderForShuffledAndDuplicatedIds) {
  const std::vector<VariableSpecProto> vars = {Var("embedding/user", {10, 3})};
  TwoPs cluster(vars, PartitionerSpec::Fixed(2));
  ASSERT_EQ(cluster.placement[0].shards_size(), 2);  // rows [0, 5) on PS 0, [5, 10) on PS 1
  auto router = ParamRouter::Create(vars, cluster.placement, 2);
  ASSERT_TRUE(router.ok()) << router.status();

  const std::vector<uint64_t> ids = {7, 2, 7, 9, 0, 2, 5, 4, 7, 3};
  std::vector<uint64_t> unique;
  std::vector<int64_t> index;
  DedupeIds(ids, &unique, &index);
  RoutedStep step;
  ASSERT_TRUE((*router)->PlanStep(false, {unique}, &step).ok());
  std::vector<Tensor> params(1), rows;
  std::vector<PullResponse> answers = cluster.Pull(step);
  ASSERT_TRUE((*router)->ReadPull(step, &answers, &params, &rows).ok());

  ASSERT_EQ(rows[0].shape(), (Shape{static_cast<int64_t>(unique.size()), 3}));
  for (size_t k = 0; k < ids.size(); ++k) {
    const float* row = rows[0].data() + index[k] * 3;
    EXPECT_THAT(std::vector<float>(row, row + 3),
                ElementsAre(Value(0, ids[k], 0), Value(0, ids[k], 1), Value(0, ids[k], 2)))
        << "request position " << k << ", id " << ids[k];
  }
  // Each PS got one lookup with LOCAL row ids, each id once.
  ASSERT_EQ(cluster.clients[0]->pull_log.size(), 1u);
  ASSERT_EQ(cluster.clients[1]->pull_log.size(), 1u);
  const PullRequest& to0 = cluster.clients[0]->pull_log[0];
  const PullRequest& to1 = cluster.clients[1]->pull_log[0];
  ASSERT_EQ(to0.lookups_size(), 1);
  ASSERT_EQ(to1.lookups_size(), 1);
  EXPECT_EQ(to0.lookups(0).name(), "embedding/user/part_0");
  EXPECT_THAT(DecodeIds(to0.lookups(0).ids()), ElementsAre(2, 0, 4, 3));
  EXPECT_EQ(to1.lookups(0).name(), "embedding/user/part_1");
  EXPECT_THAT(DecodeIds(to1.lookups(0).ids()), ElementsAre(2, 4, 0));  // 7, 9, 5
}

// The same ids reversed and sorted give the same row for every id.
TEST(ParamRouterTest, AnyIdOrderGivesTheSameRowPerId) {
  const std::vector<VariableSpecProto> vars = {Var("embedding/user", {10, 3})};
  TwoPs cluster(vars, PartitionerSpec::Fixed(2));
  auto router = ParamRouter::Create(vars, cluster.placement, 2);
  ASSERT_TRUE(router.ok());
  for (std::vector<uint64_t> ids : {std::vector<uint64_t>{9, 8, 1, 0, 6, 5, 4},
                                    std::vector<uint64_t>{0, 1, 4, 5, 6, 8, 9}}) {
    RoutedStep step;
    ASSERT_TRUE((*router)->PlanStep(false, {ids}, &step).ok());
    std::vector<Tensor> params(1), rows;
    std::vector<PullResponse> answers = cluster.Pull(step);
    ASSERT_TRUE((*router)->ReadPull(step, &answers, &params, &rows).ok());
    for (size_t u = 0; u < ids.size(); ++u) {
      EXPECT_EQ(rows[0].data()[u * 3 + 1], Value(0, ids[u], 1)) << "id " << ids[u];
    }
  }
}

// A partitioned dense variable is assembled from its shards, and its
// gradient goes back split along the same rows.
TEST(ParamRouterTest, PartitionedDenseVariableAssemblesAndSplits) {
  const std::vector<VariableSpecProto> vars = {Var("dense_0/kernel", {5, 2}),
                                               Var("dense_0/bias", {2})};
  // Fixed(2): kernel rows [0, 3) on PS 0 and [3, 5) on PS 1; bias rows [0, 1)
  // on PS 0 and [1, 2) on PS 1.
  TwoPs cluster(vars, PartitionerSpec::Fixed(2));
  ASSERT_EQ(cluster.placement[0].shards(1).row_offset(), 3);
  auto router = ParamRouter::Create(vars, cluster.placement, 2);
  ASSERT_TRUE(router.ok()) << router.status();
  RoutedStep step;
  ASSERT_TRUE((*router)->PlanStep(true, {}, &step).ok());
  EXPECT_THAT(step.pull[0].names(), ElementsAre("dense_0/kernel/part_0", "dense_0/bias/part_0"));
  EXPECT_THAT(step.pull[1].names(), ElementsAre("dense_0/kernel/part_1", "dense_0/bias/part_1"));
  std::vector<Tensor> params(2), rows;
  std::vector<PullResponse> answers = cluster.Pull(step);
  ASSERT_TRUE((*router)->ReadPull(step, &answers, &params, &rows).ok());
  ASSERT_EQ(params[0].shape(), (Shape{5, 2}));
  for (int64_t r = 0; r < 5; ++r) {
    for (int64_t c = 0; c < 2; ++c) EXPECT_EQ(params[0].values()[r * 2 + c], Value(0, r, c));
  }
  EXPECT_THAT(params[1].values(), ElementsAre(Value(1, 0, 0), Value(1, 1, 0)));

  // Push a gradient with a distinct value per element; SGD(1) subtracts it.
  std::vector<Tensor> grads = {Tensor({5, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}),
                               Tensor({2}, {0.5f, -0.5f})};
  std::vector<PushRequest> push;
  (*router)->BuildPush(step, &grads, {}, &push);
  ASSERT_EQ(push[1].gradients(0).name(), "dense_0/kernel/part_1");
  EXPECT_THAT(push[1].gradients(0).tensor().shape(), ElementsAre(2, 2));
  cluster.Push(push);
  std::vector<Tensor> after(2);
  answers = cluster.Pull(step);
  ASSERT_TRUE((*router)->ReadPull(step, &answers, &after, &rows).ok());
  for (int64_t i = 0; i < 10; ++i) {
    EXPECT_EQ(after[0].values()[i], params[0].values()[i] - grads[0].values()[i]) << i;
  }
  EXPECT_EQ(after[1].values()[1], params[1].values()[1] + 0.5f);
}

// A whole variable is taken from its answer without a copy: the answer is
// left holding the tensor's previous bytes, of the same size, so the next
// parse into it needs no allocation; a second read still gets fresh values.
TEST(ParamRouterTest, WholeVariableIsSwappedOutOfItsAnswer) {
  const std::vector<VariableSpecProto> vars = {Var("dense_0/kernel", {4, 3}),
                                               Var("dense_0/bias", {3})};
  TwoPs cluster(vars, PartitionerSpec());  // kernel on PS 0, bias on PS 1
  auto router = ParamRouter::Create(vars, cluster.placement, 2);
  ASSERT_TRUE(router.ok()) << router.status();
  RoutedStep step;
  ASSERT_TRUE((*router)->PlanStep(true, {}, &step).ok());
  std::vector<Tensor> params(2), rows;
  std::vector<PullResponse> answers = cluster.Pull(step);
  const char* pulled_bytes = answers[0].tensors(0).tensor().data().data();
  ASSERT_TRUE((*router)->ReadPull(step, &answers, &params, &rows).ok());
  EXPECT_EQ(reinterpret_cast<const char*>(params[0].data()), pulled_bytes);  // not copied
  EXPECT_EQ(answers[0].tensors(0).tensor().data().size(), 4u * 3 * sizeof(float));
  EXPECT_EQ(params[0].values()[7], Value(0, 2, 1));

  std::vector<Tensor> grads = {Tensor({4, 3}), Tensor({3}, {1, 2, 3})};
  grads[0].values()[7] = 5;
  std::vector<PushRequest> push;
  (*router)->BuildPush(step, &grads, {}, &push);
  cluster.Push(push);
  answers = cluster.Pull(step);
  ASSERT_TRUE((*router)->ReadPull(step, &answers, &params, &rows).ok());
  EXPECT_EQ(params[0].values()[7], Value(0, 2, 1) - 5);
  EXPECT_THAT(params[1].values(),
              ElementsAre(Value(1, 0, 0) - 1, Value(1, 1, 0) - 2, Value(1, 2, 0) - 3));

  // The next push reuses `push`: the gradient's bytes move into the request
  // and the tensor takes the request's previous buffer, of the same size.
  std::fill(grads[0].values().begin(), grads[0].values().end(), 0.0f);
  grads[0].values()[7] = 2;
  const char* gradient_bytes = reinterpret_cast<const char*>(grads[0].data());
  const char* request_bytes = push[0].gradients(0).tensor().data().data();
  (*router)->BuildPush(step, &grads, {}, &push);
  EXPECT_EQ(push[0].gradients(0).tensor().data().data(), gradient_bytes);
  EXPECT_EQ(reinterpret_cast<const char*>(grads[0].data()), request_bytes);
  EXPECT_EQ(grads[0].num_bytes(), 4 * 3 * static_cast<int64_t>(sizeof(float)));
  cluster.Push(push);
  answers = cluster.Pull(step);
  ASSERT_TRUE((*router)->ReadPull(step, &answers, &params, &rows).ok());
  EXPECT_EQ(params[0].values()[7], Value(0, 2, 1) - 7);
  EXPECT_EQ(params[0].values()[6], Value(0, 2, 0));
}

// Gradients for a batch with duplicate ids: the model sums them per unique
// row; the router sends each (shard, local id) once and the PS applies it.
TEST(ParamRouterTest, RowGradientsGoBackOncePerIdWithDuplicatesSummed) {
  const std::vector<VariableSpecProto> vars = {Var("embedding/user", {10, 2}),
                                               Var("dense_0/kernel", {4, 1})};
  TwoPs cluster(vars, PartitionerSpec::Fixed(2));
  auto router = ParamRouter::Create(vars, cluster.placement, 2);
  ASSERT_TRUE(router.ok());
  const std::vector<uint64_t> ids = {8, 1, 8, 8, 6, 1};
  // One gradient row per occurrence, as if each example used its id once.
  std::vector<float> per_use;
  for (size_t k = 0; k < ids.size(); ++k) per_use.insert(per_use.end(), {1.0f + k, -1.0f});
  std::vector<uint64_t> unique;
  std::vector<int64_t> index;
  DedupeIds(ids, &unique, &index);
  Tensor summed({static_cast<int64_t>(unique.size()), 2});
  for (size_t k = 0; k < ids.size(); ++k) {
    for (int c = 0; c < 2; ++c) summed.values()[index[k] * 2 + c] += per_use[k * 2 + c];
  }
  RoutedStep step;
  ASSERT_TRUE((*router)->PlanStep(true, {unique}, &step).ok());
  std::vector<Tensor> params(2), rows;
  std::vector<PullResponse> answers = cluster.Pull(step);
  ASSERT_TRUE((*router)->ReadPull(step, &answers, &params, &rows).ok());
  std::vector<PushRequest> push;
  std::vector<Tensor> dense_grads = {Tensor(), Tensor({4, 1})};
  (*router)->BuildPush(step, &dense_grads, {summed}, &push);
  // Exactly one push per PS, dense and sparse fused; distinct local ids.
  for (int ps = 0; ps < 2; ++ps) {
    ASSERT_EQ(push[ps].sparse_size(), 1) << "PS " << ps;
    EXPECT_EQ(push[ps].gradients_size(), 1) << "PS " << ps;
  }
  EXPECT_EQ(push[0].sparse(0).name(), "embedding/user/part_0");
  EXPECT_THAT(DecodeIds(push[0].sparse(0).ids()), ElementsAre(1));
  EXPECT_THAT(DecodeIds(push[1].sparse(0).ids()), ElementsAre(3, 1));  // 8, 6
  cluster.Push(push);
  EXPECT_EQ(cluster.clients[0]->pushes, 1);
  EXPECT_EQ(cluster.clients[1]->pushes, 1);
  EXPECT_EQ(cluster.clients[0]->pulls, 1);
  EXPECT_EQ(cluster.clients[1]->pulls, 1);

  // Read the rows back: row 8 lost 1+3+4 (uses 0, 2, 3), row 1 lost 2+6,
  // row 6 lost 5; the untouched rows kept their values.
  const std::vector<uint64_t> check = {8, 1, 6, 0, 9};
  RoutedStep again;
  ASSERT_TRUE((*router)->PlanStep(false, {check}, &again).ok());
  answers = cluster.Pull(again);
  ASSERT_TRUE((*router)->ReadPull(again, &answers, &params, &rows).ok());
  const float lost[] = {8, 8, 5, 0, 0};
  const float uses[] = {3, 2, 1, 0, 0};  // each use adds -1 to column 1
  for (size_t u = 0; u < check.size(); ++u) {
    EXPECT_EQ(rows[0].values()[u * 2], Value(0, check[u], 0) - lost[u]) << "id " << check[u];
    EXPECT_EQ(rows[0].values()[u * 2 + 1], Value(0, check[u], 1) + uses[u]) << "id " << check[u];
  }
}

// An unpartitioned embedding keeps its PS and sends the ids as they are.
TEST(ParamRouterTest, UnpartitionedEmbeddingKeepsIds) {
  const std::vector<VariableSpecProto> vars = {Var("dense_0/bias", {3}),
                                               Var("embedding/user", {10, 2})};
  TwoPs cluster(vars, PartitionerSpec());  // round robin: bias on PS 0, table on PS 1
  auto router = ParamRouter::Create(vars, cluster.placement, 2);
  ASSERT_TRUE(router.ok());
  RoutedStep step;
  ASSERT_TRUE((*router)->PlanStep(true, {{9, 3}}, &step).ok());
  EXPECT_THAT(step.pull[0].names(), ElementsAre("dense_0/bias"));
  EXPECT_EQ(step.pull[0].lookups_size(), 0);
  ASSERT_EQ(step.pull[1].lookups_size(), 1);
  EXPECT_EQ(step.pull[1].lookups(0).name(), "embedding/user");
  EXPECT_THAT(DecodeIds(step.pull[1].lookups(0).ids()), ElementsAre(9, 3));
  std::vector<Tensor> params(2), rows;
  std::vector<PullResponse> answers = cluster.Pull(step);
  ASSERT_TRUE((*router)->ReadPull(step, &answers, &params, &rows).ok());
  EXPECT_THAT(rows[0].values(), ElementsAre(Value(1, 9, 0), Value(1, 9, 1), Value(1, 3, 0),
                                            Value(1, 3, 1)));
  EXPECT_THAT(params[0].values(), ElementsAre(Value(0, 0, 0), Value(0, 1, 0), Value(0, 2, 0)));
}

// Hash-table routing in detail, with fake PS answers: each id goes to shard
// HashTableShard(id, n) on that shard's PS, and the key sent is the id
// itself.
TEST(ParamRouterTest, HashTableIdsGoToTheirHashShardWithTheIdAsKey) {
  const std::vector<VariableSpecProto> vars = {Var("embedding/tags", {4}, HASH_TABLE)};
  auto plan = PlanVariables(vars, PartitionerSpec(), 2);
  ASSERT_TRUE(plan.ok());
  auto router = ParamRouter::Create(vars, plan->placement, 2);
  ASSERT_TRUE(router.ok()) << router.status();
  EXPECT_EQ((*router)->row_width(0), 4);
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 40; ++i) ids.push_back(i * 0x9e3779b97f4a7c15ULL);
  RoutedStep step;
  ASSERT_TRUE((*router)->PlanStep(false, {ids}, &step).ok());
  std::vector<uint64_t> want[2];
  for (uint64_t id : ids) want[HashTableShard(id, 2)].push_back(id);
  ASSERT_FALSE(want[0].empty());
  ASSERT_FALSE(want[1].empty());
  for (int ps = 0; ps < 2; ++ps) {
    ASSERT_EQ(step.pull[ps].lookups_size(), 1);
    EXPECT_EQ(step.pull[ps].lookups(0).name(), absl::StrCat("embedding/tags/part_", ps));
    EXPECT_THAT(DecodeIds(step.pull[ps].lookups(0).ids()), ElementsAreArray(want[ps]));
  }
  // Fake answers: row of key k is (k % 1000, 0, 0, ps). ReadPull puts each
  // at its id's position; BuildPush routes gradients back to the same keys.
  std::vector<PullResponse> responses(2);
  for (int ps = 0; ps < 2; ++ps) {
    std::vector<float> r;
    for (uint64_t k : want[ps]) r.insert(r.end(), {static_cast<float>(k % 1000), 0, 0, 1.0f * ps});
    EncodeTensor({static_cast<int64_t>(want[ps].size()), 4}, r,
                 responses[ps].add_rows()->mutable_tensor());
  }
  std::vector<Tensor> params(1), rows;
  ASSERT_TRUE((*router)->ReadPull(step, &responses, &params, &rows).ok());
  Tensor grads({static_cast<int64_t>(ids.size()), 4});
  for (size_t u = 0; u < ids.size(); ++u) {
    EXPECT_EQ(rows[0].values()[u * 4], static_cast<float>(ids[u] % 1000));
    EXPECT_EQ(rows[0].values()[u * 4 + 3], HashTableShard(ids[u], 2));
    grads.values()[u * 4] = static_cast<float>(u);
  }
  std::vector<PushRequest> push;
  std::vector<Tensor> no_dense;
  (*router)->BuildPush(step, &no_dense, {grads}, &push);
  for (int ps = 0; ps < 2; ++ps) {
    ASSERT_EQ(push[ps].sparse_size(), 1);
    const std::vector<uint64_t> keys = DecodeIds(push[ps].sparse(0).ids());
    EXPECT_THAT(keys, ElementsAreArray(want[ps]));
    auto g = DecodeTensor(push[ps].sparse(0).rows());
    ASSERT_TRUE(g.ok());
    for (size_t i = 0; i < keys.size(); ++i) {
      const size_t u = std::find(ids.begin(), ids.end(), keys[i]) - ids.begin();
      EXPECT_EQ(g->values()[i * 4], static_cast<float>(u));
    }
  }
}

// The same must-show on a hash table held by two real PS: rows are created
// on first lookup, set through sparse pushes, and read back in request order
// for shuffled, repeated keys; each PS holds exactly the keys of its shard.
TEST(ParamRouterTest, HashTableLookupsOnRealPsReturnRowsInRequestOrder) {
  const std::vector<VariableSpecProto> vars = {Var("embedding/tags", {3}, HASH_TABLE)};
  TwoPs cluster(vars, PartitionerSpec());
  auto router = ParamRouter::Create(vars, cluster.placement, 2);
  ASSERT_TRUE(router.ok()) << router.status();
  std::vector<uint64_t> keys;
  for (uint64_t i = 1; i <= 12; ++i) keys.push_back(i * 0x9e3779b97f4a7c15ULL);
  auto expected = [](uint64_t key, int c) { return static_cast<float>(key % 997) + 0.25f * c; };

  // First touch: rows come back as initialised (zeros); then set each row.
  RoutedStep step;
  ASSERT_TRUE((*router)->PlanStep(false, {keys}, &step).ok());
  std::vector<Tensor> params(1), rows;
  std::vector<PullResponse> answers = cluster.Pull(step);
  ASSERT_TRUE((*router)->ReadPull(step, &answers, &params, &rows).ok());
  for (float v : rows[0].values()) EXPECT_EQ(v, 0.0f);
  Tensor set({static_cast<int64_t>(keys.size()), 3});
  for (size_t u = 0; u < keys.size(); ++u) {
    for (int c = 0; c < 3; ++c) set.values()[u * 3 + c] = -expected(keys[u], c);
  }
  std::vector<PushRequest> push;
  std::vector<Tensor> no_dense;
  (*router)->BuildPush(step, &no_dense, {set}, &push);
  cluster.Push(push);

  const std::vector<uint64_t> ids = {keys[7], keys[2], keys[7], keys[11], keys[0], keys[2],
                                     keys[5], keys[7], keys[9]};
  std::vector<uint64_t> unique;
  std::vector<int64_t> index;
  DedupeIds(ids, &unique, &index);
  ASSERT_TRUE((*router)->PlanStep(false, {unique}, &step).ok());
  answers = cluster.Pull(step);
  ASSERT_TRUE((*router)->ReadPull(step, &answers, &params, &rows).ok());
  for (size_t k = 0; k < ids.size(); ++k) {
    const float* row = rows[0].data() + index[k] * 3;
    EXPECT_THAT(std::vector<float>(row, row + 3),
                ElementsAre(expected(ids[k], 0), expected(ids[k], 1), expected(ids[k], 2)))
        << "request position " << k;
  }
  int64_t want_rows[2] = {0, 0};
  for (uint64_t key : keys) ++want_rows[HashTableShard(key, 2)];
  ASSERT_GT(want_rows[0], 0);
  ASSERT_GT(want_rows[1], 0);
  for (int ps = 0; ps < 2; ++ps) {
    StatsResponse stats;
    ASSERT_TRUE(cluster.clients[ps]->Stats(StatsRequest(), &stats).ok());
    ASSERT_EQ(stats.variables_size(), 1);
    EXPECT_EQ(stats.variables(0).name(), absl::StrCat("embedding/tags/part_", ps));
    EXPECT_EQ(stats.variables(0).rows(), want_rows[ps]);
  }
}

TEST(ParamRouterTest, IdOutsideTheVocabularyIsInvalidArgument) {
  const std::vector<VariableSpecProto> vars = {Var("embedding/user", {10, 2})};
  auto plan = PlanVariables(vars, PartitionerSpec::Fixed(2), 2);
  auto router = ParamRouter::Create(vars, plan->placement, 2);
  ASSERT_TRUE(router.ok());
  RoutedStep step;
  const absl::Status s = (*router)->PlanStep(false, {{3, 10}}, &step);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("id 10 of 'embedding/user'"));
}

TEST(ParamRouterTest, CreateRejectsBadPlacements) {
  const std::vector<VariableSpecProto> vars = {Var("embedding/user", {10, 2}),
                                               Var("dense_0/kernel", {4, 1})};
  auto plan = PlanVariables(vars, PartitionerSpec::Fixed(2), 2);
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(ParamRouter::Create(vars, plan->placement, 2).ok());
  auto expect_bad = [&](std::vector<VariablePlacementProto> p, const std::string& what) {
    auto r = ParamRouter::Create(vars, p, 2);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(r.status().message(), HasSubstr(what));
  };
  auto p = plan->placement;
  p.pop_back();
  expect_bad(p, "'dense_0/kernel' has no placement");
  p = plan->placement;
  p.push_back(p[0]);
  expect_bad(p, "placed twice");
  p = plan->placement;
  p[0].mutable_shards(1)->set_row_offset(6);  // a gap
  expect_bad(p, "must be contiguous");
  p = plan->placement;
  p[0].mutable_shards(1)->set_rows(4);  // 9 of 10 rows
  expect_bad(p, "cover 9 of its 10 rows");
  p = plan->placement;
  p[1].mutable_shards(0)->set_ps_index(2);
  expect_bad(p, "outside [0, 2)");
  p = plan->placement;
  p[1].clear_shards();
  p[1].set_ps_index(-1);
  expect_bad(p, "outside [0, 2)");
}

}  // namespace
}  // namespace pscluster
