#include "api/pscluster/program_recovery.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/core/step_accounting.h"
#include "protos/coordinator.pb.h"

namespace pscluster {
namespace {

// The first closure id after restoring a checkpoint that does not say which
// ids it used (a YAML job's: its training closures' ids lie below 2^61).
constexpr int64_t kForeignClosureBase = int64_t{3} << 61;

CheckpointSpec PolicySpec(const ProgramRecovery::Options& o) {
  CheckpointSpec spec;
  spec.dir = o.checkpoint_dir;
  spec.every_steps = o.every_steps;
  spec.every_seconds = absl::ToDoubleSeconds(o.every);
  spec.keep = o.keep;
  spec.on_failure = CheckpointSpec::OnFailure::kContinue;
  return spec;
}

PsRecovery::Options RecoveryOptions(const ProgramRecovery::Options& o, ProgramRecovery* self) {
  PsRecovery::Options r;
  r.job_id = o.job_id;
  r.ps = o.ps;
  r.health = o.health;
  r.recovery_timeout = o.recovery_timeout;
  r.steps_counted = [self] {
    return std::make_pair(self->global_step(), self->lost_steps());
  };
  const std::string job = o.job_id;
  r.event = [job](const std::string& kind, const std::string& message) {
    spdlog::warn("job {}: {}: {}", job, kind, message);
  };
  return r;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProgramRecovery>> ProgramRecovery::Create(Options options) {
  if (!options.checkpoint_dir.empty() && options.checkpoint_root.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint_dir '", options.checkpoint_dir,
        "' needs checkpoint_root: the PS tasks' --checkpoint_root as this program reaches it"));
  }
  if (options.every_steps < 0 || options.every < absl::ZeroDuration() || options.keep < 1) {
    return absl::InvalidArgumentError(
        "checkpoint_every_steps and checkpoint_every must be >= 0, checkpoint_keep >= 1");
  }
  std::unique_ptr<ProgramRecovery> r(new ProgramRecovery(std::move(options)));
  if (!r->options_.checkpoint_dir.empty()) {
    ASSIGN_OR_RETURN(CheckpointLocation location,
                     r->Locate(r->options_.checkpoint_dir, "checkpoint_dir"));
    r->periodic_ = std::move(location);
  }
  return r;
}

ProgramRecovery::ProgramRecovery(Options options)
    : options_(std::move(options)),
      ps_recovery_(RecoveryOptions(options_, this)),
      policy_(PolicySpec(options_)) {}

void ProgramRecovery::SetPlan(const VariablePlan* plan) {
  plan_ = plan;
  // A function pushes the variables it chooses: a PS hears of the steps
  // that push one of its pieces, not necessarily of every step.
  std::vector<StepReach> reach;
  for (const CreateVariablesRequest& r : plan->per_ps) {
    reach.push_back(r.variables_size() > 0 ? StepReach::kSomeSteps : StepReach::kNone);
  }
  ps_recovery_.SetPlan(plan, std::move(reach));
  ps_recovery_.NoteCurrentIncarnations();
  ps_recovery_.NoteStateIncarnations();
  policy_.Start();
}

void ProgramRecovery::AddSteps(int64_t steps) {
  absl::MutexLock lock(&ledger_mu_);
  steps_ += steps;
}

int64_t ProgramRecovery::steps() const {
  absl::MutexLock lock(&ledger_mu_);
  return steps_;
}

int64_t ProgramRecovery::lost_steps() const {
  absl::MutexLock lock(&ledger_mu_);
  return lost_;
}

int64_t ProgramRecovery::global_step() const {
  absl::MutexLock lock(&ledger_mu_);
  return base_ + steps_ - lost_;
}

int64_t ProgramRecovery::ps_recoveries() const {
  absl::MutexLock lock(&ledger_mu_);
  return recoveries_;
}

int64_t ProgramRecovery::next_closure_floor() const {
  absl::MutexLock lock(&ledger_mu_);
  return closure_floor_;
}

void ProgramRecovery::RollTo(int64_t step, bool lost) {
  absl::MutexLock lock(&ledger_mu_);
  const int64_t now = base_ + steps_ - lost_;
  if (lost && step <= now) {
    lost_ += now - step;
  } else {
    base_ += step - now;
  }
}

absl::StatusOr<CheckpointLocation> ProgramRecovery::Locate(const std::string& dir,
                                                           const std::string& what) const {
  if (options_.checkpoint_root.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " '", dir, "': checkpoints need ClusterCoordinator::Options::checkpoint_root (the "
        "PS tasks' --checkpoint_root, as this program reaches it)"));
  }
  if (dir.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " needs a directory"));
  }
  absl::StatusOr<CheckpointLocation> location =
      ResolveCheckpointDir(options_.checkpoint_root, dir);
  if (!location.ok()) {
    return absl::Status(location.status().code(), absl::StrCat(what, " '", dir, "': ",
                                                               location.status().message()));
  }
  return location;
}

bool ProgramRecovery::CheckpointDue() const {
  return periodic_.has_value() && policy_.Due(global_step());
}

absl::StatusOr<CheckpointManifest> ProgramRecovery::SaveLocked(const CheckpointLocation& location,
                                                               int64_t next_closure_id) {
  CheckpointManager manager(location.dir, options_.keep, options_.job_id, location.name_prefix);
  CheckpointManifest m;
  m.set_global_step(global_step());
  m.set_next_closure_id(std::max(next_closure_id, next_closure_floor()));
  JobStatusProto history;
  history.set_steps(global_step());
  history.set_lost_steps(lost_steps());
  history.set_ps_recoveries(ps_recoveries());
  m.set_epoch_results(history.SerializeAsString());
  std::vector<int> expected;
  for (const CreateVariablesRequest& r : plan_->per_ps) expected.push_back(r.variables_size());
  absl::StatusOr<CheckpointManifest> saved = manager.Save(options_.ps, expected, std::move(m));
  if (absl::IsAborted(saved.status())) ps_recovery_.MarkFailed();  // a PS lost the job
  if (!saved.ok()) return saved.status();
  last_ = Last{location, *saved};
  return saved;
}

absl::Status ProgramRecovery::Checkpoint(int64_t next_closure_id, int64_t prune_below) {
  absl::MutexLock lock(&op_mu_);
  if (!periodic_.has_value()) return absl::OkStatus();
  // As JobRunner::Checkpoint: never commit a state a PS lost part of.
  if (const std::vector<StepDiscrepancy> found =
          ps_recovery_.CompareWithPs(AccountingPoint::kQuiescent, nullptr);
      !found.empty()) {
    ps_recovery_.MarkFailed();
    return AccountingError(found);
  }
  absl::StatusOr<CheckpointManifest> saved = SaveLocked(*periodic_, next_closure_id);
  if (!saved.ok()) {
    const bool ps_failure = IsPsFailure(saved.status()) || ps_recovery_.failed();
    const CheckpointPolicy::Failure f =
        policy_.Failed(saved.status(), ps_failure, global_step());
    if (!f.report.empty()) spdlog::warn("job {}: {}", options_.job_id, f.report);
    return saved.status();
  }
  policy_.Committed(saved->global_step());
  spdlog::info("job {}: checkpoint {} committed in {} at step {}", options_.job_id,
               saved->checkpoint_id(), periodic_->dir, saved->global_step());
  // The closures below it ended before the checkpoint and never push again.
  ps_recovery_.PruneKeysBelow(prune_below);
  return absl::OkStatus();
}

absl::StatusOr<CheckpointManifest> ProgramRecovery::Save(const std::string& dir,
                                                         int64_t next_closure_id) {
  absl::MutexLock lock(&op_mu_);
  ASSIGN_OR_RETURN(const CheckpointLocation location, Locate(dir, "Save"));
  absl::StatusOr<CheckpointManifest> saved = SaveLocked(location, next_closure_id);
  if (!saved.ok()) {
    return absl::Status(saved.status().code(),
                        absl::StrCat("Save into '", dir, "': ", saved.status().message()));
  }
  return saved;
}

absl::StatusOr<CheckpointManifest> ProgramRecovery::Restore(const std::string& dir) {
  absl::MutexLock lock(&op_mu_);
  ASSIGN_OR_RETURN(const CheckpointLocation location, Locate(dir, "Restore"));
  std::error_code ec;
  if (!std::filesystem::is_directory(location.dir, ec)) {
    return absl::NotFoundError(absl::StrCat("Restore from '", dir, "': no such directory (",
                                            location.dir, ")"));
  }
  CheckpointManager manager(location.dir, options_.keep, options_.job_id, location.name_prefix);
  if (manager.List().empty()) {
    return absl::NotFoundError(absl::StrCat("Restore from '", dir,
                                            "': it holds no committed checkpoint (a ckpt-<id> "
                                            "directory with its MANIFEST)"));
  }
  absl::StatusOr<CheckpointManifest> m = manager.RestoreLatest(*plan_, options_.ps);
  if (!m.ok()) {
    return absl::Status(m.status().code(),
                        absl::StrCat("Restore from '", dir, "': ", m.status().message()));
  }
  RollTo(m->global_step(), /*lost=*/false);
  {
    absl::MutexLock ledger(&ledger_mu_);
    closure_floor_ = std::max(closure_floor_, m->next_closure_id() > 0 ? m->next_closure_id()
                                                                        : kForeignClosureBase);
  }
  policy_.Restored(m->global_step());
  last_ = Last{location, *m};
  ps_recovery_.NoteCurrentIncarnations();
  ps_recovery_.NoteStateIncarnations();
  spdlog::info("job {}: restored checkpoint {} of job {} from {} (step {}, saved by {} PS)",
               options_.job_id, m->checkpoint_id(), m->job_id(), location.dir, m->global_step(),
               m->num_ps());
  return m;
}

absl::Status ProgramRecovery::HealIfFailed(std::string* what) {
  if (!ps_recovery_.failed()) return absl::OkStatus();
  absl::MutexLock lock(&op_mu_);
  const int64_t before = global_step();
  PsRecovery::RecoveryActions actions;
  actions.restore = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::Status {
    // Runs inside Heal, under op_mu_.
    if (!last_.has_value()) return absl::NotFoundError("no checkpoint");
    CheckpointManager manager(last_->location.dir, options_.keep, options_.job_id,
                              last_->location.name_prefix);
    RETURN_IF_ERROR(manager.Restore(last_->manifest, *plan_, options_.ps));
    RollTo(last_->manifest.global_step(), /*lost=*/true);
    return absl::OkStatus();
  };
  actions.restart = [this] { RollTo(0, /*lost=*/true); };
  absl::StatusOr<PsRecovery::Healing> healing = ps_recovery_.Heal(actions);
  if (!healing.ok()) {
    return absl::Status(healing.status().code(),
                        absl::StrCat("PS recovery failed: ", healing.status().message()));
  }
  const int64_t lost = before - global_step();
  {
    absl::MutexLock ledger(&ledger_mu_);
    ++recoveries_;
  }
  policy_.Restored(global_step());
  policy_.ClearBackoff();
  // (PsRecovery's "training restarted" is a YAML job's: a program's
  // closures that ended are not run again, their steps are lost.)
  const std::string how =
      absl::StrCat("PS failure healed: ", healing->how, "; ", lost, " steps lost (", lost_steps(),
                   " in all): closures that had ended are not run again");
  spdlog::warn("job {}: {}", options_.job_id, how);
  if (what != nullptr) *what = how;
  return absl::OkStatus();
}

}  // namespace pscluster
