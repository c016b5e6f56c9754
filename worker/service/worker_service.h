// WorkerService: the gRPC adapter for a worker's WorkerState. Each handler is
// one WorkerState call. Every closure that succeeded adds its time split to
// pscluster_worker_{compute,pull,push}_seconds_total, and a training closure
// its steps and examples to pscluster_worker_{steps,examples}_total.
// Thread-safe.
#ifndef PSCLUSTER_WORKER_SERVICE_WORKER_SERVICE_H_
#define PSCLUSTER_WORKER_SERVICE_WORKER_SERVICE_H_

#include <memory>

#include <prometheus/counter.h>

#include "protos/worker.grpc.pb.h"
#include "rpc/handler.h"
#include "worker/core/worker_state.h"

namespace pscluster {

class WorkerService final : public Worker::Service {
 public:
  // `state` is not owned and must outlive the service.
  WorkerService(WorkerState* state, std::shared_ptr<prometheus::Registry> registry);

  grpc::Status SetupJob(grpc::ServerContext* ctx, const SetupJobRequest* request,
                        SetupJobResponse* response) override;
  grpc::Status RunClosure(grpc::ServerContext* ctx, const RunClosureRequest* request,
                          RunClosureResponse* response) override;
  grpc::Status RunClosures(grpc::ServerContext* ctx, const RunClosuresRequest* request,
                           RunClosuresResponse* response) override;
  grpc::Status Ping(grpc::ServerContext* ctx, const PingRequest* request,
                    PingResponse* response) override;
  grpc::Status ReleaseJob(grpc::ServerContext* ctx, const ReleaseJobRequest* request,
                          ReleaseJobResponse* response) override;

 private:
  // Adds a finished closure to the worker metrics (no-op without a registry).
  void Record(ClosureMode mode, const RunClosureResponse& r);

  WorkerState* state_;
  RpcHandler handler_;
  // Null without a registry.
  prometheus::Counter* compute_seconds_ = nullptr;
  prometheus::Counter* pull_seconds_ = nullptr;
  prometheus::Counter* push_seconds_ = nullptr;
  prometheus::Counter* steps_ = nullptr;
  prometheus::Counter* examples_ = nullptr;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_SERVICE_WORKER_SERVICE_H_
