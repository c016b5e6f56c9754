// Parse rules of streaming input: data.*.stream and format: tfrecord.
#include <string>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;

// A job whose train source is `train` (YAML lines under data.train) and
// whose strategy is `strategy`.
std::string Job(const std::string& train, const std::string& strategy = "parameter_server") {
  return absl::StrCat("strategy: ", strategy, R"(
model:
  inputs:
    categorical: [{name: s, hashed: true}]
    dense: 1
  layers: [{dense: {units: 1}}]
  loss: sigmoid_cross_entropy
data:
  train:
    columns: [{y: int}, {x: float}, {s: string}]
    label: {column: y}
    dense_columns: [x]
)", train, R"(
  eval:
    format: csv
    path: b.csv
    columns: [{y: int}, {x: float}, {s: string}]
    label: {column: y}
    dense_columns: [x]
optimizer: {type: sgd}
)");
}

TEST(JobSpecStreamTest, ParsesTheStreamBlock) {
  auto spec = ParseJobSpec(Job("    format: csv\n    path: ['logs/day-*.tsv']\n"
                               "    stream: {shard: file, prefetch_bytes: 1024, "
                               "shuffle_buffer: 0, corrupt_records: skip}"),
                           "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const StreamSpec& s = spec->data.train.stream;
  EXPECT_TRUE(s.enabled);
  EXPECT_EQ(s.shard, StreamSpec::Shard::kFile);
  EXPECT_EQ(s.prefetch_bytes, 1024);
  EXPECT_EQ(s.shuffle_buffer, 0);
  EXPECT_TRUE(s.skip_corrupt);
  EXPECT_EQ(spec->data.train.paths.front(), "logs/day-*.tsv");
  EXPECT_FALSE(spec->data.eval.stream.enabled);
}

TEST(JobSpecStreamTest, TfRecordAlwaysStreamsWithTheDefaults) {
  auto spec = ParseJobSpec(Job("    format: tfrecord\n    path: a.tfrecord"), "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const StreamSpec& s = spec->data.train.stream;
  EXPECT_TRUE(s.enabled);
  EXPECT_EQ(s.shard, StreamSpec::Shard::kData);
  EXPECT_FALSE(s.skip_corrupt);
  auto on = ParseJobSpec(Job("    format: csv\n    path: a.csv\n    stream: true"), "job.yaml");
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_TRUE(on->data.train.stream.enabled);
}

TEST(JobSpecStreamTest, RefusesWhatAStreamCannotHonour) {
  const struct {
    std::string train;
    std::string strategy;
    std::string error;
  } cases[] = {
      {"    format: csv\n    path: a.csv\n    stream: {shard: rows}", "parameter_server",
       "unknown shard 'rows' (expected file or data)"},
      {"    format: csv\n    path: a.csv\n    stream: {corrupt_records: ignore}",
       "parameter_server", "unknown corrupt_records 'ignore'"},
      {"    format: csv\n    path: a.csv\n    stream: {buffer: 3}", "parameter_server", "buffer"},
      {"    format: csv\n    path: a.csv\n    limit: 10\n    stream: true", "parameter_server",
       "limit cannot be combined with stream"},
      {"    format: csv\n    path: a.csv\n    stream: false", "parameter_server",
       "omit it"},
      {"    format: tfrecord\n    path: a.tfrecord\n    delimiter: \",\"", "parameter_server",
       "delimiter"},
      {"    format: tfrecord\n    path: a.tfrecord", "central_storage",
       "parameter_server only, not central_storage"},
  };
  for (const auto& c : cases) {
    auto spec = ParseJobSpec(Job(c.train, c.strategy), "job.yaml");
    ASSERT_FALSE(spec.ok()) << c.train;
    EXPECT_THAT(std::string(spec.status().message()), HasSubstr(c.error)) << c.train;
    EXPECT_THAT(std::string(spec.status().message()), HasSubstr("job.yaml:")) << c.train;
  }
}

}  // namespace
}  // namespace pscluster
