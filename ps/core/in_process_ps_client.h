// InProcessPsClient: a PsClient that calls a PS's state in the same process:
// either one VariableStore (strategy: one_device, core tests), which holds a
// single job whatever the requests' `job` (EndJob then frees nothing: the
// owner frees the store), or a JobStores (job namespaces, as a ps_server
// holds them). Lets code written against PsClient run without gRPC.
//
// Thread-safe (the stores are).
#ifndef PSCLUSTER_PS_CORE_IN_PROCESS_PS_CLIENT_H_
#define PSCLUSTER_PS_CORE_IN_PROCESS_PS_CLIENT_H_

#include "common/ps_client.h"
#include "ps/core/job_stores.h"
#include "ps/core/variable_store.h"

namespace pscluster {

class InProcessPsClient : public PsClient {
 public:
  // REQUIRES: `store` / `jobs` is not null and outlives this client (not owned).
  explicit InProcessPsClient(VariableStore* store);
  explicit InProcessPsClient(JobStores* jobs);

  absl::Status CreateVariables(const CreateVariablesRequest& request,
                               CreateVariablesResponse* response) override;
  absl::Status Pull(const PullRequest& request, PullResponse* response) override;
  absl::Status Push(const PushRequest& request, PushResponse* response) override;
  absl::Status Stats(const StatsRequest& request, StatsResponse* response) override;
  absl::Status Save(const SaveRequest& request, SaveResponse* response) override;
  absl::Status Restore(const RestoreRequest& request, RestoreResponse* response) override;
  absl::Status EndJob(const EndJobRequest& request, EndJobResponse* response) override;
  absl::Status PruneKeys(const PruneKeysRequest& request, PruneKeysResponse* response) override;

 private:
  // Calls `method` on whichever of the two this client wraps.
  template <typename Request, typename Response>
  absl::Status Forward(absl::Status (VariableStore::*store_method)(const Request&, Response*),
                       absl::Status (JobStores::*jobs_method)(const Request&, Response*),
                       const Request& request, Response* response) {
    return store_ != nullptr ? (store_->*store_method)(request, response)
                             : (jobs_->*jobs_method)(request, response);
  }

  VariableStore* const store_ = nullptr;
  JobStores* const jobs_ = nullptr;
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_CORE_IN_PROCESS_PS_CLIENT_H_
