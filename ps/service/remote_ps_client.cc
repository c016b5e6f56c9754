#include "ps/service/remote_ps_client.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "rpc/rpc_util.h"
#include "rpc/zero_copy.h"

namespace pscluster {

RemotePsClient::RemotePsClient(Options options)
    : options_(std::move(options)),
      channel_(MakeChannel(options_.target)),
      stub_(ParameterServer::NewStub(channel_)),
      generic_stub_(std::make_unique<grpc::GenericStub>(channel_)) {
  if (options_.data_plane) {
    DataPlaneClient::Options o;
    o.target = options_.target;
    o.call_timeout = options_.call_timeout;
    o.wait_for_ready = options_.wait_for_ready;
    data_plane_ = std::make_unique<DataPlaneClient>(o, stub_.get());
  }
}

namespace {

// A call that failed before it started.
class FailedCall : public PendingPsCall {
 public:
  explicit FailedCall(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait() override { return status_; }

 private:
  absl::Status status_;
};

}  // namespace

absl::Status RemotePsClient::Call(absl::FunctionRef<grpc::Status(grpc::ClientContext*)> rpc) {
  grpc::ClientContext context;
  SetDeadline(&context, options_.call_timeout);
  context.set_wait_for_ready(options_.wait_for_ready);
  return ErrorFor(rpc(&context));
}

// One zero-copy unary call: started at construction, finished by Wait.
// `request` is serialized without copying its tensors, so it must outlive
// the call.
class RemotePsClient::ZeroCopyCall : public PendingPsCall {
 public:
  ZeroCopyCall(RemotePsClient* client, const std::string& method,
               const google::protobuf::Message& request, google::protobuf::Message* response)
      : client_(client), response_(response) {
    SerializeToByteBuffer(request, nullptr, &request_buffer_);
    SetDeadline(&context_, client_->options_.call_timeout);
    context_.set_wait_for_ready(client_->options_.wait_for_ready);
    // The call's own completion queue, polled by the waiting thread (as the
    // generated blocking stub does): no hand-off to another thread.
    call_ = client_->generic_stub_->PrepareUnaryCall(&context_, method, request_buffer_, &cq_);
    call_->StartCall();
    call_->Finish(&response_buffer_, &status_, /*tag=*/&status_);
  }

  ~ZeroCopyCall() override {
    if (!waited_) (void)Wait();
  }

  absl::Status Wait() override {
    waited_ = true;
    void* tag = nullptr;
    bool ok = false;
    if (!cq_.Next(&tag, &ok) || !ok) {
      status_ = grpc::Status(grpc::StatusCode::INTERNAL, "the call's completion queue failed");
    }
    cq_.Shutdown();
    while (cq_.Next(&tag, &ok)) {
    }
    if (status_.ok()) {
      status_ = ToGrpcStatus(ParseFromByteBuffer(response_buffer_, response_,
                                                 response_->GetDescriptor()->name().c_str()));
    }
    return client_->ErrorFor(status_);
  }

 private:
  RemotePsClient* const client_;
  google::protobuf::Message* const response_;
  grpc::ClientContext context_;
  grpc::CompletionQueue cq_;
  grpc::ByteBuffer request_buffer_;
  grpc::ByteBuffer response_buffer_;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call_;
  grpc::Status status_;
  bool waited_ = false;
};

absl::Status RemotePsClient::ErrorFor(const grpc::Status& grpc_status) const {
  const absl::Status status = FromGrpcStatus(grpc_status);
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("ps ", options_.target, ": ", status.message()));
}

absl::Status RemotePsClient::CallZeroCopy(const std::string& method,
                                        const google::protobuf::Message& request,
                                        google::protobuf::Message* response) {
  return ZeroCopyCall(this, method, request, response).Wait();
}

std::unique_ptr<PendingPsCall> RemotePsClient::StartPush(const PushRequest& request,
                                                       PushResponse* response) {
  if (data_plane_ != nullptr) {
    absl::StatusOr<std::unique_ptr<FrameStream>> connection = data_plane_->Acquire();
    if (!connection.ok()) return std::make_unique<FailedCall>(connection.status());
    if (*connection != nullptr) {
      return data_plane_->StartPush(std::move(*connection), request, response);
    }
  }
  return std::make_unique<ZeroCopyCall>(this, "/pscluster.ParameterServer/Push", request, response);
}

absl::Status RemotePsClient::CreateVariables(const CreateVariablesRequest& request,
                                           CreateVariablesResponse* response) {
  return Call([&](grpc::ClientContext* c) { return stub_->CreateVariables(c, request, response); });
}

absl::Status RemotePsClient::Pull(const PullRequest& request, PullResponse* response) {
  if (data_plane_ != nullptr) {
    absl::StatusOr<std::unique_ptr<FrameStream>> connection = data_plane_->Acquire();
    if (!connection.ok()) return connection.status();
    if (*connection != nullptr) return data_plane_->Pull(std::move(*connection), request, response);
  }
  return CallZeroCopy("/pscluster.ParameterServer/Pull", request, response);
}

absl::Status RemotePsClient::Push(const PushRequest& request, PushResponse* response) {
  if (data_plane_ != nullptr) return StartPush(request, response)->Wait();
  return CallZeroCopy("/pscluster.ParameterServer/Push", request, response);
}

absl::Status RemotePsClient::Stats(const StatsRequest& request, StatsResponse* response) {
  return Call([&](grpc::ClientContext* c) { return stub_->Stats(c, request, response); });
}

absl::Status RemotePsClient::Save(const SaveRequest& request, SaveResponse* response) {
  return Call([&](grpc::ClientContext* c) { return stub_->Save(c, request, response); });
}

absl::Status RemotePsClient::Restore(const RestoreRequest& request, RestoreResponse* response) {
  return Call([&](grpc::ClientContext* c) { return stub_->Restore(c, request, response); });
}

absl::Status RemotePsClient::EndJob(const EndJobRequest& request, EndJobResponse* response) {
  return Call([&](grpc::ClientContext* c) { return stub_->EndJob(c, request, response); });
}

absl::Status RemotePsClient::PruneKeys(const PruneKeysRequest& request,
                                       PruneKeysResponse* response) {
  return Call([&](grpc::ClientContext* c) { return stub_->PruneKeys(c, request, response); });
}

}  // namespace pscluster
