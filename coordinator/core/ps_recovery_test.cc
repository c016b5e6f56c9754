#include "coordinator/core/ps_recovery.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/job_stores.h"

namespace pscluster {
namespace {

VariableSpecProto Dense(const std::string& name, std::vector<int64_t> shape) {
  VariableSpecProto spec;
  spec.set_name(name);
  spec.set_dtype(DT_FLOAT32);
  spec.set_kind(DENSE);
  spec.mutable_shape()->Assign(shape.begin(), shape.end());
  spec.mutable_initializer()->set_type("zeros");
  spec.mutable_optimizer()->set_type("sgd");
  spec.mutable_optimizer()->set_learning_rate(0.5f);
  return spec;
}

// Health whose answers the test sets: PS `index` answers with its
// incarnation unless it is down.
class ScriptedHealth : public HealthChecker {
 public:
  absl::StatusOr<uint64_t> CheckPs(int index) override {
    absl::MutexLock lock(&mu_);
    ++checks;
    if (down_[index]) return absl::UnavailableError("connection refused");
    return incarnation_[index];
  }
  absl::Status CheckWorker(int) override { return absl::OkStatus(); }
  void Set(int index, bool down, uint64_t incarnation) {
    absl::MutexLock lock(&mu_);
    down_[index] = down;
    incarnation_[index] = incarnation;
  }
  absl::Mutex mu_;
  std::map<int, bool> down_;
  std::map<int, uint64_t> incarnation_ = {{0, 1}, {1, 2}};
  int checks = 0;
};

// Two in-process PS holding job "j"'s two dense variables (one each), a
// fake clock whose sleeps only move it, and the steps the test counts.
struct Fixture {
  Fixture() {
    auto planned = PlanVariables({Dense("w", {4, 3}), Dense("b", {3})}, PartitionerSpec(), 2);
    EXPECT_TRUE(planned.ok()) << planned.status();
    plan = *planned;
    for (CreateVariablesRequest& r : plan.per_ps) r.set_job("j");
    PsRecovery::Options o;
    o.job_id = "j";
    o.ps = {&ps0, &ps1};
    o.health = &health;
    o.recovery_timeout = absl::Seconds(5);
    o.steps_counted = [this] { return std::make_pair(steps, int64_t{0}); };
    o.event = [this](const std::string& kind, const std::string& message) {
      events.emplace_back(kind, message);
    };
    o.now = [this] { return now; };
    o.sleep = [this](absl::Duration d) { now += d; };
    recovery = std::make_unique<PsRecovery>(o);
    recovery->SetPlan(&plan, StepReachOf(plan, Strategy::kParameterServer));
  }
  // Step `step` of closure 1, applied on every PS.
  void Apply(int64_t step) {
    for (PsClient* ps : {static_cast<PsClient*>(&ps0), static_cast<PsClient*>(&ps1)}) {
      PushRequest push;
      push.set_job("j");
      push.mutable_update()->set_closure_id(1);
      push.mutable_update()->set_step(step);
      PushResponse response;
      ASSERT_TRUE(ps->Push(push, &response).ok());
    }
    steps = step + 1;
  }
  int Events(const std::string& kind) const {
    int n = 0;
    for (const auto& e : events) n += e.first == kind;
    return n;
  }
  JobStores stores0, stores1;
  InProcessPsClient ps0{&stores0}, ps1{&stores1};
  ScriptedHealth health;
  VariablePlan plan;
  absl::Time now = absl::FromUnixSeconds(1000);
  int64_t steps = 0;
  std::vector<std::pair<std::string, std::string>> events;
  std::unique_ptr<PsRecovery> recovery;
};

// Recovery actions that count their calls; restore finds no checkpoint.
struct Actions {
  PsRecovery::RecoveryActions Get() {
    PsRecovery::RecoveryActions a;
    a.restore = [this] {
      ++restores;
      return restore_result;
    };
    a.restart = [this] { ++restarts; };
    return a;
  }
  absl::Status restore_result = absl::NotFoundError("no checkpoint");
  int restores = 0;
  int restarts = 0;
};

TEST(PsRecoveryTest, APsThatWasOnlyUnreachableLosesNothing) {
  Fixture f;
  ASSERT_TRUE(f.recovery->CreateAll().ok());
  f.recovery->NoteStateIncarnations();
  f.Apply(0);
  f.Apply(1);
  EXPECT_FALSE(f.recovery->MarkFailed());
  EXPECT_TRUE(f.recovery->MarkFailed());
  Actions actions;
  absl::StatusOr<PsRecovery::Healing> healed = f.recovery->Heal(actions.Get());
  ASSERT_TRUE(healed.ok()) << healed.status();
  EXPECT_EQ(healed->how,
            "no checkpoint, and every PS kept the job's variables and steps: nothing rolled back");
  EXPECT_EQ(actions.restores, 1);
  EXPECT_EQ(actions.restarts, 0);
  EXPECT_FALSE(f.recovery->failed());
  EXPECT_TRUE(f.recovery->AuditFinalSteps().ok());
}

TEST(PsRecoveryTest, AJobEndedBehindItsBackWithoutACheckpointRestartsFromTheFirstStep) {
  Fixture f;
  ASSERT_TRUE(f.recovery->CreateAll().ok());
  f.recovery->NoteStateIncarnations();
  f.Apply(0);
  EndJobRequest end;
  end.set_job("j");
  EndJobResponse ended;
  ASSERT_TRUE(f.ps1.EndJob(end, &ended).ok());
  Actions actions;
  PsRecovery::RecoveryActions a = actions.Get();
  a.restart = [&] {
    ++actions.restarts;
    f.steps = 0;  // the job rewinds its count with the PS
  };
  absl::StatusOr<PsRecovery::Healing> healed = f.recovery->Heal(a);
  ASSERT_TRUE(healed.ok()) << healed.status();
  EXPECT_EQ(actions.restarts, 1);
  EXPECT_TRUE(absl::StrContains(healed->how, "PS 1")) << healed->how;
  EXPECT_TRUE(absl::StrContains(healed->how, "no checkpoint: every PS re-created from the "
                                             "initializers"))
      << healed->how;
  // Both PS start over: no step applied anywhere.
  EXPECT_TRUE(f.recovery->AuditFinalSteps().ok());
}

TEST(PsRecoveryTest, ARestoredCheckpointIsCheckedAgainstTheStepsCounted) {
  Fixture f;
  ASSERT_TRUE(f.recovery->CreateAll().ok());
  f.Apply(0);
  Actions actions;
  actions.restore_result = absl::OkStatus();
  PsRecovery::RecoveryActions a = actions.Get();
  // A "restore" that claims more steps than the PS hold.
  a.restore = [&] {
    f.steps = 5;
    return absl::OkStatus();
  };
  absl::StatusOr<PsRecovery::Healing> healed = f.recovery->Heal(a);
  EXPECT_EQ(healed.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(healed.status().message(),
                                "after PS recovery (restored the newest checkpoint)"))
      << healed.status();
  EXPECT_GE(f.Events("accounting"), 1);
}

TEST(PsRecoveryTest, APsThatNeverComesBackFailsAfterTheTimeoutOnTheFakeClock) {
  Fixture f;
  f.health.Set(1, /*down=*/true, 2);
  const absl::Time start = f.now;
  Actions actions;
  absl::StatusOr<PsRecovery::Healing> healed = f.recovery->Heal(actions.Get());
  EXPECT_EQ(healed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(healed.status().message(),
            "PS 1 did not come back within 5s: connection refused");
  EXPECT_GT(f.now - start, absl::Seconds(5));
  EXPECT_LT(f.now - start, absl::Seconds(6));
  EXPECT_EQ(actions.restores, 0);
}

TEST(PsRecoveryTest, APsDownOrRestartedIsAFailure) {
  Fixture f;
  f.recovery->NoteCurrentIncarnations();
  f.recovery->CheckEveryPs();
  EXPECT_FALSE(f.recovery->failed());
  f.health.Set(0, /*down=*/false, 77);  // restarted
  f.recovery->CheckEveryPs();
  EXPECT_TRUE(f.recovery->failed());
  ASSERT_EQ(f.Events("ps_down"), 1);
  EXPECT_EQ(f.events[0].second, "PS 0 restarted (it lost its variables); pausing dispatch");
  // While a failure is known, the PS are not checked again.
  const int checks = f.health.checks;
  f.recovery->CheckEveryPs();
  EXPECT_EQ(f.health.checks, checks);
}

TEST(PsRecoveryTest, NotePsIncarnationTellsARestart) {
  Fixture f;
  EXPECT_FALSE(f.recovery->NotePsIncarnation(1, 5));  // first seen
  EXPECT_FALSE(f.recovery->NotePsIncarnation(1, 5));
  EXPECT_TRUE(f.recovery->NotePsIncarnation(1, 6));
}

TEST(PsRecoveryTest, AnsweringAndEndOnEveryPsSkipThePsThatAreDown) {
  Fixture f;
  ASSERT_TRUE(f.recovery->CreateAll().ok());
  f.health.Set(0, /*down=*/true, 1);
  const std::vector<bool> up = f.recovery->Answering();
  EXPECT_EQ(up, (std::vector<bool>{false, true}));
  f.recovery->EndOnEveryPs(up);
  StatsResponse stats0, stats1;
  ASSERT_TRUE(f.ps0.Stats(StatsRequest(), &stats0).ok());
  ASSERT_TRUE(f.ps1.Stats(StatsRequest(), &stats1).ok());
  EXPECT_EQ(stats0.jobs_size(), 1);  // kept: it was down
  EXPECT_EQ(stats1.jobs_size(), 0);
}

TEST(PsRecoveryTest, FreeStaleNamespacesFreesOtherJobsOnly) {
  Fixture f;
  ASSERT_TRUE(f.recovery->CreateAll().ok());
  CreateVariablesRequest other = f.plan.per_ps[0];
  other.set_job("old");
  CreateVariablesResponse created;
  ASSERT_TRUE(f.ps0.CreateVariables(other, &created).ok());
  f.recovery->FreeStaleNamespaces();
  StatsResponse stats;
  ASSERT_TRUE(f.ps0.Stats(StatsRequest(), &stats).ok());
  ASSERT_EQ(stats.jobs_size(), 1);
  EXPECT_EQ(stats.jobs(0), "j");
  ASSERT_EQ(f.Events("setup"), 1);
  EXPECT_TRUE(absl::StrContains(f.events[0].second, "PS 0 still held job 'old'"));
}

TEST(PsRecoveryTest, TheFinalAuditNamesAPsThatAppliedFewerSteps) {
  Fixture f;
  ASSERT_TRUE(f.recovery->CreateAll().ok());
  f.Apply(0);
  f.steps = 3;  // the coordinator counts more than the PS applied
  const absl::Status s = f.recovery->AuditFinalSteps();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(s.message(), "PS 0")) << s;
  EXPECT_EQ(f.Events("accounting"), 2);
}

}  // namespace
}  // namespace pscluster
