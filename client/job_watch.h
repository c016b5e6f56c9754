// JobWatch: follows one job's WatchJob stream on a background thread, so the
// caller's thread stays free to supervise child processes and signals.
//
// With a reconnect_timeout it also rides out a coordinator restart: when the
// stream breaks before the job reached a final state, it calls GetJob until
// the (restarted) coordinator answers for the same job id, then re-opens
// WatchJob. The job is never re-submitted.
//
// Thread-safety: thread-safe. `on_status` and `on_notice` run on the watch
// thread, one call at a time; the destructor cancels the stream and joins
// that thread.
#ifndef PSCLUSTER_CLIENT_JOB_WATCH_H_
#define PSCLUSTER_CLIENT_JOB_WATCH_H_

#include <functional>
#include <memory>
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

struct JobWatchOptions {
  // Each job status received (progress). May be empty.
  std::function<void(const JobStatusProto&)> on_status;
  // How long to wait, per outage, for the coordinator to answer again after
  // the stream broke (UNAVAILABLE, a reset, or an end before a final state).
  // Zero: the watch ends at the first break, with the stream's status.
  absl::Duration reconnect_timeout = absl::ZeroDuration();
  // Human-readable notices ("lost ..., waiting", "re-attached ..."). May be
  // empty.
  std::function<void(const std::string&)> on_notice;
};

class JobWatch {
 public:
  using Callback = std::function<void(const JobStatusProto&)>;

  // Starts streaming `job_id`. `stub` is not owned and must outlive this.
  JobWatch(Coordinator::Stub* stub, std::string job_id, JobWatchOptions options);
  // As above, without reconnecting.
  JobWatch(Coordinator::Stub* stub, std::string job_id, Callback on_status);
  ~JobWatch();

  JobWatch(const JobWatch&) = delete;
  JobWatch& operator=(const JobWatch&) = delete;

  // Blocks until the watch ended or `timeout` passes; true once it ended.
  bool WaitFor(absl::Duration timeout);

  // Ends the watch early (its status becomes CANCELLED), also while it waits
  // for the coordinator to come back.
  void Cancel();

  // The last status received, if any.
  std::optional<JobStatusProto> last() const;

  // OK if the coordinator closed the stream normally (the job ended), else
  // why the watch ended: the stream's error, NOT_FOUND if a restarted
  // coordinator no longer knows the job, the last error if it did not come
  // back within reconnect_timeout. REQUIRES: WaitFor returned true.
  absl::Status stream_status() const;

 private:
  void Run(std::string job_id);
  // One WatchJob stream until it ends.
  absl::Status WatchOnce(const std::string& job_id);
  // GetJob until the coordinator answers, at most until `deadline`. OK with
  // the job's status, or why not.
  absl::StatusOr<JobStatusProto> AwaitCoordinator(const std::string& job_id, absl::Time deadline);
  // A fresh context registered for Cancel; nullptr once cancelled.
  grpc::ClientContext* NewContext();
  void ReleaseContext();
  void Record(const JobStatusProto& status);
  void Notice(const std::string& message);

  Coordinator::Stub* stub_;
  JobWatchOptions options_;
  mutable absl::Mutex mu_;
  // The RPC in flight (TryCancel is thread-safe); null between RPCs.
  std::unique_ptr<grpc::ClientContext> context_ ABSL_GUARDED_BY(mu_);
  absl::Notification cancelled_;  // notified under mu_
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
