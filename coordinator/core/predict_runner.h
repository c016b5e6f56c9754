// PredictRunner: one batch prediction (`psctl predict`, Coordinator.Predict)
// on the cluster: the model of a job's checkpoint run forward over every row
// of a data source, each row's prediction kept exactly once.
//
// Run() lays the model's variables out over the PS tasks as the job did
// (its partitioner; a fresh namespace named by this run's id), restores the
// newest complete checkpoint of the directory into them through
// CheckpointManager::RestoreLatest (the coordinator's restore path), sets up
// every worker with the spec (data.eval: the rows to predict), then runs
// one PREDICT phase through PhaseRunner: [0, rows) cut into closures of
// `closure_rows` rows, dispatched and retried by the job machinery
// (closure_dispatch.h: a closure whose worker dies runs on another; with
// health checks a worker that stops answering gets no work). Each answer
// goes into a PredictionTable, which keeps the first answer of a split and
// drops (counts) any other; at the end every row must hold exactly one
// prediction, or the run fails (INTERNAL) naming the rows missing. The
// PS namespace is freed and the workers let go at the end, success or not.
//
// Thread-safe: Run() blocks on one thread; Cancel() may come from any.
#ifndef PSCLUSTER_COORDINATOR_CORE_PREDICT_RUNNER_H_
#define PSCLUSTER_COORDINATOR_CORE_PREDICT_RUNNER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/job_spec.h"
#include "common/ps_client.h"
#include "coordinator/core/coordinator_metrics.h"
#include "coordinator/core/health_checker.h"
#include "coordinator/core/prediction_table.h"
#include "coordinator/core/worker_client.h"

namespace pscluster {

// How far a run is; sent to Options::on_progress.
struct PredictProgress {
  int64_t closures_done = 0;  // splits answered (once each)
  int64_t closures = 0;       // splits in all (0 until the workers are set up)
  int64_t rows_done = 0;
  int64_t rows = 0;
  int64_t retries = 0;     // closure failures that were retried
  int64_t duplicates = 0;  // second answers of a split, dropped
};

struct PredictRunnerOptions {
  // PS addresses sent to workers in SetupJob (index i = PS task i); empty
  // for in-process workers.
  std::vector<std::string> ps_addresses;
  // The coordinator's secret (common/update_lease.h); empty: none.
  std::string lease_secret;
  // The checkpoint directory (relative to checkpoint_root, or absolute under
  // it; common/job_paths.h). Empty: the spec's checkpoint.dir.
  std::string checkpoint_dir;
  std::string checkpoint_root;
  // Health checks of the PS tasks and workers; null: none.
  HealthChecker* health = nullptr;
  // The coordinator's metrics: the run's closures count as closures
  // scheduled, retried and failed, as a job's. Not owned; null: none.
  CoordinatorMetrics* metrics = nullptr;
  // How long the run waits at its start for every task to answer (with
  // `health`).
  absl::Duration cluster_wait = absl::Seconds(120);
  // Rows per PREDICT closure (>= 1).
  int64_t closure_rows = 500;
  // Overrides the spec's fault_tolerance.max_attempts when > 0.
  int max_attempts = 0;
  absl::Duration retry_backoff = absl::Milliseconds(200);
  // Called on a dispatch thread after each closure's answer is recorded,
  // and once (closures set, none done) before the first is dispatched, with
  // the counts so far and the run's table, whose TakeReady() hands out the
  // rows ready in input order (to stream them as they come; callers
  // serialize TakeReady-and-send). Several dispatch threads may call it at
  // once. Must not call back into the runner but Cancel(). Null: none.
  std::function<void(const PredictProgress&, PredictionTable& table)> on_progress;
  std::function<absl::Time()> now = [] { return absl::Now(); };
};

// What a run that succeeded produced.
struct PredictResult {
  // Complete (Verify() is OK); the rows on_progress did not take are still
  // to be taken (TakeReady() hands out all of them).
  std::unique_ptr<PredictionTable> table;
  PredictProgress progress;                // the final counts
  int64_t checkpoint_id = 0;               // the checkpoint restored
  int64_t global_step = 0;                 // its training step
  std::string backend;                     // the workers' ("cpu", "cuda:...")
  // From the first closure dispatched to the last answer recorded.
  double predict_seconds = 0;
};

class PredictRunner {
 public:
  // `spec` is resolved for `workers` (ResolveReplicas), its data.eval the
  // rows to predict. `ps` and `workers` (and options.health) are not owned
  // and must outlive the runner. `run_id` names the run's PS namespace and
  // its closures' job; it must not be a running job's id.
  PredictRunner(std::string run_id, JobSpec spec, std::vector<PsClient*> ps,
                std::vector<WorkerClient*> workers, PredictRunnerOptions options);
  ~PredictRunner();

  // Runs the prediction. Errors: INVALID_ARGUMENT for a cluster without a
  // PS or worker, or a multi_worker_mirrored spec (no PS to restore into);
  // NOT_FOUND / FAILED_PRECONDITION naming the checkpoint directory when it
  // holds no usable checkpoint, or lies outside the checkpoint root; a
  // worker's SetupJob error (e.g. NOT_FOUND for a missing data file) naming
  // it; a closure that failed for good; ABORTED when a PS lost the restored
  // model meanwhile (it restarted); INTERNAL when a row ended without
  // exactly one prediction; CANCELLED after Cancel().
  absl::StatusOr<PredictResult> Run();

  // Stops dispatching (closures in flight finish); Run() returns CANCELLED.
  void Cancel();

 private:
  struct Parts;  // the run's PhaseRunner, board and health watch

  // The run after the variables and workers are ready.
  absl::StatusOr<PredictResult> Predict(int64_t rows, PredictResult result);
  // Sets up every worker; returns the rows of data.eval they agree on.
  absl::StatusOr<int64_t> SetupWorkers(std::string* backend);
  // Frees the run's namespace on every PS and lets the workers go.
  void Cleanup();
  // Records a closure's answer (on its dispatch thread).
  void OnAnswer(const RunClosureResponse& r, int64_t begin, int64_t end);

  const std::string run_id_;
  const JobSpec spec_;
  const std::string job_key_;
  std::vector<std::unique_ptr<PsClient>> signing_;
  std::vector<PsClient*> ps_;
  const std::vector<WorkerClient*> workers_;
  const PredictRunnerOptions options_;
  SetupJobRequest setup_;  // written before dispatch starts, never after
  // Both set before the first closure is dispatched (parts_ under mu_, for
  // Cancel), never reset while the run lasts: the dispatch threads read
  // them unlocked.
  std::unique_ptr<Parts> parts_;
  std::unique_ptr<PredictionTable> table_;

  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // The first malformed answer: it cancels the phase and fails the run.
  absl::Status answer_error_ ABSL_GUARDED_BY(mu_);
  bool ps_lost_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_PREDICT_RUNNER_H_
