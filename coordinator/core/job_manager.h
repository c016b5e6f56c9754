// JobManager: the coordinator's jobs. Submits a job spec, runs it on the
// cluster in its own thread, and answers status, watch, cancel and list.
// One job runs at a time (the cluster's workers serve one job); finished jobs
// stay listed.
//
// With a state directory the manager is durable: every submitted job is
// recorded in <state_dir>/jobs (a job log of JobStarted records naming each
// job's checkpoint directory), and a manager created on the same directory
// (a restarted coordinator) resumes the jobs that had not ended, under the
// same ids. A job without checkpoint.dir keeps its checkpoints and job log
// in <state_dir>/<job id>.
//
// Thread-safe.
#ifndef PSCLUSTER_COORDINATOR_CORE_JOB_MANAGER_H_
#define PSCLUSTER_COORDINATOR_CORE_JOB_MANAGER_H_

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

namespace pscluster {

class JobManager {
 public:
  // `ps` and `workers` are not owned and must outlive the manager.
  JobManager(std::vector<PsClient*> ps, std::vector<WorkerClient*> workers,
             JobRunnerOptions options, std::string state_dir = "");

  // Resumes the unfinished jobs recorded in the state directory (no-op
  // without one). Returns how many were resumed; UNAVAILABLE if the registry
  // cannot be read or written.
  absl::StatusOr<int> Recover() ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels running jobs and waits for them.
  ~JobManager();

  // Parses the spec (INVALID_ARGUMENT "path:line:col: ..." when malformed)
  // and starts it. FAILED_PRECONDITION while another job runs. Returns the
  // new job's id.
  absl::StatusOr<std::string> Submit(const std::string& spec_yaml, const std::string& spec_path)
      ABSL_LOCKS_EXCLUDED(mu_);
  // NOT_FOUND for an unknown job id.
  absl::StatusOr<JobStatusProto> Get(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Calls `on_update` with the job's status now and on every change, until
  // the job ends (the final status is delivered) or `on_update` returns false.
  absl::Status Watch(const std::string& job_id,
                     const std::function<bool(const JobStatusProto&)>& on_update)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Cancel(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // NOT_FOUND for an unknown job; see JobRunner::Describe.
  absl::StatusOr<DescribeJobResponse> Describe(const std::string& job_id)
      ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<JobStatusProto> List() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Job {
    std::unique_ptr<JobRunner> runner;
    std::thread thread;
  };
  absl::StatusOr<JobRunner*> Find(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  void StartLocked(const std::string& id, JobSpec spec, JobRunnerOptions options)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string CheckpointDirFor(const std::string& id, const JobSpec& spec) const;

  const std::vector<PsClient*> ps_;
  const std::vector<WorkerClient*> workers_;
  const JobRunnerOptions options_;
  const std::string state_dir_;
  std::unique_ptr<JobLog> registry_;
  absl::Mutex mu_;
  std::map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
  // Jobs that had ended before this coordinator started, from their logs.
  std::map<std::string, JobStatusProto> ended_ ABSL_GUARDED_BY(mu_);
  int64_t submitted_ ABSL_GUARDED_BY(mu_) = 0;
};

bool IsTerminal(JobState state);

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_JOB_MANAGER_H_
