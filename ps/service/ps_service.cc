#include "ps/service/ps_service.h"

#include <utility>

namespace pscluster {

ParameterServerService::ParameterServerService(VariableStore* store,
                                               std::shared_ptr<prometheus::Registry> registry)
    : store_(store), handler_("ParameterServer", std::move(registry)) {}

grpc::Status ParameterServerService::CreateVariables(grpc::ServerContext*,
                                                     const CreateVariablesRequest* request,
                                                     CreateVariablesResponse* response) {
  return handler_.Run("CreateVariables",
                      [&] { return store_->CreateVariables(*request, response); });
}

grpc::Status ParameterServerService::Pull(grpc::ServerContext*, const PullRequest* request,
                                          PullResponse* response) {
  return handler_.Run("Pull", [&] { return store_->Pull(*request, response); });
}

grpc::Status ParameterServerService::Push(grpc::ServerContext*, const PushRequest* request,
                                          PushResponse* response) {
  return handler_.Run("Push", [&] { return store_->Push(*request, response); });
}

grpc::Status ParameterServerService::Stats(grpc::ServerContext*, const StatsRequest* request,
                                           StatsResponse* response) {
  return handler_.Run("Stats", [&] { return store_->Stats(*request, response); });
}

grpc::Status ParameterServerService::Save(grpc::ServerContext*, const SaveRequest* request,
                                          SaveResponse* response) {
  return handler_.Run("Save", [&] { return store_->Save(*request, response); });
}

grpc::Status ParameterServerService::Restore(grpc::ServerContext*, const RestoreRequest* request,
                                             RestoreResponse* response) {
  return handler_.Run("Restore", [&] { return store_->Restore(*request, response); });
}

}  // namespace pscluster
