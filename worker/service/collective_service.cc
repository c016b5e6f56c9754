#include "worker/service/collective_service.h"

#include "absl/strings/str_cat.h"
#include "rpc/rpc_util.h"

#include "rpc/peer_role.h"

namespace pscluster {

CollectiveService::CollectiveService(CollectiveMailbox* mailbox,
                                     std::shared_ptr<prometheus::Registry> registry)
    : mailbox_(mailbox), handler_("Collective", std::move(registry)) {}

grpc::Status CollectiveService::Deliver(grpc::ServerContext* context,
                                        const CollectiveChunk* request, CollectiveAck*) {
  if (grpc::Status s = CheckPeerRole(*context, {"worker"}, "Deliver"); !s.ok()) return s;
  return handler_.Run("Deliver", [&] { return mailbox_->Deliver(*request); });
}

GrpcCollectivePeers::GrpcCollectivePeers(std::vector<std::string> addresses, absl::Duration timeout)
    : addresses_(std::move(addresses)), timeout_(timeout) {
  for (const std::string& a : addresses_) stubs_.push_back(Collective::NewStub(MakeChannel(a)));
}

absl::Status GrpcCollectivePeers::Send(int replica, const CollectiveChunk& chunk) {
  if (replica < 0 || replica >= static_cast<int>(stubs_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica ", replica, " of a ring of ", stubs_.size(), " workers"));
  }
  grpc::ClientContext context;
  SetDeadline(&context, absl::ToChronoMilliseconds(timeout_));
  context.set_wait_for_ready(true);  // a restarting neighbour: wait, up to the deadline
  CollectiveAck ack;
  const absl::Status s =
      FromGrpcStatus(stubs_[static_cast<size_t>(replica)]->Deliver(&context, chunk, &ack));
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat("worker ", addresses_[static_cast<size_t>(replica)],
                                             ": ", s.message()));
}

}  // namespace pscluster
