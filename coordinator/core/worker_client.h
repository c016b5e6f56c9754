// WorkerClient: how the coordinator talks to one worker. GrpcWorkerClient
// (coordinator/service) is the cluster implementation; strategy: one_device
// uses an in-process one. Mirrors the Worker service. Thread-safe.
#ifndef PSCLUSTER_COORDINATOR_CORE_WORKER_CLIENT_H_
#define PSCLUSTER_COORDINATOR_CORE_WORKER_CLIENT_H_

#include <string>

#include "absl/status/status.h"
#include "protos/worker.pb.h"

namespace pscluster {

class WorkerClient {
 public:
  virtual ~WorkerClient() = default;
  // Where the worker is, for messages ("127.0.0.1:4242", "in-process").
  virtual std::string address() const = 0;
  virtual absl::Status SetupJob(const SetupJobRequest& request, SetupJobResponse* response) = 0;
  virtual absl::Status RunClosure(const RunClosureRequest& request,
                                  RunClosureResponse* response) = 0;
  virtual absl::Status Ping(const PingRequest& request, PingResponse* response) = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_WORKER_CLIENT_H_
