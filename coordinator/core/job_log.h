// JobLog: the coordinator's durable record of a job, kept beside its
// checkpoints (<checkpoint dir>/joblog), so that a restarted coordinator
// resumes the job instead of starting over.
//
// The log is append-only: frames of [uint32 length][uint32 crc32][bytes of a
// JobLogRecord], each appended with write + fsync. Replay stops at the first
// torn or corrupt frame (a crash mid-append), so a record is either whole or
// absent. Format: docs/checkpoint_format.md.
//
// Thread-safe.
#ifndef PSCLUSTER_COORDINATOR_CORE_JOB_LOG_H_
#define PSCLUSTER_COORDINATOR_CORE_JOB_LOG_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "protos/checkpoint.pb.h"

namespace pscluster {

class JobLog {
 public:
  // Opens (creating if needed) the log at `path` for appending; its parent
  // directory is created. UNAVAILABLE when it cannot be opened.
  static absl::StatusOr<std::unique_ptr<JobLog>> Open(const std::string& path);
  ~JobLog();

  // Appends one record durably (fsync). UNAVAILABLE on a write error.
  absl::Status Append(const JobLogRecord& record) ABSL_LOCKS_EXCLUDED(mu_);

  const std::string& path() const { return path_; }

 private:
  JobLog(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  const std::string path_;
  absl::Mutex mu_;
  int fd_ ABSL_GUARDED_BY(mu_);
};

// The whole records of the log at `path`, in order. NOT_FOUND if there is no
// log; a torn or corrupt tail is dropped (and the log is usable after it).
absl::StatusOr<std::vector<JobLogRecord>> ReadJobLog(const std::string& path);

// Writes `data` to `path` durably: a temporary file, fsync, rename, fsync of
// the directory. UNAVAILABLE on failure.
absl::Status WriteFileDurably(const std::string& path, const std::string& data);

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_JOB_LOG_H_
