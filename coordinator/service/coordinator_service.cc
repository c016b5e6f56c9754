#include "coordinator/service/coordinator_service.h"

#include <openssl/crypto.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "rpc/peer_role.h"
#include "rpc/transport.h"

namespace pscluster {

CoordinatorService::CoordinatorService(JobManager* jobs,
                                       std::shared_ptr<prometheus::Registry> registry,
                                       JobAuth auth)
    : jobs_(jobs), handler_("Coordinator", std::move(registry)), auth_(std::move(auth)) {}

absl::StatusOr<std::string> CoordinatorService::Caller(grpc::ServerContext* ctx) const {
  if (!auth_.enabled()) return std::string();
  const auto& metadata = ctx->client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return auth_.Authenticate("");
  return auth_.Authenticate(absl::string_view(it->second.data(), it->second.size()));
}

grpc::Status CoordinatorService::SubmitJob(grpc::ServerContext* ctx, const SubmitJobRequest* request,
                                           SubmitJobResponse* response) {
  return handler_.Run("SubmitJob", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(const std::string user, Caller(ctx));
    absl::StatusOr<SubmitJobResponse> r =
        jobs_->Submit(request->spec_yaml(), request->spec_path(), user);
    if (r.ok()) *response = *std::move(r);
    return r.status();
  });
}

grpc::Status CoordinatorService::GetJob(grpc::ServerContext* ctx, const GetJobRequest* request,
                                        JobStatusProto* response) {
  return handler_.Run("GetJob", [&]() -> absl::Status {
    RETURN_IF_ERROR(Caller(ctx).status());
    absl::StatusOr<JobStatusProto> s = jobs_->Get(request->job_id());
    if (s.ok()) *response = *s;
    return s.status();
  });
}

grpc::Status CoordinatorService::WatchJob(grpc::ServerContext* ctx, const WatchJobRequest* request,
                                          grpc::ServerWriter<JobStatusProto>* writer) {
  return handler_.Run("WatchJob", [&]() -> absl::Status {
    RETURN_IF_ERROR(Caller(ctx).status());
    return jobs_->Watch(request->job_id(), [&](const JobStatusProto& status) {
      return !ctx->IsCancelled() && writer->Write(status);
    });
  });
}

grpc::Status CoordinatorService::CancelJob(grpc::ServerContext* ctx, const CancelJobRequest* request,
                                           CancelJobResponse*) {
  return handler_.Run("CancelJob", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(const std::string user, Caller(ctx));
    return jobs_->Cancel(request->job_id(), user);
  });
}

grpc::Status CoordinatorService::RescaleJob(grpc::ServerContext* ctx,
                                            const RescaleJobRequest* request,
                                            RescaleJobResponse* response) {
  return handler_.Run("RescaleJob", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(const std::string user, Caller(ctx));
    absl::StatusOr<RescaleJobResponse> r =
        jobs_->Rescale(request->job_id(), request->num_ps(), user);
    if (r.ok()) *response = *std::move(r);
    return r.status();
  });
}

grpc::Status CoordinatorService::ListJobs(grpc::ServerContext* ctx, const ListJobsRequest*,
                                          ListJobsResponse* response) {
  return handler_.Run("ListJobs", [&]() -> absl::Status {
    RETURN_IF_ERROR(Caller(ctx).status());
    for (JobStatusProto& s : jobs_->List()) *response->add_jobs() = std::move(s);
    return absl::OkStatus();
  });
}

grpc::Status CoordinatorService::DescribeJob(grpc::ServerContext* ctx,
                                             const DescribeJobRequest* request,
                                             DescribeJobResponse* response) {
  return handler_.Run("DescribeJob", [&]() -> absl::Status {
    RETURN_IF_ERROR(Caller(ctx).status());
    absl::StatusOr<DescribeJobResponse> d = jobs_->Describe(request->job_id());
    if (d.ok()) *response = *std::move(d);
    return d.status();
  });
}

grpc::Status CoordinatorService::GetJobEvents(grpc::ServerContext* ctx,
                                              const GetJobEventsRequest* request,
                                              GetJobEventsResponse* response) {
  return handler_.Run("GetJobEvents", [&]() -> absl::Status {
    RETURN_IF_ERROR(Caller(ctx).status());
    absl::StatusOr<std::vector<JobEvent>> events = jobs_->Events(request->job_id());
    if (!events.ok()) return events.status();
    for (JobEvent& e : *events) *response->add_events() = std::move(e);
    return absl::OkStatus();
  });
}

grpc::Status CoordinatorService::Predict(grpc::ServerContext* ctx, const PredictRequest* request,
                                         grpc::ServerWriter<PredictResponse>* writer) {
  return handler_.Run("Predict", [&]() -> absl::Status {
    RETURN_IF_ERROR(Caller(ctx).status());
    return jobs_->Predict(*request, [&](const PredictResponse& r) {
      return !ctx->IsCancelled() && writer->Write(r);
    });
  });
}

absl::Status CoordinatorService::CheckJoin(const grpc::ServerContext& ctx,
                                           const std::string& token, const char* method) const {
  if (roster_ == nullptr) {
    return absl::FailedPreconditionError(
        "this coordinator takes no worker registrations (start it with --join_token_file, or "
        "with TLS)");
  }
  if (grpc::Status s = CheckPeerRole(ctx, {"worker"}, method); !s.ok()) {
    return absl::PermissionDeniedError(s.error_message());
  }
  if (join_token_.empty()) {
    if (TransportUsesTls()) return absl::OkStatus();  // the cluster's CA vouches for the peer
    return absl::PermissionDeniedError(absl::StrCat(
        method, " refused: this coordinator has no join token (--join_token_file) and no TLS"));
  }
  if (token.size() != join_token_.size() ||
      CRYPTO_memcmp(token.data(), join_token_.data(), token.size()) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat(method, " refused: ", token.empty() ? "no join token" : "wrong join token",
                     " (worker_server --join_token_file: the coordinator's --join_token_file)"));
  }
  return absl::OkStatus();
}

grpc::Status CoordinatorService::RegisterWorker(grpc::ServerContext* ctx,
                                                const RegisterWorkerRequest* request,
                                                RegisterWorkerResponse* response) {
  return handler_.Run("RegisterWorker", [&]() -> absl::Status {
    RETURN_IF_ERROR(CheckJoin(*ctx, request->join_token(), "RegisterWorker"));
    ASSIGN_OR_RETURN(const int index, roster_->Join(request->address()));
    response->set_index(index);
    response->set_active_workers(roster_->active_count());
    return absl::OkStatus();
  });
}

grpc::Status CoordinatorService::LeaveCluster(grpc::ServerContext* ctx,
                                              const LeaveClusterRequest* request,
                                              LeaveClusterResponse* response) {
  return handler_.Run("LeaveCluster", [&]() -> absl::Status {
    RETURN_IF_ERROR(CheckJoin(*ctx, request->join_token(), "LeaveCluster"));
    const double wait_s = std::clamp(request->wait_s(), 0.0, 600.0);
    ASSIGN_OR_RETURN(const int in_flight,
                     roster_->Leave(request->address(), absl::Seconds(wait_s)));
    response->set_in_flight(in_flight);
    response->set_active_workers(roster_->active_count());
    return absl::OkStatus();
  });
}

}  // namespace pscluster
