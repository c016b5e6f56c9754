// InProcessWorkerClient: a WorkerState in this process behind the
// coordinator's WorkerClient interface, for runs without worker processes
// (strategy: one_device and mirrored in psctl local, and tests that drive a
// JobRunner against real workers' state without gRPC).
#ifndef PSCLUSTER_CLIENT_IN_PROCESS_WORKER_H_
#define PSCLUSTER_CLIENT_IN_PROCESS_WORKER_H_

#include <string>
#include <utility>

#include "common/job_spec.h"
#include "coordinator/core/worker_client.h"
#include "worker/core/worker_state.h"

namespace pscluster {

class InProcessWorkerClient final : public WorkerClient {
 public:
  // `state` is not owned and must outlive the client; `address` names the
  // worker in messages. `spec`, when given (not owned, outliving the
  // client), is the job's spec as this process parsed and resolved it: the
  // worker sets the job up from it instead of parsing its YAML again
  // (WorkerState::SetupJob).
  explicit InProcessWorkerClient(WorkerState* state, std::string address = "in-process",
                                 const JobSpec* spec = nullptr)
      : state_(state), address_(std::move(address)), spec_(spec) {}

  std::string address() const override { return address_; }
  absl::Status SetupJob(const SetupJobRequest& request, SetupJobResponse* response) override {
    return state_->SetupJob(request, response, spec_);
  }
  // The timeout does not apply: the closure runs on the caller's thread.
  absl::Status RunClosure(const RunClosureRequest& request, absl::Duration /*timeout*/,
                          RunClosureResponse* response) override {
    return state_->RunClosure(request, response);
  }
  absl::Status Ping(const PingRequest& request, PingResponse* response) override {
    return state_->Ping(request, response);
  }
  absl::Status ReleaseJob(const ReleaseJobRequest& request,
                          ReleaseJobResponse* response) override {
    return state_->ReleaseJob(request, response);
  }

 private:
  WorkerState* const state_;
  const std::string address_;
  const JobSpec* const spec_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_IN_PROCESS_WORKER_H_
