// ParameterServerService: the gRPC adapter of the ParameterServer service.
//
// Each handler is one JobStores call (the request's job namespace, then its
// VariableStore) run through the shared RpcHandler (status conversion and
// pscluster_rpc_* metrics); all logic lives in ps/core. Thread-safe.
//
// Pull and Push, the data plane, are gRPC callback methods on raw
// ByteBuffers (rpc/zero_copy.h): requests are parsed into pooled messages,
// and a response's tensors are sent from the pooled response itself, not
// copied into gRPC's buffers. The wire format is plain protobuf. The same two
// calls are also served without gRPC by a DataPlaneServer
// (ps/service/data_plane_server.h), whose port DataPlane tells clients.
#ifndef PSCLUSTER_PS_SERVICE_PS_SERVICE_H_
#define PSCLUSTER_PS_SERVICE_PS_SERVICE_H_

#include <atomic>
#include <memory>

#include "protos/ps.grpc.pb.h"
#include "ps/core/job_stores.h"
#include "ps/service/data_plane_server.h"
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
  // Answers the port of the data plane set_data_plane gave (0: none).
  grpc::Status DataPlane(grpc::ServerContext* context, const DataPlaneRequest* request,
                         DataPlaneResponse* response) override;

  // This PS's DataPlaneServer, once it is listening (null: none): its port is
  // what DataPlane answers, and EndJob frees its connections' buffers. Not
  // owned; must outlive the service or be unset first.
  void set_data_plane(DataPlaneServer* data_plane) { data_plane_.store(data_plane); }
  // For the DataPlaneServer: one set of pscluster_rpc_* metrics for both paths.
  RpcHandler* handler() { return &handler_; }

 private:
  JobStores* const jobs_;
  RpcHandler handler_;
  MessagePool<PullRequest> pull_requests_;
  MessagePool<PullResponse> pull_responses_;
  MessagePool<PushRequest> push_requests_;
  MessagePool<PushResponse> push_responses_;
  std::atomic<DataPlaneServer*> data_plane_{nullptr};
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_SERVICE_PS_SERVICE_H_
