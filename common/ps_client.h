// PsClient: how workers and the coordinator talk to one PS task.
//
// Two implementations: RemotePsClient (ps/service) for a cluster, and
// InProcessPsClient (ps/core) for strategy: one_device and for core tests, so
// core logic never depends on gRPC. The methods mirror the ParameterServer
// service one to one and return its status codes.
//
// Implementations are thread-safe.
#ifndef PSCLUSTER_COMMON_PS_CLIENT_H_
#define PSCLUSTER_COMMON_PS_CLIENT_H_

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "protos/ps.pb.h"

namespace pscluster {

// A call started without waiting for its answer (PsClient::StartPush).
class PendingPsCall {
 public:
  virtual ~PendingPsCall() = default;
  // Blocks until the call has finished and returns its status. Call once.
  virtual absl::Status Wait() = 0;
};

class PsClient {
 public:
  virtual ~PsClient() = default;

  // Creates variables (idempotent for an identical spec). INVALID_ARGUMENT for
  // a bad spec; ALREADY_EXISTS if a variable exists with a different spec.
  virtual absl::Status CreateVariables(const CreateVariablesRequest& request,
                                       CreateVariablesResponse* response) = 0;
  // NOT_FOUND names the first unknown variable.
  virtual absl::Status Pull(const PullRequest& request, PullResponse* response) = 0;
  // Applies each gradient with its variable's optimizer. NOT_FOUND for an
  // unknown variable, INVALID_ARGUMENT for a wrong dtype or shape or a NaN or
  // Inf gradient ("non-finite value"), RESOURCE_EXHAUSTED for new hash-table
  // rows past the PS's memory limit; on error no gradient of the request is
  // applied (and its update key is not recorded).
  virtual absl::Status Push(const PushRequest& request, PushResponse* response) = 0;
  virtual absl::Status Stats(const StatsRequest& request, StatsResponse* response) = 0;

  // Push without waiting: a worker starts its push to every PS, then waits
  // for them all, so that the PS work in parallel. `request` and `response`
  // must stay valid (and unchanged) until Wait returns; the call must be
  // waited for before the client is destroyed. The default runs Push now and
  // returns its status from Wait.
  virtual std::unique_ptr<PendingPsCall> StartPush(const PushRequest& request,
                                                   PushResponse* response);

  // Checkpoints (VariableStore::Save / Restore in ps/core/variable_store.h
  // give the full contract). Save writes this PS's data file; errors keep
  // the PS's code (I/O errors naming the file). Restore replaces everything
  // the PS holds by request.variables filled from the files: DATA_LOSS for a
  // torn or corrupt file or uncovered rows, FAILED_PRECONDITION for a
  // variable missing from the checkpoint or saved with another shape or
  // optimizer; on error the PS is unchanged.
  // The defaults return UNIMPLEMENTED, as gRPC's generated services do, so
  // test fakes that never checkpoint need not override them.
  virtual absl::Status Save(const SaveRequest& /*request*/, SaveResponse* /*response*/) {
    return absl::UnimplementedError("this PsClient does not implement Save");
  }
  virtual absl::Status Restore(const RestoreRequest& /*request*/, RestoreResponse* /*response*/) {
    return absl::UnimplementedError("this PsClient does not implement Restore");
  }
  // Job namespaces (ps/core/job_stores.h): EndJob frees everything the job
  // holds on the PS; PruneKeys forgets the exactly-once keys a committed
  // checkpoint covers. UNIMPLEMENTED by default, as above.
  virtual absl::Status EndJob(const EndJobRequest& /*request*/, EndJobResponse* /*response*/) {
    return absl::UnimplementedError("this PsClient does not implement EndJob");
  }
  virtual absl::Status PruneKeys(const PruneKeysRequest& /*request*/,
                                 PruneKeysResponse* /*response*/) {
    return absl::UnimplementedError("this PsClient does not implement PruneKeys");
  }
};

namespace ps_client_internal {

// A call that has already finished.
class DonePsCall : public PendingPsCall {
 public:
  explicit DonePsCall(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait() override { return status_; }

 private:
  absl::Status status_;
};

}  // namespace ps_client_internal

inline std::unique_ptr<PendingPsCall> PsClient::StartPush(const PushRequest& request,
                                                          PushResponse* response) {
  return std::make_unique<ps_client_internal::DonePsCall>(Push(request, response));
}

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_PS_CLIENT_H_
