// CoordinatorService: the gRPC adapter for JobManager. Each handler
// authenticates the caller (JobAuth, from its `authorization: Bearer TOKEN`
// metadata: UNAUTHENTICATED otherwise) and makes one JobManager call.
// Thread-safe.
#ifndef PSCLUSTER_COORDINATOR_SERVICE_COORDINATOR_SERVICE_H_
#define PSCLUSTER_COORDINATOR_SERVICE_COORDINATOR_SERVICE_H_

#include <memory>

#include "coordinator/core/job_auth.h"
#include "coordinator/core/job_manager.h"
#include "protos/coordinator.grpc.pb.h"
#include "rpc/handler.h"

namespace pscluster {

class CoordinatorService final : public Coordinator::Service {
 public:
  // `jobs` is not owned and must outlive the service. `auth` is who may call
  // (default: anyone).
  CoordinatorService(JobManager* jobs, std::shared_ptr<prometheus::Registry> registry,
                     JobAuth auth = JobAuth());

  grpc::Status SubmitJob(grpc::ServerContext* ctx, const SubmitJobRequest* request,
                         SubmitJobResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* ctx, const GetJobRequest* request,
                      JobStatusProto* response) override;
  grpc::Status WatchJob(grpc::ServerContext* ctx, const WatchJobRequest* request,
                        grpc::ServerWriter<JobStatusProto>* writer) override;
  grpc::Status CancelJob(grpc::ServerContext* ctx, const CancelJobRequest* request,
                         CancelJobResponse* response) override;
  grpc::Status ListJobs(grpc::ServerContext* ctx, const ListJobsRequest* request,
                        ListJobsResponse* response) override;
  grpc::Status DescribeJob(grpc::ServerContext* ctx, const DescribeJobRequest* request,
                           DescribeJobResponse* response) override;
  grpc::Status GetJobEvents(grpc::ServerContext* ctx, const GetJobEventsRequest* request,
                            GetJobEventsResponse* response) override;
  // Batch prediction (JobManager::Predict); the owner of a token may run it.
  grpc::Status Predict(grpc::ServerContext* ctx, const PredictRequest* request,
                       grpc::ServerWriter<PredictResponse>* writer) override;

 private:
  // The caller's user; UNAUTHENTICATED without valid credentials.
  absl::StatusOr<std::string> Caller(grpc::ServerContext* ctx) const;

  JobManager* jobs_;
  RpcHandler handler_;
  const JobAuth auth_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_SERVICE_COORDINATOR_SERVICE_H_
