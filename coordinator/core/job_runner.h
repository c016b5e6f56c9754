// JobRunner: runs one training job on a cluster, the way TF's
// ClusterCoordinator drives ParameterServerStrategy.
//
// It creates the model's variables on the PS tasks (laid out by the job's
// partitioner and placed round-robin, as TF does),
// sets up every worker, then for each epoch splits the training data into
// closures of `steps_per_closure` steps, dispatches them through a queue to
// idle workers (`closures_per_worker` in flight per worker), waits for the
// epoch, and evaluates test accuracy with eval closures. A closure whose
// worker is unreachable is retried elsewhere with backoff, on the same data
// split; one that keeps failing fails the job with a message naming it.
//
// Thread-safe: Run() blocks on one thread while others read the status,
// wait for changes, or Cancel().
#ifndef PSCLUSTER_COORDINATOR_CORE_JOB_RUNNER_H_
#define PSCLUSTER_COORDINATOR_CORE_JOB_RUNNER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/job_spec.h"
#include "common/ps_client.h"
#include "coordinator/core/closure_queue.h"
#include "coordinator/core/worker_client.h"
#include "protos/coordinator.pb.h"

namespace pscluster {

struct JobRunnerOptions {
  // PS addresses sent to workers in SetupJob (index i = PS task i). Empty for
  // in-process workers, which already hold their PS clients.
  std::vector<std::string> ps_addresses;
  // Runs of one closure before the job fails.
  int max_attempts = 5;
  // Backoff before retry n is retry_backoff * 2^(n-1).
  absl::Duration retry_backoff = absl::Milliseconds(200);
  // Examples per eval closure.
  int64_t eval_closure_examples = 2000;
};

class JobRunner {
 public:
  // `ps` and `workers` are not owned and must outlive the runner.
  JobRunner(std::string job_id, JobSpec spec, std::vector<PsClient*> ps,
            std::vector<WorkerClient*> workers, JobRunnerOptions options);

  // Runs the job to the end. Returns OK when it succeeded, CANCELLED after
  // Cancel(), or the error that failed it (also in the status's `error`).
  absl::Status Run() ABSL_LOCKS_EXCLUDED(mu_);

  // Stops dispatching; closures in flight finish. Run() returns CANCELLED.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);

  JobStatusProto Status() const ABSL_LOCKS_EXCLUDED(mu_);

  // Waits until the status changes after version `seen` or `timeout` passes;
  // fills `out` and returns the current version.
  int64_t WaitForChange(int64_t seen, absl::Duration timeout, JobStatusProto* out) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // The job's variable layout and what each PS holds now (asks every PS for
  // its Stats). FAILED_PRECONDITION before the variables exist.
  absl::StatusOr<DescribeJobResponse> Describe() const ABSL_LOCKS_EXCLUDED(mu_);

  const JobSpec& spec() const { return spec_; }

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

  absl::Status CreateVariables(std::vector<VariablePlacementProto>* placement);
  absl::Status SetupWorkers(const std::vector<VariablePlacementProto>& placement,
                            int64_t* train_examples, int64_t* eval_examples);
  // Enqueues closures over [0, size) and runs them to the end.
  absl::Status RunPhase(ClosureMode mode, int64_t epoch, int64_t size, int64_t closure_examples,
                        PhaseTotals* totals) ABSL_LOCKS_EXCLUDED(mu_);
  void DispatchLoop(WorkerClient* worker, ClosureMode mode, ClosureQueue* queue,
                    PhaseTotals* totals);
  void Update(const std::function<void(JobStatusProto*)>& change) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Finish(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);

  const std::string job_id_;
  const JobSpec spec_;
  const std::vector<PsClient*> ps_;
  const std::vector<WorkerClient*> workers_;
  const JobRunnerOptions options_;
  SetupJobRequest setup_request_;  // written before dispatch starts
  std::atomic<int64_t> next_closure_id_{0};  // re-sent to a worker that lost the job

  mutable absl::Mutex mu_;
  JobStatusProto status_ ABSL_GUARDED_BY(mu_);
  std::vector<VariableSpecProto> variables_ ABSL_GUARDED_BY(mu_);
  std::vector<VariablePlacementProto> placement_ ABSL_GUARDED_BY(mu_);
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time start_ ABSL_GUARDED_BY(mu_);
  absl::Time end_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  double train_seconds_ ABSL_GUARDED_BY(mu_) = 0;  // before the current phase
  absl::Time phase_start_ ABSL_GUARDED_BY(mu_);
  int64_t epoch_examples_ ABSL_GUARDED_BY(mu_) = 0;
  double epoch_loss_sum_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  ClosureQueue* current_queue_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_JOB_RUNNER_H_
