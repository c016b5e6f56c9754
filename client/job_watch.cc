#include "client/job_watch.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "rpc/rpc_util.h"

namespace pscluster {
namespace {

constexpr absl::Duration kGetJobTimeout = absl::Seconds(1);
constexpr absl::Duration kRetryInterval = absl::Milliseconds(250);

// Whether a broken stream may come back: the coordinator went away or reset
// the connection. NOT_FOUND (a coordinator that forgot the job), bad
// arguments and the like will not change by waiting.
bool MayComeBack(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk:  // ended before a final state: shutting down
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kCancelled:  // not by us: checked before
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kInternal:  // e.g. RST_STREAM from a dying server
    case absl::StatusCode::kUnknown:
      return true;
    default:
      return false;
  }
}

}  // namespace

JobWatch::JobWatch(Coordinator::Stub* stub, std::string job_id, JobWatchOptions options)
    : stub_(stub), options_(std::move(options)) {
  thread_ = std::thread([this, id = std::move(job_id)]() mutable { Run(std::move(id)); });
}

JobWatch::JobWatch(Coordinator::Stub* stub, std::string job_id, Callback on_status)
    : JobWatch(stub, std::move(job_id), JobWatchOptions{std::move(on_status)}) {}

JobWatch::~JobWatch() {
  Cancel();
  thread_.join();
}

grpc::ClientContext* JobWatch::NewContext() {
  absl::MutexLock lock(&mu_);
  if (cancelled_.HasBeenNotified()) return nullptr;
  context_ = std::make_unique<grpc::ClientContext>();
  return context_.get();
}

void JobWatch::ReleaseContext() {
  absl::MutexLock lock(&mu_);
  context_.reset();
}

void JobWatch::Record(const JobStatusProto& status) {
  {
    absl::MutexLock lock(&mu_);
    last_ = status;
  }
  if (options_.on_status) options_.on_status(status);
}

void JobWatch::Notice(const std::string& message) {
  if (options_.on_notice) options_.on_notice(message);
}

absl::Status JobWatch::WatchOnce(const std::string& job_id) {
  grpc::ClientContext* ctx = NewContext();
  if (ctx == nullptr) return absl::CancelledError("watch cancelled");
  WatchJobRequest request;
  request.set_job_id(job_id);
  std::unique_ptr<grpc::ClientReader<JobStatusProto>> reader = stub_->WatchJob(ctx, request);
  JobStatusProto status;
  while (reader->Read(&status)) Record(status);
  const absl::Status s = FromGrpcStatus(reader->Finish());
  reader.reset();
  ReleaseContext();
  return s;
}

absl::StatusOr<JobStatusProto> JobWatch::AwaitCoordinator(const std::string& job_id,
                                                          absl::Time deadline) {
  absl::Status last_error = absl::UnavailableError("coordinator not reached");
  for (;;) {
    grpc::ClientContext* ctx = NewContext();
    if (ctx == nullptr) return absl::CancelledError("watch cancelled");
    SetDeadline(ctx, std::chrono::milliseconds(absl::ToInt64Milliseconds(
                         std::min(kGetJobTimeout, std::max(deadline - absl::Now(),
                                                           absl::Milliseconds(1))))));
    ctx->set_wait_for_ready(true);  // wait out a coordinator still starting
    GetJobRequest request;
    request.set_job_id(job_id);
    JobStatusProto status;
    const absl::Status s = FromGrpcStatus(stub_->GetJob(ctx, request, &status));
    ReleaseContext();
    if (s.ok()) return status;
    if (!MayComeBack(s)) return s;
    last_error = s;
    if (absl::Now() >= deadline) {
      return absl::Status(last_error.code(),
                          absl::StrCat("the coordinator did not come back: ",
                                       last_error.message()));
    }
    if (cancelled_.WaitForNotificationWithTimeout(kRetryInterval)) {
      return absl::CancelledError("watch cancelled");
    }
  }
}

void JobWatch::Run(std::string job_id) {
  absl::Status s;
  for (;;) {
    s = WatchOnce(job_id);
    const std::optional<JobStatusProto> seen = last();
    if (seen && IsFinalState(seen->state())) break;
    if (cancelled_.HasBeenNotified()) {
      if (s.ok()) s = absl::CancelledError("watch cancelled");
      break;
    }
    if (options_.reconnect_timeout <= absl::ZeroDuration() || !MayComeBack(s)) break;
    Notice(absl::StrCat("lost the job stream (", s.ToString(), "); waiting up to ",
                        absl::FormatDuration(options_.reconnect_timeout),
                        " for the coordinator"));
    absl::StatusOr<JobStatusProto> status =
        AwaitCoordinator(job_id, absl::Now() + options_.reconnect_timeout);
    if (!status.ok()) {
      s = status.status();
      if (s.code() == absl::StatusCode::kNotFound) {
        s = absl::NotFoundError(absl::StrCat("the restarted coordinator does not know job ",
                                             job_id, ": ", s.message()));
      }
      break;
    }
    Record(*status);
    if (IsFinalState(status->state())) {
      s = absl::OkStatus();
      break;
    }
    Notice(absl::StrCat("the coordinator answers again; watching job ", job_id));
  }
  {
    absl::MutexLock lock(&mu_);
    stream_status_ = s;
  }
  done_.Notify();
}

bool JobWatch::WaitFor(absl::Duration timeout) {
  return done_.WaitForNotificationWithTimeout(timeout);
}

void JobWatch::Cancel() {
  absl::MutexLock lock(&mu_);
  if (!cancelled_.HasBeenNotified()) cancelled_.Notify();
  if (context_) context_->TryCancel();
}

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
