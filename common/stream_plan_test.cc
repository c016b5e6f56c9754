#include "common/stream_plan.h"

#include <zlib.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/tfrecord.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

std::string TempPath(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

std::string WriteFile(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// `n` lines "i,<i>" starting at `first`.
std::string Lines(int first, int n) {
  std::string out;
  for (int i = first; i < first + n; ++i) absl::StrAppend(&out, "r", i, ",", i, "\n");
  return out;
}

DataSourceSpec Source(const std::vector<std::string>& paths, StreamSpec::Shard shard) {
  DataSourceSpec s;
  s.format = "csv";
  s.header = false;
  s.paths = paths;
  s.path = paths.front();
  s.stream.enabled = true;
  s.stream.shard = shard;
  return s;
}

TEST(StreamPlanTest, DataUnitsAreRecordRangesWithSeekOffsets) {
  const std::string a = WriteFile("data_a.csv", Lines(0, 10));
  const std::string b = WriteFile("data_b.csv", Lines(10, 5));
  absl::StatusOr<StreamPlan> plan =
      StreamPlan::Create(Source({a, b}, StreamSpec::Shard::kData), /*unit_records=*/4, /*batch=*/3);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->records(), 15);
  EXPECT_EQ(plan->units(), 5);  // a: [0,4) [4,8) [8,10); b: [0,4) [4,5)
  EXPECT_EQ(plan->epoch_steps(), 2 + 2 + 1 + 2 + 1);
  const StreamPlan::Epoch e = plan->ForEpoch(0, /*seed=*/1, /*shuffle=*/false);
  ASSERT_EQ(e.splits.size(), 5u);
  EXPECT_EQ(e.splits[1].path(), a);
  EXPECT_EQ(e.splits[1].begin(), 4);
  EXPECT_EQ(e.splits[1].end(), 8);
  // "r0,0\n" .. "r3,3\n" are 5 bytes each.
  EXPECT_EQ(e.splits[1].byte_offset(), 20);
  EXPECT_EQ(e.splits[4].path(), b);
  EXPECT_EQ(e.splits[4].begin(), 4);
  EXPECT_EQ(e.splits[4].end(), 5);
  EXPECT_EQ(e.splits[4].first_step(), 7);
  EXPECT_EQ(e.splits[4].epoch_steps(), 8);
}

TEST(StreamPlanTest, ShuffledEpochsCoverEveryRecordOnceInAnotherOrder) {
  const std::string a = WriteFile("shuffle_a.csv", Lines(0, 100));
  absl::StatusOr<StreamPlan> plan =
      StreamPlan::Create(Source({a}, StreamSpec::Shard::kData), 7, 7);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const StreamPlan::Epoch e0 = plan->ForEpoch(0, 5, true);
  const StreamPlan::Epoch e1 = plan->ForEpoch(1, 5, true);
  EXPECT_NE(e0.split_indices, e1.split_indices);
  // The same (seed, epoch) plans alike: a restarted coordinator's splits.
  EXPECT_EQ(e1.split_indices, plan->ForEpoch(1, 5, true).split_indices);
  std::set<int64_t> records;
  int64_t step = 0;
  for (const DataSplit& s : e1.splits) {
    EXPECT_EQ(s.first_step(), step);
    step += (s.end() - s.begin() + 6) / 7;
    for (int64_t r = s.begin(); r < s.end(); ++r) EXPECT_TRUE(records.insert(r).second);
  }
  EXPECT_EQ(records.size(), 100u);
}

TEST(StreamPlanTest, FileUnitsAndSortedGlobs) {
  WriteFile("glob-2.csv", Lines(0, 3));
  WriteFile("glob-1.csv", Lines(0, 2));
  WriteFile("glob-3.csv", "");  // empty: no unit
  absl::StatusOr<StreamPlan> plan =
      StreamPlan::Create(Source({TempPath("glob-*.csv")}, StreamSpec::Shard::kFile), 100, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->files(), 3);
  EXPECT_EQ(plan->units(), 2);
  const StreamPlan::Epoch e = plan->ForEpoch(0, 1, false);
  EXPECT_EQ(e.splits[0].path(), TempPath("glob-1.csv"));
  EXPECT_EQ(e.splits[0].end(), 2);
  EXPECT_EQ(e.splits[1].path(), TempPath("glob-2.csv"));
  EXPECT_EQ(e.splits[1].end(), 3);
  EXPECT_EQ(plan->epoch_steps(), 1 + 2);
}

TEST(StreamPlanTest, ClearErrors) {
  absl::StatusOr<StreamPlan> none =
      StreamPlan::Create(Source({TempPath("nothing-*.tsv")}, StreamSpec::Shard::kFile), 10, 2);
  EXPECT_TRUE(absl::IsNotFound(none.status())) << none.status();
  EXPECT_NE(none.status().message().find("nothing-*.tsv"), std::string::npos);

  const std::string gz = TempPath("data.csv.gz");
  gzFile f = gzopen(gz.c_str(), "wb");
  const std::string text = Lines(0, 5);
  gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
  gzclose(f);
  absl::StatusOr<StreamPlan> data = StreamPlan::Create(Source({gz}, StreamSpec::Shard::kData), 2, 2);
  EXPECT_TRUE(absl::IsInvalidArgument(data.status())) << data.status();
  EXPECT_NE(data.status().message().find("shard: file"), std::string::npos);
  absl::StatusOr<StreamPlan> by_file =
      StreamPlan::Create(Source({gz}, StreamSpec::Shard::kFile), 2, 2);
  ASSERT_TRUE(by_file.ok()) << by_file.status();
  EXPECT_EQ(by_file->records(), 5);

  const std::string empty = WriteFile("empty.csv", "");
  EXPECT_TRUE(absl::IsInvalidArgument(
      StreamPlan::Create(Source({empty}, StreamSpec::Shard::kData), 2, 2).status()));
}

TEST(StreamPlanTest, TfRecordFramingLostFailsOrIsSkippedAndNamed) {
  std::string bytes;
  for (int i = 0; i < 5; ++i) bytes += FrameTfRecord(absl::StrCat("record ", i));
  const size_t third = 2 * FrameTfRecord("record 0").size();
  const std::string whole = WriteFile("ok.tfrecord", bytes);
  const std::string cut = WriteFile("cut.tfrecord", bytes.substr(0, bytes.size() - 3));
  DataSourceSpec source = Source({whole, cut}, StreamSpec::Shard::kData);
  source.format = "tfrecord";
  absl::StatusOr<StreamPlan> failed = StreamPlan::Create(source, 2, 2);
  EXPECT_TRUE(absl::IsDataLoss(failed.status())) << failed.status();
  EXPECT_NE(failed.status().message().find("cut.tfrecord"), std::string::npos);
  EXPECT_NE(failed.status().message().find(absl::StrCat("byte ", 2 * third)), std::string::npos)
      << failed.status();

  source.stream.skip_corrupt = true;
  absl::StatusOr<StreamPlan> skipped = StreamPlan::Create(source, 2, 2);
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_EQ(skipped->records(), 5 + 4);
  ASSERT_EQ(skipped->lost_tails().size(), 1u);
  const StreamPlan::Epoch e = skipped->ForEpoch(0, 1, false);
  EXPECT_EQ(e.splits[1].byte_offset(), static_cast<int64_t>(third));  // record 2 of ok.tfrecord
}

TEST(StreamPlanTest, FingerprintChangesWithTheFiles) {
  const std::string a = WriteFile("fp.csv", Lines(0, 10));
  DataSourceSpec source = Source({a}, StreamSpec::Shard::kData);
  const std::string before = StreamPlan::Create(source, 4, 2)->fingerprint();
  EXPECT_EQ(before, StreamPlan::Create(source, 4, 2)->fingerprint());
  WriteFile("fp.csv", Lines(0, 11));
  const std::string after = StreamPlan::Create(source, 4, 2)->fingerprint();
  EXPECT_NE(before, after);
  EXPECT_NE(after.find("records=11"), std::string::npos) << after;
}

}  // namespace
}  // namespace pscluster
