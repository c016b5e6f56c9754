#include "ps/core/in_process_ps_client.h"

namespace pscluster {

InProcessPsClient::InProcessPsClient(VariableStore* store) : store_(store) {}

absl::Status InProcessPsClient::CreateVariables(const CreateVariablesRequest& request,
                                                CreateVariablesResponse* response) {
  return store_->CreateVariables(request, response);
}

absl::Status InProcessPsClient::Pull(const PullRequest& request, PullResponse* response) {
  return store_->Pull(request, response);
}

absl::Status InProcessPsClient::Push(const PushRequest& request, PushResponse* response) {
  return store_->Push(request, response);
}

absl::Status InProcessPsClient::Stats(const StatsRequest& request, StatsResponse* response) {
  return store_->Stats(request, response);
}

absl::Status InProcessPsClient::Save(const SaveRequest& request, SaveResponse* response) {
  return store_->Save(request, response);
}

absl::Status InProcessPsClient::Restore(const RestoreRequest& request, RestoreResponse* response) {
  return store_->Restore(request, response);
}

}  // namespace pscluster
