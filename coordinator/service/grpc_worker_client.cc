#include "coordinator/service/grpc_worker_client.h"

#include "rpc/rpc_util.h"

namespace pscluster {

GrpcWorkerClient::GrpcWorkerClient(std::string address, GrpcWorkerClientOptions options)
    : address_(std::move(address)),
      options_(options),
      stub_(Worker::NewStub(MakeChannel(address_))) {}

absl::Status GrpcWorkerClient::SetupJob(const SetupJobRequest& request,
                                        SetupJobResponse* response) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.setup_timeout);
  return FromGrpcStatus(stub_->SetupJob(&ctx, request, response));
}

absl::Status GrpcWorkerClient::RunClosure(const RunClosureRequest& request,
                                          RunClosureResponse* response) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.closure_timeout);
  return FromGrpcStatus(stub_->RunClosure(&ctx, request, response));
}

absl::Status GrpcWorkerClient::RunClosures(const RunClosuresRequest& request,
                                           RunClosuresResponse* response) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.closure_timeout);
  return FromGrpcStatus(stub_->RunClosures(&ctx, request, response));
}

absl::Status GrpcWorkerClient::Ping(const PingRequest& request, PingResponse* response) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.ping_timeout);
  return FromGrpcStatus(stub_->Ping(&ctx, request, response));
}

}  // namespace pscluster
