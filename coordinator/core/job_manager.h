// JobManager: the coordinator's jobs and its job queue.
//
// Queue policy: a cluster runs one job at a time, in submission order
// (FIFO). Submit validates a job against the cluster (its spec, then
// AdmitJob: layout and per-PS memory) and queues it as QUEUED; a scheduler
// thread runs the head of the queue when the cluster is free:
// QUEUED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED. A queued job can be
// cancelled (it never runs); cancelling a running job stops it after the
// closures in flight; cancelling an ended job is FAILED_PRECONDITION. Ended
// jobs stay listed.
//
// With a state directory the queue is durable: every submitted job is
// recorded in <state_dir>/jobs (JobStarted, and JobEnded with its final
// status when it ends), and a manager created on the same directory (a
// restarted coordinator) queues again, in their submission order, the jobs
// that had not ended — the one that was running resumes from its newest
// checkpoint or its job log. A job without checkpoint.dir keeps its
// checkpoints and job log in <checkpoint_root>/<job id> (options
// checkpoint_root; characters of the id outside [A-Za-z0-9._-] become '_');
// without a checkpoint root such a job has neither, and a restarted
// coordinator runs it again from the start. A coordinator shutdown
// interrupts the running job without ending it (JobRunner::Interrupt).
//
// A batch prediction (Predict, predict_runner.h) takes the cluster as a job
// does: it runs only when no job runs or waits, and no job starts before it
// ends.
//
// Thread-safe.
#ifndef PSCLUSTER_COORDINATOR_CORE_JOB_MANAGER_H_
#define PSCLUSTER_COORDINATOR_CORE_JOB_MANAGER_H_

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/core/job_log.h"
#include "coordinator/core/job_runner.h"
#include "coordinator/core/predict_runner.h"

namespace pscluster {

class JobManager {
 public:
  // `ps` and `workers` are not owned and must outlive the manager. The
  // scheduler thread starts here.
  JobManager(std::vector<PsClient*> ps, std::vector<WorkerClient*> workers,
             JobRunnerOptions options, std::string state_dir = "");

  // Queues again the unfinished jobs recorded in the state directory (no-op
  // without one). Returns how many; UNAVAILABLE if the registry cannot be
  // read or written. Call once, before serving.
  absl::StatusOr<int> Recover() ABSL_LOCKS_EXCLUDED(mu_);
  // Interrupts the running job (it stays unfinished in the state directory)
  // and stops the scheduler.
  ~JobManager();

  // Parses the spec (INVALID_ARGUMENT "path:line:col: ..." when malformed or
  // past a stated limit), admits it (AdmitJob: INVALID_ARGUMENT or
  // RESOURCE_EXHAUSTED naming why it does not fit; AdmitJobPaths:
  // INVALID_ARGUMENT for a data file outside options.data_roots or a
  // checkpoint.dir outside options.checkpoint_root, FAILED_PRECONDITION for a
  // checkpoint.dir without a checkpoint root; AdmitCheckpointRoots:
  // FAILED_PRECONDITION naming each PS that answers without a
  // --checkpoint_root, for a job that asks for checkpoints), records and
  // queues it.
  // Returns its id and place in the queue.
  // `owner` is the submitting user (JobAuth; "" on an open service).
  absl::StatusOr<SubmitJobResponse> Submit(const std::string& spec_yaml,
                                           const std::string& spec_path,
                                           const std::string& owner = "")
      ABSL_LOCKS_EXCLUDED(mu_);
  // NOT_FOUND for an unknown job id.
  absl::StatusOr<JobStatusProto> Get(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Calls `on_update` with the job's status now and on every change, until
  // the job ends (the final status is delivered) or `on_update` returns false.
  absl::Status Watch(const std::string& job_id,
                     const std::function<bool(const JobStatusProto&)>& on_update)
      ABSL_LOCKS_EXCLUDED(mu_);
  // NOT_FOUND for an unknown job, FAILED_PRECONDITION for one that ended,
  // PERMISSION_DENIED when the job has an owner and `user` is someone else.
  absl::Status Cancel(const std::string& job_id, const std::string& user = "")
      ABSL_LOCKS_EXCLUDED(mu_);
  // Elastic PS (docs/elastic_ps.md): JobRunner::Rescale of a running job,
  // authorised as Cancel. NOT_FOUND for an unknown job, FAILED_PRECONDITION
  // for one that ended or waits, PERMISSION_DENIED for another's job.
  absl::StatusOr<RescaleJobResponse> Rescale(const std::string& job_id, int num_ps,
                                             const std::string& user = "")
      ABSL_LOCKS_EXCLUDED(mu_);
  // NOT_FOUND for an unknown job; see JobRunner::Describe.
  absl::StatusOr<DescribeJobResponse> Describe(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // The job's event log; NOT_FOUND for an unknown job.
  absl::StatusOr<std::vector<JobEvent>> Events(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Every job, in submission order.
  std::vector<JobStatusProto> List() ABSL_LOCKS_EXCLUDED(mu_);
  // Jobs waiting in the queue (not counting the running one).
  int64_t QueueDepth() ABSL_LOCKS_EXCLUDED(mu_);

  // Batch prediction (PredictRequest; predict_runner.h), on this thread.
  // Calls `write` with each response of the stream in order: progress
  // (from the run's dispatch threads, one call at a time), then the rows in
  // input order, then the summary; `write` returning false (the caller went
  // away) cancels the run. Errors: INVALID_ARGUMENT for a spec that does not
  // parse or a path outside the coordinator's roots (as Submit); the
  // cluster runs one thing at a time: FAILED_PRECONDITION while a job runs
  // or waits, or another prediction runs (no job starts until this one
  // ends); PredictRunner::Run's errors.
  absl::Status Predict(const PredictRequest& request,
                       const std::function<bool(const PredictResponse&)>& write)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // A job that ended before this coordinator started, from the registry.
  struct EndedJob {
    JobStatusProto status;
    std::string checkpoint_dir;  // its job log (with its events) is here
  };

  void SchedulerLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Queues a job whose runner is created here. REQUIRES: id is new.
  void QueueLocked(const std::string& id, JobSpec spec, JobRunnerOptions options)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<JobRunner*> Find(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  JobStatusProto StatusLocked(const std::string& job_id, JobRunner* runner)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `status` with its job's owner set.
  JobStatusProto OwnedLocked(JobStatusProto status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records the job's end in the registry (logged on failure).
  void RecordEnd(const std::string& job_id, const JobStatusProto& status) ABSL_LOCKS_EXCLUDED(mu_);
  std::string CheckpointDirFor(const std::string& id, const JobSpec& spec) const;

  const std::vector<PsClient*> ps_;
  const std::vector<WorkerClient*> workers_;
  const JobRunnerOptions options_;
  const std::string state_dir_;
  std::unique_ptr<JobLog> registry_;  // set before the first job is queued
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<JobRunner>> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);  // submission order, all jobs
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  std::string running_ ABSL_GUARDED_BY(mu_);  // empty: none
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, EndedJob> ended_ ABSL_GUARDED_BY(mu_);
  int64_t submitted_ ABSL_GUARDED_BY(mu_) = 0;
  // Job id -> the user who submitted it (absent or "": no owner).
  std::map<std::string, std::string> owners_ ABSL_GUARDED_BY(mu_);
  // The batch prediction running (Predict), if any: no job starts meanwhile.
  PredictRunner* predicting_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t predictions_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread scheduler_;
};

bool IsTerminal(JobState state);

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_JOB_MANAGER_H_
