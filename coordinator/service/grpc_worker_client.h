// GrpcWorkerClient: WorkerClient over gRPC to a worker_server. Thread-safe.
#ifndef PSCLUSTER_COORDINATOR_SERVICE_GRPC_WORKER_CLIENT_H_
#define PSCLUSTER_COORDINATOR_SERVICE_GRPC_WORKER_CLIENT_H_

#include <chrono>
#include <memory>
#include <string>

#include "coordinator/core/worker_client.h"
#include "protos/worker.grpc.pb.h"

namespace pscluster {

struct GrpcWorkerClientOptions {
  // Deadline of SetupJob (loads data) and RunClosure (runs N steps).
  std::chrono::milliseconds setup_timeout{120000};
  std::chrono::milliseconds closure_timeout{300000};
  std::chrono::milliseconds ping_timeout{5000};
};

class GrpcWorkerClient final : public WorkerClient {
 public:
  GrpcWorkerClient(std::string address, GrpcWorkerClientOptions options = {});

  std::string address() const override { return address_; }
  absl::Status SetupJob(const SetupJobRequest& request, SetupJobResponse* response) override;
  absl::Status RunClosure(const RunClosureRequest& request, RunClosureResponse* response) override;
  // One RunClosures RPC under closure_timeout. UNIMPLEMENTED from a worker
  // that predates it.
  absl::Status RunClosures(const RunClosuresRequest& request,
                           RunClosuresResponse* response) override;
  absl::Status Ping(const PingRequest& request, PingResponse* response) override;

 private:
  const std::string address_;
  const GrpcWorkerClientOptions options_;
  std::unique_ptr<Worker::Stub> stub_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_SERVICE_GRPC_WORKER_CLIENT_H_
