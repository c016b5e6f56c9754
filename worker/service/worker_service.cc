#include "worker/service/worker_service.h"

namespace pscluster {

WorkerService::WorkerService(WorkerState* state, std::shared_ptr<prometheus::Registry> registry)
    : state_(state), handler_("Worker", std::move(registry)) {}

grpc::Status WorkerService::SetupJob(grpc::ServerContext*, const SetupJobRequest* request,
                                     SetupJobResponse* response) {
  return handler_.Run("SetupJob", [&] { return state_->SetupJob(*request, response); });
}

grpc::Status WorkerService::RunClosure(grpc::ServerContext*, const RunClosureRequest* request,
                                       RunClosureResponse* response) {
  return handler_.Run("RunClosure", [&] { return state_->RunClosure(*request, response); });
}

grpc::Status WorkerService::RunClosures(grpc::ServerContext*, const RunClosuresRequest* request,
                                        RunClosuresResponse* response) {
  return handler_.Run("RunClosures", [&] { return state_->RunClosures(*request, response); });
}

grpc::Status WorkerService::Ping(grpc::ServerContext*, const PingRequest* request,
                                 PingResponse* response) {
  return handler_.Run("Ping", [&] { return state_->Ping(*request, response); });
}

}  // namespace pscluster
