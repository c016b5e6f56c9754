// JobRunner's fault tolerance, the steps that span its parts: preparing the
// variables (fresh, or resumed from a checkpoint or the job log), taking and
// restoring checkpoints, and recovering from a PS failure.
#include <prometheus/counter.h>
#include <prometheus/gauge.h>

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/job_paths.h"
#include "common/status_macros.h"
#include "coordinator/core/job_runner.h"

namespace pscluster {

absl::Status JobRunner::PrepareVariables() {
  ASSIGN_OR_RETURN(
      plan_, PlanVariables(ModelVariables(spec_), spec_.partitioner, static_cast<int>(ps_.size())));
  Recovery()->SetPlan(&plan_, StepReachOf(plan_, spec_.strategy));
  for (CreateVariablesRequest& r : plan_.per_ps) {
    r.set_job(job_id_);
    r.set_job_key(job_key_);
  }
  std::vector<JobLogRecord> history;
  if (!checkpoint_dir_.empty()) {
    ASSIGN_OR_RETURN(const CheckpointLocation location,
                     ResolveCheckpointDir(options_.checkpoint_root, checkpoint_dir_));
    checkpoints_ = std::make_unique<CheckpointManager>(location.dir, spec_.checkpoint.keep, job_id_,
                                                       location.name_prefix);
    // The PS confine the job's Saves to its directory ("." : the root).
    for (CreateVariablesRequest& r : plan_.per_ps) {
      r.set_checkpoint_dir(location.name_prefix.empty() ? "." : location.name_prefix);
    }
    const std::string log_path = checkpoint_dir_ + "/joblog";
    if (options_.resume) {
      absl::StatusOr<std::vector<JobLogRecord>> records = ReadJobLog(log_path);
      if (records.ok()) history = *std::move(records);
    }
    ASSIGN_OR_RETURN(std::unique_ptr<JobLog> log, JobLog::Open(log_path));
    board_.AttachLog(std::move(log));
  }
  RETURN_IF_ERROR(ResumeRescaledLayout(history));
  // Events recorded so far (queued, started) go into the log now.
  Event("setup", absl::StrCat("variables planned over ", ps_.size(), " PS",
                              checkpoint_dir_.empty() ? std::string(", no checkpoints")
                                                      : ", checkpoints in " + checkpoint_dir_));
  touched_ps_ = true;
  Recovery()->FreeStaleNamespaces();
  bool restored = false;
  if (checkpoints_ != nullptr && !checkpoints_->List().empty()) {
    absl::Status s = RestorePosition();
    if (s.ok()) {
      restored = true;
    } else if (!absl::IsNotFound(s)) {
      return s;
    }
  }
  // Every step trained so far: the job log's closures (all of them, those
  // rolled back included), or at least what the checkpoint covers.
  int64_t trained = 0;
  for (const JobLogRecord& r : history) {
    if (r.has_closure_finished()) trained += r.closure_finished().steps();
  }
  Update([&](JobStatusProto* s) { s->set_steps_trained(std::max(trained, s->steps())); });
  if (restored) {
    // A restarted coordinator: the steps its predecessor had done past the
    // checkpoint are trained again, and count as lost.
    int64_t logged_steps = 0, logged_lost = 0;
    for (const JobLogRecord& r : history) {
      if (!r.has_closure_finished()) continue;
      logged_steps = r.closure_finished().global_steps();
      logged_lost = r.closure_finished().lost_steps();
    }
    int64_t lost = 0;
    Update([&](JobStatusProto* s) {
      lost = std::max<int64_t>(0, logged_steps - s->steps());
      s->set_lost_steps(std::max(s->lost_steps(), logged_lost) + lost);
    });
    if (options_.metrics != nullptr) options_.metrics->StepsLost(lost);
    if (lost > 0) {
      Event("resumed", absl::StrCat(lost,
                                    " steps done before the coordinator restarted were past "
                                    "the checkpoint and are trained again (counted as lost)"));
    }
  }
  const std::string input = train_stream_.has_value() ? train_stream_->fingerprint() : "";
  for (const JobLogRecord& r : history) {
    // The log's finished splits index the plan of the files its runs read
    // (a run before this check was added logged none).
    if (!restored && r.has_started() && !r.started().input_fingerprint().empty() &&
        r.started().input_fingerprint() != input) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the job log in ", checkpoint_dir_, " was written over the train input [",
          r.started().input_fingerprint(), "], but the job's input now is [",
          input.empty() ? "in memory" : input,
          "]: a resumed job must read the same files (or start over in another checkpoint dir)"));
    }
  }
  if (!restored) {
    if (!options_.resume) {
      // A fresh job starts from its initializers, even if a namespace of the
      // same id is left on a PS (a coordinator without --state_dir restarts
      // its job ids).
      Recovery()->EndOnEveryPs();
    }
    RETURN_IF_ERROR(Recovery()->CreateAll());
    // A restarted coordinator without a checkpoint: the PS kept training
    // state, and the log says which closures finished (their steps were
    // applied exactly once; the rest run again).
    phases_.ResumeFromLog(history);
  }
  // The PS processes that hold the variables now: a later change of
  // incarnation means one restarted and lost them.
  Recovery()->NoteCurrentIncarnations();
  JobLogRecord started;
  started.mutable_started()->set_job_id(job_id_);
  started.mutable_started()->set_spec_yaml(spec_.yaml);
  started.mutable_started()->set_input_fingerprint(input);
  board_.Log(started);
  if (!restored) Update([](JobStatusProto* s) { s->set_resumed_from_checkpoint(-1); });
  absl::MutexLock lock(&mu_);
  variables_ready_ = true;
  return absl::OkStatus();
}

absl::Status JobRunner::RestorePosition() {
  ASSIGN_OR_RETURN(CheckpointManifest m, checkpoints_->RestoreLatest(plan_, ps_));
  // The finished splits index the epoch plan of the files the checkpoint
  // was taken over: another file set would skip or repeat data.
  const std::string input = train_stream_.has_value() ? train_stream_->fingerprint() : "";
  if (m.input_fingerprint() != input) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", m.checkpoint_id(), " in ", checkpoint_dir_,
        " was taken over the train "
        "input [",
        m.input_fingerprint().empty() ? "in memory" : m.input_fingerprint(),
        "], but the job's input now is [", input.empty() ? "in memory" : input,
        "]: a resumed job must read the same files (or start over in another checkpoint dir)"));
  }
  JobStatusProto history;
  history.ParseFromString(m.epoch_results());
  bool first;
  {
    absl::MutexLock lock(&mu_);
    first = !variables_ready_;
  }
  phases_.Rewind(m.epoch(),
                 std::set<int64_t>(m.finished_splits().begin(), m.finished_splits().end()));
  Update([&](JobStatusProto* s) {
    s->set_steps(m.global_step());
    s->set_examples(history.examples());
    s->clear_epochs();
    for (const EpochResult& e : history.epochs()) *s->add_epochs() = e;
    if (history.epochs_size() > 0) {
      const EpochResult& last = history.epochs(history.epochs_size() - 1);
      s->set_eval_accuracy(last.eval_accuracy());
      s->set_eval_loss(last.eval_loss());
      s->set_eval_auc(last.eval_auc());
    }
    if (first) s->set_resumed_from_checkpoint(m.checkpoint_id());
    // Counters of failures survive a coordinator restart through the manifest.
    s->set_ps_recoveries(std::max(s->ps_recoveries(), history.ps_recoveries()));
    s->set_lost_steps(std::max(s->lost_steps(), history.lost_steps()));
    s->set_workers_lost(std::max(s->workers_lost(), history.workers_lost()));
    if (s->last_recovery_seconds() == 0) {
      s->set_last_recovery_seconds(history.last_recovery_seconds());
    }
    s->set_checkpoints(std::max(s->checkpoints(), history.checkpoints()));
  });
  checkpoint_policy_.Restored(m.global_step());
  Event("resumed", absl::StrCat("restored checkpoint ", m.checkpoint_id(), " (epoch ",
                                m.epoch() + 1, ", ", m.finished_splits_size(),
                                " closures of it finished, step ", m.global_step(), ")"));
  return absl::OkStatus();
}

bool JobRunner::CheckpointDue() const {
  return checkpoints_ != nullptr && checkpoint_policy_.Due(StepsCounted().first);
}

absl::Status JobRunner::Checkpoint() {
  // A checkpoint must not keep updates dropped behind the coordinator's back
  // (or a PS that lost the job): that is a PS failure, and recovery rolls
  // back to the newest checkpoint that agreed, counting the steps since as
  // lost. A PS that does not answer is left to Save.
  if (const std::vector<StepDiscrepancy> found =
          Recovery()->CompareWithPs(AccountingPoint::kQuiescent, nullptr);
      !found.empty()) {
    for (const StepDiscrepancy& d : found) Event("accounting", d.message);
    Recovery()->MarkFailed();
    return AccountingError(found);
  }
  CheckpointManifest m;
  board_.Read([&](const JobStatusProto& s) {
    m.set_global_step(s.steps());
    JobStatusProto history;
    history.set_examples(s.examples());
    *history.mutable_epochs() = s.epochs();
    history.set_ps_recoveries(s.ps_recoveries());
    history.set_lost_steps(s.lost_steps());
    history.set_workers_lost(s.workers_lost());
    history.set_last_recovery_seconds(s.last_recovery_seconds());
    history.set_checkpoints(s.checkpoints() + 1);
    m.set_epoch_results(history.SerializeAsString());
  });
  m.set_epoch(phases_.epoch());
  for (int64_t s : phases_.finished_splits()) m.add_finished_splits(s);
  if (train_stream_.has_value()) m.set_input_fingerprint(train_stream_->fingerprint());
  std::vector<int> expected;
  for (const CreateVariablesRequest& r : plan_.per_ps) expected.push_back(r.variables_size());
  const absl::Time save_start = absl::Now();
  absl::StatusOr<CheckpointManifest> saved = checkpoints_->Save(ps_, expected, std::move(m));
  if (absl::IsAborted(saved.status())) Recovery()->MarkFailed();  // a PS lost its variables
  if (!saved.ok()) return saved.status();
  CheckpointManifest committed = *std::move(saved);
  if (options_.metrics != nullptr) {
    int64_t bytes = 0;
    for (const CheckpointFile& f : committed.files()) bytes += f.bytes();
    options_.metrics->CheckpointCommitted(absl::Now() - save_start, bytes);
  }
  if (summaries_ != nullptr) {
    int64_t bytes = 0;
    for (const CheckpointFile& f : committed.files()) bytes += f.bytes();
    summaries_->CheckpointCommitted(committed.checkpoint_id(), committed.global_step(), bytes);
  }
  checkpoint_policy_.Committed(committed.global_step());
  Update([](JobStatusProto* s) { s->set_checkpoints(s->checkpoints() + 1); });
  JobLogRecord rec;
  rec.mutable_checkpoint()->set_checkpoint_id(committed.checkpoint_id());
  rec.mutable_checkpoint()->set_manifest_path(
      absl::StrCat(checkpoint_dir_, "/ckpt-", committed.checkpoint_id(), "/MANIFEST"));
  board_.Log(rec);
  Event("checkpoint", absl::StrCat("checkpoint ", committed.checkpoint_id(), " committed at step ",
                                   committed.global_step()));
  // Closures of the epochs before the checkpoint's never run again.
  Recovery()->PruneKeysBelow(ClosureId(TRAIN, committed.epoch(), 0));
  return absl::OkStatus();
}

absl::Status JobRunner::CheckpointWithRetries(bool final) {
  const CheckpointSpec& c = spec_.checkpoint;
  while (!checkpoint_policy_.disabled()) {
    const absl::Status s = Checkpoint();
    if (s.ok()) return absl::OkStatus();
    const bool ps_failure = IsPsFailure(s) || Recovery()->failed();
    absl::Duration backoff;
    if (CheckpointFailed(s, ps_failure, &backoff)) {
      if (c.on_failure == CheckpointSpec::OnFailure::kFail) {
        return absl::Status(s.code(),
                            absl::StrCat("checkpoint failed ", c.max_retries + 1,
                                         " times (checkpoint.on_failure: fail): ", s.message()));
      }
      break;
    }
    if (!final) return absl::OkStatus();  // training goes on; CheckpointDue says when to retry
    // The job cannot end with its PS state lost; PS recovery is over.
    if (ps_failure) return s;
    // No training is left to wait for: wait the backoff out here.
    const absl::Time until = absl::Now() + backoff;
    for (absl::Time now = absl::Now(); now < until; now = absl::Now()) {
      if (phases_.cancelled()) return absl::CancelledError("job cancelled");
      absl::SleepFor(std::min(until - now, absl::Milliseconds(50)));
    }
  }
  if (final) {
    Event("checkpoint", absl::StrCat("no final checkpoint: checkpoints were given up after ",
                                     Status().checkpoint_failures(), " failures"));
  }
  return absl::OkStatus();
}

bool JobRunner::CheckpointFailed(const absl::Status& error, bool ps_failure,
                                 absl::Duration* backoff) {
  const CheckpointPolicy::Failure f =
      checkpoint_policy_.Failed(error, ps_failure, StepsCounted().first);
  Update([&](JobStatusProto* s) {
    s->set_checkpoint_failures(s->checkpoint_failures() + 1);
    s->set_checkpoint_error(std::string(error.message()));
    if (f.disabled) s->set_checkpoints_disabled(true);
  });
  if (f.disabled && checkpoints_disabled_metric_ != nullptr) {
    checkpoints_disabled_metric_->Increment();
  }
  if (checkpoint_failures_metric_ != nullptr) checkpoint_failures_metric_->Increment();
  if (!f.report.empty()) Event("checkpoint_failed", f.report);
  *backoff = f.backoff;
  return f.give_up;
}

absl::Status JobRunner::RecoverFromPsFailure() {
  const int64_t steps_before = StepsCounted().first;
  PsRecovery::RecoveryActions actions;
  actions.restore = [this] {
    return checkpoints_ != nullptr ? RestorePosition()
                                   : absl::NotFoundError("no checkpoint directory");
  };
  actions.restart = [this] { phases_.RestartFromFirstStep(); };
  ASSIGN_OR_RETURN(const PsRecovery::Healing healing, Recovery()->Heal(actions));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - healing.back);
  // Shares of the run before this rollback never meet those after it.
  phases_.NextRound();
  if (Mirrored()) {
    // A restarted worker lost its setup: give it now, or its first closure
    // would fail (and roll the copies back once more) for want of it.
    for (WorkerClient* w : workers_) {
      SetupJobResponse ignored;
      w->SetupJob(setup_request_, &ignored).IgnoreError();
    }
  }
  int64_t lost = 0;
  int64_t steps_after = 0;
  Update([&](JobStatusProto* s) {
    steps_after = s->steps();
    lost = steps_before - s->steps();
    s->set_ps_recoveries(s->ps_recoveries() + 1);
    s->set_lost_steps(s->lost_steps() + lost);
    s->set_last_recovery_seconds(seconds);
  });
  // A checkpoint that failed because a PS was down waits out a backoff; the
  // PS is healed now, so the next one is due by steps again: the recovery
  // (and the steps after it) should reach a checkpoint soon, not only after
  // a backoff that a fast job outruns.
  checkpoint_policy_.ClearBackoff();
  if (summaries_ != nullptr) summaries_->RolledBack(steps_after);
  if (options_.metrics != nullptr) {
    options_.metrics->PsRecovered();
    options_.metrics->StepsLost(lost);
  }
  Event("ps_recovered",
        absl::StrFormat("PS failure healed: %s; %d steps lost; resumed %.2f s after every PS "
                        "answered again",
                        healing.how, lost, seconds));
  return absl::OkStatus();
}

}  // namespace pscluster
