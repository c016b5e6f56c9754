// JobWatch: follows one job's WatchJob stream on a background thread, so the
// caller's thread stays free to supervise child processes and signals.
//
// Thread-safety: thread-safe. `on_status` runs on the watch thread, one call
// at a time; the destructor cancels the stream and joins that thread.
#ifndef PSCLUSTER_CLIENT_JOB_WATCH_H_
#define PSCLUSTER_CLIENT_JOB_WATCH_H_

#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/progress.h"
#include "protos/coordinator.grpc.pb.h"

namespace pscluster {

class JobWatch {
 public:
  using Callback = std::function<void(const JobStatusProto&)>;

  // Starts streaming `job_id`. `stub` is not owned and must outlive this.
  JobWatch(Coordinator::Stub* stub, std::string job_id, Callback on_status);
  ~JobWatch();

  JobWatch(const JobWatch&) = delete;
  JobWatch& operator=(const JobWatch&) = delete;

  // Blocks until the stream ends or `timeout` passes; true once it ended.
  bool WaitFor(absl::Duration timeout);

  // Ends the stream early (the stream status becomes CANCELLED).
  void Cancel();

  // The last status received, if any.
  std::optional<JobStatusProto> last() const;

  // OK if the coordinator closed the stream normally (the job ended);
  // REQUIRES: WaitFor returned true.
  absl::Status stream_status() const;

 private:
  void Run(std::string job_id);

  Coordinator::Stub* stub_;
  Callback on_status_;
  grpc::ClientContext context_;  // TryCancel is thread-safe
  mutable absl::Mutex mu_;
  std::optional<JobStatusProto> last_ ABSL_GUARDED_BY(mu_);
  absl::Status stream_status_ ABSL_GUARDED_BY(mu_);
  absl::Notification done_;
  std::thread thread_;
};

// The job's final status: the watch's last status if it is final, else one
// GetJob call (deadline `timeout`). UNAVAILABLE etc. if the coordinator
// cannot be reached.
absl::StatusOr<JobStatusProto> FinalStatus(Coordinator::Stub* stub, const std::string& job_id,
                                           const JobWatch& watch, absl::Duration timeout);

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_JOB_WATCH_H_
