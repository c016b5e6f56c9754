// ParameterServerService: the gRPC adapter of the ParameterServer service.
//
// Each handler is one JobStores call (the request's job namespace, then its
// VariableStore) run through the shared RpcHandler (status conversion and
// pscluster_rpc_* metrics); all logic lives in ps/core. Thread-safe.
//
// Pull and Push, the data plane, are gRPC callback methods on raw
// ByteBuffers (rpc/zero_copy.h): requests are parsed into pooled messages,
// and a response's tensors are sent from the pooled response itself, not
// copied into gRPC's buffers. The wire format is plain protobuf.
#ifndef PSCLUSTER_PS_SERVICE_PS_SERVICE_H_
#define PSCLUSTER_PS_SERVICE_PS_SERVICE_H_

#include <memory>

#include "protos/ps.grpc.pb.h"
#include "ps/core/job_stores.h"
#include "rpc/handler.h"
#include "rpc/zero_copy.h"

namespace pscluster {

class ParameterServerService final
    : public ParameterServer::WithRawCallbackMethod_Pull<
          ParameterServer::WithRawCallbackMethod_Push<ParameterServer::Service>> {
 public:
  // REQUIRES: `jobs` is not null and outlives the service (not owned).
  // `registry` may be null (no RPC metrics).
  ParameterServerService(JobStores* jobs, std::shared_ptr<prometheus::Registry> registry);

  grpc::Status CreateVariables(grpc::ServerContext* context, const CreateVariablesRequest* request,
                               CreateVariablesResponse* response) override;
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::Status Stats(grpc::ServerContext* context, const StatsRequest* request,
                     StatsResponse* response) override;
  grpc::Status Save(grpc::ServerContext* context, const SaveRequest* request,
                    SaveResponse* response) override;
  grpc::Status Restore(grpc::ServerContext* context, const RestoreRequest* request,
                       RestoreResponse* response) override;
  // Frees the job's namespace, then gives the freed memory back to the system.
  grpc::Status EndJob(grpc::ServerContext* context, const EndJobRequest* request,
                      EndJobResponse* response) override;
  grpc::Status PruneKeys(grpc::ServerContext* context, const PruneKeysRequest* request,
                         PruneKeysResponse* response) override;

 private:
  JobStores* const jobs_;
  RpcHandler handler_;
  MessagePool<PullRequest> pull_requests_;
  MessagePool<PullResponse> pull_responses_;
  MessagePool<PushRequest> push_requests_;
  MessagePool<PushResponse> push_responses_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_SERVICE_PS_SERVICE_H_
