#include "worker/service/worker_service.h"

#include <algorithm>
#include <string>

#include "rpc/peer_role.h"

namespace pscluster {

namespace {

prometheus::Counter* NewCounter(prometheus::Registry& registry, const std::string& name,
                                const std::string& help) {
  return &prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add({});
}

}  // namespace

WorkerService::WorkerService(WorkerState* state, std::shared_ptr<prometheus::Registry> registry)
    : state_(state), handler_("Worker", registry) {
  if (registry == nullptr) return;
  compute_seconds_ = NewCounter(*registry, "pscluster_worker_compute_seconds_total",
                                "Seconds closures spent computing (forward and backward).");
  pull_seconds_ = NewCounter(*registry, "pscluster_worker_pull_seconds_total",
                             "Seconds closures spent pulling parameters from the PS tasks.");
  push_seconds_ = NewCounter(*registry, "pscluster_worker_push_seconds_total",
                             "Seconds closures spent pushing gradients to the PS tasks.");
  steps_ = NewCounter(*registry, "pscluster_worker_steps_total",
                      "Training steps of the closures this worker finished.");
  examples_ = NewCounter(*registry, "pscluster_worker_examples_total",
                         "Training examples of the closures this worker finished.");
}

void WorkerService::Record(ClosureMode mode, const RunClosureResponse& r) {
  if (compute_seconds_ == nullptr) return;
  compute_seconds_->Increment(std::max(0.0, r.compute_seconds()));
  pull_seconds_->Increment(std::max(0.0, r.pull_seconds()));
  push_seconds_->Increment(std::max(0.0, r.push_seconds()));
  if (mode == TRAIN) {
    steps_->Increment(static_cast<double>(r.steps()));
    examples_->Increment(static_cast<double>(r.examples()));
  }
}

grpc::Status WorkerService::SetupJob(grpc::ServerContext* context, const SetupJobRequest* request,
                                     SetupJobResponse* response) {
  if (grpc::Status s = CheckPeerRole(*context, {"coordinator"}, "SetupJob"); !s.ok()) return s;
  return handler_.Run("SetupJob", [&] { return state_->SetupJob(*request, response); });
}

grpc::Status WorkerService::RunClosure(grpc::ServerContext* context, const RunClosureRequest* request,
                                       RunClosureResponse* response) {
  if (grpc::Status s = CheckPeerRole(*context, {"coordinator"}, "RunClosure"); !s.ok()) return s;
  return handler_.Run("RunClosure", [&] {
    absl::Status s = state_->RunClosure(*request, response);
    if (s.ok()) Record(request->mode(), *response);
    return s;
  });
}

grpc::Status WorkerService::RunClosures(grpc::ServerContext* context, const RunClosuresRequest* request,
                                        RunClosuresResponse* response) {
  if (grpc::Status s = CheckPeerRole(*context, {"coordinator"}, "RunClosures"); !s.ok()) return s;
  return handler_.Run("RunClosures", [&] {
    absl::Status s = state_->RunClosures(*request, response);
    if (!s.ok()) return s;
    for (int i = 0; i < response->results_size() && i < request->closures_size(); ++i) {
      const ClosureResult& r = response->results(i);
      if (r.code() == 0) Record(request->closures(i).mode(), r.response());
    }
    return s;
  });
}

grpc::Status WorkerService::ReleaseJob(grpc::ServerContext* context,
                                       const ReleaseJobRequest* request,
                                       ReleaseJobResponse* response) {
  if (grpc::Status s = CheckPeerRole(*context, {"coordinator"}, "ReleaseJob"); !s.ok()) return s;
  return handler_.Run("ReleaseJob", [&] { return state_->ReleaseJob(*request, response); });
}

grpc::Status WorkerService::Ping(grpc::ServerContext*, const PingRequest* request,
                                 PingResponse* response) {
  return handler_.Run("Ping", [&] { return state_->Ping(*request, response); });
}

}  // namespace pscluster
