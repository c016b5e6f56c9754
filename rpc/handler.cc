#include "rpc/handler.h"

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "rpc/rpc_util.h"

namespace pscluster {

RpcHandler::RpcHandler(std::string service, std::shared_ptr<prometheus::Registry> registry)
    : service_(std::move(service)), registry_(std::move(registry)) {
  if (registry_ == nullptr) return;
  requests_ = &prometheus::BuildCounter()
                   .Name("pscluster_rpc_requests_total")
                   .Help("RPCs handled, by service, method and status code")
                   .Register(*registry_);
  latency_ = &prometheus::BuildHistogram()
                  .Name("pscluster_rpc_latency_seconds")
                  .Help("Time spent handling an RPC")
                  .Register(*registry_);
}

grpc::Status RpcHandler::Run(const std::string& method, absl::FunctionRef<absl::Status()> call) {
  const absl::Time start = absl::Now();
  return Record(method, call(), start);
}

grpc::Status RpcHandler::Record(const std::string& method, const absl::Status& status,
                                absl::Time start) {
  if (requests_ != nullptr) {
    requests_
        ->Add({{"service", service_},
               {"method", method},
               {"code", absl::StatusCodeToString(status.code())}})
        .Increment();
    static const prometheus::Histogram::BucketBoundaries kBuckets = {
        1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1, 3, 10, 30};
    latency_->Add({{"service", service_}, {"method", method}}, kBuckets)
        .Observe(absl::ToDoubleSeconds(absl::Now() - start));
  }
  return ToGrpcStatus(status);
}

}  // namespace pscluster
