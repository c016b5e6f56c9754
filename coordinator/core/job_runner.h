// JobRunner: runs one training job on a cluster, the way TF's
// ClusterCoordinator drives ParameterServerStrategy, and keeps it running
// through failures.
//
// It lays the model's variables out over the PS tasks (the job's partitioner,
// round-robin placement), sets up every worker, then for each epoch splits
// the training data into closures of `steps_per_closure` steps, dispatches
// them through a queue to idle workers (`closures_per_worker` in flight per
// worker, `closures_per_rpc` closures per round trip; closure_dispatch.h;
// the calls of every worker are driven from a few threads, dispatcher.h),
// waits for the epoch, and evaluates with eval closures.
//
// multi_worker_mirrored: there is no PS; every worker holds the whole
// model (its "PS" is a copy in its own process, served to the coordinator as
// a ParameterServer: options.worker_ps) and each step's gradients are
// all-reduced over the ring of workers. Splits run as for central_storage,
// but replica r only ever runs on the ring's member r (its copy; with
// elastic workers the ring is re-formed between splits, ReformRing). The
// copies are
// created and restored together and checkpointed from replica 0
// (worker_copies_ps_client.h). Any failure of a replica rolls every copy back to
// the last checkpoint (without one, to the initializers and the job's
// start) once every worker answers again, as a PS failure does.
//
// strategy: central_storage (synchronous): a closure's split is
// steps_per_closure global batches, and it runs as one closure per replica
// (RunClosureRequest.replica; replica r prefers worker r mod workers; with
// elastic workers, one replica per worker holding the job, re-formed between
// splits over the job's global batch, DataSplit.replicas), split after
// split. The PS applies each step once every replica pushed its share
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
// - Elastic PS (docs/elastic_ps.md): Rescale() moves a running
//   parameter_server job onto the first N of the cluster's PS tasks: at the
//   next quiesced point of a training phase it checkpoints, plans the
//   variables over N PS, restores the checkpoint there (re-sharded), ends the
//   job on the PS no longer used, sets every worker up for the new layout and
//   resumes. Nothing applied before the checkpoint is lost; the pause is in
//   the status, the events and a metric.
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
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/job_spec.h"
#include "common/model_variables.h"
#include "common/ps_client.h"
#include "common/stream_plan.h"
#include "coordinator/core/checkpoint_manager.h"
#include "coordinator/core/checkpoint_policy.h"
#include "coordinator/core/coordinator_metrics.h"
#include "coordinator/core/health_checker.h"
#include "coordinator/core/health_watch.h"
#include "coordinator/core/job_status_board.h"
#include "coordinator/core/job_summaries.h"
#include "coordinator/core/phase_runner.h"
#include "coordinator/core/ps_recovery.h"
#include "coordinator/core/worker_client.h"
#include "coordinator/core/worker_copies_ps_client.h"
#include "coordinator/core/worker_roster.h"
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
  // The clock of the job's status and events, its checkpoint triggers and
  // its PS recovery deadlines (the parts' clocks); tests inject a fake one.
  // Backoff waits and RPC deadlines still use real time.
  std::function<absl::Time()> now = [] { return absl::Now(); };
  // Elastic workers (worker_roster.h, docs/elastic_workers.md; not owned,
  // shared by every job): the coordinator's workers as they join and leave.
  // The job's `workers` are then the roster's first ones (the cluster's);
  // a worker that joins while the job runs is set up and gets closures
  // within a turn of the phase's control loop, one that leaves gets no new
  // closure and its calls in flight finish. A synchronous job re-forms its
  // replicas at its next split (one per worker holding the job; each step
  // keeps the job's global batch and learning rate); multi_worker_mirrored
  // re-forms its ring only with `connect_copy` (ReformRing). Null: fixed
  // workers.
  WorkerRoster* roster = nullptr;
  // multi_worker_mirrored with a roster: a client of the copy a worker that
  // joined serves at `address` (its ParameterServer service, as worker_ps).
  // Null: the ring stays the cluster's workers.
  std::function<std::unique_ptr<PsClient>(const std::string& address)> connect_copy;
  // Elastic PS (docs/elastic_ps.md): a job starts on the first `job_ps` of
  // the PS tasks it is given (0, or more than there are: all of them); the
  // rest are spare, for Rescale().
  int job_ps = 0;
};

// JobRunner owns the job's parts and wires them together:
// - JobStatusBoard (job_status_board.h): the status, its events, the job log;
// - PhaseRunner (phase_runner.h): the phases' dispatch, their results and
//   the data position;
// - CheckpointPolicy (checkpoint_policy.h): when a checkpoint is due, what a
//   failed one means;
// - PsRecovery (ps_recovery.h): the PS tasks' failures, incarnations, step
//   accounting and recovery, and the job's housekeeping on them;
// - HealthWatch (health_watch.h): the health-check loop;
// - JobSummaries (job_summaries.h): with `summaries:`, the TensorBoard
//   scalars, fed where the epochs, closures and checkpoints are recorded.
// What stays here is the job's sequence (Prepare, the epochs, Finish) and the
// steps that span parts: taking and restoring checkpoints, and recovering.
class JobRunner {
 public:
  // `spec` is resolved for `workers` (ResolveReplicas(ReplicasFor(spec,
  // workers.size()))): the spec is parsed and resolved once, by JobManager or
  // psctl, and handed on; one that is not fails the job at Run.
  // `ps`, `workers` and options.health are not owned and must outlive the
  // runner.
  JobRunner(std::string job_id, JobSpec spec, std::vector<PsClient*> ps,
            std::vector<WorkerClient*> workers, JobRunnerOptions options);
  ~JobRunner();

  // Runs the job to the end. Returns OK when it succeeded, CANCELLED after
  // Cancel(), or the error that failed it (also in the status's `error`).
  absl::Status Run() ABSL_LOCKS_EXCLUDED(mu_);

  // Stops dispatching; closures in flight finish. Run() returns CANCELLED.
  void Cancel();

  // Stops the job for a coordinator shutdown: like Cancel, but the job does
  // not end — nothing of its end is logged and its PS state is kept, so a
  // coordinator restarted on the same state directory resumes it. Its
  // status goes back to QUEUED.
  void Interrupt();
  bool interrupted() const { return interrupted_.load(); }

  // Ends a job that never ran (cancelled while QUEUED): CANCELLED, with the
  // event logged. REQUIRES: Run() was not called.
  void CancelQueued() ABSL_LOCKS_EXCLUDED(mu_);

  // Records an event of the job's event log (JobEvent.kind): kept in memory,
  // appended to the job log once it is open (earlier ones then too), and
  // logged by the coordinator.
  void Event(const std::string& kind, const std::string& message) { board_.Event(kind, message); }
  std::vector<JobEvent> Events() const { return board_.Events(); }

  JobStatusProto Status() const { return board_.Status(); }

  // Waits until the status changes after version `seen` or `timeout` passes;
  // fills `out` and returns the current version.
  int64_t WaitForChange(int64_t seen, absl::Duration timeout, JobStatusProto* out) const {
    return board_.WaitForChange(seen, timeout, out);
  }

  // The job's variable layout and what each PS holds now (asks every PS for
  // its Stats); after the job ended, what they held at its end.
  // FAILED_PRECONDITION before the variables exist.
  absl::StatusOr<DescribeJobResponse> Describe() const ABSL_LOCKS_EXCLUDED(mu_);

  const JobSpec& spec() const { return spec_; }
  const std::string& checkpoint_dir() const { return checkpoint_dir_; }

  // Elastic PS: moves the running job onto the first `num_ps` of its PS
  // tasks (see the file comment) and returns once it runs there, with the
  // pause (at once, without one, when it already runs on `num_ps` PS).
  // INVALID_ARGUMENT for num_ps < 1 or past the PS given;
  // FAILED_PRECONDITION for a job that is not running (yet), a synchronous
  // strategy, a job without checkpoints, or a rescale already under way;
  // DEADLINE_EXCEEDED when the job reached no point to rescale within
  // `timeout` (nothing changed then); the checkpoint's or the restore's
  // error otherwise (the job then goes on on its old PS).
  absl::StatusOr<RescaleJobResponse> Rescale(int num_ps, absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mu_, rescale_mu_);

 private:
  // The examples the workers hold.
  struct DataSizes {
    int64_t train = 0;
    int64_t eval = 0;
  };

  // Waits for the cluster, lays out and creates (or restores) the job's
  // variables and sets up every worker.
  absl::Status Prepare(DataSizes* data) ABSL_LOCKS_EXCLUDED(mu_);
  // The variables: planned, then restored from the newest checkpoint, or
  // created (resuming from the job log when there is one).
  absl::Status PrepareVariables() ABSL_LOCKS_EXCLUDED(mu_);
  // Streaming sources (data.*.stream): indexes their files and plans their
  // units (train_stream_, eval_stream_), naming them in the job's events.
  absl::Status PlanStreams();
  // Trains and evaluates every epoch from the data position on.
  absl::Status RunEpochs(const DataSizes& data);
  // After the last epoch: every PS agrees with the steps counted, and the
  // final checkpoint.
  absl::Status FinalChecks();
  // setup_request_ for `worker`, with the release of the job it holds
  // when that is another job of this coordinator (SetupJobRequest.release).
  SetupJobRequest ReleasingSetup(WorkerClient* worker) const;
  // Lets every worker go at the job's end (ReleaseJobRequest), so that the
  // next job, of any coordinator, may set it up.
  void ReleaseWorkers();
  absl::Status SetupWorkers(DataSizes* data);
  // Sets up roster worker `w`, which joined after the job's start
  // (PhaseRunner::Options::setup_worker): the same SetupJob, and the same
  // data as the others.
  absl::Status SetupJoined(int w);
  // central_storage and multi_worker_mirrored.
  bool Synchronous() const { return IsSynchronous(spec_.strategy); }
  // multi_worker_mirrored: the "PS" is every worker's copy (mirrors_).
  bool Mirrored() const { return spec_.strategy == Strategy::kMultiWorkerMirrored; }
  void Update(const std::function<void(JobStatusProto*)>& change) { board_.Update(change); }
  // The job's steps done and lost so far (JobStatus.steps, lost_steps).
  std::pair<int64_t, int64_t> StepsCounted() const;
  // Quiesced checkpoint of the current position. REQUIRES: no closure in flight.
  absl::Status Checkpoint();
  // Checkpoint() under checkpoint.on_failure / max_retries (CheckpointPolicy):
  // a failed attempt is counted and logged (rate-limited) and the next one
  // waits for the backoff and the next trigger; at the `final` checkpoint,
  // with no training left, it waits the backoff out here. Returns OK unless
  // the job must fail (retries exhausted with on_failure: fail, or a PS
  // failure at the final checkpoint). Skipped once checkpoints are disabled.
  // REQUIRES: no closure in flight.
  absl::Status CheckpointWithRetries(bool final);
  // Records failed attempt `error` (status, metrics, event); true when the
  // job gives up checkpointing (sets `backoff` to the wait before the next
  // attempt otherwise). `ps_failure`: a PS failed (not the storage).
  bool CheckpointFailed(const absl::Status& error, bool ps_failure, absl::Duration* backoff);
  // A checkpoint is due (CheckpointPolicy::Due) and the job takes them.
  bool CheckpointDue() const;
  // After a PS failure: PsRecovery::Heal, then the job's counts. REQUIRES:
  // no closure in flight.
  absl::Status RecoverFromPsFailure();
  // With `summaries:`, opens the run's event file (summaries_).
  // FAILED_PRECONDITION / INVALID_ARGUMENT when the logdir is outside the
  // checkpoint root; the file's errors naming it.
  absl::Status OpenSummaries();
  // The job's training throughput so far (JobStatus.examples_per_sec).
  double ExamplesPerSec() const;
  // Restores the newest checkpoint into every PS and takes its position.
  // NOT_FOUND when there is none.
  absl::Status RestorePosition() ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Finish(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  // The job's PS recovery for its PS set now (replaced by a rescale).
  std::shared_ptr<PsRecovery> Recovery() const ABSL_LOCKS_EXCLUDED(recovery_mu_);
  // PsRecovery's options for the PS tasks `ps` (a prefix of all_ps_).
  PsRecovery::Options RecoveryOptions(std::vector<PsClient*> ps);
  // The variables laid out over `num_ps` PS, with the job's id, key and
  // checkpoint directory set in each PS's request.
  absl::StatusOr<VariablePlan> PlanFor(int num_ps) const;
  // setup_request_'s PS addresses and placement for plan_ (re-signed).
  void SetLayoutInSetup();
  // The pending rescale, run by the phase's control loop in place of a
  // checkpoint (no closure in flight); its result goes to Rescale().
  absl::Status RunPendingRescale() ABSL_LOCKS_EXCLUDED(rescale_mu_);
  // The rescale itself (job_runner_rescale.cc). REQUIRES: no closure in
  // flight, on Run's thread.
  absl::StatusOr<RescaleJobResponse> MoveToPs(int num_ps);
  // Sets every worker of the job up again for the new layout.
  void SetupWorkersAgain();
  // multi_worker_mirrored (PhaseRunner::Options::reform_ring,
  // job_runner_ring.cc): the ring over `members`, between two splits. The
  // members still in the ring keep their order; a joiner's copy is brought
  // to the ring's state from a checkpoint taken now (only with
  // checkpoints; else it is left out, with an event); every member is set
  // up with the new ring. A member that cannot be set up marks a failure
  // (the ring rolls back). Returns the ring formed. REQUIRES: no closure in
  // flight, on Run's thread.
  std::vector<int> ReformRing(const std::vector<int>& members);
  // Replica copy of roster worker `w` (the cluster's from worker_ps, a
  // joiner's made by connect_copy); null when there is none.
  PsClient* CopyOf(int w);
  // With ElasticRing(), before the variables are made: the ring starts as
  // the cluster's workers still members. UNAVAILABLE when none is.
  absl::Status FormFirstRing();
  // A multi_worker_mirrored job whose ring follows the roster.
  bool ElasticRing() const {
    return Mirrored() && options_.roster != nullptr && options_.connect_copy != nullptr;
  }
  // A resumed job (PrepareVariables): on the PS count of the newest rescale
  // in its log `history`, instead of the coordinator's job_ps.
  absl::Status ResumeRescaledLayout(const std::vector<JobLogRecord>& history);

  const std::string job_id_;
  const JobSpec spec_;
  // DeriveJobKey(options.lease_secret, job_id); empty without a secret.
  const std::string job_key_;
  // multi_worker_mirrored: the workers' copies as one PS (null otherwise).
  std::unique_ptr<WorkerCopiesPsClient> mirrors_;
  // multi_worker_mirrored: the ring (roster indices, in ring order) and the
  // joiners' copies (raw, and signed for the coordinator's control calls);
  // only on Run's thread (ReformRing). Copies are kept until the job ends.
  std::vector<int> ring_;
  std::map<int, std::unique_ptr<PsClient>> joiner_copies_;
  std::map<int, std::unique_ptr<PsClient>> signed_joiner_copies_;
  // Joiners told they get no copy (one event each; not asked again).
  std::set<int> refused_copies_;
  // The PS clients (or mirrors_) signing the coordinator's control requests
  // (signing_ps_client.h); ps_ points to them.
  std::vector<std::unique_ptr<PsClient>> signing_;
  // Every PS task the job may use (Rescale); ps_ is its first ones, those
  // that hold the job's variables now. ps_ and plan_ are written only on
  // Run's thread while no closure is in flight (Prepare, a rescale), under
  // layout_mu_; other threads (Describe) read them under it.
  const std::vector<PsClient*> all_ps_;
  std::vector<PsClient*> ps_;
  mutable absl::Mutex layout_mu_;
  const std::vector<WorkerClient*> workers_;
  const JobRunnerOptions options_;
  const std::string checkpoint_dir_;
  const int max_attempts_;
  // From options_.registry; null without one.
  prometheus::Counter* checkpoint_failures_metric_ = nullptr;
  prometheus::Gauge* checkpoints_disabled_metric_ = nullptr;
  // Written by Prepare before dispatch starts, never after.
  std::unique_ptr<CheckpointManager> checkpoints_;
  // The job's TensorBoard summaries (null without `summaries:`); written by
  // Prepare before dispatch starts, never after.
  std::unique_ptr<JobSummaries> summaries_;
  VariablePlan plan_;
  // The units of streaming sources (stream_plan.h); unset for a source in
  // memory. Written by Prepare before dispatch starts, never after.
  std::optional<StreamPlan> train_stream_;
  std::optional<StreamPlan> eval_stream_;
  SetupJobRequest setup_request_;  // re-sent to a worker that lost the job
  // The examples every worker holds (SetupWorkers), for workers that join
  // later. Written by Prepare before dispatch starts, never after.
  DataSizes data_;
  // Set once Prepare has touched the PS tasks (this job's namespace may exist).
  std::atomic<bool> touched_ps_{false};
  std::atomic<bool> interrupted_{false};
  // options_.health over the roster's members (a worker that left answers
  // as healthy): a mirrored job's PsRecovery checks its copies' workers.
  std::unique_ptr<HealthChecker> members_health_;

  // The parts, in the order they are built (each may use those before it).
  JobStatusBoard board_;
  CheckpointPolicy checkpoint_policy_;
  mutable absl::Mutex recovery_mu_;
  std::shared_ptr<PsRecovery> recovery_ ABSL_GUARDED_BY(recovery_mu_);
  HealthWatch health_;
  PhaseRunner phases_;

  mutable absl::Mutex mu_;
  bool variables_ready_ ABSL_GUARDED_BY(mu_) = false;
  // Describe() taken as the job ended, before its namespaces were freed.
  std::optional<DescribeJobResponse> final_describe_ ABSL_GUARDED_BY(mu_);

  // Elastic PS: the rescale asked for (dispatch pauses for it) and its
  // result, for the Rescale() call waiting on it.
  std::atomic<bool> rescale_pending_{false};
  absl::Mutex rescale_mu_;
  int rescale_to_ ABSL_GUARDED_BY(rescale_mu_) = 0;
  bool rescale_started_ ABSL_GUARDED_BY(rescale_mu_) = false;
  std::optional<absl::StatusOr<RescaleJobResponse>> rescale_result_ ABSL_GUARDED_BY(rescale_mu_);
  prometheus::Counter* rescales_metric_ = nullptr;
  prometheus::Gauge* rescale_pause_metric_ = nullptr;
};

// ClosureId(mode, epoch, split): phase_runner.h.

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_JOB_RUNNER_H_
