// ParameterServerService: the gRPC adapter of the ParameterServer service.
//
// Each handler is one VariableStore call run through the shared RpcHandler
// (status conversion and pscluster_rpc_* metrics); all logic lives in
// ps/core. Thread-safe.
#ifndef PSCLUSTER_PS_SERVICE_PS_SERVICE_H_
#define PSCLUSTER_PS_SERVICE_PS_SERVICE_H_

#include <memory>

#include "protos/ps.grpc.pb.h"
#include "ps/core/variable_store.h"
#include "rpc/handler.h"

namespace pscluster {

class ParameterServerService final : public ParameterServer::Service {
 public:
  // REQUIRES: `store` is not null and outlives the service (not owned).
  // `registry` may be null (no RPC metrics).
  ParameterServerService(VariableStore* store, std::shared_ptr<prometheus::Registry> registry);

  grpc::Status CreateVariables(grpc::ServerContext* context, const CreateVariablesRequest* request,
                               CreateVariablesResponse* response) override;
  grpc::Status Pull(grpc::ServerContext* context, const PullRequest* request,
                    PullResponse* response) override;
  grpc::Status Push(grpc::ServerContext* context, const PushRequest* request,
                    PushResponse* response) override;
  grpc::Status Stats(grpc::ServerContext* context, const StatsRequest* request,
                     StatsResponse* response) override;
  grpc::Status Save(grpc::ServerContext* context, const SaveRequest* request,
                    SaveResponse* response) override;
  grpc::Status Restore(grpc::ServerContext* context, const RestoreRequest* request,
                       RestoreResponse* response) override;

 private:
  VariableStore* const store_;
  RpcHandler handler_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_SERVICE_PS_SERVICE_H_
