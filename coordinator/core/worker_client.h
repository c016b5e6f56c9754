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
  // Several closures in one round trip; each result carries its own status
  // (WorkerState::RunClosures). An error returned here (the RPC failed) is
  // every closure's. This default runs them through RunClosure one by one.
  virtual absl::Status RunClosures(const RunClosuresRequest& request,
                                   RunClosuresResponse* response) {
    for (const RunClosureRequest& closure : request.closures()) {
      ClosureResult* result = response->add_results();
      const absl::Status s = RunClosure(closure, result->mutable_response());
      result->set_code(static_cast<int32_t>(s.code()));
      result->set_message(std::string(s.message()));
    }
    return absl::OkStatus();
  }
  virtual absl::Status Ping(const PingRequest& request, PingResponse* response) = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_WORKER_CLIENT_H_
