#include "coordinator/service/coordinator_service.h"

namespace pscluster {

CoordinatorService::CoordinatorService(JobManager* jobs,
                                       std::shared_ptr<prometheus::Registry> registry)
    : jobs_(jobs), handler_("Coordinator", std::move(registry)) {}

grpc::Status CoordinatorService::SubmitJob(grpc::ServerContext*, const SubmitJobRequest* request,
                                           SubmitJobResponse* response) {
  return handler_.Run("SubmitJob", [&]() -> absl::Status {
    absl::StatusOr<SubmitJobResponse> r = jobs_->Submit(request->spec_yaml(), request->spec_path());
    if (r.ok()) *response = *std::move(r);
    return r.status();
  });
}

grpc::Status CoordinatorService::GetJob(grpc::ServerContext*, const GetJobRequest* request,
                                        JobStatusProto* response) {
  return handler_.Run("GetJob", [&]() -> absl::Status {
    absl::StatusOr<JobStatusProto> s = jobs_->Get(request->job_id());
    if (s.ok()) *response = *s;
    return s.status();
  });
}

grpc::Status CoordinatorService::WatchJob(grpc::ServerContext* ctx, const WatchJobRequest* request,
                                          grpc::ServerWriter<JobStatusProto>* writer) {
  return handler_.Run("WatchJob", [&] {
    return jobs_->Watch(request->job_id(), [&](const JobStatusProto& status) {
      return !ctx->IsCancelled() && writer->Write(status);
    });
  });
}

grpc::Status CoordinatorService::CancelJob(grpc::ServerContext*, const CancelJobRequest* request,
                                           CancelJobResponse*) {
  return handler_.Run("CancelJob", [&] { return jobs_->Cancel(request->job_id()); });
}

grpc::Status CoordinatorService::ListJobs(grpc::ServerContext*, const ListJobsRequest*,
                                          ListJobsResponse* response) {
  return handler_.Run("ListJobs", [&] {
    for (JobStatusProto& s : jobs_->List()) *response->add_jobs() = std::move(s);
    return absl::OkStatus();
  });
}

grpc::Status CoordinatorService::DescribeJob(grpc::ServerContext*,
                                             const DescribeJobRequest* request,
                                             DescribeJobResponse* response) {
  return handler_.Run("DescribeJob", [&]() -> absl::Status {
    absl::StatusOr<DescribeJobResponse> d = jobs_->Describe(request->job_id());
    if (d.ok()) *response = *std::move(d);
    return d.status();
  });
}

grpc::Status CoordinatorService::GetJobEvents(grpc::ServerContext*,
                                              const GetJobEventsRequest* request,
                                              GetJobEventsResponse* response) {
  return handler_.Run("GetJobEvents", [&]() -> absl::Status {
    absl::StatusOr<std::vector<JobEvent>> events = jobs_->Events(request->job_id());
    if (!events.ok()) return events.status();
    for (JobEvent& e : *events) *response->add_events() = std::move(e);
    return absl::OkStatus();
  });
}

}  // namespace pscluster
