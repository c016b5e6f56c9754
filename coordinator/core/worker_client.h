// WorkerClient: how the coordinator talks to one worker. GrpcWorkerClient
// (coordinator/service) is the cluster implementation; strategy: one_device
// uses an in-process one. Mirrors the Worker service. Thread-safe.
#ifndef PSCLUSTER_COORDINATOR_CORE_WORKER_CLIENT_H_
#define PSCLUSTER_COORDINATOR_CORE_WORKER_CLIENT_H_

#include <functional>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "protos/worker.pb.h"

namespace pscluster {

class WorkerClient {
 public:
  virtual ~WorkerClient() = default;
  // Where the worker is, for messages ("127.0.0.1:4242", "in-process").
  virtual std::string address() const = 0;
  virtual absl::Status SetupJob(const SetupJobRequest& request, SetupJobResponse* response) = 0;
  // Runs one closure. `timeout` bounds the call (DEADLINE_EXCEEDED past it;
  // ClosureDeadline picks it); in-process workers may ignore it.
  virtual absl::Status RunClosure(const RunClosureRequest& request, absl::Duration timeout,
                                  RunClosureResponse* response) = 0;
  // Several closures in one round trip under one `timeout`; each result
  // carries its own status (WorkerState::RunClosures). An error returned here
  // (the RPC failed) is every closure's. This default runs them through
  // RunClosure one by one.
  virtual absl::Status RunClosures(const RunClosuresRequest& request, absl::Duration timeout,
                                   RunClosuresResponse* response) {
    const absl::Time deadline = absl::Now() + timeout;
    for (const RunClosureRequest& closure : request.closures()) {
      ClosureResult* result = response->add_results();
      const absl::Status s =
          RunClosure(closure, deadline - absl::Now(), result->mutable_response());
      result->set_code(static_cast<int32_t>(s.code()));
      result->set_message(std::string(s.message()));
    }
    return absl::OkStatus();
  }
  // The asynchronous forms, for a dispatch that drives many workers' calls
  // from a few threads (closure_dispatch.h's Dispatcher). `done` is called
  // once, on a thread of the implementation's, with the call's status and
  // its response (valid during the call; `done` may move from it); it must
  // not block for long. These defaults run the blocking form on a thread of
  // their own per call (in-process workers, test fakes); GrpcWorkerClient
  // overrides them with gRPC's callback API, no thread per call.
  using RunClosureDone = std::function<void(absl::Status, RunClosureResponse*)>;
  using RunClosuresDone = std::function<void(absl::Status, RunClosuresResponse*)>;
  virtual void RunClosureAsync(RunClosureRequest request, absl::Duration timeout,
                               RunClosureDone done) {
    std::thread([this, request = std::move(request), timeout, done = std::move(done)] {
      RunClosureResponse response;
      const absl::Status s = RunClosure(request, timeout, &response);
      done(s, &response);
    }).detach();
  }
  virtual void RunClosuresAsync(RunClosuresRequest request, absl::Duration timeout,
                                RunClosuresDone done) {
    std::thread([this, request = std::move(request), timeout, done = std::move(done)] {
      RunClosuresResponse response;
      const absl::Status s = RunClosures(request, timeout, &response);
      done(s, &response);
    }).detach();
  }
  // Cancels every call to this worker now in flight, from any thread: each
  // returns CANCELLED soon after. Calls made later are not affected. For a
  // worker declared lost (it stopped answering health checks) whose calls
  // would otherwise wait for their deadline. The worker itself may still run
  // the closures (their pushes are applied once: exactly-once keys). This
  // default does nothing (in-process workers, test fakes).
  virtual void CancelCalls() {}
  virtual absl::Status Ping(const PingRequest& request, PingResponse* response) = 0;
  // Lets the worker go at the end of its job (ReleaseJobRequest). This
  // default does nothing (in-process workers, test fakes hold nothing).
  virtual absl::Status ReleaseJob(const ReleaseJobRequest& /*request*/,
                                  ReleaseJobResponse* /*response*/) {
    return absl::OkStatus();
  }
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_WORKER_CLIENT_H_
