// RemotePsClient: a PsClient that talks to one remote ps_server: Push and
// Pull on its raw data plane when it serves one (plaintext or TLS, as the
// process's transport), everything else, and Push/Pull otherwise, over gRPC.
// (It was GrpcPsClient; it has spoken the data plane since issue 14.)
//
// Errors keep the server's status code; their message starts with
// "ps <target>: " so a worker's log says which PS failed. Transport failures
// come back as UNAVAILABLE, an expired deadline as DEADLINE_EXCEEDED.
//
// Pull and Push go through a generic stub on raw ByteBuffers
// (rpc/zero_copy.h): tensors are sent from the request itself, not copied
// into gRPC's buffers, and parsed into the caller's response, whose
// strings keep their capacity when the caller reuses it.
//
// When the PS serves a raw-socket data plane (ps/service/data_plane_server.h)
// and Options::data_plane is set, Pull, Push and StartPush use it instead
// (ps/service/data_plane_client.h); everything else stays on gRPC.
//
// Thread-safe: calls may be made concurrently (they share one channel).
#ifndef PSCLUSTER_PS_SERVICE_REMOTE_PS_CLIENT_H_
#define PSCLUSTER_PS_SERVICE_REMOTE_PS_CLIENT_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "common/ps_client.h"
#include "protos/ps.grpc.pb.h"
#include "ps/service/data_plane_client.h"

namespace pscluster {

class RemotePsClient : public PsClient {
 public:
  struct Options {
    // "host:port" of the ps_server. Required.
    std::string target;
    // Deadline of each call, from when it starts. Save and Restore of a
    // large PS take longer than training calls: give them a client with a
    // longer deadline.
    std::chrono::milliseconds call_timeout{30000};
    // If true, a call waits (up to its deadline) for the server to come up
    // instead of failing at once with UNAVAILABLE.
    bool wait_for_ready = false;
    // Pull and Push on the PS's data plane when it has one (over mutual TLS
    // when the process's transport is TLS).
    bool data_plane = true;
  };

  // Creates the channel (MakeChannel: pscluster's message-size limits); it
  // connects lazily, so this never fails.
  explicit RemotePsClient(Options options);

  absl::Status CreateVariables(const CreateVariablesRequest& request,
                               CreateVariablesResponse* response) override;
  absl::Status Pull(const PullRequest& request, PullResponse* response) override;
  absl::Status Push(const PushRequest& request, PushResponse* response) override;
  absl::Status Stats(const StatsRequest& request, StatsResponse* response) override;
  absl::Status Save(const SaveRequest& request, SaveResponse* response) override;
  absl::Status Restore(const RestoreRequest& request, RestoreResponse* response) override;
  absl::Status EndJob(const EndJobRequest& request, EndJobResponse* response) override;
  absl::Status PruneKeys(const PruneKeysRequest& request, PruneKeysResponse* response) override;
  // The call runs on gRPC while the caller goes on; Wait polls its own
  // completion queue.
  std::unique_ptr<PendingPsCall> StartPush(const PushRequest& request,
                                           PushResponse* response) override;

 private:
  // Runs `rpc` with a fresh context carrying the options' deadline and turns
  // its status into an absl::Status naming the target.
  absl::Status Call(absl::FunctionRef<grpc::Status(grpc::ClientContext*)> rpc);
  // Calls `method` ("/pscluster.ParameterServer/Pull") with `request`
  // serialized without copying its tensors; parses the answer into `response`.
  absl::Status CallZeroCopy(const std::string& method, const google::protobuf::Message& request,
                            google::protobuf::Message* response);
  // Turns a finished call's status into the client's error form.
  absl::Status ErrorFor(const grpc::Status& status) const;

  class ZeroCopyCall;

  const Options options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<ParameterServer::Stub> stub_;
  std::unique_ptr<grpc::GenericStub> generic_stub_;
  std::unique_ptr<DataPlaneClient> data_plane_;  // null: gRPC only
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_SERVICE_REMOTE_PS_CLIENT_H_
