#include "coordinator/core/prediction_table.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

// `rows` x 2 values: row r holds (r, -r).
std::vector<float> Values(int64_t first_row, int64_t rows) {
  std::vector<float> v;
  for (int64_t r = first_row; r < first_row + rows; ++r) {
    v.push_back(static_cast<float>(r));
    v.push_back(-static_cast<float>(r));
  }
  return v;
}

// The rows TakeReady() hands out now, appended to `*taken`; checks that
// they continue the rows taken before without a gap.
void Take(PredictionTable& table, std::vector<float>* taken) {
  for (PredictionTable::Split& s : table.TakeReady()) {
    EXPECT_EQ(s.first_row * table.outputs(), static_cast<int64_t>(taken->size()));
    EXPECT_EQ(static_cast<int64_t>(s.values.size()), s.rows * table.outputs());
    taken->insert(taken->end(), s.values.begin(), s.values.end());
  }
}

TEST(PredictionTableTest, SplitsCoverTheRowsWithAShortLastOne) {
  PredictionTable table(10, 4);
  ASSERT_EQ(table.num_splits(), 3);
  EXPECT_EQ(table.SplitBegin(2), 8);
  EXPECT_EQ(table.SplitEnd(2), 10);
}

TEST(PredictionTableTest, AnswersInAnyOrderComeOutInInputOrder) {
  PredictionTable table(10, 4);
  std::vector<float> taken;
  EXPECT_TRUE(*table.Record(8, 2, 2, Values(8, 2)));
  Take(table, &taken);  // split 0 is not in: nothing yet
  EXPECT_TRUE(taken.empty());
  EXPECT_TRUE(*table.Record(0, 4, 2, Values(0, 4)));
  Take(table, &taken);  // split 0 only: split 1 is missing
  EXPECT_EQ(taken, Values(0, 4));
  EXPECT_EQ(table.rows_taken(), 4);
  EXPECT_FALSE(table.Verify().ok());
  EXPECT_TRUE(*table.Record(4, 4, 2, Values(4, 4)));
  ASSERT_TRUE(table.Verify().ok()) << table.Verify();
  Take(table, &taken);  // splits 1 and 2
  EXPECT_EQ(taken, Values(0, 10));
  EXPECT_TRUE(table.TakeReady().empty());  // each split is handed out once
  EXPECT_EQ(table.rows_done(), 10);
  EXPECT_EQ(table.rows_taken(), 10);
  EXPECT_EQ(table.duplicates(), 0);
}

TEST(PredictionTableTest, ASecondAnswerIsDroppedAndCountedEvenAfterItsSplitWasTaken) {
  PredictionTable table(8, 4);
  EXPECT_TRUE(*table.Record(0, 4, 2, Values(0, 4)));
  // A retried closure whose first run answered after all, with other values:
  // the first answer stays.
  std::vector<float> other(8, 42.0f);
  absl::StatusOr<bool> again = table.Record(0, 4, 2, other);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(*again);
  std::vector<float> taken;
  Take(table, &taken);
  // And once the split left the table.
  again = table.Record(0, 4, 2, other);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(*again);
  EXPECT_EQ(table.duplicates(), 2);
  EXPECT_EQ(table.splits_done(), 1);
  EXPECT_EQ(table.rows_done(), 4);
  EXPECT_TRUE(*table.Record(4, 4, 2, Values(4, 4)));
  Take(table, &taken);
  EXPECT_EQ(taken, Values(0, 8));
  EXPECT_TRUE(table.Verify().ok());
}

TEST(PredictionTableTest, AMissingSplitFailsVerifyLoudly) {
  PredictionTable table(10, 4);
  ASSERT_TRUE(table.Record(0, 4, 2, Values(0, 4)).ok());
  ASSERT_TRUE(table.Record(8, 2, 2, Values(8, 2)).ok());
  std::vector<float> taken;
  Take(table, &taken);
  const absl::Status v = table.Verify();
  EXPECT_EQ(v.code(), absl::StatusCode::kInternal);
  EXPECT_NE(v.message().find("6 of 10 rows"), std::string::npos) << v;
  EXPECT_NE(v.message().find("[4, 8)"), std::string::npos) << v;
  // The rows after the gap are never handed out.
  EXPECT_EQ(taken, Values(0, 4));
}

TEST(PredictionTableTest, MalformedAnswersAreRefusedAndRecordNothing) {
  PredictionTable table(10, 4);
  // Not a split's first row, the wrong row count, values that do not fit.
  EXPECT_EQ(table.Record(2, 4, 2, Values(2, 4)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.Record(12, 4, 2, Values(12, 4)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.Record(8, 4, 2, Values(8, 4)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.Record(0, 4, 3, Values(0, 4)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.Record(0, 4, 0, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.splits_done(), 0);
  // Outputs per row must agree across answers.
  ASSERT_TRUE(table.Record(0, 4, 2, Values(0, 4)).ok());
  EXPECT_EQ(table.Record(4, 4, 1, std::vector<float>(4, 1.0f)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.splits_done(), 1);
}

TEST(PredictionTableTest, NoRowsIsComplete) {
  PredictionTable table(0, 4);
  EXPECT_EQ(table.num_splits(), 0);
  EXPECT_TRUE(table.Verify().ok());
  EXPECT_TRUE(table.TakeReady().empty());
}

TEST(PredictionTableTest, ConcurrentAnswersKeepEachRowOnce) {
  // Two "workers" answer every split (as if each closure ran twice) while a
  // third thread takes what is ready: each split is kept and taken once,
  // the other answer counted.
  constexpr int64_t kRows = 1000, kSplit = 7;
  PredictionTable table(kRows, kSplit);
  auto answer_all = [&] {
    for (int64_t b = 0; b < kRows; b += kSplit) {
      const int64_t n = std::min(kSplit, kRows - b);
      ASSERT_TRUE(table.Record(b, n, 2, Values(b, n)).ok());
    }
  };
  std::vector<float> taken;
  std::atomic<int> answering{2};
  auto answerer = [&] {
    answer_all();
    --answering;
  };
  std::thread a(answerer), b(answerer);
  std::thread taker([&] {
    while (answering > 0) Take(table, &taken);
    Take(table, &taken);  // what the last answers made ready
  });
  a.join();
  b.join();
  taker.join();
  EXPECT_EQ(table.splits_done(), table.num_splits());
  EXPECT_EQ(table.duplicates(), table.num_splits());
  EXPECT_EQ(taken, Values(0, kRows));
  EXPECT_TRUE(table.Verify().ok());
}

}  // namespace
}  // namespace pscluster
