#include "coordinator/core/checkpoint_policy.h"

#include "gtest/gtest.h"

namespace pscluster {
namespace {

// A clock the test moves by hand: no test here sleeps.
struct FakeClock {
  absl::Time now = absl::FromUnixSeconds(1000);
  std::function<absl::Time()> Fn() {
    return [this] { return now; };
  }
};

CheckpointSpec Every(int64_t steps, double seconds) {
  CheckpointSpec c;
  c.dir = "ckpt";
  c.every_steps = steps;
  c.every_seconds = seconds;
  c.max_retries = 2;
  c.retry_backoff_s = 1;
  return c;
}

const absl::Status kDiskFull =
    absl::UnavailableError("writing ckpt-3/ps-0: No space left on device");

TEST(CheckpointPolicyTest, DueByStepsCountedFromTheLastCheckpoint) {
  FakeClock clock;
  CheckpointPolicy policy(Every(10, 0), clock.Fn());
  EXPECT_FALSE(policy.Due(9));
  EXPECT_TRUE(policy.Due(10));
  policy.Committed(12);
  EXPECT_FALSE(policy.Due(21));
  EXPECT_TRUE(policy.Due(22));
  policy.Restored(5);  // rolled back to a checkpoint at step 5
  EXPECT_FALSE(policy.Due(14));
  EXPECT_TRUE(policy.Due(15));
}

TEST(CheckpointPolicyTest, DueBySecondsCountedFromTheStart) {
  FakeClock clock;
  CheckpointPolicy policy(Every(0, 60), clock.Fn());
  clock.now += absl::Seconds(50);
  policy.Start();  // queued time does not count
  clock.now += absl::Seconds(59);
  EXPECT_FALSE(policy.Due(1000));
  clock.now += absl::Seconds(1);
  EXPECT_TRUE(policy.Due(1));
  policy.Committed(1);
  EXPECT_FALSE(policy.Due(1));
}

// Checkpoints slower than every_seconds, at an epoch's end with nothing
// left to dispatch: the time trigger waits for a new step, or the job would
// checkpoint the same step forever.
TEST(CheckpointPolicyTest, TheTimeTriggerWaitsForAStepSinceTheLastCheckpoint) {
  FakeClock clock;
  CheckpointPolicy policy(Every(0, 1), clock.Fn());
  policy.Start();
  clock.now += absl::Seconds(2);
  ASSERT_TRUE(policy.Due(10));
  policy.Committed(10);
  clock.now += absl::Seconds(5);  // the checkpoint took 5 s
  EXPECT_FALSE(policy.Due(10));
  EXPECT_TRUE(policy.Due(11));
}

TEST(CheckpointPolicyTest, NoTriggerNeverDue) {
  FakeClock clock;
  CheckpointPolicy policy(Every(0, 0), clock.Fn());
  clock.now += absl::Hours(100);
  EXPECT_FALSE(policy.Due(1 << 30));
}

TEST(CheckpointPolicyTest, AFailureWaitsForTheBackoffAndTheNextTrigger) {
  FakeClock clock;
  CheckpointPolicy policy(Every(10, 0), clock.Fn());
  const CheckpointPolicy::Failure f = policy.Failed(kDiskFull, /*ps_failure=*/false, 10);
  EXPECT_FALSE(f.give_up);
  EXPECT_EQ(f.attempt, 1);
  EXPECT_EQ(f.backoff, absl::Seconds(1));
  EXPECT_EQ(f.report,
            "writing ckpt-3/ps-0: No space left on device; retry 1 of 2 after 1s and the next "
            "checkpoint trigger; training goes on");
  // The trigger counts from the failed attempt's step...
  EXPECT_FALSE(policy.Due(19));
  // ...and the backoff must pass too.
  EXPECT_FALSE(policy.Due(20));
  clock.now += absl::Seconds(1);
  EXPECT_TRUE(policy.Due(20));
  // The second retry waits twice as long.
  EXPECT_EQ(policy.Failed(kDiskFull, false, 20).backoff, absl::Seconds(2));
}

TEST(CheckpointPolicyTest, RetriesUsedUpGiveUpAndDisableWithContinue) {
  FakeClock clock;
  CheckpointSpec spec = Every(1, 0);
  spec.on_failure = CheckpointSpec::OnFailure::kContinue;
  CheckpointPolicy policy(spec, clock.Fn());
  EXPECT_FALSE(policy.Failed(kDiskFull, false, 1).give_up);
  EXPECT_FALSE(policy.Failed(kDiskFull, false, 2).give_up);
  const CheckpointPolicy::Failure last = policy.Failed(kDiskFull, false, 3);
  EXPECT_TRUE(last.give_up);
  EXPECT_TRUE(last.disabled);
  EXPECT_EQ(last.attempt, 3);
  EXPECT_EQ(last.report,
            "checkpoint failed 3 times in a row (2 retries): writing ckpt-3/ps-0: No space left "
            "on device; training goes on without checkpoints (checkpoint.on_failure: continue)");
  EXPECT_TRUE(policy.disabled());
  clock.now += absl::Hours(1);
  EXPECT_FALSE(policy.Due(1000));
}

TEST(CheckpointPolicyTest, RetriesUsedUpWithFailGiveUpWithoutDisabling) {
  FakeClock clock;
  CheckpointSpec spec = Every(1, 0);
  spec.on_failure = CheckpointSpec::OnFailure::kFail;
  spec.max_retries = 0;
  CheckpointPolicy policy(spec, clock.Fn());
  const CheckpointPolicy::Failure f = policy.Failed(kDiskFull, false, 1);
  EXPECT_TRUE(f.give_up);
  EXPECT_FALSE(f.disabled);
  EXPECT_FALSE(policy.disabled());
  EXPECT_NE(f.report.find("the job fails (checkpoint.on_failure: fail)"), std::string::npos);
}

TEST(CheckpointPolicyTest, PsFailuresUseUpNoRetry) {
  FakeClock clock;
  CheckpointPolicy policy(Every(1, 0), clock.Fn());
  const absl::Status ps_down = absl::AbortedError("PS 1 lost its variables");
  for (int i = 0; i < 10; ++i) {
    const CheckpointPolicy::Failure f = policy.Failed(ps_down, /*ps_failure=*/true, i);
    EXPECT_FALSE(f.give_up);
    EXPECT_EQ(f.attempt, 0);
  }
  EXPECT_FALSE(policy.disabled());
  EXPECT_EQ(policy.Failed(kDiskFull, false, 11).attempt, 1);
}

TEST(CheckpointPolicyTest, EachKindIsReportedOnceThenItsRepeatsAsCountsEvery30Seconds) {
  FakeClock clock;
  CheckpointSpec spec = Every(1, 0);
  spec.max_retries = 100;
  spec.retry_backoff_s = 0;
  CheckpointPolicy policy(spec, clock.Fn());
  EXPECT_FALSE(policy.Failed(kDiskFull, false, 1).report.empty());
  // The same kind (code and errno text), another file: counted, not reported.
  const absl::Status again = absl::UnavailableError("writing ckpt-4/ps-1: No space left on device");
  clock.now += absl::Seconds(10);
  EXPECT_TRUE(policy.Failed(again, false, 2).report.empty());
  clock.now += absl::Seconds(10);
  EXPECT_TRUE(policy.Failed(again, false, 3).report.empty());
  // Another kind is reported at once.
  EXPECT_FALSE(policy.Failed(absl::UnavailableError("writing: Input/output error"), false, 4)
                   .report.empty());
  clock.now += absl::Seconds(10);  // 30 s since the first report
  EXPECT_EQ(policy.Failed(again, false, 5).report,
            "checkpoint failed 3 more times since the last report: writing ckpt-4/ps-1: No "
            "space left on device");
  clock.now += absl::Seconds(1);
  EXPECT_TRUE(policy.Failed(again, false, 6).report.empty());
}

TEST(CheckpointPolicyTest, ASuccessEndsTheRetriesAndTheBackoff) {
  FakeClock clock;
  CheckpointPolicy policy(Every(1, 0), clock.Fn());
  policy.Failed(kDiskFull, false, 1);
  policy.Failed(kDiskFull, false, 2);
  EXPECT_FALSE(policy.Due(5));  // backoff of 2 s
  policy.Committed(5);
  EXPECT_TRUE(policy.Due(6));
  EXPECT_EQ(policy.Failed(kDiskFull, false, 6).attempt, 1);
}

TEST(CheckpointPolicyTest, ClearBackoffMakesTheNextDueByItsTrigger) {
  FakeClock clock;
  CheckpointPolicy policy(Every(1, 0), clock.Fn());
  policy.Failed(absl::UnavailableError("PS 0 down"), /*ps_failure=*/true, 1);
  EXPECT_FALSE(policy.Due(2));
  policy.ClearBackoff();  // PS recovery healed it
  EXPECT_TRUE(policy.Due(2));
}

}  // namespace
}  // namespace pscluster
