// CoordinatorService: the gRPC adapter for JobManager. Each handler
// authenticates the caller (JobAuth, from its `authorization: Bearer TOKEN`
// metadata: UNAUTHENTICATED otherwise) and makes one JobManager call.
// Thread-safe.
#ifndef PSCLUSTER_COORDINATOR_SERVICE_COORDINATOR_SERVICE_H_
#define PSCLUSTER_COORDINATOR_SERVICE_COORDINATOR_SERVICE_H_

#include <memory>

#include "coordinator/core/job_auth.h"
#include "coordinator/core/job_manager.h"
#include "coordinator/core/worker_roster.h"
#include "protos/coordinator.grpc.pb.h"
#include "rpc/handler.h"

namespace pscluster {

class CoordinatorService final : public Coordinator::Service {
 public:
  // `jobs` is not owned and must outlive the service. `auth` is who may call
  // (default: anyone).
  CoordinatorService(JobManager* jobs, std::shared_ptr<prometheus::Registry> registry,
                     JobAuth auth = JobAuth());

  // Elastic workers (docs/elastic_workers.md): RegisterWorker and
  // LeaveCluster act on `roster` (not owned; null: both FAILED_PRECONDITION).
  // A caller must show `join_token` (non-empty) and, with TLS, a
  // certificate that may be a worker's (rpc/peer_role.h); without a token,
  // only a TLS peer may (the cluster's CA vouches for it). Call before the
  // server starts.
  void EnableRegistration(WorkerRoster* roster, std::string join_token) {
    roster_ = roster;
    join_token_ = std::move(join_token);
  }

  grpc::Status SubmitJob(grpc::ServerContext* ctx, const SubmitJobRequest* request,
                         SubmitJobResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* ctx, const GetJobRequest* request,
                      JobStatusProto* response) override;
  grpc::Status WatchJob(grpc::ServerContext* ctx, const WatchJobRequest* request,
                        grpc::ServerWriter<JobStatusProto>* writer) override;
  grpc::Status CancelJob(grpc::ServerContext* ctx, const CancelJobRequest* request,
                         CancelJobResponse* response) override;
  // Elastic PS (JobManager::Rescale): authorised as CancelJob (a caller
  // with credentials, and only the job's owner).
  grpc::Status RescaleJob(grpc::ServerContext* ctx, const RescaleJobRequest* request,
                          RescaleJobResponse* response) override;
  grpc::Status ListJobs(grpc::ServerContext* ctx, const ListJobsRequest* request,
                        ListJobsResponse* response) override;
  grpc::Status DescribeJob(grpc::ServerContext* ctx, const DescribeJobRequest* request,
                           DescribeJobResponse* response) override;
  grpc::Status GetJobEvents(grpc::ServerContext* ctx, const GetJobEventsRequest* request,
                            GetJobEventsResponse* response) override;
  // Batch prediction (JobManager::Predict); the owner of a token may run it.
  grpc::Status Predict(grpc::ServerContext* ctx, const PredictRequest* request,
                       grpc::ServerWriter<PredictResponse>* writer) override;
  grpc::Status RegisterWorker(grpc::ServerContext* ctx, const RegisterWorkerRequest* request,
                              RegisterWorkerResponse* response) override;
  grpc::Status LeaveCluster(grpc::ServerContext* ctx, const LeaveClusterRequest* request,
                            LeaveClusterResponse* response) override;

 private:
  // The caller's user; UNAUTHENTICATED without valid credentials.
  absl::StatusOr<std::string> Caller(grpc::ServerContext* ctx) const;

  // OK when the caller may register or remove a worker (`method`).
  absl::Status CheckJoin(const grpc::ServerContext& ctx, const std::string& token,
                         const char* method) const;

  JobManager* jobs_;
  RpcHandler handler_;
  const JobAuth auth_;
  WorkerRoster* roster_ = nullptr;
  std::string join_token_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_SERVICE_COORDINATOR_SERVICE_H_
