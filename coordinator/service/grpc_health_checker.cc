#include "coordinator/service/grpc_health_checker.h"

#include "rpc/rpc_util.h"

namespace pscluster {

GrpcHealthChecker::GrpcHealthChecker(const std::vector<std::string>& ps_addresses,
                                     const std::vector<std::string>& worker_addresses,
                                     std::chrono::milliseconds timeout)
    : timeout_(timeout) {
  for (const std::string& a : ps_addresses) ps_.push_back(ParameterServer::NewStub(MakeChannel(a)));
  for (const std::string& a : worker_addresses) workers_.push_back(Worker::NewStub(MakeChannel(a)));
}

absl::Status GrpcHealthChecker::CheckPs(int index) {
  if (index < 0 || index >= static_cast<int>(ps_.size())) {
    return absl::InvalidArgumentError("no such PS");
  }
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout_);
  StatsRequest request;
  StatsResponse response;
  return FromGrpcStatus(ps_[index]->Stats(&ctx, request, &response));
}

absl::Status GrpcHealthChecker::CheckWorker(int index) {
  if (index < 0 || index >= static_cast<int>(workers_.size())) {
    return absl::InvalidArgumentError("no such worker");
  }
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout_);
  PingRequest request;
  PingResponse response;
  return FromGrpcStatus(workers_[index]->Ping(&ctx, request, &response));
}

}  // namespace pscluster
