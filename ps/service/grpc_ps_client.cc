#include "ps/service/grpc_ps_client.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "rpc/rpc_util.h"
#include "rpc/zero_copy.h"

namespace pscluster {

GrpcPsClient::GrpcPsClient(Options options)
    : options_(std::move(options)),
      channel_(MakeChannel(options_.target)),
      stub_(ParameterServer::NewStub(channel_)),
      generic_stub_(std::make_unique<grpc::GenericStub>(channel_)) {}

absl::Status GrpcPsClient::Call(absl::FunctionRef<grpc::Status(grpc::ClientContext*)> rpc) {
  grpc::ClientContext context;
  SetDeadline(&context, options_.call_timeout);
  context.set_wait_for_ready(options_.wait_for_ready);
  const absl::Status status = FromGrpcStatus(rpc(&context));
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("ps ", options_.target, ": ", status.message()));
}

absl::Status GrpcPsClient::CallZeroCopy(const std::string& method,
                                        const google::protobuf::Message& request,
                                        google::protobuf::Message* response) {
  // The call finishes before this returns, so `request` outlives the slices
  // that point into it.
  grpc::ByteBuffer request_buffer;
  SerializeToByteBuffer(request, nullptr, &request_buffer);
  grpc::ByteBuffer response_buffer;
  return Call([&](grpc::ClientContext* context) {
    // A completion queue of this call, polled by this thread (as the
    // generated blocking stub does): no hand-off to another thread.
    grpc::CompletionQueue cq;
    std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
        generic_stub_->PrepareUnaryCall(context, method, request_buffer, &cq);
    call->StartCall();
    grpc::Status status;
    call->Finish(&response_buffer, &status, /*tag=*/&status);
    void* tag = nullptr;
    bool ok = false;
    if (!cq.Next(&tag, &ok) || !ok) {
      status = grpc::Status(grpc::StatusCode::INTERNAL, "the call's completion queue failed");
    }
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
    if (status.ok()) {
      status = ToGrpcStatus(ParseFromByteBuffer(response_buffer, response,
                                                response->GetDescriptor()->name().c_str()));
    }
    return status;
  });
}

absl::Status GrpcPsClient::CreateVariables(const CreateVariablesRequest& request,
                                           CreateVariablesResponse* response) {
  return Call([&](grpc::ClientContext* c) { return stub_->CreateVariables(c, request, response); });
}

absl::Status GrpcPsClient::Pull(const PullRequest& request, PullResponse* response) {
  return CallZeroCopy("/pscluster.ParameterServer/Pull", request, response);
}

absl::Status GrpcPsClient::Push(const PushRequest& request, PushResponse* response) {
  return CallZeroCopy("/pscluster.ParameterServer/Push", request, response);
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
