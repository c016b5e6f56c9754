// InProcessPsClient: a PsClient that calls a VariableStore in the same
// process. Used for strategy: one_device and by core tests, so code written
// against PsClient runs without gRPC.
//
// Thread-safe (the store is).
#ifndef PSCLUSTER_PS_CORE_IN_PROCESS_PS_CLIENT_H_
#define PSCLUSTER_PS_CORE_IN_PROCESS_PS_CLIENT_H_

#include "common/ps_client.h"
#include "ps/core/variable_store.h"

namespace pscluster {

class InProcessPsClient : public PsClient {
 public:
  // REQUIRES: `store` is not null and outlives this client (not owned).
  explicit InProcessPsClient(VariableStore* store);

  absl::Status CreateVariables(const CreateVariablesRequest& request,
                               CreateVariablesResponse* response) override;
  absl::Status Pull(const PullRequest& request, PullResponse* response) override;
  absl::Status Push(const PushRequest& request, PushResponse* response) override;
  absl::Status Stats(const StatsRequest& request, StatsResponse* response) override;
  absl::Status Save(const SaveRequest& request, SaveResponse* response) override;
  absl::Status Restore(const RestoreRequest& request, RestoreResponse* response) override;

 private:
  VariableStore* const store_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_CORE_IN_PROCESS_PS_CLIENT_H_
