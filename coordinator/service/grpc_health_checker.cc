#include "coordinator/service/grpc_health_checker.h"

#include "rpc/rpc_util.h"

namespace pscluster {

GrpcHealthChecker::GrpcHealthChecker(const std::vector<std::string>& ps_addresses,
                                     const std::vector<std::string>& worker_addresses,
                                     std::chrono::milliseconds timeout)
    : timeout_(timeout) {
  for (const std::string& a : ps_addresses) ps_.push_back(ParameterServer::NewStub(MakeChannel(a)));
  absl::MutexLock lock(&mu_);
  for (const std::string& a : worker_addresses) workers_.push_back(Worker::NewStub(MakeChannel(a)));
}

int GrpcHealthChecker::AddWorker(const std::string& address) {
  absl::MutexLock lock(&mu_);
  workers_.push_back(Worker::NewStub(MakeChannel(address)));
  return static_cast<int>(workers_.size()) - 1;
}

absl::StatusOr<uint64_t> GrpcHealthChecker::CheckPs(int index) {
  if (index < 0 || index >= static_cast<int>(ps_.size())) {
    return absl::InvalidArgumentError("no such PS");
  }
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout_);
  StatsRequest request;
  StatsResponse response;
  absl::Status s = FromGrpcStatus(ps_[index]->Stats(&ctx, request, &response));
  if (!s.ok()) return s;
  return response.incarnation();
}

absl::Status GrpcHealthChecker::CheckWorker(int index) {
  Worker::Stub* stub = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (index < 0 || index >= static_cast<int>(workers_.size())) {
      return absl::InvalidArgumentError("no such worker");
    }
    stub = workers_[index].get();
  }
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout_);
  PingRequest request;
  PingResponse response;
  return FromGrpcStatus(stub->Ping(&ctx, request, &response));
}

}  // namespace pscluster
