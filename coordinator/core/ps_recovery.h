// PsRecovery: a job's PS tasks as its coordinator watches and heals them.
//
// It knows whether a PS failed (the health loop saw it down or restarted, a
// worker or a checkpoint found it empty of the job: dispatch pauses), which
// process holds the job's state on each PS (incarnations), and what each PS
// applied of the job against the steps the coordinator counts
// (step_accounting.h). Heal() is the recovery: it waits for every PS to
// answer again (up to fault_tolerance.ps_recovery_timeout_s), finds what was
// lost, and restores the newest checkpoint, or restarts every PS from the
// initializers (all steps lost) when there is none and something was lost,
// or keeps everything (a PS that was only unreachable). It also does the
// job's housekeeping on the PS: create the variables, end the job there,
// free namespaces of jobs that ended, prune exactly-once keys.
//
// multi_worker_mirrored: the one "PS" is every worker's copy; it answers
// when every worker does, and a failure always rolls the copies back.
//
// Thread-safe (the flag and the incarnations are shared with the dispatch
// threads and the health loop). Rewinding the job's own position and status
// is the caller's (RecoveryActions).
#ifndef PSCLUSTER_COORDINATOR_CORE_PS_RECOVERY_H_
#define PSCLUSTER_COORDINATOR_CORE_PS_RECOVERY_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/model_variables.h"
#include "common/ps_client.h"
#include "coordinator/core/health_checker.h"
#include "coordinator/core/step_accounting.h"

namespace pscluster {

class PsRecovery {
 public:
  struct Options {
    std::string job_id;
    // The job's PS tasks (index p = PS p); not owned.
    std::vector<PsClient*> ps;
    // Health checks; null: none (Answering() says all, WaitForEveryPs()
    // returns at once, the incarnations stay unknown).
    HealthChecker* health = nullptr;
    // multi_worker_mirrored: the PS is the copies of `workers` workers,
    // named by `worker_addresses` (index i = worker i).
    bool mirrored = false;
    int workers = 0;
    std::vector<std::string> worker_addresses;
    // How long Heal waits for every PS.
    absl::Duration recovery_timeout = absl::Seconds(60);
    // The job's steps done and lost now (JobStatus.steps, lost_steps).
    std::function<std::pair<int64_t, int64_t>()> steps_counted;
    // Records a job event (JobStatusBoard::Event).
    std::function<void(const std::string& kind, const std::string& message)> event;
    std::function<absl::Time()> now = [] { return absl::Now(); };
    // The wait between two polls of a PS that does not answer yet.
    std::function<void(absl::Duration)> sleep = [](absl::Duration d) { absl::SleepFor(d); };
  };

  // What Heal() rewinds of the job itself.
  struct RecoveryActions {
    // Restores the newest checkpoint into every PS and takes its position;
    // NOT_FOUND when there is none.
    std::function<absl::Status()> restore;
    // Every PS was re-created from the initializers: the job starts again
    // from its first step.
    std::function<void()> restart;
  };
  // What a recovery did.
  struct Healing {
    std::string how;  // for the event: what was lost, what was restored
    absl::Time back;  // when every PS answered again
  };

  explicit PsRecovery(Options options);

  // The job's variable layout: where each PS creates what (not owned; must
  // outlive this), and which steps reach each PS. REQUIRES: called once,
  // before the other threads start (Prepare).
  void SetPlan(const VariablePlan* plan, std::vector<StepReach> reach);

  // A PS failed: dispatch pauses until Heal(). MarkFailed returns whether
  // one had already failed.
  bool failed() const { return failed_.load(); }
  bool MarkFailed() { return failed_.exchange(true); }

  // One pass of the health loop over the PS: a PS that does not answer, or
  // answers as another process (it restarted), is a PS failure (an event).
  // Skipped while a failure is known, and for a mirrored job (its workers
  // are checked as workers).
  void CheckEveryPs() ABSL_LOCKS_EXCLUDED(mu_);
  // Records PS `ps`'s incarnation; true when it changed (the PS restarted).
  bool NotePsIncarnation(int ps, uint64_t incarnation) ABSL_LOCKS_EXCLUDED(mu_);
  // Asks each PS for its incarnation now: the processes that hold the
  // variables (a later change means one restarted and lost them).
  void NoteCurrentIncarnations() ABSL_LOCKS_EXCLUDED(mu_);
  // Records each PS's incarnation as that of the job's state there, just
  // created or restored (CompareSteps tells a restart from an end behind
  // the coordinator's back by it).
  void NoteStateIncarnations() ABSL_LOCKS_EXCLUDED(mu_);
  // Which PS answer their health check now (all, without a health checker).
  std::vector<bool> Answering();
  // Waits until every PS answers its health check, until `deadline`;
  // UNAVAILABLE naming the PS (or worker) that did not.
  absl::Status WaitForEveryPs(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

  // Asks every PS what it applied of the job and compares it with the steps
  // counted now, at `point` (step_accounting.h): the PS that disagree. PS
  // that do not answer are left out and, when `unanswered` is given, named
  // there ("PS 1: UNAVAILABLE: ...").
  std::vector<StepDiscrepancy> CompareWithPs(AccountingPoint point,
                                             std::vector<std::string>* unanswered)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The check at the job's end: OK when every PS agrees exactly; DATA_LOSS
  // naming each PS that does not (each also an event), UNAVAILABLE naming a
  // PS that cannot be asked. REQUIRES: no closure in flight.
  absl::Status AuditFinalSteps() ABSL_LOCKS_EXCLUDED(mu_);

  // The recovery after a PS failure (see the file comment); clears the
  // failure. Returns what it did, or the error that fails the job: the PS
  // did not come back in time, the restore failed, or the state restored
  // disagrees with the steps counted. REQUIRES: no closure in flight.
  absl::StatusOr<Healing> Heal(const RecoveryActions& actions) ABSL_LOCKS_EXCLUDED(mu_);

  // Creates the job's variables on every PS (idempotent).
  absl::Status CreateAll();
  // Frees every job namespace on the PS tasks but this job's: they belong
  // to jobs that ended (a PS that was down when its job ended still holds
  // it). Each freed one is an event.
  void FreeStaleNamespaces();
  // Frees this job's namespace on every PS (best effort: logged on
  // failure), skipping those marked down in `up` (empty: none).
  void EndOnEveryPs(const std::vector<bool>& up = {});
  // Forgets the exactly-once keys of closures below `below_closure_id` on
  // every PS (best effort), once a committed checkpoint covers them.
  void PruneKeysBelow(int64_t below_closure_id);

 private:
  const Options options_;
  // Set by SetPlan before the other threads start, never after.
  const VariablePlan* plan_ = nullptr;
  std::vector<StepReach> step_reach_;
  std::atomic<bool> failed_{false};

  mutable absl::Mutex mu_;
  // Each PS's incarnation as last seen (0: not yet).
  std::vector<uint64_t> ps_incarnation_ ABSL_GUARDED_BY(mu_);
  // Each PS's incarnation when the job's state there was last created or
  // restored (NoteStateIncarnations); empty: not known yet.
  std::vector<uint64_t> state_incarnation_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_PS_RECOVERY_H_
