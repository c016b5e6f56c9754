// JobRunner's fault tolerance: preparing (fresh, or resumed from a checkpoint
// or the job log), checkpoints, health checks and PS recovery.
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/backoff.h"
#include "common/job_paths.h"
#include "common/status_macros.h"
#include "coordinator/core/job_runner.h"

namespace pscluster {
namespace {

// UNIMPLEMENTED: a PsClient without job namespaces (test fakes).
bool Unsupported(const absl::Status& s) { return absl::IsUnimplemented(s); }

absl::Status CreateAll(const VariablePlan& plan, const std::vector<PsClient*>& ps) {
  for (size_t p = 0; p < ps.size(); ++p) {
    if (plan.per_ps[p].variables_size() == 0) continue;
    CreateVariablesResponse response;
    absl::Status s = ps[p]->CreateVariables(plan.per_ps[p], &response);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("creating variables on PS ", p, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

void JobRunner::FreeStaleNamespaces() {
  for (size_t p = 0; p < ps_.size(); ++p) {
    StatsResponse stats;
    if (!ps_[p]->Stats(StatsRequest(), &stats).ok()) continue;
    for (const std::string& job : stats.jobs()) {
      if (job == job_id_ || job.empty()) continue;
      EndJobRequest request;
      request.set_job(job);
      EndJobResponse response;
      absl::Status s = ps_[p]->EndJob(request, &response);
      if (s.ok() && response.existed()) {
        Event("setup", absl::StrCat("PS ", p, " still held job '", job, "' (", response.variables(),
                                    " variables, ", response.bytes(), " bytes): freed"));
      }
    }
  }
}

std::vector<bool> JobRunner::PsAnswering() {
  std::vector<bool> up(ps_.size(), true);
  if (options_.health == nullptr) return up;
  if (Mirrored()) {
    // The one "PS" is every worker's copy.
    for (size_t w = 0; w < workers_.size(); ++w) {
      if (!options_.health->CheckWorker(static_cast<int>(w)).ok()) up.assign(ps_.size(), false);
    }
    return up;
  }
  for (size_t p = 0; p < ps_.size(); ++p) {
    up[p] = options_.health->CheckPs(static_cast<int>(p)).ok();
  }
  return up;
}

void JobRunner::EndOnEveryPs(const std::vector<bool>& up) {
  for (size_t p = 0; p < ps_.size(); ++p) {
    if (p < up.size() && !up[p]) {
      spdlog::warn("job {}: PS {} is down; the next job frees what it holds of this one", job_id_,
                   p);
      continue;
    }
    EndJobRequest request;
    request.set_job(job_id_);
    EndJobResponse response;
    absl::Status s = ps_[p]->EndJob(request, &response);
    if (!s.ok() && !Unsupported(s)) {
      spdlog::warn("job {}: could not free its variables on PS {} ({}); the next job frees them",
                   job_id_, p, s.ToString());
    }
  }
}

void JobRunner::PruneKeysBefore(int64_t epoch) {
  PruneKeysRequest request;
  request.set_job(job_id_);
  request.set_below_closure_id(ClosureId(TRAIN, epoch, 0));
  for (size_t p = 0; p < ps_.size(); ++p) {
    PruneKeysResponse response;
    absl::Status s = ps_[p]->PruneKeys(request, &response);
    if (!s.ok() && !Unsupported(s)) {
      spdlog::warn("job {}: pruning update keys on PS {}: {}", job_id_, p, s.ToString());
    }
  }
}

absl::Status JobRunner::Prepare() {
  ASSIGN_OR_RETURN(plan_, PlanVariables(ModelVariables(spec_), spec_.partitioner,
                                        static_cast<int>(ps_.size())));
  step_reach_ = StepReachOf(plan_, spec_.strategy);
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
    ASSIGN_OR_RETURN(log_, JobLog::Open(log_path));
  }
  // Events recorded so far (queued, started) go into the log now.
  Event("setup", absl::StrCat("variables planned over ", ps_.size(), " PS",
                              checkpoint_dir_.empty() ? std::string(", no checkpoints")
                                                      : ", checkpoints in " + checkpoint_dir_));
  touched_ps_ = true;
  FreeStaleNamespaces();
  bool restored = false;
  if (checkpoints_ != nullptr && !checkpoints_->List().empty()) {
    absl::Status s = RestorePosition();
    if (s.ok()) {
      restored = true;
    } else if (!absl::IsNotFound(s)) {
      return s;
    }
  }
  {
    // Every step trained so far: the job log's closures (all of them, those
    // rolled back included), or at least what the checkpoint covers.
    int64_t trained = 0;
    for (const JobLogRecord& r : history) {
      if (r.has_closure_finished()) trained += r.closure_finished().steps();
    }
    absl::MutexLock lock(&mu_);
    status_.set_steps_trained(std::max(trained, status_.steps()));
  }
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
    {
      absl::MutexLock lock(&mu_);
      lost = std::max<int64_t>(0, logged_steps - status_.steps());
      status_.set_lost_steps(std::max(status_.lost_steps(), logged_lost) + lost);
      ++version_;
    }
    if (options_.metrics != nullptr) options_.metrics->StepsLost(lost);
    if (lost > 0) {
      Event("resumed", absl::StrCat(lost, " steps done before the coordinator restarted were past "
                                    "the checkpoint and are trained again (counted as lost)"));
    }
  }
  if (!restored) {
    if (!options_.resume) {
      // A fresh job starts from its initializers, even if a namespace of the
      // same id is left on a PS (a coordinator without --state_dir restarts
      // its job ids).
      EndOnEveryPs();
    }
    RETURN_IF_ERROR(CreateAll(plan_, ps_));
    // A restarted coordinator without a checkpoint: the PS kept training
    // state, and the log says which closures finished (their steps were
    // applied exactly once; the rest run again).
    absl::MutexLock lock(&mu_);
    for (const JobLogRecord& r : history) {
      if (r.has_epoch_finished()) {
        EpochResult e;
        e.ParseFromString(r.epoch_finished().result());
        *status_.add_epochs() = e;
        status_.set_eval_accuracy(e.eval_accuracy());
        status_.set_eval_loss(e.eval_loss());
        status_.set_eval_auc(e.eval_auc());
        epoch_ = r.epoch_finished().epoch() + 1;
        finished_splits_.clear();
      } else if (r.has_closure_finished() && r.closure_finished().epoch() == epoch_) {
        status_.set_lost_steps(std::max(status_.lost_steps(), r.closure_finished().lost_steps()));
        if (finished_splits_.insert(r.closure_finished().split()).second) {
          status_.set_steps(status_.steps() + r.closure_finished().steps());
          status_.set_examples(status_.examples() + r.closure_finished().examples());
        }
      }
    }
    if (!history.empty()) {
      spdlog::info("job {}: resumed from its job log at epoch {} ({} closures of it finished)",
                   job_id_, epoch_ + 1, finished_splits_.size());
    }
  }
  // The PS processes that hold the variables now: a later change of
  // incarnation means one restarted and lost them.
  if (options_.health != nullptr && !Mirrored()) {
    for (size_t p = 0; p < ps_.size(); ++p) {
      absl::StatusOr<uint64_t> incarnation = options_.health->CheckPs(static_cast<int>(p));
      if (incarnation.ok()) NotePsIncarnation(static_cast<int>(p), *incarnation);
    }
  }
  JobLogRecord started;
  started.mutable_started()->set_job_id(job_id_);
  started.mutable_started()->set_spec_yaml(spec_.yaml);
  Log(started);
  absl::MutexLock lock(&mu_);
  if (!restored) status_.set_resumed_from_checkpoint(-1);
  variables_ready_ = true;
  ++version_;
  return absl::OkStatus();
}

absl::Status JobRunner::RestorePosition() {
  ASSIGN_OR_RETURN(CheckpointManifest m, checkpoints_->RestoreLatest(plan_, ps_));
  JobStatusProto history;
  history.ParseFromString(m.epoch_results());
  {
  absl::MutexLock lock(&mu_);
  epoch_ = m.epoch();
  finished_splits_ = std::set<int64_t>(m.finished_splits().begin(), m.finished_splits().end());
  status_.set_steps(m.global_step());
  status_.set_examples(history.examples());
  status_.clear_epochs();
  for (const EpochResult& e : history.epochs()) *status_.add_epochs() = e;
  if (history.epochs_size() > 0) {
    const EpochResult& last = history.epochs(history.epochs_size() - 1);
    status_.set_eval_accuracy(last.eval_accuracy());
    status_.set_eval_loss(last.eval_loss());
    status_.set_eval_auc(last.eval_auc());
  }
  if (!variables_ready_) status_.set_resumed_from_checkpoint(m.checkpoint_id());
  // Counters of failures survive a coordinator restart through the manifest.
  status_.set_ps_recoveries(std::max(status_.ps_recoveries(), history.ps_recoveries()));
  status_.set_lost_steps(std::max(status_.lost_steps(), history.lost_steps()));
  status_.set_workers_lost(std::max(status_.workers_lost(), history.workers_lost()));
  if (status_.last_recovery_seconds() == 0) {
    status_.set_last_recovery_seconds(history.last_recovery_seconds());
  }
  status_.set_checkpoints(std::max(status_.checkpoints(), history.checkpoints()));
  epoch_examples_ = 0;
  epoch_loss_sum_ = 0;
  steps_at_checkpoint_ = m.global_step();
  last_checkpoint_time_ = absl::Now();
  ++version_;
  }
  Event("resumed", absl::StrCat("restored checkpoint ", m.checkpoint_id(), " (epoch ", m.epoch() + 1,
                                 ", ", m.finished_splits_size(), " closures of it finished, step ",
                                 m.global_step(), ")"));
  return absl::OkStatus();
}

bool JobRunner::CheckpointDue() const {
  if (checkpoints_ == nullptr) return false;
  absl::MutexLock lock(&mu_);
  if (status_.checkpoints_disabled() || absl::Now() < next_checkpoint_attempt_) return false;
  const CheckpointSpec& c = spec_.checkpoint;
  return (c.every_steps > 0 && status_.steps() - steps_at_checkpoint_ >= c.every_steps) ||
         (c.every_seconds > 0 &&
          absl::Now() - last_checkpoint_time_ >= absl::Seconds(c.every_seconds));
}

absl::Status JobRunner::Checkpoint() {
  // A checkpoint must not keep updates dropped behind the coordinator's back
  // (or a PS that lost the job): that is a PS failure, and recovery rolls
  // back to the newest checkpoint that agreed, counting the steps since as
  // lost. A PS that does not answer is left to Save.
  if (const std::vector<StepDiscrepancy> found =
          CompareWithPs(AccountingPoint::kQuiescent, nullptr);
      !found.empty()) {
    for (const StepDiscrepancy& d : found) Event("accounting", d.message);
    ps_failed_ = true;
    return AccountingError(found);
  }
  CheckpointManifest m;
  {
    absl::MutexLock lock(&mu_);
    m.set_global_step(status_.steps());
    m.set_epoch(epoch_);
    for (int64_t s : finished_splits_) m.add_finished_splits(s);
    JobStatusProto history;
    history.set_examples(status_.examples());
    *history.mutable_epochs() = status_.epochs();
    history.set_ps_recoveries(status_.ps_recoveries());
    history.set_lost_steps(status_.lost_steps());
    history.set_workers_lost(status_.workers_lost());
    history.set_last_recovery_seconds(status_.last_recovery_seconds());
    history.set_checkpoints(status_.checkpoints() + 1);
    m.set_epoch_results(history.SerializeAsString());
  }
  std::vector<int> expected;
  for (const CreateVariablesRequest& r : plan_.per_ps) expected.push_back(r.variables_size());
  const absl::Time save_start = absl::Now();
  absl::StatusOr<CheckpointManifest> saved = checkpoints_->Save(ps_, expected, std::move(m));
  if (absl::IsAborted(saved.status())) ps_failed_ = true;  // a PS lost its variables
  if (!saved.ok()) return saved.status();
  CheckpointManifest committed = *std::move(saved);
  if (options_.metrics != nullptr) {
    int64_t bytes = 0;
    for (const CheckpointFile& f : committed.files()) bytes += f.bytes();
    options_.metrics->CheckpointCommitted(absl::Now() - save_start, bytes);
  }
  {
    absl::MutexLock lock(&mu_);
    steps_at_checkpoint_ = committed.global_step();
    last_checkpoint_time_ = absl::Now();
    status_.set_checkpoints(status_.checkpoints() + 1);
    ++version_;
  }
  JobLogRecord rec;
  rec.mutable_checkpoint()->set_checkpoint_id(committed.checkpoint_id());
  rec.mutable_checkpoint()->set_manifest_path(
      absl::StrCat(checkpoint_dir_, "/ckpt-", committed.checkpoint_id(), "/MANIFEST"));
  Log(rec);
  Event("checkpoint", absl::StrCat("checkpoint ", committed.checkpoint_id(), " committed at step ",
                                    committed.global_step()));
  // Closures of the epochs before the checkpoint's never run again.
  PruneKeysBefore(committed.epoch());
  return absl::OkStatus();
}

absl::Status JobRunner::CheckpointWithRetries(bool final) {
  const CheckpointSpec& c = spec_.checkpoint;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (status_.checkpoints_disabled()) break;
    }
    const absl::Status s = Checkpoint();
    if (s.ok()) {
      absl::MutexLock lock(&mu_);
      checkpoint_retries_ = 0;
      next_checkpoint_attempt_ = absl::InfinitePast();
      return absl::OkStatus();
    }
    const bool ps_failure = IsPsFailure(s) || ps_failed_;
    absl::Duration backoff;
    if (CheckpointFailed(s, ps_failure, &backoff)) {
      if (c.on_failure == CheckpointSpec::OnFailure::kFail) {
        return absl::Status(s.code(), absl::StrCat("checkpoint failed ", c.max_retries + 1,
                                                   " times (checkpoint.on_failure: fail): ",
                                                   s.message()));
      }
      break;
    }
    if (!final) return absl::OkStatus();  // training goes on; CheckpointDue says when to retry
    // The job cannot end with its PS state lost; PS recovery is over.
    if (ps_failure) return s;
    // No training is left to wait for: wait the backoff out here.
    const absl::Time until = absl::Now() + backoff;
    for (absl::Time now = absl::Now(); now < until; now = absl::Now()) {
      {
        absl::MutexLock lock(&mu_);
        if (cancelled_) return absl::CancelledError("job cancelled");
      }
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
  const CheckpointSpec& c = spec_.checkpoint;
  const absl::Time now = absl::Now();
  const std::string message(error.message());
  // The kind of a failure: its code and the errno text that ends its message.
  const size_t colon = message.rfind(": ");
  const std::string kind = absl::StrCat(
      absl::StatusCodeToString(error.code()), ": ",
      colon == std::string::npos ? message : message.substr(colon + 2));
  bool give_up, first;
  int64_t attempt, repeats = 0;
  {
    absl::MutexLock lock(&mu_);
    status_.set_checkpoint_failures(status_.checkpoint_failures() + 1);
    status_.set_checkpoint_error(message);
    // A PS that is down or restarted is PS recovery's business: it does not
    // use up the storage's retries.
    if (!ps_failure) ++checkpoint_retries_;
    attempt = checkpoint_retries_;
    give_up = !ps_failure && checkpoint_retries_ > c.max_retries;
    if (give_up && c.on_failure == CheckpointSpec::OnFailure::kContinue) {
      status_.set_checkpoints_disabled(true);
      if (checkpoints_disabled_metric_ != nullptr) checkpoints_disabled_metric_->Increment();
    }
    if (checkpoint_failures_metric_ != nullptr) checkpoint_failures_metric_->Increment();
    // The next attempt waits for the backoff and for the trigger to fire
    // again, so training always goes on in between.
    *backoff = ExponentialBackoff{absl::Seconds(c.retry_backoff_s), 20}.Before(attempt);
    next_checkpoint_attempt_ = now + *backoff;
    steps_at_checkpoint_ = status_.steps();
    last_checkpoint_time_ = now;
    auto [it, inserted] = checkpoint_failure_kinds_.try_emplace(kind);
    first = inserted;
    if (first) {
      it->second.logged = now;
    } else if (give_up || now - it->second.logged >= absl::Seconds(30)) {
      repeats = it->second.unlogged + 1;
      it->second.unlogged = 0;
      it->second.logged = now;
    } else {
      ++it->second.unlogged;
    }
    ++version_;
  }
  // One line per kind of failure, repeats as counts (at most every 30 s),
  // and one when giving up.
  if (give_up) {
    Event("checkpoint_failed",
          absl::StrCat("checkpoint failed ", attempt, " times in a row (", c.max_retries,
                       " retries): ", message, "; ",
                       c.on_failure == CheckpointSpec::OnFailure::kFail
                           ? "the job fails (checkpoint.on_failure: fail)"
                           : "training goes on without checkpoints (checkpoint.on_failure: "
                             "continue)"));
  } else if (first) {
    Event("checkpoint_failed",
          absl::StrCat(message, "; ",
                       ps_failure ? std::string("a PS failed: PS recovery takes over")
                                  : absl::StrCat("retry ", attempt, " of ", c.max_retries,
                                                 " after ", absl::FormatDuration(*backoff),
                                                 " and the next checkpoint trigger; training "
                                                 "goes on")));
  } else if (repeats > 0) {
    Event("checkpoint_failed", absl::StrCat("checkpoint failed ", repeats,
                                            " more times since the last report: ", message));
  }
  return give_up;
}

void JobRunner::HealthLoop() {
  const absl::Duration interval = absl::Seconds(spec_.fault_tolerance.health_check_interval_s);
  const absl::Duration worker_timeout = absl::Seconds(spec_.fault_tolerance.worker_timeout_s);
  // When each worker began failing its health checks (InfiniteFuture while
  // it answers), and whether it is declared lost.
  std::vector<absl::Time> down_since(workers_.size(), absl::InfiniteFuture());
  std::vector<bool> lost(workers_.size(), false);
  while (!stop_health_) {
    // A mirrored job's "PS" are its workers, checked below.
    for (size_t p = 0; p < ps_.size() && !ps_failed_ && !Mirrored(); ++p) {
      absl::StatusOr<uint64_t> incarnation = options_.health->CheckPs(static_cast<int>(p));
      if (!incarnation.ok()) {
        Event("ps_down", absl::StrCat("PS ", p, " is not answering (",
                                      incarnation.status().ToString(), "); pausing dispatch"));
        ps_failed_ = true;
      } else if (NotePsIncarnation(static_cast<int>(p), *incarnation)) {
        Event("ps_down",
              absl::StrCat("PS ", p, " restarted (it lost its variables); pausing dispatch"));
        ps_failed_ = true;
      }
    }
    for (size_t w = 0; w < workers_.size(); ++w) {
      const absl::Time checked = absl::Now();
      const bool down = !options_.health->CheckWorker(static_cast<int>(w)).ok();
      if (down != worker_down_[w]) {
        Event(down ? "worker_down" : "worker_up",
              absl::StrCat("worker ", w, " (", workers_[w]->address(), ") is ",
                           down ? "not answering" : "back"));
      }
      worker_down_[w] = down;
      if (!down) {
        down_since[w] = absl::InfiniteFuture();
        lost[w] = false;
        continue;
      }
      down_since[w] = std::min(down_since[w], checked);
      const absl::Duration silent = absl::Now() - down_since[w];
      if (silent < worker_timeout) continue;
      // Hung or gone for worker_timeout_s: what it runs is given up on (and
      // re-dispatched by the dispatch loop). Cancelled on every pass while
      // it is lost, so that no call that slipped in waits for its deadline.
      if (!lost[w]) {
        lost[w] = true;
        ++worker_losses_[w];  // before the cancel: dispatch does not count the attempt
        Update([](JobStatusProto* s) { s->set_workers_lost(s->workers_lost() + 1); });
        if (options_.metrics != nullptr) options_.metrics->WorkerLost();
        Event("worker_lost",
              absl::StrFormat("worker %d (%s) has failed every health check for %.1f s "
                              "(worker_timeout_s %g): declared lost; its closures in flight "
                              "are cancelled and re-dispatched",
                              w, workers_[w]->address(), absl::ToDoubleSeconds(silent),
                              spec_.fault_tolerance.worker_timeout_s));
      }
      workers_[w]->CancelCalls();
    }
    absl::SleepFor(interval);
  }
}

bool JobRunner::NotePsIncarnation(int ps, uint64_t incarnation) {
  absl::MutexLock lock(&mu_);
  if (ps_incarnation_.size() < ps_.size()) ps_incarnation_.resize(ps_.size(), 0);
  const uint64_t before = ps_incarnation_[ps];
  ps_incarnation_[ps] = incarnation;
  return before != 0 && before != incarnation;
}

absl::Status JobRunner::WaitForEveryPs(absl::Time deadline) {
  // Polls `check` until OK or the deadline; the error names `what`.
  auto wait = [&](const std::string& what, const std::function<absl::Status()>& check) {
    while (true) {
      absl::Status s = check();
      if (s.ok()) return s;
      if (absl::Now() > deadline) {
        return absl::UnavailableError(absl::StrCat(
            what, " did not come back within ",
            absl::FormatDuration(absl::Seconds(spec_.fault_tolerance.ps_recovery_timeout_s)), ": ",
            s.message()));
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
  };
  if (options_.health == nullptr) return absl::OkStatus();
  if (Mirrored()) {
    // The copies live in the workers: wait for every worker.
    for (size_t w = 0; w < workers_.size(); ++w) {
      RETURN_IF_ERROR(wait(absl::StrCat("worker ", w, " (", workers_[w]->address(), ")"),
                           [&] { return options_.health->CheckWorker(static_cast<int>(w)); }));
    }
    return absl::OkStatus();
  }
  for (size_t p = 0; p < ps_.size(); ++p) {
    RETURN_IF_ERROR(wait(absl::StrCat("PS ", p), [&]() -> absl::Status {
      absl::StatusOr<uint64_t> incarnation = options_.health->CheckPs(static_cast<int>(p));
      if (incarnation.ok()) NotePsIncarnation(static_cast<int>(p), *incarnation);
      return incarnation.status();
    }));
  }
  return absl::OkStatus();
}

absl::Status JobRunner::RecoverFromPsFailure() {
  const absl::Time deadline =
      absl::Now() + absl::Seconds(spec_.fault_tolerance.ps_recovery_timeout_s);
  int64_t steps_before;
  {
    absl::MutexLock lock(&mu_);
    steps_before = status_.steps();
  }
  std::string how;
  absl::Time back;
  while (true) {
    RETURN_IF_ERROR(WaitForEveryPs(deadline));
    back = absl::Now();
    // Whatever happens from here on, a failure noticed before the restore
    // is healed by it.
    ps_failed_ = false;
    // What the PS lost, before anything is restored: the job's state (a
    // restart, or an end behind the coordinator's back) or applied steps. A
    // PS that cannot say counts as having lost it. (A mirrored job's copies
    // always roll back.)
    std::vector<std::string> unanswered;
    const std::vector<StepDiscrepancy> losses =
        Mirrored() ? std::vector<StepDiscrepancy>()
                   : CompareWithPs(AccountingPoint::kQuiescent, &unanswered);
    std::string lost_what;
    for (const StepDiscrepancy& d : losses) absl::StrAppend(&lost_what, d.message, "; ");
    for (const std::string& u : unanswered) {
      absl::StrAppend(&lost_what, "could not ask ", u, "; ");
    }
    absl::Status restored =
        checkpoints_ != nullptr ? RestorePosition() : absl::NotFoundError("no checkpoint directory");
    if (absl::IsNotFound(restored) && (Mirrored() || !lost_what.empty())) {
      // Nothing to roll back to: every copy (PS) starts again from the
      // initializers, and the job from its first step (copies that trained
      // on cannot be mixed with fresh ones; a PS whose keys are gone would
      // apply the steps the others drop as duplicates). Every step done so
      // far is lost.
      EndOnEveryPs();
      restored = CreateAll(plan_, ps_);
      {
        absl::MutexLock lock(&mu_);
        epoch_ = 0;
        finished_splits_.clear();
        epoch_examples_ = 0;
        epoch_loss_sum_ = 0;
        status_.set_steps(0);
        status_.set_examples(0);
      }
      how = Mirrored() ? std::string("no checkpoint: every replica's copy re-created from the "
                                     "initializers, training restarted from the first step")
                       : absl::StrCat(lost_what,
                                      "no checkpoint: every PS re-created from the initializers, "
                                      "training restarted from the first step");
    } else if (absl::IsNotFound(restored)) {
      // Every PS kept the job's variables and applied steps (one was only
      // unreachable): nothing to roll back. (CreateAll is idempotent.)
      restored = CreateAll(plan_, ps_);
      how = "no checkpoint, and every PS kept the job's variables and steps: nothing rolled back";
    } else {
      how = absl::StrCat(lost_what, "restored the newest checkpoint");
    }
    if (restored.ok()) break;
    // A PS that died again during the restore: wait for it once more.
    const bool again = absl::IsUnavailable(restored) || absl::IsDeadlineExceeded(restored) ||
                       absl::IsAborted(restored) || absl::IsCancelled(restored);
    if (!again || absl::Now() > deadline) return restored;
    spdlog::warn("job {}: recovery interrupted ({}); waiting for the PS again", job_id_,
                 restored.ToString());
  }
  // The state restored (or kept) must hold the steps counted now.
  if (const std::vector<StepDiscrepancy> found =
          CompareWithPs(AccountingPoint::kQuiescent, nullptr);
      !found.empty()) {
    for (const StepDiscrepancy& d : found) Event("accounting", d.message);
    const absl::Status error = AccountingError(found);
    return absl::Status(error.code(), absl::StrCat("after PS recovery (", how, "): ",
                                                   error.message()));
  }
  NoteStateIncarnations();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - back);
  // Shares of the run before this rollback never meet those after it.
  ++round_;
  if (Mirrored()) {
    // A restarted worker lost its setup: give it now, or its first closure
    // would fail (and roll the copies back once more) for want of it.
    for (WorkerClient* w : workers_) {
      SetupJobResponse ignored;
      w->SetupJob(setup_request_, &ignored).IgnoreError();
    }
  }
  int64_t lost;
  {
    absl::MutexLock lock(&mu_);
    lost = steps_before - status_.steps();
    status_.set_ps_recoveries(status_.ps_recoveries() + 1);
    status_.set_lost_steps(status_.lost_steps() + lost);
    status_.set_last_recovery_seconds(seconds);
    // A checkpoint that failed because a PS was down waits out a backoff;
    // the PS is healed now, so the next one is due by steps again: the
    // recovery (and the steps after it) should reach a checkpoint soon, not
    // only after a backoff that a fast job outruns.
    next_checkpoint_attempt_ = absl::InfinitePast();
    ++version_;
  }
  if (options_.metrics != nullptr) {
    options_.metrics->PsRecovered();
    options_.metrics->StepsLost(lost);
  }
  Event("ps_recovered",
        absl::StrFormat("PS failure healed: %s; %d steps lost; resumed %.2f s after every PS "
                        "answered again",
                        how, lost, seconds));
  return absl::OkStatus();
}

}  // namespace pscluster
