// JobRunner: runs one training job on a cluster, the way TF's
// ClusterCoordinator drives ParameterServerStrategy, and keeps it running
// through failures.
//
// It lays the model's variables out over the PS tasks (the job's partitioner,
// round-robin placement), sets up every worker, then for each epoch splits
// the training data into closures of `steps_per_closure` steps, dispatches
// them through a queue to idle workers (`closures_per_worker` in flight per
// worker, `closures_per_rpc` closures per round trip; closure_dispatch.h),
// waits for the epoch, and evaluates with eval closures.
//
// multi_worker_mirrored: there is no PS; every worker holds the whole
// model (its "PS" is a copy in its own process, served to the coordinator as
// a ParameterServer: options.worker_ps) and each step's gradients are
// all-reduced over the ring of workers. Splits run as for central_storage,
// but replica r only ever runs on worker r (its copy). The copies are
// created and restored together and checkpointed from replica 0
// (worker_copies_ps_client.h). Any failure of a replica rolls every copy back to
// the last checkpoint (without one, to the initializers and the job's
// start) once every worker answers again, as a PS failure does.
//
// strategy: central_storage (synchronous): a closure's split is
// steps_per_closure global batches, and it runs as one closure per replica
// (RunClosureRequest.replica; replica r prefers worker r mod workers), split
// after split. The PS applies each step once every replica pushed its share
// and answers the replicas' next pulls after it (ps/core/sync_steps.h), so
// the replicas advance in lockstep; a replica whose worker fails is retried
// elsewhere (every worker can run every replica) and its shares of steps
// already applied are dropped as duplicates. Checkpoints are taken between
// splits.
//
// Failures:
// - A closure whose worker fails is retried on the same data split, on any
//   worker, with backoff; one that fails `max_attempts` times fails the job
//   with a message naming it. A worker that stops answering health checks
//   gets no work until it answers again (a restarted worker is set up anew).
//   One that has failed them for `worker_timeout_s` (hung, e.g. SIGSTOPped)
//   is declared lost: its calls in flight are cancelled and their closures
//   run on other workers without counting an attempt. Each call's deadline
//   is a multiple of the job's longest closure (closure_deadline.h).
//   Closure ids are a function of (epoch, split), and every push carries
//   (closure id, step): the PS applies each step once, so a retried closure
//   never applies a gradient twice.
// - With a checkpoint directory, checkpoints are taken every `every_steps`
//   steps and/or `every_seconds` seconds and at the end, with dispatch
//   paused so that each is a consistent cut; the data position (epoch and the
//   splits finished in it) goes into the manifest. A checkpoint that cannot
//   be written is retried `checkpoint.max_retries` times, with backoff, while
//   training goes on; then the job fails or goes on without checkpoints
//   (`checkpoint.on_failure`). Each kind of failure is logged once, repeats
//   as counts.
// - When a PS stops answering, dispatch pauses; once every PS answers again
//   (within ps_recovery_timeout_s), every PS is restored from the newest
//   complete checkpoint and training resumes from its data position. The log
//   and the status say how many steps were lost.
// - Every PS must have applied exactly the steps the coordinator counts
//   (step_accounting.h). Before each checkpoint, a PS that applied fewer
//   (updates dropped, e.g. its exactly-once keys pruned behind the
//   coordinator's back) or holds nothing of the job is a PS failure: the
//   newest checkpoint is restored and the steps since count as lost. After a
//   recovery the state restored must agree; at the job's end each PS must
//   agree exactly, or the job fails with a message naming the PS and the
//   numbers. A recovery without a checkpoint after a PS lost the job's state
//   (it restarted, or the job was ended there behind the coordinator's back)
//   restarts every PS from the initializers and the job from its first step,
//   all its steps lost; without any loss (a PS that was only unreachable)
//   nothing is rolled back.
// - A job log beside the checkpoints records the job; a JobRunner created
//   with `resume` (a restarted coordinator) restores the newest checkpoint,
//   or picks up the finished closures from the log, instead of starting over.
//
// Thread-safe: Run() blocks on one thread while others read the status,
// wait for changes, Describe() or Cancel().
#ifndef PSCLUSTER_COORDINATOR_CORE_JOB_RUNNER_H_
#define PSCLUSTER_COORDINATOR_CORE_JOB_RUNNER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/job_spec.h"
#include "common/model_variables.h"
#include "common/ps_client.h"
#include "coordinator/core/checkpoint_manager.h"
#include "coordinator/core/closure_deadline.h"
#include "coordinator/core/closure_queue.h"
#include "coordinator/core/coordinator_metrics.h"
#include "coordinator/core/health_checker.h"
#include "coordinator/core/job_log.h"
#include "coordinator/core/step_accounting.h"
#include "coordinator/core/worker_client.h"
#include "protos/coordinator.pb.h"

namespace prometheus {
class Counter;
class Gauge;
class Registry;
}  // namespace prometheus

namespace pscluster {

struct JobRunnerOptions {
  // PS addresses sent to workers in SetupJob (index i = PS task i). Empty for
  // in-process workers, which already hold their PS clients.
  std::vector<std::string> ps_addresses;
  // The coordinator's secret (common/update_lease.h): the job's key is
  // derived from it and the job id, given to each PS with the job's
  // variables, and every training closure is dispatched with its lease.
  // Empty: no key, no leases (in-process runs and tests).
  std::string lease_secret;
  // Worker addresses (index i = worker i), to name a worker that is missing;
  // multi_worker_mirrored workers also get them as their ring.
  std::vector<std::string> worker_addresses;
  // multi_worker_mirrored: each worker's copy of the job's variables (worker
  // i's ParameterServer service; not owned), which replace the PS tasks.
  // Empty: such jobs fail at their start.
  std::vector<PsClient*> worker_ps;
  // Overrides the spec's fault_tolerance.max_attempts when > 0.
  int max_attempts = 0;
  // Backoff before retry n is retry_backoff * 2^(n-1).
  absl::Duration retry_backoff = absl::Milliseconds(200);
  // Examples per eval closure.
  int64_t eval_closure_examples = 2000;
  // Checkpoints and the job log go here; empty: the spec's checkpoint.dir
  // (and without either, no checkpoints and no job log).
  std::string checkpoint_dir;
  // The directory checkpoint_dir must lie under (a relative one is taken
  // relative to it); the PS get their files' names relative to it
  // (common/job_paths.h, ResolveCheckpointDir). A job with a checkpoint
  // directory outside it, or without a root, fails at its start naming
  // --checkpoint_root (JobManager refuses such jobs at submission already).
  std::string checkpoint_root;
  // A restarted coordinator's job: restore the newest checkpoint (or the
  // job log's progress) instead of creating the variables afresh.
  bool resume = false;
  // Health checks of PS tasks and workers; null: none (failures are then
  // seen only through failed closures).
  HealthChecker* health = nullptr;
  // How long a job waits, at its start, for every PS and worker to answer
  // their health checks (needs `health`) before it fails naming the missing.
  absl::Duration cluster_wait = absl::Seconds(120);
  // Coordinator metrics (pscluster_checkpoint_failures_total, and the gauge
  // pscluster_checkpoints_disabled: running jobs that gave up checkpoints);
  // null: none. Shared by every job of the coordinator.
  std::shared_ptr<prometheus::Registry> registry;
  // Job metrics fed as things happen (steps, closures, recoveries,
  // checkpoints); not owned, shared by every job; null: none.
  CoordinatorMetrics* metrics = nullptr;
  // Per-PS memory limit for a job's parameters plus optimizer slots, in bytes
  // (checked at submit time against the job's variable plan); 0: no limit.
  int64_t ps_memory_limit_bytes = 0;
  // Where a submitted job's data files must lie (--data_root; checked at
  // submit time by JobManager, common/job_paths.h): none given, no data file
  // is accepted.
  std::vector<std::string> data_roots;
};

class JobRunner {
 public:
  // `ps`, `workers` and options.health are not owned and must outlive the
  // runner.
  JobRunner(std::string job_id, JobSpec spec, std::vector<PsClient*> ps,
            std::vector<WorkerClient*> workers, JobRunnerOptions options);
  ~JobRunner();

  // Runs the job to the end. Returns OK when it succeeded, CANCELLED after
  // Cancel(), or the error that failed it (also in the status's `error`).
  absl::Status Run() ABSL_LOCKS_EXCLUDED(mu_);

  // Stops dispatching; closures in flight finish. Run() returns CANCELLED.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);

  // Stops the job for a coordinator shutdown: like Cancel, but the job does
  // not end — nothing of its end is logged and its PS state is kept, so a
  // coordinator restarted on the same state directory resumes it. Its
  // status goes back to QUEUED.
  void Interrupt() ABSL_LOCKS_EXCLUDED(mu_);
  bool interrupted() const ABSL_LOCKS_EXCLUDED(mu_);

  // Ends a job that never ran (cancelled while QUEUED): CANCELLED, with the
  // event logged. REQUIRES: Run() was not called.
  void CancelQueued() ABSL_LOCKS_EXCLUDED(mu_);

  // Records an event of the job's event log (JobEvent.kind): kept in memory,
  // appended to the job log once it is open (earlier ones then too), and
  // logged by the coordinator.
  void Event(const std::string& kind, const std::string& message) ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<JobEvent> Events() const ABSL_LOCKS_EXCLUDED(mu_);

  JobStatusProto Status() const ABSL_LOCKS_EXCLUDED(mu_);

  // Waits until the status changes after version `seen` or `timeout` passes;
  // fills `out` and returns the current version.
  int64_t WaitForChange(int64_t seen, absl::Duration timeout, JobStatusProto* out) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // The job's variable layout and what each PS holds now (asks every PS for
  // its Stats); after the job ended, what they held at its end.
  // FAILED_PRECONDITION before the variables exist.
  absl::StatusOr<DescribeJobResponse> Describe() const ABSL_LOCKS_EXCLUDED(mu_);

  const JobSpec& spec() const { return spec_; }
  const std::string& checkpoint_dir() const { return checkpoint_dir_; }

 private:
  // Accumulates closure results of one phase (an epoch's training or eval).
  struct PhaseTotals {
    int64_t examples = 0;
    double loss_sum = 0;
    int64_t correct = 0;
    // Binary models' eval: merged probability histograms (common/metrics.h).
    std::vector<int64_t> positive;
    std::vector<int64_t> negative;
  };
  enum class PhaseEnd { kDone, kRolledBack };

  absl::Status Prepare() ABSL_LOCKS_EXCLUDED(mu_);
  // setup_request_ for `worker`, with the release of the job it holds
  // when that is another job of this coordinator (SetupJobRequest.release).
  SetupJobRequest ReleasingSetup(WorkerClient* worker) const;
  // Lets every worker go at the job's end (ReleaseJobRequest), so that the
  // next job, of any coordinator, may set it up.
  void ReleaseWorkers();
  absl::Status SetupWorkers(int64_t* train_examples, int64_t* eval_examples);
  // Runs the closures of `epoch` not yet finished, over [0, size).
  absl::StatusOr<PhaseEnd> RunPhase(ClosureMode mode, int64_t epoch, int64_t size,
                                    int64_t closure_examples, PhaseTotals* totals)
      ABSL_LOCKS_EXCLUDED(mu_);
  void DispatchLoop(int worker, ClosureMode mode, ClosureQueue* queue, PhaseTotals* totals);
  // Returns the job's training steps done (this closure's included) and its
  // lost steps so far, for the job log.
  // `split_done`: the closure finished its split (false for a replica of a
  // synchronous split whose other replicas are not all done).
  std::pair<int64_t, int64_t> RecordSuccess(ClosureMode mode, const Closure& c,
                                            const RunClosureResponse& r, PhaseTotals* totals,
                                            bool* split_done) ABSL_LOCKS_EXCLUDED(mu_);
  // central_storage and multi_worker_mirrored.
  bool Synchronous() const { return IsSynchronous(spec_.strategy); }
  // multi_worker_mirrored: the "PS" is every worker's copy (mirrors_).
  bool Mirrored() const { return spec_.strategy == Strategy::kMultiWorkerMirrored; }
  // Quiesced checkpoint of the current position. REQUIRES: no closure in flight.
  absl::Status Checkpoint() ABSL_LOCKS_EXCLUDED(mu_);
  // Checkpoint() under checkpoint.on_failure / max_retries: a failed attempt
  // is counted and logged (rate-limited) and the next one waits for the
  // backoff and the next trigger; at the `final` checkpoint, with no training
  // left, it waits the backoff out here. Returns OK unless the job must fail
  // (retries exhausted with on_failure: fail, or a PS failure at the final
  // checkpoint). Skipped once checkpoints are disabled.
  // REQUIRES: no closure in flight.
  absl::Status CheckpointWithRetries(bool final) ABSL_LOCKS_EXCLUDED(mu_);
  // Records failed attempt `error`; true when the job gives up checkpointing
  // (sets `backoff` to the wait before the next attempt otherwise).
  // `ps_failure`: a PS failed (not the storage); it uses up no retry.
  bool CheckpointFailed(const absl::Status& error, bool ps_failure, absl::Duration* backoff)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A checkpoint is due: its trigger fired, no retry backoff is running and
  // checkpoints are not disabled.
  bool CheckpointDue() const ABSL_LOCKS_EXCLUDED(mu_);
  // After a PS failure: waits for every PS, restores the newest checkpoint
  // and rewinds the data position. REQUIRES: no closure in flight.
  absl::Status RecoverFromPsFailure() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until every PS answers its health check, until `deadline`.
  absl::Status WaitForEveryPs(absl::Time deadline);
  // Records PS `ps`'s incarnation; true when it changed (the PS restarted).
  bool NotePsIncarnation(int ps, uint64_t incarnation) ABSL_LOCKS_EXCLUDED(mu_);
  // Restores the newest checkpoint into every PS and takes its position.
  // NOT_FOUND when there is none.
  absl::Status RestorePosition() ABSL_LOCKS_EXCLUDED(mu_);
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
  // Records each PS's incarnation as that of the job's state there, just
  // created or restored (CompareSteps tells a restart from an end behind the
  // coordinator's back by it).
  void NoteStateIncarnations() ABSL_LOCKS_EXCLUDED(mu_);
  void HealthLoop();
  // Appends to the job log (every append is fsynced: JobLog).
  void Log(const JobLogRecord& record);
  void Update(const std::function<void(JobStatusProto*)>& change) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Finish(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  // Frees every job namespace on the PS tasks but this job's: they belong to
  // jobs that ended (a PS that was down when its job ended still holds it).
  void FreeStaleNamespaces();
  // Frees this job's namespace on every PS (best effort: logged on failure),
  // skipping those marked down in `up` (empty: none).
  void EndOnEveryPs(const std::vector<bool>& up = {});
  // Which PS answer their health check now (all, without a health checker).
  std::vector<bool> PsAnswering();
  // Forgets the exactly-once keys of closures before `epoch` on every PS
  // (best effort), once a committed checkpoint at that epoch covers them.
  void PruneKeysBefore(int64_t epoch);

  const std::string job_id_;
  const JobSpec spec_;
  // DeriveJobKey(options.lease_secret, job_id); empty without a secret.
  const std::string job_key_;
  // multi_worker_mirrored: the workers' copies as one PS (null otherwise).
  std::unique_ptr<PsClient> mirrors_;
  // The PS clients (or mirrors_) signing the coordinator's control requests
  // (signing_ps_client.h); ps_ points to them.
  std::vector<std::unique_ptr<PsClient>> signing_;
  const std::vector<PsClient*> ps_;
  const std::vector<WorkerClient*> workers_;
  // Rollbacks so far (RunClosureRequest.round).
  std::atomic<int64_t> round_{0};
  const JobRunnerOptions options_;
  const std::string checkpoint_dir_;
  const int max_attempts_;
  std::unique_ptr<CheckpointManager> checkpoints_;
  // From options_.registry; null without one.
  prometheus::Counter* checkpoint_failures_metric_ = nullptr;
  prometheus::Gauge* checkpoints_disabled_metric_ = nullptr;
  std::unique_ptr<JobLog> log_;
  VariablePlan plan_;              // written by Prepare before dispatch starts
  std::vector<StepReach> step_reach_;  // likewise: which steps reach each PS
  SetupJobRequest setup_request_;  // likewise; re-sent to a worker that lost the job
  int64_t closures_per_epoch_ = 0;

  std::atomic<bool> ps_failed_{false};
  // Set once Prepare has touched the PS tasks (this job's namespace may exist).
  std::atomic<bool> touched_ps_{false};
  std::unique_ptr<std::atomic<bool>[]> worker_down_;
  // Times HealthLoop declared each worker lost (DispatchOptions).
  std::unique_ptr<std::atomic<int64_t>[]> worker_losses_;
  // RunClosure(s) deadlines, from the job's own closures of each kind.
  ClosureDeadline train_deadline_;
  ClosureDeadline eval_deadline_;
  std::atomic<bool> stop_health_{false};

  mutable absl::Mutex mu_;
  JobStatusProto status_ ABSL_GUARDED_BY(mu_);
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time start_ ABSL_GUARDED_BY(mu_);
  absl::Time end_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  double train_seconds_ ABSL_GUARDED_BY(mu_) = 0;  // before the current phase
  absl::Time phase_start_ ABSL_GUARDED_BY(mu_);
  int64_t epoch_examples_ ABSL_GUARDED_BY(mu_) = 0;
  double epoch_loss_sum_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool interrupted_ ABSL_GUARDED_BY(mu_) = false;
  ClosureQueue* current_queue_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool variables_ready_ ABSL_GUARDED_BY(mu_) = false;
  // Data position: the epoch in progress and its finished splits.
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<int64_t> finished_splits_ ABSL_GUARDED_BY(mu_);
  // Synchronous phase: replicas finished, by split.
  std::map<int64_t, int64_t> sync_replicas_done_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> ps_incarnation_ ABSL_GUARDED_BY(mu_);
  // Each PS's incarnation when the job's state there was last created or
  // restored (NoteStateIncarnations); empty: not known yet.
  std::vector<uint64_t> state_incarnation_ ABSL_GUARDED_BY(mu_);
  int64_t steps_at_checkpoint_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_checkpoint_time_ ABSL_GUARDED_BY(mu_);
  // Checkpoint failures: failed storage attempts since the last success, no
  // attempt before `next_checkpoint_attempt_`, and per kind of error (code
  // and errno text) how many failed since its last log line, and when that
  // line was.
  int64_t checkpoint_retries_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time next_checkpoint_attempt_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  struct FailureKind {
    int64_t unlogged = 0;
    absl::Time logged;
  };
  std::map<std::string, FailureKind> checkpoint_failure_kinds_ ABSL_GUARDED_BY(mu_);
  std::vector<JobEvent> events_ ABSL_GUARDED_BY(mu_);
  // Rate limit of the warning about failed job-log appends.
  absl::Mutex log_warning_mu_;
  int64_t log_failures_ ABSL_GUARDED_BY(log_warning_mu_) = 0;
  absl::Time last_log_warning_ ABSL_GUARDED_BY(log_warning_mu_) = absl::InfinitePast();
  // Describe() taken as the job ended, before its namespaces were freed.
  std::optional<DescribeJobResponse> final_describe_ ABSL_GUARDED_BY(mu_);
  // Events recorded before the job log was open, appended when it opens.
  size_t events_logged_ ABSL_GUARDED_BY(mu_) = 0;
};

// Closure ids are a function of (mode, epoch, split), the same in every
// coordinator that runs the job, so that the PS recognises a retried step.
int64_t ClosureId(ClosureMode mode, int64_t epoch, int64_t split);

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_JOB_RUNNER_H_
