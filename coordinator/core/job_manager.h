// JobManager: the coordinator's jobs. Submits a job spec, runs it on the
// cluster in its own thread, and answers status, watch, cancel and list.
// One job runs at a time (the cluster's workers serve one job); finished jobs
// stay listed. Thread-safe.
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
#include "coordinator/core/job_runner.h"

namespace pscluster {

class JobManager {
 public:
  // `ps` and `workers` are not owned and must outlive the manager.
  JobManager(std::vector<PsClient*> ps, std::vector<WorkerClient*> workers,
             JobRunnerOptions options);
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

  const std::vector<PsClient*> ps_;
  const std::vector<WorkerClient*> workers_;
  const JobRunnerOptions options_;
  absl::Mutex mu_;
  std::map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
  int64_t submitted_ ABSL_GUARDED_BY(mu_) = 0;
};

bool IsTerminal(JobState state);

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_JOB_MANAGER_H_
