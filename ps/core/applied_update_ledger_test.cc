// AppliedUpdateLedger: duplicates, retiring closures, the counts Stats
// reports, the checkpoint record and its merge over a restore's files.
#include "ps/core/applied_update_ledger.h"

#include <atomic>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

using Key = AppliedUpdateLedger::Key;

AppliedKeys Record(std::vector<Key> keys, int64_t retired_below, int64_t applied,
                   int64_t duplicate) {
  AppliedKeys out;
  for (const auto& [closure, step] : keys) {
    out.add_closure_ids(closure);
    out.add_steps(step);
  }
  out.set_retired_below(retired_below);
  out.set_applied_steps(applied);
  out.set_duplicate_steps(duplicate);
  return out;
}

TEST(AppliedUpdateLedgerTest, AKeyIsClaimedOnceAndThenADuplicate) {
  AppliedUpdateLedger ledger;
  EXPECT_FALSE(ledger.Contains(7, 0));
  EXPECT_TRUE(ledger.Claim(7, 0));
  EXPECT_TRUE(ledger.Contains(7, 0));
  EXPECT_FALSE(ledger.Claim(7, 0));  // a retried closure re-sends step 0
  EXPECT_TRUE(ledger.Claim(7, 1));   // its next step is new
  EXPECT_TRUE(ledger.Claim(8, 0));   // so is another closure's step 0
  EXPECT_FALSE(ledger.Contains(8, 1));

  const AppliedUpdateLedger::Counts counts = ledger.GetCounts();
  EXPECT_EQ(counts.applied_steps, 3);
  EXPECT_EQ(counts.duplicate_steps, 1);
  EXPECT_EQ(counts.held_keys, 3);
}

TEST(AppliedUpdateLedgerTest, CountDuplicateCountsWithoutAKey) {
  AppliedUpdateLedger ledger;
  ledger.CountDuplicate();
  ledger.CountDuplicate();
  const AppliedUpdateLedger::Counts counts = ledger.GetCounts();
  EXPECT_EQ(counts.duplicate_steps, 2);
  EXPECT_EQ(counts.applied_steps, 0);
  EXPECT_EQ(counts.held_keys, 0);
}

TEST(AppliedUpdateLedgerTest, RetiringForgetsKeysAndMakesTheirClosuresDuplicates) {
  AppliedUpdateLedger ledger;
  ASSERT_TRUE(ledger.Claim(1, 0));
  ASSERT_TRUE(ledger.Claim(1, 1));
  ASSERT_TRUE(ledger.Claim(2, 0));
  ASSERT_TRUE(ledger.Claim(5, 0));

  AppliedUpdateLedger::Pruned pruned = ledger.RetireBelow(3);
  EXPECT_EQ(pruned.pruned, 3);
  EXPECT_EQ(pruned.remaining, 1);
  EXPECT_EQ(ledger.GetCounts().held_keys, 1);
  // A retired closure's pushes are duplicates, old steps or new.
  EXPECT_TRUE(ledger.Contains(1, 0));
  EXPECT_TRUE(ledger.Contains(2, 9));
  EXPECT_FALSE(ledger.Claim(2, 9));
  EXPECT_EQ(ledger.GetCounts().held_keys, 1);  // nothing recorded for it
  // At and above the watermark keys are as before.
  EXPECT_FALSE(ledger.Contains(3, 0));
  EXPECT_TRUE(ledger.Contains(5, 0));
  EXPECT_TRUE(ledger.Claim(3, 0));
}

TEST(AppliedUpdateLedgerTest, TheWatermarkOnlyRises) {
  AppliedUpdateLedger ledger;
  ASSERT_TRUE(ledger.Claim(4, 0));
  ASSERT_TRUE(ledger.Claim(6, 0));
  EXPECT_EQ(ledger.RetireBelow(5).pruned, 1);
  // Lower or equal: nothing forgotten, the watermark stays.
  AppliedUpdateLedger::Pruned again = ledger.RetireBelow(2);
  EXPECT_EQ(again.pruned, 0);
  EXPECT_EQ(again.remaining, 1);
  EXPECT_EQ(ledger.RetireBelow(5).pruned, 0);
  EXPECT_TRUE(ledger.Contains(4, 7));
  EXPECT_EQ(ledger.ToProto().retired_below(), 5);
}

TEST(AppliedUpdateLedgerTest, ToProtoHoldsSortedKeysWatermarkAndCounters) {
  AppliedUpdateLedger ledger;
  ASSERT_TRUE(ledger.Claim(9, 1));
  ASSERT_TRUE(ledger.Claim(3, 2));
  ASSERT_TRUE(ledger.Claim(9, 0));
  ASSERT_TRUE(ledger.Claim(1, 0));
  ASSERT_FALSE(ledger.Claim(9, 0));
  ledger.RetireBelow(2);

  const AppliedKeys record = ledger.ToProto();
  EXPECT_THAT(record.closure_ids(), ElementsAre(3, 9, 9));
  EXPECT_THAT(record.steps(), ElementsAre(2, 0, 1));
  EXPECT_EQ(record.retired_below(), 2);
  EXPECT_EQ(record.applied_steps(), 4);
  EXPECT_EQ(record.duplicate_steps(), 1);
}

TEST(AppliedUpdateLedgerTest, ReplaceSwapsInTheWholeState) {
  AppliedUpdateLedger ledger;
  ASSERT_TRUE(ledger.Claim(10, 0));
  ledger.RetireBelow(8);

  AppliedUpdateLedger::State state;
  state.keys = {{2, 0}, {3, 4}};
  state.retired_below = 1;
  state.applied_steps = 12;
  state.duplicate_steps = 5;
  ledger.Replace(std::move(state));

  EXPECT_FALSE(ledger.Contains(10, 0));  // the old key is gone
  EXPECT_FALSE(ledger.Contains(5, 0));   // the old watermark too
  EXPECT_TRUE(ledger.Contains(0, 0));    // below the new one
  EXPECT_TRUE(ledger.Contains(3, 4));
  EXPECT_FALSE(ledger.Claim(2, 0));
  const AppliedUpdateLedger::Counts counts = ledger.GetCounts();
  EXPECT_EQ(counts.applied_steps, 12);
  EXPECT_EQ(counts.duplicate_steps, 6);
  EXPECT_EQ(counts.held_keys, 2);
}

TEST(AppliedUpdateLedgerTest, ARecordRoundTripsThroughSavedLedgers) {
  AppliedUpdateLedger saved;
  ASSERT_TRUE(saved.Claim(4, 0));
  ASSERT_TRUE(saved.Claim(4, 1));
  ASSERT_FALSE(saved.Claim(4, 1));
  saved.RetireBelow(3);

  SavedLedgers files;
  ASSERT_TRUE(files.Add(/*ps_index=*/0, saved.ToProto()).ok());
  AppliedUpdateLedger restored;
  restored.Replace(std::move(files).Merged(/*ps_index=*/0));
  EXPECT_EQ(restored.ToProto().SerializeAsString(), saved.ToProto().SerializeAsString());
}

TEST(AppliedUpdateLedgerTest, SavedLedgersMergeKeysWatermarksAndPickCounters) {
  SavedLedgers files;
  ASSERT_TRUE(files.Add(0, Record({{5, 0}, {6, 1}}, /*retired_below=*/2, 10, 1)).ok());
  ASSERT_TRUE(files.Add(1, Record({{6, 1}, {7, 0}}, /*retired_below=*/4, 8, 3)).ok());

  // The same layout: each PS gets the counters it saved.
  SavedLedgers copy = files;
  AppliedUpdateLedger::State same = std::move(copy).Merged(1);
  EXPECT_THAT(same.keys, UnorderedElementsAre(Key{5, 0}, Key{6, 1}, Key{7, 0}));
  EXPECT_EQ(same.retired_below, 4);
  EXPECT_EQ(same.applied_steps, 8);
  EXPECT_EQ(same.duplicate_steps, 3);

  // A PS index no file was saved by: the highest of each counter.
  AppliedUpdateLedger::State other = std::move(files).Merged(2);
  EXPECT_EQ(other.keys.size(), 3u);
  EXPECT_EQ(other.retired_below, 4);
  EXPECT_EQ(other.applied_steps, 10);
  EXPECT_EQ(other.duplicate_steps, 3);
}

TEST(AppliedUpdateLedgerTest, NothingSavedMergesToAnEmptyLedger) {
  AppliedUpdateLedger::State state = SavedLedgers().Merged(0);
  EXPECT_TRUE(state.keys.empty());
  EXPECT_EQ(state.retired_below, 0);
  EXPECT_EQ(state.applied_steps, 0);
  EXPECT_EQ(state.duplicate_steps, 0);
}

TEST(AppliedUpdateLedgerTest, AMalformedRecordIsRefusedAndAddsNothing) {
  SavedLedgers files;
  AppliedKeys bad = Record({{1, 0}}, 9, 3, 0);
  bad.add_steps(1);
  absl::Status s = files.Add(0, bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("closure_ids and steps differ in length"));
  AppliedUpdateLedger::State state = std::move(files).Merged(0);
  EXPECT_TRUE(state.keys.empty());
  EXPECT_EQ(state.retired_below, 0);
  EXPECT_EQ(state.applied_steps, 0);
}

TEST(AppliedUpdateLedgerTest, ConcurrentClaimsOfOneKeySucceedOnce) {
  constexpr int kThreads = 8;
  constexpr int kKeys = 500;
  AppliedUpdateLedger ledger;
  std::atomic<int> first{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int k = 0; k < kKeys; ++k) {
        if (ledger.Claim(k / 4, k % 4)) ++first;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(first.load(), kKeys);
  const AppliedUpdateLedger::Counts counts = ledger.GetCounts();
  EXPECT_EQ(counts.applied_steps, kKeys);
  EXPECT_EQ(counts.duplicate_steps, kKeys * (kThreads - 1));
  EXPECT_EQ(counts.held_keys, kKeys);
}

}  // namespace
}  // namespace pscluster
