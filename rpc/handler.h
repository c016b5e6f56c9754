// RpcHandler: the one piece of boilerplate every pscluster RPC handler shares.
//
// A handler is `return handler_.Run("Push", [&] { return core->Push(*req, resp); });`:
// one core call, absl::Status → grpc::Status, and per-method metrics
// (pscluster_rpc_requests_total{service,method,code} and
// pscluster_rpc_latency_seconds{service,method}). Thread-safe.
#ifndef PSCLUSTER_RPC_HANDLER_H_
#define PSCLUSTER_RPC_HANDLER_H_

#include <grpcpp/grpcpp.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"

namespace pscluster {

class RpcHandler {
 public:
  // `registry` may be null (no metrics).
  RpcHandler(std::string service, std::shared_ptr<prometheus::Registry> registry);

  grpc::Status Run(const std::string& method, absl::FunctionRef<absl::Status()> call);

  // For a call answered later (a callback method that parks it): records
  // `status` of `method`, started at `start`, as Run does.
  grpc::Status Record(const std::string& method, const absl::Status& status, absl::Time start);

 private:
  std::string service_;
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* requests_ = nullptr;
  prometheus::Family<prometheus::Histogram>* latency_ = nullptr;
};

}  // namespace pscluster

#endif  // PSCLUSTER_RPC_HANDLER_H_
