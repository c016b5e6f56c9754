#include "common/model_variables.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

JobSpec Ctr(const std::string& partitioner) {
  auto spec = ParseJobSpec(R"(
name: ctr
seed: 3
model:
  inputs:
    dense: 2
    categorical:
      - {name: user, vocab_size: 1000, embedding_dim: 16}
      - {name: movie, hashed: true, embedding_dim: 8, max_rows: 500, eviction: age}
  layers: [{dense: {units: 32, activation: relu}}, {dense: {units: 1}}]
  loss: sigmoid_cross_entropy
optimizer: {type: adagrad, learning_rate: 0.05}
)" + partitioner + R"(
data:
  train:
    format: csv
    path: x.csv
    columns: [{user: int}, {movie: int}, {a: float}, {b: float}, {y: int}]
    label: {column: y}
    dense_columns: [a, b]
  eval:
    format: csv
    path: x.csv
    columns: [{user: int}, {movie: int}, {a: float}, {b: float}, {y: int}]
    label: {column: y}
    dense_columns: [a, b]
)",
                           "ctr.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

std::vector<std::string> Names(const CreateVariablesRequest& r) {
  std::vector<std::string> out;
  for (const auto& v : r.variables()) out.push_back(v.name());
  return out;
}

TEST(ModelVariablesTest, EmbeddingsFirstThenDenseLayers) {
  JobSpec spec = Ctr("");
  std::vector<VariableSpecProto> vars = ModelVariables(spec);
  ASSERT_EQ(vars.size(), 6u);
  EXPECT_EQ(vars[0].name(), "embedding/user");
  EXPECT_EQ(vars[0].kind(), DENSE);
  EXPECT_THAT(vars[0].shape(), ::testing::ElementsAre(1000, 16));
  EXPECT_EQ(vars[1].name(), "embedding/movie");
  EXPECT_EQ(vars[1].kind(), HASH_TABLE);
  EXPECT_THAT(vars[1].shape(), ::testing::ElementsAre(8));
  EXPECT_EQ(vars[1].max_rows(), 500);
  EXPECT_EQ(vars[1].eviction(), AGE);
  EXPECT_EQ(vars[1].initializer().seed(), 3u);
  EXPECT_EQ(vars[2].name(), "dense_0/kernel");
  EXPECT_THAT(vars[2].shape(), ::testing::ElementsAre(2 + 16 + 8, 32));
  EXPECT_EQ(ModelInputWidth(spec.model), 26);
  EXPECT_TRUE(IsRowAccessed(vars[0]));
  EXPECT_TRUE(IsRowAccessed(vars[1]));
  EXPECT_FALSE(IsRowAccessed(vars[2]));
}

TEST(ModelVariablesTest, NoPartitionerPlacesWholeVariablesRoundRobin) {
  JobSpec spec = Ctr("");
  auto plan = PlanVariables(ModelVariables(spec), spec.partitioner, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->placement.size(), 6u);
  EXPECT_EQ(plan->placement[0].shards_size(), 0);
  EXPECT_EQ(plan->placement[0].ps_index(), 0);
  EXPECT_EQ(plan->per_ps[0].variables(0).full_shape_size(), 0);  // whole
  // The hash table has one shard per PS and does not advance the counter.
  ASSERT_EQ(plan->placement[1].shards_size(), 2);
  EXPECT_EQ(plan->placement[1].shards(1).name(), "embedding/movie/part_1");
  EXPECT_EQ(plan->placement[2].ps_index(), 1);  // dense_0/kernel
  EXPECT_EQ(plan->placement[3].ps_index(), 0);
  EXPECT_THAT(Names(plan->per_ps[0]),
              ::testing::ElementsAre("embedding/user", "embedding/movie/part_0", "dense_0/bias",
                                     "dense_1/bias"));
  EXPECT_THAT(Names(plan->per_ps[1]),
              ::testing::ElementsAre("embedding/movie/part_1", "dense_0/kernel", "dense_1/kernel"));
}

TEST(ModelVariablesTest, FixedPartitionerShardsEveryDenseVariable) {
  JobSpec spec = Ctr("variable_partitioner: {type: fixed, num_shards: 3}");
  auto plan = PlanVariables(ModelVariables(spec), spec.partitioner, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const VariablePlacementProto& user = plan->placement[0];
  ASSERT_EQ(user.shards_size(), 3);
  EXPECT_EQ(user.shards(0).rows(), 334);
  EXPECT_EQ(user.shards(1).row_offset(), 334);
  EXPECT_EQ(user.shards(2).rows(), 333);
  EXPECT_EQ(user.shards(0).ps_index(), 0);
  EXPECT_EQ(user.shards(1).ps_index(), 1);
  EXPECT_EQ(user.shards(2).ps_index(), 0);
  // The concrete shard variables have their own row counts.
  EXPECT_EQ(plan->per_ps[0].variables(0).name(), "embedding/user/part_0");
  EXPECT_THAT(plan->per_ps[0].variables(0).shape(), ::testing::ElementsAre(334, 16));
  // ... and say which slice of the logical variable they are (checkpoints
  // store slices, so they restore into any layout).
  EXPECT_THAT(plan->per_ps[0].variables(0).full_shape(), ::testing::ElementsAre(1000, 16));
  EXPECT_EQ(plan->per_ps[0].variables(0).row_offset(), 0);
  EXPECT_EQ(plan->per_ps[1].variables(0).name(), "embedding/user/part_1");
  EXPECT_EQ(plan->per_ps[1].variables(0).row_offset(), 334);
  EXPECT_EQ(plan->per_ps[1].variables(1).name(), "embedding/movie/part_1");
  EXPECT_EQ(plan->per_ps[1].variables(1).full_shape_size(), 0);  // hash table
  // dense_1/bias has 1 row: Fixed(3) clamps to one shard, still "part_0" (as TF).
  const VariablePlacementProto& last = plan->placement.back();
  ASSERT_EQ(last.shards_size(), 1);
  EXPECT_EQ(last.shards(0).name(), "dense_1/bias/part_0");
  EXPECT_EQ(DescribePlacement(ModelVariables(spec)[0], user), "3 shards along axis 0");
}

TEST(ModelVariablesTest, HashTableShardIsStableAndSpread) {
  int counts[3] = {0, 0, 0};
  for (uint64_t id = 0; id < 3000; ++id) {
    const int s = HashTableShard(id, 3);
    ASSERT_EQ(s, HashTableShard(id, 3));
    counts[s]++;
  }
  for (int c : counts) EXPECT_GT(c, 800);
}

}  // namespace
}  // namespace pscluster
