// GrpcWorkerClient: WorkerClient over gRPC to a worker_server. Thread-safe.
#ifndef PSCLUSTER_COORDINATOR_SERVICE_GRPC_WORKER_CLIENT_H_
#define PSCLUSTER_COORDINATOR_SERVICE_GRPC_WORKER_CLIENT_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/core/worker_client.h"
#include "protos/worker.grpc.pb.h"

namespace pscluster {

struct GrpcWorkerClientOptions {
  // Deadline of SetupJob (loads data), and the longest deadline of
  // RunClosure(s) (runs N steps): a longer `timeout` asked for is cut to it.
  std::chrono::milliseconds setup_timeout{120000};
  std::chrono::milliseconds closure_timeout{300000};
  std::chrono::milliseconds ping_timeout{5000};
};

class GrpcWorkerClient final : public WorkerClient {
 public:
  GrpcWorkerClient(std::string address, GrpcWorkerClientOptions options = {});

  std::string address() const override { return address_; }
  absl::Status SetupJob(const SetupJobRequest& request, SetupJobResponse* response) override;
  absl::Status RunClosure(const RunClosureRequest& request, absl::Duration timeout,
                          RunClosureResponse* response) override;
  // One RunClosures RPC. UNIMPLEMENTED from a worker that predates it.
  absl::Status RunClosures(const RunClosuresRequest& request, absl::Duration timeout,
                           RunClosuresResponse* response) override;
  // gRPC's callback API: `done` runs on a gRPC thread, no thread per call.
  void RunClosureAsync(RunClosureRequest request, absl::Duration timeout,
                       RunClosureDone done) override;
  void RunClosuresAsync(RunClosuresRequest request, absl::Duration timeout,
                        RunClosuresDone done) override;
  // TryCancel()s the context of every SetupJob and RunClosure(s) in flight,
  // the asynchronous ones too.
  void CancelCalls() override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Ping(const PingRequest& request, PingResponse* response) override;
  absl::Status ReleaseJob(const ReleaseJobRequest& request, ReleaseJobResponse* response) override;

 private:
  // Runs `rpc` under a context with `timeout` that CancelCalls can reach.
  absl::Status Call(std::chrono::milliseconds timeout,
                    const std::function<grpc::Status(grpc::ClientContext*)>& rpc)
      ABSL_LOCKS_EXCLUDED(mu_);
  std::chrono::milliseconds ClosureTimeout(absl::Duration timeout) const;
  // Starts `start(ctx, request, response, on_done)` under a context with
  // `timeout` that CancelCalls can reach; `done` gets its status.
  template <typename Request, typename Response, typename Start>
  void CallAsync(std::chrono::milliseconds timeout, Request request,
                 std::function<void(absl::Status, Response*)> done, Start start)
      ABSL_LOCKS_EXCLUDED(mu_);

  const std::string address_;
  const GrpcWorkerClientOptions options_;
  std::unique_ptr<Worker::Stub> stub_;
  absl::Mutex mu_;
  // Contexts of the calls in flight; each is removed before it is destroyed.
  absl::flat_hash_set<grpc::ClientContext*> active_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_SERVICE_GRPC_WORKER_CLIENT_H_
