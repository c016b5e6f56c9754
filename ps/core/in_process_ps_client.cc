#include "ps/core/in_process_ps_client.h"

namespace pscluster {

InProcessPsClient::InProcessPsClient(VariableStore* store) : store_(store) {}
InProcessPsClient::InProcessPsClient(JobStores* jobs) : jobs_(jobs) {}

absl::Status InProcessPsClient::CreateVariables(const CreateVariablesRequest& request,
                                                CreateVariablesResponse* response) {
  return Forward(&VariableStore::CreateVariables, &JobStores::CreateVariables, request, response);
}

absl::Status InProcessPsClient::Pull(const PullRequest& request, PullResponse* response) {
  return Forward(&VariableStore::Pull, &JobStores::Pull, request, response);
}

absl::Status InProcessPsClient::Push(const PushRequest& request, PushResponse* response) {
  return Forward(&VariableStore::Push, &JobStores::Push, request, response);
}

absl::Status InProcessPsClient::Stats(const StatsRequest& request, StatsResponse* response) {
  return Forward(&VariableStore::Stats, &JobStores::Stats, request, response);
}

absl::Status InProcessPsClient::Save(const SaveRequest& request, SaveResponse* response) {
  return Forward(&VariableStore::Save, &JobStores::Save, request, response);
}

absl::Status InProcessPsClient::Restore(const RestoreRequest& request, RestoreResponse* response) {
  return Forward(&VariableStore::Restore, &JobStores::Restore, request, response);
}

absl::Status InProcessPsClient::PruneKeys(const PruneKeysRequest& request,
                                          PruneKeysResponse* response) {
  return Forward(&VariableStore::PruneKeys, &JobStores::PruneKeys, request, response);
}

absl::Status InProcessPsClient::EndJob(const EndJobRequest& request, EndJobResponse* response) {
  if (store_ != nullptr) return absl::OkStatus();  // one store, freed by its owner
  return jobs_->EndJob(request, response);
}

}  // namespace pscluster
