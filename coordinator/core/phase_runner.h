// PhaseRunner: runs the phases of a job (an epoch's training, then its eval;
// or a batch prediction's one PREDICT phase, predict_runner.h) on the
// workers, and keeps the job's data position: the epoch in progress and the
// splits of it that finished.
//
// A phase splits [0, size) into closures of `closure_examples` examples
// (those of splits already finished are skipped), queues them (a
// synchronous job's split by split, one closure per replica, replica r
// preferring worker r mod workers — for central_storage with a roster, the
// replicas are re-formed for each split over the workers that hold the job,
// FormReplicas; pinned there for multi_worker_mirrored),
// and runs `closures_per_worker` dispatch state machines per worker
// (dispatcher.h: a Dispatcher over the PhaseRunner's DispatchExecutor, a
// few threads whatever the worker count; no thread is started per phase or
// per worker). Results are added to the phase's totals and, for
// training, to the job's status (steps, examples, loss, throughput) on the
// JobStatusBoard; each finished training split is appended to the job log.
//
// The phase's control loop runs the job's checkpoints and PS recovery
// (Control) with no closure in flight: an asynchronous phase pauses its
// queue when a checkpoint is due, a synchronous one takes it between
// splits; a PS failure pauses dispatch, and after the recovery the phase
// ends rolled back (the job's position was rewound).
//
// Thread-safe: RunPhase runs on the job's thread, the executor's threads
// call back into RecordSuccess, and Cancel may come from any thread. Lock order:
// PhaseRunner's lock, then the JobStatusBoard's.
#ifndef PSCLUSTER_COORDINATOR_CORE_PHASE_RUNNER_H_
#define PSCLUSTER_COORDINATOR_CORE_PHASE_RUNNER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
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
#include "coordinator/core/closure_deadline.h"
#include "coordinator/core/closure_dispatch.h"
#include "coordinator/core/closure_queue.h"
#include "coordinator/core/coordinator_metrics.h"
#include "coordinator/core/dispatch_executor.h"
#include "coordinator/core/health_watch.h"
#include "coordinator/core/job_status_board.h"
#include "coordinator/core/worker_client.h"
#include "coordinator/core/worker_roster.h"
#include "protos/checkpoint.pb.h"

namespace pscluster {

// Closure ids are a function of (mode, epoch, split), the same in every
// coordinator that runs the job, so that the PS recognises a retried step.
int64_t ClosureId(ClosureMode mode, int64_t epoch, int64_t split);

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

class PhaseRunner {
 public:
  struct Options {
    std::string job_id;
    // The job's key (common/update_lease.h); empty: no leases.
    std::string job_key;
    const JobSpec* spec = nullptr;       // not owned; resolved (replicas > 0)
    std::vector<WorkerClient*> workers;  // not owned
    int max_attempts = 3;
    absl::Duration retry_backoff = absl::Milliseconds(200);
    // Re-sent to a worker that lost the job; not owned, written before the
    // first phase.
    const SetupJobRequest* setup = nullptr;
    // Where results and events go; not owned.
    JobStatusBoard* board = nullptr;
    // The job's health checks (worker down/lost flags); null: none.
    HealthWatch* health = nullptr;
    // Job metrics; null: none.
    CoordinatorMetrics* metrics = nullptr;
    // Called after each training closure is recorded, on an executor
    // thread with no lock of the PhaseRunner held: the job's steps done so
    // far, and the closure's examples and summed loss (the job's TensorBoard
    // summaries, job_summaries.h). Null: none.
    std::function<void(int64_t steps, int64_t examples, double loss_sum)> on_train_closure;
    // Called with each PREDICT closure that succeeded and its answer (its
    // predictions), on an executor thread with no lock of the PhaseRunner
    // held. A closure retried or run twice may be reported twice: the
    // callee keeps one answer per split (prediction_table.h). Null: none.
    std::function<void(const Closure&, const RunClosureResponse&)> on_predict_closure;
    std::function<absl::Time()> now = [] { return absl::Now(); };
    // The threads that drive the phases' dispatch (not owned); null: the
    // PhaseRunner's own, max(2, cores) of them, started once.
    DispatchExecutor* executor = nullptr;
    // Elastic workers (worker_roster.h; not owned): each phase runs on the
    // roster's members (indices are roster indices; `workers` are its first
    // ones), a worker that joins while a phase runs gets its dispatch
    // state machines on the control loop's next turn, after `setup_worker`, and one
    // that leaves gets no more closures. A central_storage split has one
    // replica per member that holds the job, re-formed between splits
    // (FormReplicas). multi_worker_mirrored uses it only with `reform_ring`
    // (its replicas are pinned to the ring's members). Null: `workers`, fixed.
    WorkerRoster* roster = nullptr;
    // Sets up roster worker `w` for the job (SetupJob, checked) before its
    // first closure, unless MarkSetUp(w) was called. Called once per worker,
    // on a thread of its own (it blocks: DispatchExecutor::RunBlocking);
    // an error leaves the worker out of the
    // job (logged as an event).
    std::function<absl::Status(int w)> setup_worker;
    // multi_worker_mirrored with a roster: re-forms the ring over `members`
    // (roster indices of the active workers that hold the job) between two
    // splits, with nothing in flight, and returns the ring it formed, in
    // ring order (replica r runs on ring[r]): the old members still there
    // first, then the joiners it could give a copy. Called when the members
    // differ from the ring. Null: the ring is the cluster's workers, fixed
    // (`roster` is then ignored for this strategy).
    std::function<std::vector<int>(const std::vector<int>& members)> reform_ring;
  };
  // The job's side of a phase's control loop.
  struct Control {
    // A PS failed: dispatch pauses (failures do not count as attempts).
    std::function<bool()> ps_failed;
    // Marks a PS failure; returns whether one was already marked.
    std::function<bool()> mark_ps_failed;
    // A checkpoint is due (asynchronous phases pause for it).
    std::function<bool()> checkpoint_due;
    // Takes the checkpoint (with its retries); an error fails the phase.
    // Called with no closure in flight.
    std::function<absl::Status()> checkpoint;
    // Recovers from a PS failure; an error fails the phase. Called with no
    // closure in flight.
    std::function<absl::Status()> recover;
  };

  PhaseRunner(Options options, Control control);

  // Runs the closures of `epoch` not yet finished, over [0, size), adding
  // their results to `totals`. kRolledBack: a PS failure was recovered
  // (the position may have moved); kDone: every closure finished. CANCELLED
  // after Cancel(); the error of a closure that failed for good, or of a
  // checkpoint or recovery that failed the job.
  absl::StatusOr<PhaseEnd> RunPhase(ClosureMode mode, int64_t epoch, int64_t size,
                                    int64_t closure_examples, PhaseTotals* totals)
      ABSL_LOCKS_EXCLUDED(mu_);

  // As RunPhase, over a plan of splits (a streaming source's epoch,
  // stream_plan.h): closure i runs plan[i] (its epoch set to `epoch`) as
  // split split_indices[i], in this order. REQUIRES: the two the same size.
  absl::StatusOr<PhaseEnd> RunPlannedPhase(ClosureMode mode, int64_t epoch,
                                           std::vector<DataSplit> plan,
                                           const std::vector<int64_t>& split_indices,
                                           PhaseTotals* totals) ABSL_LOCKS_EXCLUDED(mu_);

  // Stops dispatching with `why` (closures in flight finish); every later
  // phase returns CANCELLED at once.
  void Cancel(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  bool cancelled() const ABSL_LOCKS_EXCLUDED(mu_);

  // Adds closure `c`'s result `r` to `totals` and, for training, to the
  // position and the job's status. `split_done`: the closure finished its
  // split (false for a replica of a synchronous split whose other replicas
  // are not all done). Returns the job's steps done and lost so far, for the
  // job log.
  std::pair<int64_t, int64_t> RecordSuccess(ClosureMode mode, const Closure& c,
                                            const RunClosureResponse& r, PhaseTotals* totals,
                                            bool* split_done) ABSL_LOCKS_EXCLUDED(mu_);

  // The data position: the epoch in progress and its finished splits.
  int64_t epoch() const ABSL_LOCKS_EXCLUDED(mu_);
  std::set<int64_t> finished_splits() const ABSL_LOCKS_EXCLUDED(mu_);
  // The mean training loss of the epoch so far (0 before any example).
  double TrainLoss() const ABSL_LOCKS_EXCLUDED(mu_);
  // Epoch `result.epoch()` finished: its result goes into the status and
  // the position moves to the next epoch's start.
  void FinishEpoch(const EpochResult& result) ABSL_LOCKS_EXCLUDED(mu_);
  // Moves the position to `epoch` with `finished` splits done (a restored
  // checkpoint); the epoch's loss starts over.
  void Rewind(int64_t epoch, std::set<int64_t> finished) ABSL_LOCKS_EXCLUDED(mu_);
  // Back to the job's first step: position, steps and examples.
  void RestartFromFirstStep() ABSL_LOCKS_EXCLUDED(mu_);
  // A restarted coordinator without a checkpoint: takes the epochs and the
  // closures the job log says finished (their steps were applied once).
  void ResumeFromLog(const std::vector<JobLogRecord>& history) ABSL_LOCKS_EXCLUDED(mu_);

  // A rollback happened: shares of the run before it never meet those
  // after it (RunClosureRequest.round).
  void NextRound() { ++round_; }

  // Worker `w` holds the job (JobRunner::SetupWorkers set it up).
  void MarkSetUp(int w) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  enum class Setup { kNone, kRunning, kDone, kFailed };
  // With a roster: sets worker `w` up once (Options::setup_worker); false
  // when it could not be.
  bool EnsureSetUp(int w) ABSL_LOCKS_EXCLUDED(mu_);
  WorkerClient* Worker(int w) const {
    return options_.roster != nullptr ? options_.roster->client(w) : options_.workers[w];
  }
  // What worker `w`'s dispatch state machines of a phase run with.
  DispatchOptions DispatchOptionsFor(int w, ClosureMode mode, ClosureQueue* queue,
                                     PhaseTotals* totals);
  // A synchronous split's replicas: with a roster (central_storage), one
  // per active worker that holds the job, formed anew for each split (the
  // workers they prefer in `members`, roster indices); without one, or
  // before any worker holds the job, the job's (`members` empty). For
  // multi_worker_mirrored with Options::reform_ring, the ring's members (in
  // ring order), re-formed when they changed. Records a replicas_reformed
  // event when the count changes.
  int64_t FormReplicas(std::vector<int>* members) ABSL_LOCKS_EXCLUDED(mu_);
  bool Synchronous() const { return IsSynchronous(options_.spec->strategy); }
  bool Mirrored() const { return options_.spec->strategy == Strategy::kMultiWorkerMirrored; }
  // The roster applies: any strategy but a multi_worker_mirrored one
  // without reform_ring (whose ring is the cluster's workers, fixed).
  bool Elastic() const {
    return options_.roster != nullptr && (!Mirrored() || options_.reform_ring != nullptr);
  }

  const Options options_;
  const Control control_;
  const JobSpec& spec_;
  JobStatusBoard* const board_;
  std::unique_ptr<DispatchExecutor> own_executor_;  // when Options::executor is null
  DispatchExecutor* const executor_;
  // Rollbacks so far (RunClosureRequest.round).
  std::atomic<int64_t> round_{0};
  // RunClosure(s) deadlines, from the job's own closures of each kind.
  ClosureDeadline train_deadline_;
  ClosureDeadline eval_deadline_;
  ClosureDeadline predict_deadline_;

  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  ClosureQueue* current_queue_ ABSL_GUARDED_BY(mu_) = nullptr;
  double train_seconds_ ABSL_GUARDED_BY(mu_) = 0;  // before the current phase
  absl::Time phase_start_ ABSL_GUARDED_BY(mu_);
  // The epoch's training examples and loss so far.
  int64_t epoch_examples_ ABSL_GUARDED_BY(mu_) = 0;
  double epoch_loss_sum_ ABSL_GUARDED_BY(mu_) = 0;
  // Data position: the epoch in progress and its finished splits.
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<int64_t> finished_splits_ ABSL_GUARDED_BY(mu_);
  // The job's first corrupt record (streaming input) was named in its events.
  bool corrupt_named_ ABSL_GUARDED_BY(mu_) = false;
  // Synchronous phase: replicas finished, by split.
  std::map<int64_t, int64_t> sync_replicas_done_ ABSL_GUARDED_BY(mu_);
  // The replicas of the last synchronous split formed (0: none yet).
  int64_t formed_replicas_ ABSL_GUARDED_BY(mu_) = 0;
  // multi_worker_mirrored with reform_ring: the ring's members, in ring
  // order (empty: the cluster's workers), and those the last split's
  // replicas were pinned to (their calls expected, WorkerRoster::ExpectCalls).
  // Only on the job's thread.
  std::vector<int> ring_;
  std::vector<int> pinned_to_;
  // With a roster: which workers hold the job.
  std::map<int, Setup> setup_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_PHASE_RUNNER_H_
