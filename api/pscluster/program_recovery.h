// ProgramRecovery: a program job's (ClusterCoordinator's) checkpoints and PS
// recovery, on the coordinator core's parts that YAML jobs use: the
// checkpoint format and commit protocol (CheckpointManager,
// docs/checkpoint_format.md), the trigger of periodic checkpoints
// (CheckpointPolicy), and the detection and healing of a failed PS
// (PsRecovery, with its step accounting).
//
// It keeps the job's step ledger, as YAML jobs keep JobStatus.steps and
// lost_steps:
//  * steps(): the steps (pushes) of the closures that ended, each closure
//    counted once however often it ran;
//  * lost_steps(): of those, the steps a PS recovery rolled back (applied
//    after the checkpoint it restored, or all of them when it had none);
//  * global_step(): the steps the variables hold now, what each PS that
//    every step reaches has applied: steps() - lost_steps(), plus the step of
//    a checkpoint the program restored (Restore) minus what it held then.
//
// A program's closures are not replayed after a rollback (their results were
// fetched): the steps they applied are lost, and counted so. Closures that
// failed on the PS are retried after the recovery; their pushes are applied
// once (the restored update keys).
//
// Thread-safe. Save, Restore, Checkpoint and Heal run one at a time (an
// internal lock) and REQUIRE that no closure is in flight (the caller
// pauses its queue); the ledger may be read and added to at any time.
#ifndef PSCLUSTER_API_PSCLUSTER_PROGRAM_RECOVERY_H_
#define PSCLUSTER_API_PSCLUSTER_PROGRAM_RECOVERY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/job_paths.h"
#include "common/model_variables.h"
#include "common/ps_client.h"
#include "coordinator/core/checkpoint_manager.h"
#include "coordinator/core/checkpoint_policy.h"
#include "coordinator/core/health_checker.h"
#include "coordinator/core/ps_recovery.h"
#include "protos/checkpoint.pb.h"

namespace pscluster {

class ProgramRecovery {
 public:
  struct Options {
    std::string job_id;
    // The job's PS tasks, signing control requests with the job's key
    // (index p = PS p); not owned.
    std::vector<PsClient*> ps;
    // Health checks of the PS (incarnations); null: none.
    HealthChecker* health = nullptr;
    // The PS tasks' --checkpoint_root as this process reaches it (a file
    // system they share). Empty: no checkpoints.
    std::string checkpoint_root;
    // Periodic checkpoints: their directory (relative to the root, or
    // absolute under it) and trigger; empty dir: none.
    std::string checkpoint_dir;
    int64_t every_steps = 0;
    absl::Duration every = absl::ZeroDuration();
    // Committed checkpoints kept in each directory.
    int64_t keep = 3;
    // How long a recovery waits for every PS to answer again.
    absl::Duration recovery_timeout = absl::Seconds(60);
  };

  // INVALID_ARGUMENT for a checkpoint_dir without a checkpoint_root, a
  // negative trigger or keep < 1; ResolveCheckpointDir's errors for the
  // periodic directory.
  static absl::StatusOr<std::unique_ptr<ProgramRecovery>> Create(Options options);

  // The job's layout (job, key and checkpoint directory set in every
  // request). Not owned; must outlive this. REQUIRES: called once, before
  // the health checks and dispatch start.
  void SetPlan(const VariablePlan* plan);

  // The detector (health checks: CheckEveryPs; dispatch: failed,
  // MarkFailed).
  PsRecovery* ps_recovery() { return &ps_recovery_; }

  // A closure ended having made `steps` steps.
  void AddSteps(int64_t steps) ABSL_LOCKS_EXCLUDED(ledger_mu_);
  int64_t steps() const ABSL_LOCKS_EXCLUDED(ledger_mu_);
  int64_t lost_steps() const ABSL_LOCKS_EXCLUDED(ledger_mu_);
  int64_t global_step() const ABSL_LOCKS_EXCLUDED(ledger_mu_);
  int64_t ps_recoveries() const ABSL_LOCKS_EXCLUDED(ledger_mu_);

  // A periodic checkpoint is due (its trigger fired; off without a
  // checkpoint_dir).
  bool CheckpointDue() const;
  // Takes a periodic checkpoint into checkpoint_dir. `next_closure_id`: no
  // closure below it will push after the checkpoint's state unless it is
  // still pending; `prune_below`: every closure below it has ended (their
  // update keys are forgotten on the PS once the checkpoint commits).
  // A PS that lost the job marks a PS failure (ABORTED); a storage error is
  // recorded in the policy (retried on the trigger after a backoff) and
  // returned. REQUIRES: no closure in flight.
  absl::Status Checkpoint(int64_t next_closure_id, int64_t prune_below)
      ABSL_LOCKS_EXCLUDED(op_mu_);

  // The program's save into `dir` (relative to the checkpoint root or
  // absolute under it; created if missing): the same format as every
  // checkpoint, a new ckpt-<id> beside the newest `keep`. Becomes the
  // checkpoint a PS recovery restores. FAILED_PRECONDITION without a
  // checkpoint root; the root's confinement errors naming `dir`; the PS's
  // and storage's errors (CheckpointManager::Save). REQUIRES: no closure in
  // flight.
  absl::StatusOr<CheckpointManifest> Save(const std::string& dir, int64_t next_closure_id)
      ABSL_LOCKS_EXCLUDED(op_mu_);
  // Restores the newest committed checkpoint of `dir` into the PS, laid out
  // as this job's plan (any saved PS count and partitioner): values,
  // optimizer slots, update keys and step counters; global_step() becomes
  // the checkpoint's. NOT_FOUND naming `dir` when it does not exist or holds
  // no committed checkpoint; FAILED_PRECONDITION (from the PS, naming the
  // variable) when the checkpoint lacks a variable of the job or saved it
  // with another shape or optimizer; DATA_LOSS for a damaged one with none
  // older that restores. Returns its manifest (next_closure_id: the first
  // closure id the program may use now). REQUIRES: no closure in flight.
  absl::StatusOr<CheckpointManifest> Restore(const std::string& dir) ABSL_LOCKS_EXCLUDED(op_mu_);

  // When a PS failed (ps_recovery()->failed()): PsRecovery::Heal, restoring
  // the newest checkpoint this job saved or restored (or re-creating every
  // PS from the initializers when there is none and something was lost),
  // then counts the steps rolled back as lost. OK at once when no PS
  // failed. The error fails the job: a PS did not come back within
  // recovery_timeout, the restore failed, or the state restored disagrees
  // with the ledger. `what` gets the recovery's description (optional).
  // REQUIRES: no closure in flight.
  absl::Status HealIfFailed(std::string* what = nullptr) ABSL_LOCKS_EXCLUDED(op_mu_);

  // The first closure id that no checkpoint restored so far has keys of.
  int64_t next_closure_floor() const ABSL_LOCKS_EXCLUDED(ledger_mu_);

 private:
  explicit ProgramRecovery(Options options);

  // A checkpoint directory under the root, for `what` (messages).
  absl::StatusOr<CheckpointLocation> Locate(const std::string& dir, const std::string& what) const;
  // Saves into `location`; on success it becomes last_.
  absl::StatusOr<CheckpointManifest> SaveLocked(const CheckpointLocation& location,
                                                int64_t next_closure_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_);
  // The ledger's global step becomes `step`: `lost` says whether the steps
  // rolled back count as lost (a recovery) or were dropped by the program
  // (its Restore).
  void RollTo(int64_t step, bool lost) ABSL_LOCKS_EXCLUDED(ledger_mu_);

  const Options options_;
  PsRecovery ps_recovery_;
  CheckpointPolicy policy_;
  const VariablePlan* plan_ = nullptr;
  std::optional<CheckpointLocation> periodic_;  // set by Create

  absl::Mutex op_mu_ ABSL_ACQUIRED_BEFORE(ledger_mu_);
  // The checkpoint a recovery restores: the newest saved or restored.
  struct Last {
    CheckpointLocation location;
    CheckpointManifest manifest;
  };
  std::optional<Last> last_ ABSL_GUARDED_BY(op_mu_);

  mutable absl::Mutex ledger_mu_;
  int64_t steps_ ABSL_GUARDED_BY(ledger_mu_) = 0;
  int64_t lost_ ABSL_GUARDED_BY(ledger_mu_) = 0;
  // global_step = base_ + steps_ - lost_ (base_: a program's Restore).
  int64_t base_ ABSL_GUARDED_BY(ledger_mu_) = 0;
  int64_t recoveries_ ABSL_GUARDED_BY(ledger_mu_) = 0;
  int64_t closure_floor_ ABSL_GUARDED_BY(ledger_mu_) = 1;
};

}  // namespace pscluster

#endif  // PSCLUSTER_API_PSCLUSTER_PROGRAM_RECOVERY_H_
