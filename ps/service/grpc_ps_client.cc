#include "ps/service/grpc_ps_client.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "rpc/rpc_util.h"

namespace pscluster {

GrpcPsClient::GrpcPsClient(Options options)
    : options_(std::move(options)), stub_(ParameterServer::NewStub(MakeChannel(options_.target))) {}

absl::Status GrpcPsClient::Call(absl::FunctionRef<grpc::Status(grpc::ClientContext*)> rpc) {
  grpc::ClientContext context;
  SetDeadline(&context, options_.call_timeout);
  context.set_wait_for_ready(options_.wait_for_ready);
  const absl::Status status = FromGrpcStatus(rpc(&context));
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("ps ", options_.target, ": ", status.message()));
}

absl::Status GrpcPsClient::CreateVariables(const CreateVariablesRequest& request,
                                           CreateVariablesResponse* response) {
  return Call([&](grpc::ClientContext* c) { return stub_->CreateVariables(c, request, response); });
}

absl::Status GrpcPsClient::Pull(const PullRequest& request, PullResponse* response) {
  return Call([&](grpc::ClientContext* c) { return stub_->Pull(c, request, response); });
}

absl::Status GrpcPsClient::Push(const PushRequest& request, PushResponse* response) {
  return Call([&](grpc::ClientContext* c) { return stub_->Push(c, request, response); });
}

absl::Status GrpcPsClient::Stats(const StatsRequest& request, StatsResponse* response) {
  return Call([&](grpc::ClientContext* c) { return stub_->Stats(c, request, response); });
}

absl::Status GrpcPsClient::Save(const SaveRequest& request, SaveResponse* response) {
  return Call([&](grpc::ClientContext* c) { return stub_->Save(c, request, response); });
}

absl::Status GrpcPsClient::Restore(const RestoreRequest& request, RestoreResponse* response) {
  return Call([&](grpc::ClientContext* c) { return stub_->Restore(c, request, response); });
}

}  // namespace pscluster
