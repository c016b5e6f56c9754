#include "coordinator/core/ps_recovery.h"

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace pscluster {
namespace {

// UNIMPLEMENTED: a PsClient without job namespaces (test fakes).
bool Unsupported(const absl::Status& s) { return absl::IsUnimplemented(s); }

}  // namespace

PsRecovery::PsRecovery(Options options) : options_(std::move(options)) {}

void PsRecovery::SetPlan(const VariablePlan* plan, std::vector<StepReach> reach) {
  plan_ = plan;
  step_reach_ = std::move(reach);
}

void PsRecovery::CheckEveryPs() {
  const std::vector<PsClient*>& ps = options_.ps;
  // A mirrored job's "PS" are its workers, checked as workers.
  for (size_t p = 0; p < ps.size() && !failed_ && !options_.mirrored; ++p) {
    absl::StatusOr<uint64_t> incarnation = options_.health->CheckPs(static_cast<int>(p));
    if (!incarnation.ok()) {
      options_.event("ps_down", absl::StrCat("PS ", p, " is not answering (",
                                             incarnation.status().ToString(),
                                             "); pausing dispatch"));
      failed_ = true;
    } else if (NotePsIncarnation(static_cast<int>(p), *incarnation)) {
      options_.event(
          "ps_down",
          absl::StrCat("PS ", p, " restarted (it lost its variables); pausing dispatch"));
      failed_ = true;
    }
  }
}

bool PsRecovery::NotePsIncarnation(int ps, uint64_t incarnation) {
  absl::MutexLock lock(&mu_);
  if (ps_incarnation_.size() < options_.ps.size()) ps_incarnation_.resize(options_.ps.size(), 0);
  const uint64_t before = ps_incarnation_[ps];
  ps_incarnation_[ps] = incarnation;
  return before != 0 && before != incarnation;
}

void PsRecovery::NoteCurrentIncarnations() {
  if (options_.health == nullptr || options_.mirrored) return;
  for (size_t p = 0; p < options_.ps.size(); ++p) {
    absl::StatusOr<uint64_t> incarnation = options_.health->CheckPs(static_cast<int>(p));
    if (incarnation.ok()) NotePsIncarnation(static_cast<int>(p), *incarnation);
  }
}

void PsRecovery::NoteStateIncarnations() {
  const std::vector<PsSteps> ps = AskPsSteps(options_.ps, options_.job_id, step_reach_);
  absl::MutexLock lock(&mu_);
  state_incarnation_.assign(ps.size(), 0);
  for (size_t p = 0; p < ps.size(); ++p) {
    if (ps[p].answered) state_incarnation_[p] = ps[p].incarnation;
  }
}

std::vector<bool> PsRecovery::Answering() {
  const size_t n = options_.ps.size();
  std::vector<bool> up(n, true);
  if (options_.health == nullptr) return up;
  if (options_.mirrored) {
    // The one "PS" is every worker's copy.
    for (int w = 0; w < options_.workers; ++w) {
      if (!options_.health->CheckWorker(w).ok()) up.assign(n, false);
    }
    return up;
  }
  for (size_t p = 0; p < n; ++p) up[p] = options_.health->CheckPs(static_cast<int>(p)).ok();
  return up;
}

absl::Status PsRecovery::WaitForEveryPs(absl::Time deadline) {
  // Polls `check` until OK or the deadline; the error names `what`.
  auto wait = [&](const std::string& what, const std::function<absl::Status()>& check) {
    while (true) {
      absl::Status s = check();
      if (s.ok()) return s;
      if (options_.now() > deadline) {
        return absl::UnavailableError(absl::StrCat(what, " did not come back within ",
                                                   absl::FormatDuration(options_.recovery_timeout),
                                                   ": ", s.message()));
      }
      options_.sleep(absl::Milliseconds(100));
    }
  };
  if (options_.health == nullptr) return absl::OkStatus();
  if (options_.mirrored) {
    // The copies live in the workers: wait for every worker.
    for (int w = 0; w < options_.workers; ++w) {
      const std::string address = static_cast<size_t>(w) < options_.worker_addresses.size()
                                      ? options_.worker_addresses[w]
                                      : std::string();
      RETURN_IF_ERROR(wait(absl::StrCat("worker ", w, " (", address, ")"),
                           [&] { return options_.health->CheckWorker(w); }));
    }
    return absl::OkStatus();
  }
  for (size_t p = 0; p < options_.ps.size(); ++p) {
    RETURN_IF_ERROR(wait(absl::StrCat("PS ", p), [&]() -> absl::Status {
      absl::StatusOr<uint64_t> incarnation = options_.health->CheckPs(static_cast<int>(p));
      if (incarnation.ok()) NotePsIncarnation(static_cast<int>(p), *incarnation);
      return incarnation.status();
    }));
  }
  return absl::OkStatus();
}

std::vector<StepDiscrepancy> PsRecovery::CompareWithPs(AccountingPoint point,
                                                       std::vector<std::string>* unanswered) {
  const std::vector<PsSteps> ps = AskPsSteps(options_.ps, options_.job_id, step_reach_);
  StepLedger ledger;
  ledger.point = point;
  std::tie(ledger.steps, ledger.lost_steps) = options_.steps_counted();
  std::vector<uint64_t> known;
  {
    absl::MutexLock lock(&mu_);
    known = state_incarnation_;
  }
  for (size_t p = 0; unanswered != nullptr && p < ps.size(); ++p) {
    if (step_reach_[p] != StepReach::kNone && !ps[p].answered) {
      unanswered->push_back(absl::StrCat("PS ", p, ": ", ps[p].error));
    }
  }
  return CompareSteps(ledger, step_reach_, ps, known);
}

absl::Status PsRecovery::AuditFinalSteps() {
  std::vector<std::string> unanswered;
  const std::vector<StepDiscrepancy> found = CompareWithPs(AccountingPoint::kEnd, &unanswered);
  if (!unanswered.empty()) {
    return absl::UnavailableError(absl::StrCat("could not check what every PS applied of the job: ",
                                               absl::StrJoin(unanswered, "; ")));
  }
  for (const StepDiscrepancy& d : found) options_.event("accounting", d.message);
  return AccountingError(found);
}

absl::StatusOr<PsRecovery::Healing> PsRecovery::Heal(const RecoveryActions& actions) {
  const absl::Time deadline = options_.now() + options_.recovery_timeout;
  const bool mirrored = options_.mirrored;
  Healing healing;
  while (true) {
    RETURN_IF_ERROR(WaitForEveryPs(deadline));
    healing.back = options_.now();
    // Whatever happens from here on, a failure noticed before the restore
    // is healed by it.
    failed_ = false;
    // What the PS lost, before anything is restored: the job's state (a
    // restart, or an end behind the coordinator's back) or applied steps. A
    // PS that cannot say counts as having lost it. (A mirrored job's copies
    // always roll back.)
    std::vector<std::string> unanswered;
    const std::vector<StepDiscrepancy> losses =
        mirrored ? std::vector<StepDiscrepancy>()
                 : CompareWithPs(AccountingPoint::kQuiescent, &unanswered);
    std::string lost_what;
    for (const StepDiscrepancy& d : losses) absl::StrAppend(&lost_what, d.message, "; ");
    for (const std::string& u : unanswered) {
      absl::StrAppend(&lost_what, "could not ask ", u, "; ");
    }
    absl::Status restored = actions.restore();
    if (absl::IsNotFound(restored) && (mirrored || !lost_what.empty())) {
      // Nothing to roll back to: every copy (PS) starts again from the
      // initializers, and the job from its first step (copies that trained
      // on cannot be mixed with fresh ones; a PS whose keys are gone would
      // apply the steps the others drop as duplicates). Every step done so
      // far is lost.
      EndOnEveryPs();
      restored = CreateAll();
      actions.restart();
      healing.how = mirrored ? std::string("no checkpoint: every replica's copy re-created from "
                                           "the initializers, training restarted from the first "
                                           "step")
                             : absl::StrCat(lost_what,
                                            "no checkpoint: every PS re-created from the "
                                            "initializers, training restarted from the first step");
    } else if (absl::IsNotFound(restored)) {
      // Every PS kept the job's variables and applied steps (one was only
      // unreachable): nothing to roll back. (CreateAll is idempotent.)
      restored = CreateAll();
      healing.how =
          "no checkpoint, and every PS kept the job's variables and steps: nothing rolled back";
    } else {
      healing.how = absl::StrCat(lost_what, "restored the newest checkpoint");
    }
    if (restored.ok()) break;
    // A PS that died again during the restore: wait for it once more.
    const bool again = absl::IsUnavailable(restored) || absl::IsDeadlineExceeded(restored) ||
                       absl::IsAborted(restored) || absl::IsCancelled(restored);
    if (!again || options_.now() > deadline) return restored;
    spdlog::warn("job {}: recovery interrupted ({}); waiting for the PS again", options_.job_id,
                 restored.ToString());
  }
  // The state restored (or kept) must hold the steps counted now.
  if (const std::vector<StepDiscrepancy> found =
          CompareWithPs(AccountingPoint::kQuiescent, nullptr);
      !found.empty()) {
    for (const StepDiscrepancy& d : found) options_.event("accounting", d.message);
    const absl::Status error = AccountingError(found);
    return absl::Status(error.code(), absl::StrCat("after PS recovery (", healing.how, "): ",
                                                   error.message()));
  }
  NoteStateIncarnations();
  return healing;
}

absl::Status PsRecovery::CreateAll() {
  const std::vector<PsClient*>& ps = options_.ps;
  for (size_t p = 0; p < ps.size(); ++p) {
    if (plan_->per_ps[p].variables_size() == 0) continue;
    CreateVariablesResponse response;
    absl::Status s = ps[p]->CreateVariables(plan_->per_ps[p], &response);
    if (!s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("creating variables on PS ", p, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

void PsRecovery::FreeStaleNamespaces() {
  const std::vector<PsClient*>& ps = options_.ps;
  for (size_t p = 0; p < ps.size(); ++p) {
    StatsResponse stats;
    if (!ps[p]->Stats(StatsRequest(), &stats).ok()) continue;
    for (const std::string& job : stats.jobs()) {
      if (job == options_.job_id || job.empty()) continue;
      EndJobRequest request;
      request.set_job(job);
      EndJobResponse response;
      absl::Status s = ps[p]->EndJob(request, &response);
      if (s.ok() && response.existed()) {
        options_.event("setup", absl::StrCat("PS ", p, " still held job '", job, "' (",
                                             response.variables(), " variables, ",
                                             response.bytes(), " bytes): freed"));
      }
    }
  }
}

void PsRecovery::EndOnEveryPs(const std::vector<bool>& up) {
  const std::vector<PsClient*>& ps = options_.ps;
  for (size_t p = 0; p < ps.size(); ++p) {
    if (p < up.size() && !up[p]) {
      spdlog::warn("job {}: PS {} is down; the next job frees what it holds of this one",
                   options_.job_id, p);
      continue;
    }
    EndJobRequest request;
    request.set_job(options_.job_id);
    EndJobResponse response;
    absl::Status s = ps[p]->EndJob(request, &response);
    if (!s.ok() && !Unsupported(s)) {
      spdlog::warn("job {}: could not free its variables on PS {} ({}); the next job frees them",
                   options_.job_id, p, s.ToString());
    }
  }
}

void PsRecovery::PruneKeysBelow(int64_t below_closure_id) {
  PruneKeysRequest request;
  request.set_job(options_.job_id);
  request.set_below_closure_id(below_closure_id);
  for (size_t p = 0; p < options_.ps.size(); ++p) {
    PruneKeysResponse response;
    absl::Status s = options_.ps[p]->PruneKeys(request, &response);
    if (!s.ok() && !Unsupported(s)) {
      spdlog::warn("job {}: pruning update keys on PS {}: {}", options_.job_id, p, s.ToString());
    }
  }
}

}  // namespace pscluster
