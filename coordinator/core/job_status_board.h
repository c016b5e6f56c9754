// JobStatusBoard: what a job tells the world about itself. It holds the job's
// status (JobStatusProto) with a version that readers wait on, the job's wall
// time, its event log (JobEvent: kept in memory and logged by the
// coordinator), and its job log (job_log.h), to which every event is
// appended once the log is open (earlier ones then too).
//
// A job log that fails its appends (a broken disk) is warned about once,
// then at most every 30 s, with the count of failed appends.
//
// Thread-safe. Lock order: a caller may hold its own lock while it calls
// Update (PhaseRunner does); the board calls nothing of its callers while it
// holds its lock, and `change` functions given to Update must take no lock.
#ifndef PSCLUSTER_COORDINATOR_CORE_JOB_STATUS_BOARD_H_
#define PSCLUSTER_COORDINATOR_CORE_JOB_STATUS_BOARD_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/core/job_log.h"
#include "protos/coordinator.pb.h"

namespace pscluster {

class JobStatusBoard {
 public:
  // `now` is the clock of the wall time, the events' timestamps and the
  // job log warning's rate limit. The status starts with `initial`; its
  // wall time counts from now (until Start()).
  JobStatusBoard(std::string job_id, JobStatusProto initial,
                 std::function<absl::Time()> now = [] { return absl::Now(); });

  // The job starts running: its wall time counts from now (time spent
  // QUEUED is not the job's). Returns that time.
  absl::Time Start() ABSL_LOCKS_EXCLUDED(mu_);

  // Applies `change` to the status and wakes WaitForChange. `change` runs
  // under the board's lock: it must not call the board or take a lock.
  void Update(const std::function<void(JobStatusProto*)>& change) ABSL_LOCKS_EXCLUDED(mu_);
  // Reads the status under the board's lock, without copying it.
  void Read(const std::function<void(const JobStatusProto&)>& read) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The status, with wall_seconds up to now (or up to the job's end).
  JobStatusProto Status() const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until the status changes after version `seen` or `timeout`
  // passes; fills `out` and returns the current version.
  int64_t WaitForChange(int64_t seen, absl::Duration timeout, JobStatusProto* out) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // The job ends: applies `change` and stops the wall time, without waking
  // WaitForChange (the caller logs the end first, then Update()s). Returns
  // the final status, wall_seconds set.
  JobStatusProto End(const std::function<void(JobStatusProto*)>& change) ABSL_LOCKS_EXCLUDED(mu_);

  // Records an event (JobEvent.kind): kept, logged by the coordinator (a
  // warning for the kinds that say something went wrong) and appended to
  // the job log once it is open.
  void Event(const std::string& kind, const std::string& message) ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<JobEvent> Events() const ABSL_LOCKS_EXCLUDED(mu_);

  // Opens the job log: the events recorded so far are appended with the
  // next Event. REQUIRES: called at most once.
  void AttachLog(std::unique_ptr<JobLog> log) ABSL_LOCKS_EXCLUDED(mu_);
  bool has_log() const ABSL_LOCKS_EXCLUDED(mu_);
  // Appends to the job log (fsynced: JobLog); nothing without one. A failed
  // append is counted and warned about (rate-limited), never returned.
  void Log(const JobLogRecord& record) ABSL_LOCKS_EXCLUDED(mu_, log_warning_mu_);

 private:
  const std::string job_id_;
  const std::function<absl::Time()> now_;

  mutable absl::Mutex mu_;
  JobStatusProto status_ ABSL_GUARDED_BY(mu_);
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time start_ ABSL_GUARDED_BY(mu_);
  absl::Time end_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  std::vector<JobEvent> events_ ABSL_GUARDED_BY(mu_);
  // Events recorded before the job log was open, appended when it opens.
  size_t events_logged_ ABSL_GUARDED_BY(mu_) = 0;
  // Set once (AttachLog) and never reset; JobLog is thread-safe.
  std::unique_ptr<JobLog> log_ ABSL_GUARDED_BY(mu_);

  // Rate limit of the warning about failed job-log appends.
  absl::Mutex log_warning_mu_;
  int64_t log_failures_ ABSL_GUARDED_BY(log_warning_mu_) = 0;
  absl::Time last_log_warning_ ABSL_GUARDED_BY(log_warning_mu_) = absl::InfinitePast();
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_JOB_STATUS_BOARD_H_
