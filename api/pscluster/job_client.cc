#include "api/pscluster/job_client.h"

#include <chrono>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/job_watch.h"
#include "common/cluster_config.h"
#include "common/job_spec.h"
#include "rpc/rpc_util.h"
#include "rpc/transport.h"

namespace pscluster {
namespace {

// How often Watch polls options.interrupted and its deadline.
constexpr absl::Duration kWatchPoll = absl::Milliseconds(100);

// The TLS files the process's transport was configured with by a Connect
// (rpc/transport.h: one setting per process). Connects serialize on it.
struct ProcessTls {
  absl::Mutex mu;
  bool configured ABSL_GUARDED_BY(mu) = false;
  TlsFiles files ABSL_GUARDED_BY(mu);
};

ProcessTls& TheProcessTls() {
  static ProcessTls* tls = new ProcessTls();
  return *tls;
}

bool SameTls(const TlsFiles& a, const TlsFiles& b) {
  return a.cert == b.cert && a.key == b.key && a.ca == b.ca && a.server_name == b.server_name;
}

// Applies `wanted` to the process's transport, or checks that it already is.
absl::Status UseTls(const TlsFiles& wanted) {
  ProcessTls& tls = TheProcessTls();
  absl::MutexLock lock(&tls.mu);
  if (tls.configured) {
    if (SameTls(tls.files, wanted)) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "this process already talks mutual TLS with ", tls.files.cert, " (CA ", tls.files.ca,
        "); TLS is one setting per process, so every JobClient of it must use the same files"));
  }
  if (wanted.empty()) {
    if (TransportUsesTls()) {
      return absl::FailedPreconditionError(
          "this process talks mutual TLS (configured elsewhere); give the client the same TLS "
          "files");
    }
    return absl::OkStatus();
  }
  TransportOptions transport;
  transport.max_message_bytes = MaxMessageBytes();
  transport.tls = wanted;
  if (absl::Status s = ConfigureTransport(transport); !s.ok()) return s;
  tls.configured = true;
  tls.files = wanted;
  return absl::OkStatus();
}

// `status` with its code, the message prefixed by the RPC's name.
absl::Status RpcError(const char* rpc, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(rpc, ": ", status.message()));
}
absl::Status RpcError(const char* rpc, const grpc::Status& s) {
  return RpcError(rpc, FromGrpcStatus(s));
}

std::chrono::milliseconds ToChrono(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

// One unary Coordinator RPC under `timeout`; a failure keeps its code and
// names the RPC.
template <typename Request, typename Response>
absl::StatusOr<Response> Unary(Coordinator::Stub* stub,
                               grpc::Status (Coordinator::Stub::*method)(grpc::ClientContext*,
                                                                         const Request&, Response*),
                               const char* rpc, const Request& request, absl::Duration timeout) {
  Response response;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, ToChrono(timeout));
  if (grpc::Status s = (stub->*method)(&ctx, request, &response); !s.ok()) return RpcError(rpc, s);
  return response;
}

}  // namespace

JobClient::JobClient(std::string address, absl::Duration rpc_timeout,
                     std::unique_ptr<Coordinator::Stub> stub)
    : address_(std::move(address)), rpc_timeout_(rpc_timeout), stub_(std::move(stub)) {}

absl::StatusOr<std::unique_ptr<JobClient>> JobClient::Connect(const std::string& address,
                                                              const JobClientOptions& options) {
  if (address.empty()) {
    return absl::InvalidArgumentError("no coordinator address (want HOST:PORT)");
  }
  TlsFiles tls;
  tls.cert = options.tls_cert;
  tls.key = options.tls_key;
  tls.ca = options.tls_ca;
  tls.server_name = options.tls_server_name;
  if (absl::Status s = UseTls(tls); !s.ok()) return s;
  std::shared_ptr<grpc::Channel> channel = MakeChannel(address, options.token);
  if (options.connect_timeout > absl::ZeroDuration() &&
      !channel->WaitForConnected(std::chrono::system_clock::now() +
                                 ToChrono(options.connect_timeout))) {
    return absl::UnavailableError(absl::StrCat("cannot connect to the coordinator at ", address,
                                               " within ",
                                               absl::FormatDuration(options.connect_timeout)));
  }
  return std::unique_ptr<JobClient>(
      new JobClient(address, options.rpc_timeout, Coordinator::NewStub(channel)));
}

absl::StatusOr<std::string> JobClient::Submit(const std::string& spec_yaml,
                                              const std::string& spec_path) {
  // Validate here first, as psctl submit does: file:line:col errors without
  // a round trip.
  if (absl::StatusOr<JobSpec> spec =
          ParseJobSpec(spec_yaml, spec_path.empty() ? "job.yaml" : spec_path);
      !spec.ok()) {
    return spec.status();
  }
  SubmitJobRequest request;
  request.set_spec_yaml(spec_yaml);
  request.set_spec_path(spec_path);
  absl::StatusOr<SubmitJobResponse> response =
      Unary(stub_.get(), &Coordinator::Stub::SubmitJob, "SubmitJob", request, rpc_timeout_);
  if (!response.ok()) return response.status();
  return response->job_id();
}

absl::StatusOr<std::string> JobClient::SubmitFile(const std::string& spec_path) {
  absl::StatusOr<JobSpec> spec = LoadJobSpec(spec_path);
  if (!spec.ok()) return spec.status();
  return Submit(spec->yaml, spec_path);
}

absl::StatusOr<JobStatusProto> JobClient::Get(const std::string& job_id) {
  GetJobRequest request;
  request.set_job_id(job_id);
  return Unary(stub_.get(), &Coordinator::Stub::GetJob, "GetJob", request, rpc_timeout_);
}

absl::StatusOr<JobStatusProto> JobClient::Watch(const std::string& job_id,
                                                const WatchOptions& options) {
  JobWatchOptions watch_options;
  watch_options.on_status = options.on_update;
  watch_options.reconnect_timeout = options.reconnect_timeout;
  JobWatch watch(stub_.get(), job_id, std::move(watch_options));
  const absl::Time deadline = options.timeout == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : absl::Now() + options.timeout;
  while (!watch.WaitFor(kWatchPoll)) {
    const bool interrupted = options.interrupted && options.interrupted();
    if (!interrupted && absl::Now() < deadline) continue;
    watch.Cancel();
    watch.WaitFor(absl::InfiniteDuration());
    if (interrupted) {
      return absl::CancelledError(absl::StrCat("watching job ", job_id, " was interrupted"));
    }
    const std::optional<JobStatusProto> last = watch.last();
    return absl::DeadlineExceededError(absl::StrCat(
        "job ", job_id, " has not ended within ", absl::FormatDuration(options.timeout),
        last ? absl::StrCat(" (last seen ", JobState_Name(last->state()), ", step ", last->steps(),
                            "/", last->total_steps(), ")")
             : " (no status received)"));
  }
  if (!watch.stream_status().ok() && !watch.last()) {
    return RpcError("WatchJob", watch.stream_status());
  }
  absl::StatusOr<JobStatusProto> final_status = FinalStatus(stub_.get(), job_id, watch,
                                                            rpc_timeout_);
  if (!final_status.ok()) return RpcError("GetJob", final_status.status());
  return final_status;
}

absl::StatusOr<GetJobEventsResponse> JobClient::Events(const std::string& job_id) {
  GetJobEventsRequest request;
  request.set_job_id(job_id);
  return Unary(stub_.get(), &Coordinator::Stub::GetJobEvents, "GetJobEvents", request,
               rpc_timeout_);
}

absl::Status JobClient::Cancel(const std::string& job_id) {
  CancelJobRequest request;
  request.set_job_id(job_id);
  return Unary(stub_.get(), &Coordinator::Stub::CancelJob, "CancelJob", request, rpc_timeout_)
      .status();
}

absl::StatusOr<ListJobsResponse> JobClient::List() {
  return Unary(stub_.get(), &Coordinator::Stub::ListJobs, "ListJobs", ListJobsRequest(),
               rpc_timeout_);
}

}  // namespace pscluster
