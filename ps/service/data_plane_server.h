// DataPlaneServer: a PS's raw-socket data plane. Serves Push and Pull — the
// same JobStores calls, checks and pscluster_rpc_* metrics as the gRPC
// methods of ParameterServerService — as frames on plain TCP connections
// (ps/service/data_plane_wire.h), with one thread per connection reading
// each request straight into that connection's own reused messages and
// writing the answer from the response's own buffers.
//
// Why: on the gRPC path a round trip of a few MiB spends most of its time in
// HTTP/2 framing, thread hand-offs and protobuf copies
// (bench/results/2026-12-01-data-plane.md); here it is two kernel copies per
// direction and the optimizer.
//
// Workers find the port with ParameterServer.DataPlane (GrpcPsClient does,
// and falls back to gRPC when there is none). Everything else (create,
// checkpoints, stats) stays on gRPC. The data plane is plaintext: ps_server
// starts it only when the process's transport is not TLS.
//
// A connection whose frames are malformed (bad magic, too large, payloads
// that do not match the meta) is answered with the error and closed; a
// request that fails in the core (unknown variable, wrong shape, a lease) is
// answered with its status and the connection stays open, as with gRPC.
#ifndef PSCLUSTER_PS_SERVICE_DATA_PLANE_SERVER_H_
#define PSCLUSTER_PS_SERVICE_DATA_PLANE_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "protos/ps.pb.h"
#include "ps/core/job_stores.h"
#include "rpc/frame_socket.h"
#include "rpc/handler.h"

namespace pscluster {

class DataPlaneServer {
 public:
  struct Options {
    // Where to listen: the host of the PS's gRPC address, and 0 for a free port.
    std::string host = "127.0.0.1";
    int port = 0;
    // The largest frame accepted (meta and tensors); the process's
    // MaxMessageBytes, as gRPC's limit.
    int64_t max_message_bytes = int64_t{256} << 20;
    // Connections beyond this are closed at once (each has a thread).
    int max_connections = 512;
    // A connection that sends nothing for this long is closed, so idle
    // strangers do not hold connections and threads for ever. Clients drop
    // pooled connections well before (DataPlaneClient::Options::max_idle).
    absl::Duration idle_timeout = absl::Minutes(10);
    // A frame, once its first byte has arrived, must be read whole within
    // this; an answer must be taken by the client within it.
    absl::Duration frame_timeout = absl::Seconds(60);
  };

  // Listens and starts accepting. `jobs` and `handler` (the gRPC service's:
  // one set of metrics) must outlive the server; `handler` may be null.
  static absl::StatusOr<std::unique_ptr<DataPlaneServer>> Start(const Options& options,
                                                                JobStores* jobs,
                                                                RpcHandler* handler);

  // Shuts down.
  ~DataPlaneServer();

  int port() const { return port_; }
  // Connections open now.
  int connections() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(connections_.size());
  }
  // Push and Pull requests answered so far (errors included).
  int64_t calls() const { return calls_.load(); }

  // Frees the request and answer buffers every connection keeps for its next
  // call (at once for an idle connection, after its call for a busy one).
  // ParameterServerService::EndJob calls it: the next job's tensors differ.
  void ReleaseBuffers();

  // Stops accepting, closes every connection (a call being served is
  // answered first when its handler returns) and joins every thread.
  // Idempotent.
  void Shutdown();

 private:
  DataPlaneServer(const Options& options, JobStores* jobs, RpcHandler* handler)
      : options_(options), jobs_(jobs), handler_(handler) {}

  // One connection: its socket and the messages it reuses call after call.
  struct Connection {
    explicit Connection(int fd) : fd(fd) {}
    // Frees the kept buffers. REQUIRES: mu held.
    void Release();

    const int fd;
    absl::Mutex mu;                    // held while a call is served
    std::atomic<bool> release{false};  // ReleaseBuffers came while busy
    PushRequest push;
    PushResponse pushed;
    PullRequest pull;
    PullResponse pulled;
  };

  void AcceptLoop();
  void Serve(std::shared_ptr<Connection> c);

  const Options options_;
  JobStores* const jobs_;
  RpcHandler* const handler_;
  UniqueFd listener_;
  int port_ = 0;
  std::thread acceptor_;
  std::atomic<int64_t> calls_{0};

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Open connections by descriptor, shut down by Shutdown.
  absl::flat_hash_map<int, std::shared_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_SERVICE_DATA_PLANE_SERVER_H_
