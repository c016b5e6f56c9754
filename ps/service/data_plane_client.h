// DataPlaneClient: a worker's side of one PS's raw-socket data plane
// (ps/service/data_plane_server.h). RemotePsClient runs Push, StartPush and
// Pull through it when the PS has a data plane, and on gRPC otherwise.
//
// The PS's data port is asked for once with ParameterServer.DataPlane on the
// client's gRPC channel (so the PS must be up, and wait_for_ready applies
// there); the client dials the port on the host of its gRPC target and keeps
// idle connections for the next calls, one per call in flight. When the
// process's transport is TLS (rpc/transport.h), so is the data plane: mutual
// TLS 1.3 with the same certificate, key and CA (rpc/tls_stream.h), the PS's
// certificate checked against the dialled host (or the transport's server
// name when set), as gRPC does. No data plane (a PS started with
// --data_plane_port=-1, an older PS that does not know the RPC or answers 0
// under TLS), or a port that cannot be reached or whose TLS handshake fails
// (a firewall that lets only the gRPC port through): the calls go over gRPC,
// and the data plane is tried again a minute later.
//
// Errors have RemotePsClient's form ("ps <target>: ..."): the server's status
// as it answered, UNAVAILABLE when the connection breaks (the PS died or
// restarted: the next call asks for the port again), DEADLINE_EXCEEDED after
// the call timeout. A connection that saw any error is closed, not reused.
//
// Thread-safe.
#ifndef PSCLUSTER_PS_SERVICE_DATA_PLANE_CLIENT_H_
#define PSCLUSTER_PS_SERVICE_DATA_PLANE_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/ps_client.h"
#include "protos/ps.grpc.pb.h"
#include "rpc/frame_socket.h"
#include "rpc/tls_stream.h"

namespace pscluster {

class DataPlaneClient {
 public:
  struct Options {
    std::string target;  // the PS's gRPC "host:port"
    std::chrono::milliseconds call_timeout{30000};
    bool wait_for_ready = false;
    // How long to stay on gRPC after the data plane could not be used.
    absl::Duration retry_after = absl::Minutes(1);
    // A pooled connection unused for this long is closed, not reused: well
    // under the PS's idle timeout (DataPlaneServer::Options::idle_timeout,
    // 10 min), so a call never races the PS closing the connection under it.
    absl::Duration max_idle = absl::Minutes(5);
  };

  // `stub` (the gRPC client's) must outlive this. Reads the process's
  // transport (TLS or not) now.
  DataPlaneClient(Options options, ParameterServer::Stub* stub);

  // A connection for one call: null when this call should go over gRPC; an
  // error (the discovery RPC's, with the PS unreachable) to return as the
  // call's own.
  absl::StatusOr<std::unique_ptr<FrameStream>> Acquire();

  // Sends `request` on `connection` and returns at once; Wait reads the
  // answer. The connection goes back to the pool when the call succeeded.
  std::unique_ptr<PendingPsCall> StartPush(std::unique_ptr<FrameStream> connection,
                                           const PushRequest& request, PushResponse* response);
  absl::Status Pull(std::unique_ptr<FrameStream> connection, const PullRequest& request,
                    PullResponse* response);

 private:
  class Call;

  // Connects to the data port (and does the TLS handshake under TLS).
  absl::StatusOr<std::unique_ptr<FrameStream>> Dial(int port, absl::Time deadline);
  // Asks the PS for its data port (mu_ not held).
  absl::StatusOr<int> Discover();
  // Puts a connection that finished a call cleanly back for the next one.
  void Release(std::unique_ptr<FrameStream> connection);
  // After a broken connection: ask for the port again on the next call.
  void Forget();
  absl::Status Named(const absl::Status& status) const;

  const Options options_;
  ParameterServer::Stub* const stub_;
  std::string host_;
  bool usable_target_ = false;
  // Under TLS: the client side's context (null when its creation failed:
  // then gRPC only). Null in plaintext.
  bool tls_ = false;
  std::unique_ptr<TlsContext> tls_context_;
  std::string tls_peer_name_;  // what the PS's certificate must name

  absl::Mutex mu_;
  int port_ ABSL_GUARDED_BY(mu_) = 0;  // 0: not known
  absl::Time retry_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Connections back from a clean call, and since when they are unused.
  struct Idle {
    std::unique_ptr<FrameStream> connection;
    absl::Time since;
  };
  std::vector<Idle> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_SERVICE_DATA_PLANE_CLIENT_H_
