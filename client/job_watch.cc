#include "client/job_watch.h"

#include <chrono>

#include "rpc/rpc_util.h"

namespace pscluster {

JobWatch::JobWatch(Coordinator::Stub* stub, std::string job_id, Callback on_status)
    : stub_(stub), on_status_(std::move(on_status)) {
  thread_ = std::thread([this, id = std::move(job_id)]() mutable { Run(std::move(id)); });
}

JobWatch::~JobWatch() {
  Cancel();
  thread_.join();
}

void JobWatch::Run(std::string job_id) {
  WatchJobRequest request;
  request.set_job_id(std::move(job_id));
  std::unique_ptr<grpc::ClientReader<JobStatusProto>> reader = stub_->WatchJob(&context_, request);
  JobStatusProto status;
  while (reader->Read(&status)) {
    {
      absl::MutexLock lock(&mu_);
      last_ = status;
    }
    if (on_status_) on_status_(status);
  }
  const absl::Status s = FromGrpcStatus(reader->Finish());
  {
    absl::MutexLock lock(&mu_);
    stream_status_ = s;
  }
  done_.Notify();
}

bool JobWatch::WaitFor(absl::Duration timeout) {
  return done_.WaitForNotificationWithTimeout(timeout);
}

void JobWatch::Cancel() { context_.TryCancel(); }

std::optional<JobStatusProto> JobWatch::last() const {
  absl::MutexLock lock(&mu_);
  return last_;
}

absl::Status JobWatch::stream_status() const {
  absl::MutexLock lock(&mu_);
  return stream_status_;
}

absl::StatusOr<JobStatusProto> FinalStatus(Coordinator::Stub* stub, const std::string& job_id,
                                           const JobWatch& watch, absl::Duration timeout) {
  std::optional<JobStatusProto> last = watch.last();
  if (last && IsFinalState(last->state())) return *last;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
  GetJobRequest request;
  request.set_job_id(job_id);
  JobStatusProto status;
  const absl::Status s = FromGrpcStatus(stub->GetJob(&ctx, request, &status));
  if (!s.ok()) return s;
  return status;
}

}  // namespace pscluster
