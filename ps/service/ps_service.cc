#include "ps/service/ps_service.h"

#include <malloc.h>

#include <utility>

namespace pscluster {
namespace {

// Pushes at least this large are followed by malloc_trim.
constexpr size_t kTrimAfterBytes = 16 << 20;

}  // namespace

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
  grpc::Status status = handler_.Run("Push", [&] { return store_->Push(*request, response); });
  // gRPC assembles a large request from many small buffers, which glibc keeps
  // after they are freed; give them back so that a PS stays near its
  // parameters plus slots in resident memory (bench/memory_bench).
  if (request->ByteSizeLong() >= kTrimAfterBytes) malloc_trim(0);
  return status;
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
