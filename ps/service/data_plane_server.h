// DataPlaneServer: a PS's raw-socket data plane. Serves Push and Pull — the
// same JobStores calls, checks and pscluster_rpc_* metrics as the gRPC
// methods of ParameterServerService — as frames on TCP connections
// (ps/service/data_plane_wire.h), plaintext or mutual TLS (Options::tls),
// with one thread per connection reading
// each request straight into that connection's own reused messages and
// writing the answer from the response's own buffers.
//
// Why: on the gRPC path a round trip of a few MiB spends most of its time in
// HTTP/2 framing, thread hand-offs and protobuf copies
// (bench/results/2026-12-01-data-plane.md); here it is two kernel copies per
// direction and the optimizer.
//
// Workers find the port with ParameterServer.DataPlane (RemotePsClient does,
// and falls back to gRPC when there is none). Everything else (create,
// checkpoints, stats) stays on gRPC. When the process's transport is TLS,
// ps_server gives the data plane the same certificate, key and CA: each
// connection first completes a TLS 1.3 handshake (a client certificate
// signed by the cluster CA is required; within the first-frame deadline, on
// the connection's own thread), and the certificate's role (rpc/peer_role.h)
// must be "worker" or "coordinator" (or none), as for gRPC's Push and Pull:
// another role's first frame is answered PERMISSION_DENIED and the
// connection closed. A failed handshake closes the connection, serving
// nothing.
//
// A connection whose frames are malformed (bad magic, too large, payloads
// that do not match the meta) is answered with the error and closed; a
// request that fails in the core (unknown variable, wrong shape) is answered
// with its status and the connection stays open, as with gRPC.
//
// Authenticate before allocate. The port is open to anyone who can reach
// it, so what a stranger can make the PS hold is bounded:
// - Every frame's meta is checked before any of its payloads is read:
//   JobStores::CheckPushAuth / CheckPullAuth (the job is held here; a keyed
//   job's lease, or a pull's ControlAuth). A frame that fails is answered
//   with that status (PERMISSION_DENIED, NOT_FOUND, ...); its payloads are
//   then read into a small scratch buffer and dropped (so that the sender,
//   still writing them, sees the answer rather than a reset), never stored,
//   and the connection is closed.
// - Until a connection's first frame has passed that check it is
//   "unproven": its meta may be at most max_unproven_meta_bytes, its first
//   frame must start within min(idle_timeout, frame_timeout), and at most
//   max_unproven_connections of them are open at once (more are closed at
//   once).
// - No buffer is allocated at the size a header announces: buffers grow as
//   bytes arrive (ReadGrowing, rpc/frame_socket.h). Each growth is first
//   counted against max_pending_bytes (the bytes of frames still arriving,
//   over all connections) and reserved from the PS's MemoryBudget (the one
//   --max_memory_bytes bounds); either refusing answers RESOURCE_EXHAUSTED
//   naming its limit and closes the connection. The request buffers a
//   connection keeps for its next call stay reserved until they are freed
//   (ReleaseBuffers, a request or answer over 160 MiB, the connection's
//   end). Answers (PushResponse, PullResponse) are not counted.
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
#include "ps/core/memory_budget.h"
#include "rpc/frame_socket.h"
#include "rpc/handler.h"
#include "rpc/tls_stream.h"

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
    // Connections that have not yet had a frame pass the job check beyond
    // this are closed at once: strangers cannot take every slot.
    int max_unproven_connections = 64;
    // The largest meta of an unproven connection's frame (a proven one's is
    // bounded by max_message_bytes only). A push's meta takes about 100
    // bytes per variable.
    int64_t max_unproven_meta_bytes = 256 << 10;
    // The most bytes all connections together may have allocated for frames
    // still arriving (meta, payload sizes, growth of payload buffers past
    // what a connection kept from its last call); a growth past it is
    // RESOURCE_EXHAUSTED. One frame is bounded by max_message_bytes.
    int64_t max_pending_bytes = int64_t{1} << 30;
    // The budget connection buffers are reserved from: ps_server passes the
    // one its JobStores share (--max_memory_bytes), so parameters and bytes
    // in flight count against one limit. Null: not counted.
    std::shared_ptr<MemoryBudget> memory_budget;
    // A connection that sends nothing for this long is closed, so idle
    // strangers do not hold connections and threads for ever. Clients drop
    // pooled connections well before (DataPlaneClient::Options::max_idle).
    absl::Duration idle_timeout = absl::Minutes(10);
    // A frame, once its first byte has arrived, must be read whole within
    // this; an answer must be taken by the client within it.
    absl::Duration frame_timeout = absl::Seconds(60);
    // Mutual TLS: a server-side context (TlsContext::Side::kServer) with the
    // process's certificate, key and cluster CA. Null: plaintext.
    std::shared_ptr<const TlsContext> tls;
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
  // Open connections that have not yet had a frame pass the job check.
  int unproven_connections() {
    absl::MutexLock lock(&mu_);
    return unproven_;
  }
  // Bytes allocated for frames still arriving, over all connections.
  int64_t pending_bytes() const { return pending_.load(); }
  // Bytes of the buffers connections hold for requests (frames in flight and
  // those kept for the next call), as reserved from the memory budget.
  int64_t buffer_bytes() const { return buffer_bytes_.load(); }

  // Frees the request and answer buffers every connection keeps for its next
  // call (at once for an idle connection, after its call for a busy one),
  // giving their reservation back to the memory budget.
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

    const int fd;
    absl::Mutex mu;                    // held while a call is served
    std::atomic<bool> release{false};  // ReleaseBuffers came (set before trying mu)
    PushRequest push ABSL_GUARDED_BY(mu);
    PushResponse pushed ABSL_GUARDED_BY(mu);
    PullRequest pull ABSL_GUARDED_BY(mu);
    PullResponse pulled ABSL_GUARDED_BY(mu);
    // Bytes reserved for the payload buffers of `push` and `pull`.
    int64_t kept_bytes ABSL_GUARDED_BY(mu) = 0;
  };

  // What one connection's thread has reserved besides its kept buffers.
  struct FrameBytes {
    int64_t frame = 0;  // growth for the frame in flight (also in pending_)
    int64_t head = 0;   // the reused FrameHead's meta and sizes
  };

  void AcceptLoop();
  void Serve(std::shared_ptr<Connection> c);
  // Counts `bytes` a frame in flight is about to allocate against
  // max_pending_bytes and reserves them from the budget (FrameGrowth).
  absl::Status ReserveFrameBytes(uint64_t bytes, FrameBytes* reserved);
  // After a frame (read, refused or failed): it is no longer pending, and the
  // reservations match the buffers `c` and `head` hold now.
  void EndFrame(Connection* c, const FrameHead& head, FrameBytes* reserved)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu);
  // Frees `c`'s kept messages and their reservation.
  void Release(Connection* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu);
  // Adds `delta` (may be negative) to buffer_bytes_ and the budget.
  void AdjustBufferBytes(int64_t delta);

  const Options options_;
  JobStores* const jobs_;
  RpcHandler* const handler_;
  UniqueFd listener_;
  int port_ = 0;
  std::thread acceptor_;
  std::atomic<int64_t> calls_{0};
  std::atomic<int64_t> pending_{0};
  std::atomic<int64_t> buffer_bytes_{0};

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Open connections by descriptor, shut down by Shutdown.
  absl::flat_hash_map<int, std::shared_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  int unproven_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_SERVICE_DATA_PLANE_SERVER_H_
