#include "coordinator/service/grpc_worker_client.h"

#include <algorithm>

#include "rpc/rpc_util.h"

namespace pscluster {

GrpcWorkerClient::GrpcWorkerClient(std::string address, GrpcWorkerClientOptions options)
    : address_(std::move(address)),
      options_(options),
      stub_(Worker::NewStub(MakeChannel(address_))) {}

absl::Status GrpcWorkerClient::Call(std::chrono::milliseconds timeout,
                                    const std::function<grpc::Status(grpc::ClientContext*)>& rpc) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  {
    absl::MutexLock lock(&mu_);
    active_.insert(&ctx);
  }
  const grpc::Status s = rpc(&ctx);
  {
    absl::MutexLock lock(&mu_);
    active_.erase(&ctx);
  }
  return FromGrpcStatus(s);
}

void GrpcWorkerClient::CancelCalls() {
  // Under the lock, so that no context is destroyed while it is cancelled.
  // TryCancel does not block on the call.
  absl::MutexLock lock(&mu_);
  for (grpc::ClientContext* ctx : active_) ctx->TryCancel();
}

std::chrono::milliseconds GrpcWorkerClient::ClosureTimeout(absl::Duration timeout) const {
  if (timeout >= absl::FromChrono(options_.closure_timeout)) return options_.closure_timeout;
  return std::max(absl::ToChronoMilliseconds(timeout), std::chrono::milliseconds(1));
}

absl::Status GrpcWorkerClient::SetupJob(const SetupJobRequest& request,
                                        SetupJobResponse* response) {
  return Call(options_.setup_timeout,
              [&](grpc::ClientContext* ctx) { return stub_->SetupJob(ctx, request, response); });
}

absl::Status GrpcWorkerClient::RunClosure(const RunClosureRequest& request, absl::Duration timeout,
                                          RunClosureResponse* response) {
  return Call(ClosureTimeout(timeout),
              [&](grpc::ClientContext* ctx) { return stub_->RunClosure(ctx, request, response); });
}

absl::Status GrpcWorkerClient::RunClosures(const RunClosuresRequest& request,
                                           absl::Duration timeout, RunClosuresResponse* response) {
  return Call(ClosureTimeout(timeout),
              [&](grpc::ClientContext* ctx) { return stub_->RunClosures(ctx, request, response); });
}

template <typename Request, typename Response, typename Start>
void GrpcWorkerClient::CallAsync(std::chrono::milliseconds timeout, Request request,
                                 std::function<void(absl::Status, Response*)> done, Start start) {
  struct Call {
    grpc::ClientContext ctx;
    Request request;
    Response response;
    std::function<void(absl::Status, Response*)> done;
  };
  auto* call = new Call;
  call->request = std::move(request);
  call->done = std::move(done);
  SetDeadline(&call->ctx, timeout);
  {
    absl::MutexLock lock(&mu_);
    active_.insert(&call->ctx);
  }
  start(&call->ctx, &call->request, &call->response, [this, call](grpc::Status s) {
    {
      absl::MutexLock lock(&mu_);
      active_.erase(&call->ctx);
    }
    call->done(FromGrpcStatus(s), &call->response);
    delete call;
  });
}

void GrpcWorkerClient::RunClosureAsync(RunClosureRequest request, absl::Duration timeout,
                                       RunClosureDone done) {
  CallAsync<RunClosureRequest, RunClosureResponse>(
      ClosureTimeout(timeout), std::move(request), std::move(done),
      [this](grpc::ClientContext* ctx, const RunClosureRequest* req, RunClosureResponse* resp,
             std::function<void(grpc::Status)> on_done) {
        stub_->async()->RunClosure(ctx, req, resp, std::move(on_done));
      });
}

void GrpcWorkerClient::RunClosuresAsync(RunClosuresRequest request, absl::Duration timeout,
                                        RunClosuresDone done) {
  CallAsync<RunClosuresRequest, RunClosuresResponse>(
      ClosureTimeout(timeout), std::move(request), std::move(done),
      [this](grpc::ClientContext* ctx, const RunClosuresRequest* req, RunClosuresResponse* resp,
             std::function<void(grpc::Status)> on_done) {
        stub_->async()->RunClosures(ctx, req, resp, std::move(on_done));
      });
}

absl::Status GrpcWorkerClient::Ping(const PingRequest& request, PingResponse* response) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.ping_timeout);
  return FromGrpcStatus(stub_->Ping(&ctx, request, response));
}

absl::Status GrpcWorkerClient::ReleaseJob(const ReleaseJobRequest& request,
                                          ReleaseJobResponse* response) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.ping_timeout);
  return FromGrpcStatus(stub_->ReleaseJob(&ctx, request, response));
}

}  // namespace pscluster
