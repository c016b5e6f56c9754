#include "common/partitioner.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Type = PartitionerSpec::Type;

constexpr int64_t kF32 = 4;

PartitionerSpec WithStringBytes(PartitionerSpec spec, int64_t bytes) {
  spec.bytes_per_string = bytes;
  return spec;
}

struct NumShardsCase {
  std::string label;
  PartitionerSpec spec;
  std::vector<int64_t> shape;
  int64_t elem_bytes;
  int64_t want;
};

TEST(PartitionerTest, NumShardsMatchesTensorFlow) {
  const PartitionerSpec str_min = WithStringBytes(PartitionerSpec::MinSize(64, 100), 16);
  const NumShardsCase cases[] = {
      // MinSizePartitioner: n = max(1, min(shape[0], max_shards, ceil(total / min))).
      {"min 4MiB f32, max_shards 16", PartitionerSpec::MinSize(256 << 10, 16), {1024, 1024}, kF32,
       16},
      {"min 4MiB f32, max_shards 100", PartitionerSpec::MinSize(256 << 10, 100), {1024, 1024},
       kF32, 16},
      {"min 4MiB f32, max_shards 3", PartitionerSpec::MinSize(256 << 10, 3), {1024, 1024}, kF32,
       3},
      {"min tutorial embedding", PartitionerSpec::MinSize(256 << 10, 2), {8, 16384}, kF32, 2},
      {"min ceil 1.5x => 2", PartitionerSpec::MinSize(8, 10), {3, 1}, kF32, 2},
      {"min exact 2x => 2", PartitionerSpec::MinSize(8, 10), {4, 1}, kF32, 2},
      {"min 2x + 1 byte => 3", PartitionerSpec::MinSize(8, 10), {17, 1}, 1, 3},
      {"min default max_shards 1", PartitionerSpec::MinSize(), {1024, 1024}, kF32, 1},
      {"min default-constructed spec", [] {
         PartitionerSpec s;
         s.type = Type::kMinSize;
         return s;
       }(),
       {1024, 1024}, kF32, 1},
      {"min tiny variable", PartitionerSpec::MinSize(256 << 10, 8), {2, 2}, kF32, 1},
      {"min capped by rows", PartitionerSpec::MinSize(256 << 10, 16), {4, 1 << 20}, kF32, 4},
      {"min empty variable", PartitionerSpec::MinSize(8, 10), {0, 5}, kF32, 1},
      {"min other dim 0", PartitionerSpec::MinSize(8, 10), {5, 0}, kF32, 1},
      {"min string 16 B/elem", str_min, {4, 4}, str_min.bytes_per_string, 4},
      {"min same shape as f32", str_min, {4, 4}, kF32, 1},
      {"min string 8 B/elem", WithStringBytes(str_min, 8), {4, 4}, 8, 2},
      // MaxSizePartitioner: rows_per_shard = max(1, max / bytes_per_row),
      // n = ceil(rows / rows_per_shard), capped by max_shards if set.
      {"max 4 B, [6,1]", PartitionerSpec::MaxSize(4), {6, 1}, kF32, 6},
      {"max 4 B, [6,1], max_shards 2", PartitionerSpec::MaxSize(4, 2), {6, 1}, kF32, 2},
      {"max 1024 B, [6,1]", PartitionerSpec::MaxSize(1024), {6, 1}, kF32, 1},
      {"max 12 B, [10,1] => 3 rows/shard", PartitionerSpec::MaxSize(12), {10, 1}, kF32, 4},
      {"max row exceeds limit", PartitionerSpec::MaxSize(10), {3, 100}, kF32, 3},
      {"max 1-D", PartitionerSpec::MaxSize(8), {5}, kF32, 3},
      {"max string", PartitionerSpec::MaxSize(64), {4, 2}, 16, 2},
      {"max one row", PartitionerSpec::MaxSize(1), {1, 1000}, kF32, 1},
      // FixedShardsPartitioner, then PSS's clamp n = min(n, shape[0]).
      {"fixed 4 on 10 rows", PartitionerSpec::Fixed(4), {10, 3}, kF32, 4},
      {"fixed 5 on 13 rows", PartitionerSpec::Fixed(5), {13}, kF32, 5},
      {"fixed 8 on 3 rows", PartitionerSpec::Fixed(8), {3, 2}, kF32, 3},
      {"fixed 4 on 1 row", PartitionerSpec::Fixed(4), {1, 5}, kF32, 1},
      {"fixed 1", PartitionerSpec::Fixed(1), {100, 5}, kF32, 1},
      {"fixed 1 on 0 rows", PartitionerSpec::Fixed(1), {0, 5}, kF32, 1},
      {"fixed tiny variable", PartitionerSpec::Fixed(2), {2}, 1, 2},
      // Scalars are never partitioned; no partitioner never partitions.
      {"scalar fixed", PartitionerSpec::Fixed(4), {}, kF32, 1},
      {"scalar min", PartitionerSpec::MinSize(1, 10), {}, kF32, 1},
      {"scalar max", PartitionerSpec::MaxSize(1), {}, kF32, 1},
      {"none", PartitionerSpec(), {1024, 1024}, kF32, 1},
  };
  for (const NumShardsCase& c : cases) {
    SCOPED_TRACE(c.label);
    absl::StatusOr<int64_t> n = NumShards(c.spec, c.shape, c.elem_bytes);
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, c.want);
  }
}

TEST(PartitionerTest, RequestedShardsIsBeforeTheClamp) {
  EXPECT_EQ(*RequestedShards(PartitionerSpec::Fixed(8), {3, 2}, kF32), 8);
  EXPECT_EQ(*RequestedShards(PartitionerSpec::Fixed(4), {1}, kF32), 4);
  EXPECT_EQ(*RequestedShards(PartitionerSpec::Fixed(4), {}, kF32), 1);
}

TEST(PartitionerTest, NumShardsRejectsWhatTensorFlowCannotPartition) {
  struct Case {
    std::string label;
    PartitionerSpec spec;
    std::vector<int64_t> shape;
    int64_t elem_bytes;
    std::string message;
  };
  const Case cases[] = {
      {"fixed 4 on 0 rows", PartitionerSpec::Fixed(4), {0, 3}, kF32, "shape[0] == 0"},
      {"max on 0 rows", PartitionerSpec::MaxSize(16), {0, 3}, kF32, "zero dimension"},
      {"max with inner dim 0", PartitionerSpec::MaxSize(16), {3, 0}, kF32, "zero dimension"},
      {"negative dim", PartitionerSpec::Fixed(2), {4, -1}, kF32, "negative dimension"},
      {"elem_bytes 0", PartitionerSpec::MinSize(8, 2), {4}, 0, "elem_bytes"},
      {"overflow", PartitionerSpec::MinSize(8, 2), {int64_t{1} << 40, int64_t{1} << 40}, kF32,
       "overflows"},
      {"invalid spec", PartitionerSpec::Fixed(0), {4}, kF32, "num_shards"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    absl::StatusOr<int64_t> n = NumShards(c.spec, c.shape, c.elem_bytes);
    ASSERT_FALSE(n.ok());
    EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(n.status().message()), HasSubstr(c.message));
  }
}

TEST(PartitionerTest, ValidateNamesTheBadField) {
  struct Case {
    std::string label;
    PartitionerSpec spec;
    std::string field;
  };
  PartitionerSpec max_missing;
  max_missing.type = Type::kMaxSize;
  const Case cases[] = {
      {"fixed num_shards 0", PartitionerSpec::Fixed(0), "num_shards"},
      {"fixed num_shards -3", PartitionerSpec::Fixed(-3), "num_shards"},
      {"min min_shard_bytes 0", PartitionerSpec::MinSize(0, 4), "min_shard_bytes"},
      {"min max_shards 0", PartitionerSpec::MinSize(1024, 0), "max_shards"},
      {"max max_shard_bytes missing", max_missing, "max_shard_bytes"},
      {"max max_shards -1", PartitionerSpec::MaxSize(1024, -1), "max_shards"},
      {"bytes_per_string 0", WithStringBytes(PartitionerSpec::MinSize(), 0), "bytes_per_string"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    absl::Status status = ValidatePartitioner(c.spec);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.field));
  }
  EXPECT_TRUE(ValidatePartitioner(PartitionerSpec()).ok());
  EXPECT_TRUE(ValidatePartitioner(PartitionerSpec::Fixed(1)).ok());
  EXPECT_TRUE(ValidatePartitioner(PartitionerSpec::MinSize()).ok());
  EXPECT_TRUE(ValidatePartitioner(PartitionerSpec::MaxSize(1)).ok());  // max_shards 0: unlimited
}

std::vector<int64_t> Rows(const std::vector<Shard>& shards) {
  std::vector<int64_t> rows;
  for (const Shard& s : shards) rows.push_back(s.rows);
  return rows;
}

std::vector<int64_t> Offsets(const std::vector<Shard>& shards) {
  std::vector<int64_t> offsets;
  for (const Shard& s : shards) offsets.push_back(s.row_offset);
  return offsets;
}

std::vector<int> Tasks(const std::vector<Shard>& shards) {
  std::vector<int> tasks;
  for (const Shard& s : shards) tasks.push_back(s.ps_task);
  return tasks;
}

std::vector<std::string> Names(const std::vector<Shard>& shards) {
  std::vector<std::string> names;
  for (const Shard& s : shards) names.push_back(s.name);
  return names;
}

TEST(PartitionerTest, DivLayoutGivesExtraRowsToTheFirstShards) {
  std::vector<Shard> ten = ShardLayout("emb", 10, 4, 0, 2);
  EXPECT_THAT(Rows(ten), ElementsAre(3, 3, 2, 2));
  EXPECT_THAT(Offsets(ten), ElementsAre(0, 3, 6, 8));
  EXPECT_THAT(Names(ten), ElementsAre("emb/part_0", "emb/part_1", "emb/part_2", "emb/part_3"));
  EXPECT_THAT(Tasks(ten), ElementsAre(0, 1, 0, 1));

  std::vector<Shard> thirteen = ShardLayout("w", 13, 5, 3, 4);
  EXPECT_THAT(Rows(thirteen), ElementsAre(3, 3, 3, 2, 2));
  EXPECT_THAT(Offsets(thirteen), ElementsAre(0, 3, 6, 9, 11));
  EXPECT_THAT(Tasks(thirteen), ElementsAre(3, 0, 1, 2, 3));
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(thirteen[i].index, i);

  EXPECT_THAT(Rows(ShardLayout("v", 6, 6, 0, 1)), ElementsAre(1, 1, 1, 1, 1, 1));
  EXPECT_THAT(Rows(ShardLayout("v", 7, 1, 0, 1)), ElementsAre(7));
}

TEST(PartitionerTest, ShardForRowFindsEveryRow) {
  const std::pair<int64_t, int64_t> layouts[] = {{10, 4}, {13, 5}, {7, 7}, {1, 1},
                                                 {100, 3}, {22, 2}, {32, 3}};
  for (const auto& [rows, n] : layouts) {
    SCOPED_TRACE(absl::StrCat(rows, " rows / ", n, " shards"));
    const std::vector<Shard> shards = ShardLayout("v", rows, n, 0, 1);
    const int64_t base = rows / n;
    const int64_t extra = rows % n;
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t s = ShardForRow(shards, row);
      ASSERT_GE(s, 0);
      ASSERT_LT(s, n);
      EXPECT_GE(row, shards[s].row_offset);
      EXPECT_LT(row, shards[s].row_offset + shards[s].rows);
      // TF's sparse-update routing formula (sharded_variable.py) agrees.
      const int64_t tf = std::max(row / (base + 1), (row - extra) / base);
      EXPECT_EQ(s, tf) << "row " << row;
    }
  }
}

TEST(PartitionerTest, PlacerContinuesRoundRobinAcrossVariables) {
  RoundRobinPlacer placer(3);
  const PartitionerSpec none;
  for (int i = 0; i < 4; ++i) {
    auto plain = placer.Place(absl::StrCat("v", i), {5, 5}, kF32, none);
    ASSERT_TRUE(plain.ok()) << plain.status();
    ASSERT_EQ(plain->size(), 1u);
    EXPECT_EQ((*plain)[0].name, absl::StrCat("v", i));  // Unpartitioned: name kept.
    EXPECT_EQ((*plain)[0].ps_task, i % 3);
    EXPECT_EQ((*plain)[0].rows, 5);
  }
  auto sharded = placer.Place("emb", {8, 16384}, kF32, PartitionerSpec::MinSize(256 << 10, 2));
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  EXPECT_THAT(Names(*sharded), ElementsAre("emb/part_0", "emb/part_1"));
  EXPECT_THAT(Tasks(*sharded), ElementsAre(1, 2));
  EXPECT_THAT(Rows(*sharded), ElementsAre(4, 4));
  EXPECT_EQ(placer.counter(), 6);

  auto next = placer.Place("bias", {10}, kF32, PartitionerSpec::MinSize(256 << 10, 2));
  ASSERT_TRUE(next.ok());
  EXPECT_THAT(Names(*next), ElementsAre("bias"));  // Partitioner says 1: plain variable.
  EXPECT_THAT(Tasks(*next), ElementsAre(0));
  EXPECT_EQ(placer.counter(), 7);
}

TEST(PartitionerTest, PlacerKeepsScalarsWholeAndNamesClampedShards) {
  RoundRobinPlacer placer(2);
  auto scalar = placer.Place("step", {}, 8, PartitionerSpec::Fixed(4));
  ASSERT_TRUE(scalar.ok());
  EXPECT_THAT(Names(*scalar), ElementsAre("step"));
  EXPECT_EQ((*scalar)[0].rows, 1);

  // Fixed(4) on one row: PSS clamps to one shard but still builds a
  // ShardedVariable, so the shard is "row/part_0" (the clamp follows the
  // partitioner-says-1 check).
  auto clamped = placer.Place("row", {1, 3}, kF32, PartitionerSpec::Fixed(4));
  ASSERT_TRUE(clamped.ok());
  EXPECT_THAT(Names(*clamped), ElementsAre("row/part_0"));
  EXPECT_THAT(Tasks(*clamped), ElementsAre(1));

  auto more_than_rows = placer.Place("t", {3, 2}, kF32, PartitionerSpec::Fixed(8));
  ASSERT_TRUE(more_than_rows.ok());
  EXPECT_THAT(Rows(*more_than_rows), ElementsAre(1, 1, 1));
  EXPECT_THAT(Tasks(*more_than_rows), ElementsAre(0, 1, 0));
  EXPECT_EQ(placer.counter(), 5);
}

TEST(PartitionerTest, PlacerErrorLeavesTheCounterAlone) {
  RoundRobinPlacer placer(2);
  ASSERT_TRUE(placer.Place("a", {4}, kF32, PartitionerSpec()).ok());
  auto bad = placer.Place("b", {0, 4}, kF32, PartitionerSpec::MaxSize(16));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(placer.counter(), 1);
  auto next = placer.Place("c", {4}, kF32, PartitionerSpec());
  ASSERT_TRUE(next.ok());
  EXPECT_EQ((*next)[0].ps_task, 1);
}

}  // namespace
}  // namespace pscluster
