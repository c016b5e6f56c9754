// JobRunner's elastic PS (docs/elastic_ps.md): Rescale() asks for the move,
// the phase's control loop runs it with no closure in flight (where a
// checkpoint would run), and MoveToPs does it: checkpoint, plan over the new
// PS, restore (re-shard), end the job on the PS left, set the workers up
// again, resume.
#include <prometheus/counter.h>
#include <prometheus/gauge.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/control_auth.h"
#include "common/job_paths.h"
#include "common/status_macros.h"
#include "coordinator/core/job_runner.h"

namespace pscluster {

absl::StatusOr<VariablePlan> JobRunner::PlanFor(int num_ps) const {
  ASSIGN_OR_RETURN(VariablePlan plan,
                   PlanVariables(ModelVariables(spec_), spec_.partitioner, num_ps));
  std::string name_prefix;
  if (!checkpoint_dir_.empty()) {
    ASSIGN_OR_RETURN(const CheckpointLocation location,
                     ResolveCheckpointDir(options_.checkpoint_root, checkpoint_dir_));
    name_prefix = location.name_prefix.empty() ? "." : location.name_prefix;
  }
  for (CreateVariablesRequest& r : plan.per_ps) {
    r.set_job(job_id_);
    r.set_job_key(job_key_);
    if (!name_prefix.empty()) r.set_checkpoint_dir(name_prefix);
  }
  return plan;
}

void JobRunner::SetLayoutInSetup() {
  setup_request_.clear_ps_addresses();
  setup_request_.clear_placement();
  for (size_t p = 0; p < ps_.size() && p < options_.ps_addresses.size(); ++p) {
    setup_request_.add_ps_addresses(options_.ps_addresses[p]);
  }
  for (const auto& p : plan_.placement) *setup_request_.add_placement() = p;
  if (!setup_request_.worker_key().empty()) {
    SignRequest(setup_request_.worker_key(), "SetupJob", &setup_request_);
  }
}

absl::StatusOr<RescaleJobResponse> JobRunner::Rescale(int num_ps, absl::Duration timeout) {
  const int available = static_cast<int>(all_ps_.size());
  if (num_ps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("rescale of job '", job_id_, "': num_ps must be at least 1, got ", num_ps));
  }
  if (Mirrored()) {
    // Its variables live on the workers (each replica a copy), not on PS.
    return absl::FailedPreconditionError(
        absl::StrCat("rescale of job '", job_id_, "': strategy ", StrategyName(spec_.strategy),
                     " keeps its variables on the workers, not on PS tasks: it cannot be rescaled; "
                     "parameter_server and central_storage jobs can"));
  }
  if (num_ps > available) {
    return absl::InvalidArgumentError(absl::StrCat("rescale of job '", job_id_, "': num_ps ",
                                                   num_ps, " is more than the ", available,
                                                   " PS tasks of this coordinator (--ps)"));
  }
  JobState state = QUEUED;
  board_.Read([&](const JobStatusProto& s) { state = s.state(); });
  bool ready;
  {
    absl::MutexLock lock(&mu_);
    ready = variables_ready_;
  }
  if (state != RUNNING || !ready) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rescale of job '", job_id_, "': the job is ", JobState_Name(state),
        state == RUNNING ? " but has not created its variables yet" : ", not RUNNING"));
  }
  if (checkpoints_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("rescale of job '", job_id_,
                     "': the job has no checkpoint directory (checkpoint.dir); "
                     "a rescale moves the variables through a checkpoint"));
  }
  if (checkpoint_policy_.disabled()) {
    return absl::FailedPreconditionError(
        absl::StrCat("rescale of job '", job_id_,
                     "': the job gave up checkpoints after failures; a rescale "
                     "moves the variables through a checkpoint"));
  }
  {
    absl::ReaderMutexLock layout(&layout_mu_);
    if (static_cast<int>(ps_.size()) == num_ps) {
      RescaleJobResponse same;
      same.set_old_num_ps(num_ps);
      same.set_num_ps(num_ps);
      same.set_step(StepsCounted().first);
      return same;  // nothing to move: no pause
    }
  }
  absl::MutexLock lock(&rescale_mu_);
  if (rescale_pending_.load()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rescale of job '", job_id_, "': a rescale to ", rescale_to_, " PS is already under way"));
  }
  rescale_to_ = num_ps;
  rescale_started_ = false;
  rescale_result_.reset();
  rescale_pending_ = true;
  Event("rescale", absl::StrCat("rescale to ", num_ps, " PS asked for; pausing dispatch"));
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(rescale_mu_) {
    return rescale_result_.has_value();
  };
  if (!rescale_mu_.AwaitWithTimeout(absl::Condition(&done), timeout) && !rescale_started_) {
    // Nothing changed: the job reached no quiesced point (e.g. it evaluates).
    rescale_pending_ = false;
    Event("rescale_failed", "the job reached no point to rescale at in time; nothing changed");
    return absl::DeadlineExceededError(
        absl::StrCat("rescale of job '", job_id_,
                     "': the job reached no point to rescale at (a training "
                     "phase with no closure in flight) within ",
                     absl::FormatDuration(timeout), "; nothing changed"));
  }
  // Once started, the move ends in bounded time (its RPCs have deadlines).
  rescale_mu_.Await(absl::Condition(&done));
  return *rescale_result_;
}

absl::Status JobRunner::RunPendingRescale() {
  int num_ps;
  {
    absl::MutexLock lock(&rescale_mu_);
    if (!rescale_pending_.load()) return absl::OkStatus();  // it timed out meanwhile
    rescale_started_ = true;
    num_ps = rescale_to_;
  }
  absl::StatusOr<RescaleJobResponse> result = MoveToPs(num_ps);
  if (!result.ok()) {
    Event("rescale_failed", absl::StrCat("rescale to ", num_ps,
                                         " PS failed (the job goes on "
                                         "on ",
                                         ps_.size(), " PS): ", result.status().ToString()));
  }
  absl::MutexLock lock(&rescale_mu_);
  rescale_result_ = std::move(result);
  rescale_pending_ = false;
  // The job goes on either way; a PS failure found on the way is recovered
  // by the control loop's next turn.
  return absl::OkStatus();
}

absl::Status JobRunner::ResumeRescaledLayout(const std::vector<JobLogRecord>& history) {
  const JobRescaled* newest = nullptr;
  int rescales = 0;
  for (const JobLogRecord& r : history) {
    if (!r.has_rescaled()) continue;
    newest = &r.rescaled();
    ++rescales;
  }
  if (newest == nullptr) return absl::OkStatus();
  Update([&](JobStatusProto* s) { s->set_ps_rescales(rescales); });
  const int num_ps = newest->num_ps();
  const int old_num_ps = static_cast<int>(ps_.size());
  if (num_ps == old_num_ps) return absl::OkStatus();
  if (num_ps < 1 || num_ps > static_cast<int>(all_ps_.size())) {
    // Its checkpoints re-shard onto the count it runs on.
    Event("rescale", absl::StrCat("the job log says the job was rescaled to ", num_ps,
                                  " PS, but this coordinator has ", all_ps_.size(),
                                  " PS tasks: the job resumes on ", old_num_ps));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(VariablePlan plan, PlanFor(num_ps));
  const std::vector<PsClient*> ps(all_ps_.begin(), all_ps_.begin() + num_ps);
  {
    absl::WriterMutexLock layout(&layout_mu_);
    ps_ = ps;
    plan_ = std::move(plan);
  }
  auto recovery = std::make_shared<PsRecovery>(RecoveryOptions(ps));
  recovery->SetPlan(&plan_, StepReachOf(plan_, spec_.strategy));
  {
    absl::MutexLock lock(&recovery_mu_);
    recovery_ = recovery;
  }
  Update([&](JobStatusProto* s) { s->set_num_ps(num_ps); });
  Event("rescale", absl::StrCat("resumed on ", num_ps,
                                " PS, the count the job was rescaled to at "
                                "step ",
                                newest->step(), ", not on the coordinator's ", old_num_ps));
  return absl::OkStatus();
}

void JobRunner::SetupWorkersAgain() {
  std::vector<std::pair<int, WorkerClient*>> workers;
  for (size_t w = 0; w < workers_.size(); ++w) {
    if (options_.roster == nullptr || options_.roster->active(static_cast<int>(w))) {
      workers.emplace_back(static_cast<int>(w), workers_[w]);
    }
  }
  if (options_.roster != nullptr) {
    for (int w = static_cast<int>(workers_.size()); w < options_.roster->size(); ++w) {
      if (options_.roster->active(w)) workers.emplace_back(w, options_.roster->client(w));
    }
  }
  std::vector<absl::Status> status(workers.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < workers.size(); ++i) {
    threads.emplace_back([&, i] {
      SetupJobResponse response;
      status[i] = workers[i].second->SetupJob(setup_request_, &response);
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < workers.size(); ++i) {
    if (status[i].ok()) continue;
    // It keeps the old layout: its closures fail and are retried elsewhere
    // (a PS of the old layout that no longer holds the job makes that a PS
    // failure, recovered from the newest checkpoint on the new layout).
    Event("rescale",
          absl::StrCat("worker ", workers[i].first, " (", workers[i].second->address(),
                       ") was not set up for the new PS layout: ", status[i].ToString()));
  }
}

absl::StatusOr<RescaleJobResponse> JobRunner::MoveToPs(int num_ps) {
  const absl::Time paused = absl::Now();
  const int old_num_ps = static_cast<int>(ps_.size());
  RescaleJobResponse response;
  response.set_old_num_ps(old_num_ps);
  response.set_num_ps(num_ps);
  response.set_step(StepsCounted().first);
  if (num_ps == old_num_ps) {
    Event("rescale", absl::StrCat("the job already runs on ", num_ps, " PS: nothing to do"));
    return response;
  }
  if (options_.health != nullptr) {
    for (int p = 0; p < num_ps; ++p) {
      absl::StatusOr<uint64_t> up = options_.health->CheckPs(p);
      if (!up.ok()) {
        return absl::UnavailableError(
            absl::StrCat("PS ", p,
                         p < static_cast<int>(options_.ps_addresses.size())
                             ? " (" + options_.ps_addresses[p] + ")"
                             : std::string(),
                         " does not answer: ", up.status().message()));
      }
    }
  }
  // 1. The cut: every step applied so far, in a committed checkpoint.
  if (absl::Status s = Checkpoint(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("the checkpoint before the rescale: ", s.message()));
  }
  const std::vector<CheckpointManifest> committed = checkpoints_->List();
  if (committed.empty() || committed.front().global_step() != response.step()) {
    return absl::InternalError("the checkpoint just taken is not the newest");
  }
  const CheckpointManifest& cut = committed.front();
  const absl::Time checkpointed = absl::Now();
  response.set_checkpoint_id(cut.checkpoint_id());
  // 2. The new layout, restored from the cut (re-sharded onto num_ps PS).
  ASSIGN_OR_RETURN(VariablePlan plan, PlanFor(num_ps));
  const std::vector<PsClient*> ps(all_ps_.begin(), all_ps_.begin() + num_ps);
  if (absl::Status s = checkpoints_->Restore(cut, plan, ps); !s.ok()) {
    // The PS of the old layout that the restore reached hold the cut in the
    // new layout: put the old one back, from the same cut.
    absl::Status back = checkpoints_->Restore(cut, plan_, ps_);
    for (int p = old_num_ps; p < num_ps; ++p) {
      EndJobRequest end;
      end.set_job(job_id_);
      EndJobResponse ended;
      all_ps_[p]->EndJob(end, &ended).IgnoreError();
    }
    if (!back.ok()) Recovery()->MarkFailed();  // recovered on the control loop's next turn
    return absl::Status(s.code(), absl::StrCat("restoring checkpoint ", cut.checkpoint_id(),
                                               " onto ", num_ps, " PS: ", s.message()));
  }
  const absl::Time restored = absl::Now();
  // 3. The PS no longer used let the job go.
  for (int p = num_ps; p < old_num_ps; ++p) {
    EndJobRequest end;
    end.set_job(job_id_);
    EndJobResponse ended;
    if (absl::Status s = all_ps_[p]->EndJob(end, &ended); !s.ok()) {
      Event("rescale", absl::StrCat("PS ", p, " (no longer used) did not end the job: ",
                                    s.ToString(), "; the next job frees it"));
    }
  }
  // 4. The job's parts on the new layout.
  {
    absl::WriterMutexLock layout(&layout_mu_);
    ps_ = ps;
    plan_ = std::move(plan);
  }
  auto recovery = std::make_shared<PsRecovery>(RecoveryOptions(ps));
  recovery->SetPlan(&plan_, StepReachOf(plan_, spec_.strategy));
  recovery->NoteCurrentIncarnations();
  recovery->NoteStateIncarnations();
  {
    absl::MutexLock lock(&recovery_mu_);
    recovery_ = recovery;
  }
  SetLayoutInSetup();
  const absl::Time setup_start = absl::Now();
  SetupWorkersAgain();
  const absl::Duration setup = absl::Now() - setup_start;
  // The restored state must hold every step counted.
  if (const std::vector<StepDiscrepancy> found =
          recovery->CompareWithPs(AccountingPoint::kQuiescent, nullptr);
      !found.empty()) {
    for (const StepDiscrepancy& d : found) Event("accounting", d.message);
    recovery->MarkFailed();  // the control loop's next turn recovers
  }
  const double pause_ms = absl::ToDoubleMilliseconds(absl::Now() - paused);
  response.set_pause_ms(pause_ms);
  Update([&](JobStatusProto* s) {
    s->set_num_ps(num_ps);
    s->set_ps_rescales(s->ps_rescales() + 1);
    s->set_last_rescale_pause_ms(pause_ms);
  });
  // A restarted coordinator resumes the job on this count (PrepareVariables).
  JobLogRecord rescaled;
  rescaled.mutable_rescaled()->set_num_ps(num_ps);
  rescaled.mutable_rescaled()->set_step(response.step());
  rescaled.mutable_rescaled()->set_checkpoint_id(cut.checkpoint_id());
  board_.Log(rescaled);
  if (rescales_metric_ != nullptr) rescales_metric_->Increment();
  if (rescale_pause_metric_ != nullptr) rescale_pause_metric_->Set(pause_ms / 1000);
  Event("ps_rescaled",
        absl::StrFormat("moved from %d to %d PS at step %d (checkpoint %d): dispatch paused "
                        "%.1f ms (checkpoint %.1f ms, restore %.1f ms, workers set up again "
                        "%.1f ms)",
                        old_num_ps, num_ps, response.step(), cut.checkpoint_id(), pause_ms,
                        absl::ToDoubleMilliseconds(checkpointed - paused),
                        absl::ToDoubleMilliseconds(restored - checkpointed),
                        absl::ToDoubleMilliseconds(setup)));
  return response;
}

}  // namespace pscluster
