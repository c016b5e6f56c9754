#include "coordinator/core/step_accounting.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;
using Kind = StepDiscrepancy::Kind;

VariableSpecProto Var(const std::string& name, VariableKind kind = DENSE) {
  VariableSpecProto v;
  v.set_name(name);
  v.set_kind(kind);
  return v;
}

// PS 0: a dense kernel and an embedding shard; PS 1: embedding and hash-table
// shards only; PS 2: nothing.
VariablePlan Plan() {
  VariablePlan plan;
  plan.per_ps.resize(3);
  *plan.per_ps[0].add_variables() = Var("dense_0/kernel");
  *plan.per_ps[0].add_variables() = Var("embedding/user/part_0");
  *plan.per_ps[1].add_variables() = Var("embedding/user/part_1");
  *plan.per_ps[1].add_variables() = Var("embedding/item/part_1", HASH_TABLE);
  return plan;
}

PsSteps Answer(int64_t applied, int64_t duplicates, uint64_t incarnation = 7) {
  PsSteps s;
  s.answered = true;
  s.holds_job = true;
  s.applied_steps = applied;
  s.duplicate_steps = duplicates;
  s.incarnation = incarnation;
  return s;
}

StepLedger Ledger(int64_t steps, AccountingPoint point, int64_t lost = 0) {
  StepLedger l;
  l.steps = steps;
  l.lost_steps = lost;
  l.point = point;
  return l;
}

const std::vector<StepReach> kBothEvery = {StepReach::kEveryStep, StepReach::kEveryStep};

TEST(StepReachTest, DenseVariablesHearEveryStepRowsOnlySomeNothingNone) {
  EXPECT_EQ(StepReachOf(Plan(), Strategy::kParameterServer),
            (std::vector<StepReach>{StepReach::kEveryStep, StepReach::kSomeSteps,
                                    StepReach::kNone}));
}

TEST(StepReachTest, SynchronousStepsReachEveryPsThatHoldsVariables) {
  for (Strategy s : {Strategy::kCentralStorage, Strategy::kMultiWorkerMirrored}) {
    EXPECT_EQ(StepReachOf(Plan(), s),
              (std::vector<StepReach>{StepReach::kEveryStep, StepReach::kEveryStep,
                                      StepReach::kNone}));
  }
}

TEST(CompareStepsTest, ExactlyOnceWithHonestRetriesAgrees) {
  // Retried closures pushed 40 steps again: dropped as duplicates, fine.
  EXPECT_TRUE(CompareSteps(Ledger(9380, AccountingPoint::kEnd), kBothEvery,
                           {Answer(9380, 40), Answer(9380, 0)}, {7, 7})
                  .empty());
}

TEST(CompareStepsTest, KeysPrunedBehindTheCoordinatorsBackFailTheEnd) {
  // PruneKeys(below 2^62) on both PS: every later push was a "duplicate".
  const std::vector<StepDiscrepancy> found =
      CompareSteps(Ledger(9380, AccountingPoint::kEnd), kBothEvery,
                   {Answer(1876, 7504), Answer(1876, 7504)}, {7, 7});
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[1].ps, 1);
  EXPECT_EQ(found[1].kind, Kind::kFewer);
  EXPECT_EQ(found[1].message,
            "PS 1 applied 1876 of 9380 steps (duplicates 7504, lost 0): updates were dropped "
            "behind the coordinator's back");
  const absl::Status s = AccountingError(found);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("PS 0 applied 1876 of 9380"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("; PS 1 applied 1876 of 9380"));
}

TEST(CompareStepsTest, MoreThanCountedFailsOnlyAtTheEnd) {
  // A closure that failed part way applied 3 steps its retry has not run yet.
  EXPECT_TRUE(CompareSteps(Ledger(100, AccountingPoint::kQuiescent), kBothEvery,
                           {Answer(103, 0), Answer(100, 0)}, {})
                  .empty());
  const std::vector<StepDiscrepancy> found = CompareSteps(
      Ledger(100, AccountingPoint::kEnd, 12), kBothEvery, {Answer(103, 0), Answer(100, 0)}, {});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, Kind::kMore);
  EXPECT_THAT(found[0].message, HasSubstr("PS 0 applied 103 of 100 steps (duplicates 0, lost 12)"));
}

TEST(CompareStepsTest, FewerThanCountedFailsAtAQuiescentPointToo) {
  const std::vector<StepDiscrepancy> found = CompareSteps(
      Ledger(100, AccountingPoint::kQuiescent), kBothEvery, {Answer(100, 0), Answer(60, 0)}, {});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].ps, 1);
  EXPECT_EQ(found[0].kind, Kind::kFewer);
}

TEST(CompareStepsTest, RowOnlyPsMayHearOfFewerStepsButNeverMore) {
  const std::vector<StepReach> reach = StepReachOf(Plan(), Strategy::kParameterServer);
  PsSteps none;  // PS 2 is not asked
  EXPECT_TRUE(
      CompareSteps(Ledger(50, AccountingPoint::kEnd), reach, {Answer(50, 0), Answer(31, 2), none},
                   {})
          .empty());
  const std::vector<StepDiscrepancy> found = CompareSteps(
      Ledger(50, AccountingPoint::kEnd), reach, {Answer(50, 0), Answer(51, 0), none}, {});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].ps, 1);
  EXPECT_EQ(found[0].kind, Kind::kMore);
}

TEST(CompareStepsTest, AVanishedNamespaceSaysWhetherThePsRestarted) {
  PsSteps gone_same;  // ended behind the coordinator's back
  gone_same.answered = true;
  gone_same.incarnation = 7;
  PsSteps gone_new = gone_same;  // a restarted PS
  gone_new.incarnation = 8;
  const std::vector<StepDiscrepancy> found =
      CompareSteps(Ledger(10, AccountingPoint::kQuiescent), kBothEvery, {gone_same, gone_new},
                   {7, 7});
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].kind, Kind::kStateGone);
  EXPECT_FALSE(found[0].restarted);
  EXPECT_THAT(found[0].message, HasSubstr("PS 0 holds nothing of the job although it did not "
                                          "restart"));
  EXPECT_THAT(found[0].message, HasSubstr("behind the coordinator's back"));
  EXPECT_EQ(found[1].kind, Kind::kStateGone);
  EXPECT_TRUE(found[1].restarted);
  EXPECT_THAT(found[1].message, HasSubstr("PS 1 restarted"));
  // Without a known incarnation it says only what it sees; even with no
  // step done, a PS that should hold the job and does not is reported.
  const std::vector<StepDiscrepancy> unknown =
      CompareSteps(Ledger(0, AccountingPoint::kEnd), kBothEvery, {gone_same, Answer(0, 0)}, {});
  ASSERT_EQ(unknown.size(), 1u);
  EXPECT_EQ(unknown[0].message, "PS 0 holds nothing of the job");
}

TEST(CompareStepsTest, UnansweredPsAreLeftToTheCaller) {
  PsSteps down;
  down.error = "UNAVAILABLE: connection refused";
  EXPECT_TRUE(
      CompareSteps(Ledger(10, AccountingPoint::kEnd), kBothEvery, {down, Answer(10, 0)}, {})
          .empty());
  EXPECT_TRUE(AccountingError({}).ok());
}

// A PS that answers Stats from a script, or fails.
class StatsPs : public PsClient {
 public:
  absl::Status CreateVariables(const CreateVariablesRequest&, CreateVariablesResponse*) override {
    return absl::UnimplementedError("");
  }
  absl::Status Pull(const PullRequest&, PullResponse*) override {
    return absl::UnimplementedError("");
  }
  absl::Status Push(const PushRequest&, PushResponse*) override {
    return absl::UnimplementedError("");
  }
  absl::Status Stats(const StatsRequest& request, StatsResponse* response) override {
    ++calls;
    asked_job = request.job();
    if (!error.ok()) return error;
    *response = answer;
    return absl::OkStatus();
  }
  StatsResponse answer;
  absl::Status error;
  std::string asked_job;
  int calls = 0;
};

TEST(AskPsStepsTest, ReadsTheJobsCountersAndSkipsPsWithoutVariables) {
  StatsPs holds, empty, down, unasked;
  holds.answer.add_variables()->set_name("dense_0/kernel");
  holds.answer.set_applied_steps(12);
  holds.answer.set_duplicate_steps(3);
  holds.answer.set_incarnation(99);
  empty.answer.set_incarnation(5);  // the job is not there
  down.error = absl::UnavailableError("connection refused");
  const std::vector<PsSteps> got =
      AskPsSteps({&holds, &empty, &down, &unasked}, "job-1",
                 {StepReach::kEveryStep, StepReach::kSomeSteps, StepReach::kEveryStep,
                  StepReach::kNone});
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(holds.asked_job, "job-1");
  EXPECT_TRUE(got[0].answered && got[0].holds_job);
  EXPECT_EQ(got[0].applied_steps, 12);
  EXPECT_EQ(got[0].duplicate_steps, 3);
  EXPECT_EQ(got[0].incarnation, 99u);
  EXPECT_TRUE(got[1].answered);
  EXPECT_FALSE(got[1].holds_job);
  EXPECT_EQ(got[1].incarnation, 5u);
  EXPECT_FALSE(got[2].answered);
  EXPECT_THAT(got[2].error, HasSubstr("connection refused"));
  EXPECT_FALSE(got[3].answered);
  EXPECT_EQ(unasked.calls, 0);
}

}  // namespace
}  // namespace pscluster
