// The Collective service (protos/worker.proto) of a worker, and gRPC peers
// that send chunks to the other workers' Collective services: the transport
// of multi_worker_mirrored's ring all-reduce (worker/core/collective.h).
#ifndef PSCLUSTER_WORKER_SERVICE_COLLECTIVE_SERVICE_H_
#define PSCLUSTER_WORKER_SERVICE_COLLECTIVE_SERVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "protos/worker.grpc.pb.h"
#include "rpc/handler.h"
#include "worker/core/collective.h"

namespace pscluster {

// Deliver files the chunk in `mailbox` (not owned; outlives the service):
// RESOURCE_EXHAUSTED when it is full. Thread-safe.
class CollectiveService final : public Collective::Service {
 public:
  CollectiveService(CollectiveMailbox* mailbox, std::shared_ptr<prometheus::Registry> registry);
  grpc::Status Deliver(grpc::ServerContext* context, const CollectiveChunk* request,
                       CollectiveAck* response) override;

 private:
  CollectiveMailbox* const mailbox_;
  RpcHandler handler_;
};

// Replica i is the worker at addresses[i]; each Send is one Deliver with
// `timeout`, over the process's transport (TLS when configured).
class GrpcCollectivePeers final : public CollectivePeers {
 public:
  GrpcCollectivePeers(std::vector<std::string> addresses, absl::Duration timeout);
  absl::Status Send(int replica, const CollectiveChunk& chunk) override;

 private:
  const std::vector<std::string> addresses_;
  const absl::Duration timeout_;
  std::vector<std::unique_ptr<Collective::Stub>> stubs_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_SERVICE_COLLECTIVE_SERVICE_H_
