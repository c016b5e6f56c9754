// DataPlaneServer: a PS's raw-socket data plane. Serves Push and Pull — the
// same JobStores calls, checks and pscluster_rpc_* metrics as the gRPC
// methods of ParameterServerService — as frames on TCP connections
// (ps/service/data_plane_wire.h), plaintext or mutual TLS (Options::tls),
// reading each request straight into that connection's own reused messages
// (ps/service/data_plane_connection.h; in plaintext a frame's first 16 KiB
// through the serving thread's read-ahead buffer) and writing the answer
// from the response's own buffers.
//
// Threads. A connection holds no thread. Idle connections are parked in one
// epoll set (one-shot), which a bounded pool of serving threads
// (Options::serving_threads) waits on: the thread epoll wakes for a readable
// connection serves frames while their bytes are at hand (a frame is read
// whole, blocking, within frame_timeout; then more while the stream holds
// bytes it read ahead, which epoll cannot see, or, in plaintext, while the
// next frame is already on the socket: up to
// DataPlaneConnection::kMaxFramesPerTurn, then it queues behind the others),
// and parks it again. In plaintext a small frame comes off the socket with
// one recv into the serving thread's buffer (ps/service/data_plane_stream.h)
// and its answer goes with one sendmsg. One more thread,
// the poller, accepts, and closes parked connections past their deadline. A
// push that waits for a synchronous step does not hold a pool thread: the
// core's callback queues its connection for the pool to answer.
// Unproven connections (below) are served by threads of their own, started
// when one is needed (every one is in a Turn) and kept, at most
// max_unproven_connections of them: a stranger that stalls mid-frame or mid-handshake holds one
// until its first-frame deadline, and can take no thread from proven workers nor from new ones. So
// thousands of connections cost a few KiB each (bench/results/2026-12-07-data-plane-pool.md), and a
// PS serves up to max_connections of them, bounded by the process's RLIMIT_NOFILE.
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
// signed by the cluster CA is required; on a thread for unproven connections
// when its first bytes come, never past the first-frame deadline), and the
// certificate's role (rpc/peer_role.h)
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
//   "unproven": its meta may be at most max_unproven_meta_bytes, its TLS
//   handshake and its first frame's first byte must come within
//   min(idle_timeout, frame_timeout) of its accept (a parked one is closed
//   then), at most max_unproven_connections of them are open at once (more
//   are closed at once), each served by its own thread while it is read.
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
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "ps/core/job_stores.h"
#include "ps/core/memory_budget.h"
#include "ps/service/data_plane_connection.h"
#include "rpc/frame_socket.h"
#include "rpc/handler.h"
#include "rpc/tls_stream.h"

namespace pscluster {

class DataPlaneServer final : private DataPlaneConnection::Host {
 public:
  struct Options {
    // Where to listen: the host of the PS's gRPC address, and 0 for a free port.
    std::string host = "127.0.0.1";
    int port = 0;
    // The largest frame accepted (meta and tensors); the process's
    // MaxMessageBytes, as gRPC's limit.
    int64_t max_message_bytes = int64_t{256} << 20;
    // Connections beyond this are closed at once, with a warning naming the
    // limit. The process's RLIMIT_NOFILE (soft) less 128 descriptors for the
    // rest of the process bounds it further (Start logs it when it does).
    int max_connections = 16384;
    // The pool's threads, serving proven connections when they are readable
    // (a frame being read or answered holds one). 0: max(4, 2 x the cores).
    int serving_threads = 0;
    // Connections that have not yet had a frame pass the job check beyond
    // this are closed at once: strangers cannot take every slot. It also
    // bounds the threads that serve them (besides the pool).
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
    // strangers do not hold connections for ever. Clients drop
    // pooled connections well before (DataPlaneClient::Options::max_idle).
    absl::Duration idle_timeout = absl::Minutes(10);
    // A frame, once its first byte has arrived, must be read whole within
    // this; an answer must be taken by the client within it.
    absl::Duration frame_timeout = absl::Seconds(60);
    // Mutual TLS: a server-side context (TlsContext::Side::kServer) with the
    // process's certificate, key and cluster CA. Null: plaintext.
    std::shared_ptr<const TlsContext> tls;
  };

  // Listens and starts accepting, with the poller and the serving threads.
  // `jobs` and `handler` (the gRPC service's: one set of metrics) must
  // outlive the server; `handler` may be null. Errors: ListenTcp's, or
  // INTERNAL when epoll cannot be set up.
  static absl::StatusOr<std::unique_ptr<DataPlaneServer>> Start(const Options& options,
                                                                JobStores* jobs,
                                                                RpcHandler* handler);

  // Shuts down.
  ~DataPlaneServer() override;

  int port() const { return port_; }
  // The most connections served at once: max_connections, or less when
  // RLIMIT_NOFILE is lower.
  int max_connections() const { return max_connections_; }
  // The pool's size.
  int serving_threads() const { return static_cast<int>(pool_.size()); }
  // Connections open now.
  int connections() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(slots_.size());
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
  DataPlaneServer(const Options& options, JobStores* jobs, RpcHandler* handler);

  // Where a connection is. Parked: armed in connections_epoll_ (a pool thread
  // that epoll wakes, or the poller's sweep, moves it on). Queued: in ready_ or ready_unproven_.
  // Serving: a pool thread runs its Turn. Waiting: its push is with the core.
  enum class State { kParked, kQueued, kServing, kWaitingForPush, kClosing };
  struct Slot {
    std::shared_ptr<DataPlaneConnection> connection;
    State state = State::kParked;
    bool proven = false;
    // Resume came while its Turn was still running.
    bool resumed = false;
    // Close it instead of running a Turn (Shutdown, epoll failed).
    bool close_next = false;
    absl::Time first_frame_deadline;
    // Parked: closed by the poller past this.
    absl::Time deadline;
  };

  // DataPlaneConnection::Host.
  absl::Status ReserveFrameBytes(int64_t bytes) override;
  void FrameBytesArrived(int64_t bytes) override;
  void AdjustBufferBytes(int64_t delta) override;
  void Proven(int fd) override;
  void Answered(const char* method, const absl::Status& status, absl::Time start) override;
  void Resume(std::shared_ptr<DataPlaneConnection> connection) override;

  // The poller: accepts, and closes parked connections past their deadline.
  void PollLoop();
  // Accepts every pending connection and parks it. Returns false when
  // accept failed for want of descriptors or memory.
  bool AcceptAll() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A thread of the pool: queued work first, else waits in epoll_wait for a
  // parked connection's bytes and serves it (an unproven one is queued for
  // ServeStrangers).
  void ServeLoop();
  // A thread serving unproven connections only.
  void ServeStrangers();
  // Runs a Turn of `connection` (or closes it), lending it the thread's
  // `read_ahead`, and parks, queues or closes it after.
  void Serve(int fd, const std::shared_ptr<DataPlaneConnection>& connection, bool close,
             absl::Span<char> read_ahead) ABSL_LOCKS_EXCLUDED(mu_);
  // After a Turn that returned `next`.
  void AfterTurn(int fd, const std::shared_ptr<DataPlaneConnection>& connection,
                 DataPlaneConnection::Next next) ABSL_LOCKS_EXCLUDED(mu_);
  // Queues `slot` (of `fd`) for the pool.
  void Enqueue(int fd, Slot* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Arms `fd` in the epoll set again for its next bytes.
  void Park(int fd, Slot* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Closes a connection no Turn runs for, and forgets it.
  void Finish(const std::shared_ptr<DataPlaneConnection>& connection) ABSL_LOCKS_EXCLUDED(mu_);
  // Wakes the poller.
  void Wake();
  // Wakes `threads` pool threads from epoll_wait.
  void WakePool(uint64_t threads);

  const Options options_;
  const DataPlaneConnection::Settings settings_;
  JobStores* const jobs_;
  RpcHandler* const handler_;
  UniqueFd listener_;
  UniqueFd epoll_;  // the poller's: the listener and wake_
  UniqueFd wake_;   // an eventfd: Shutdown wakes the poller
  // Parked connections (one-shot), which the pool's threads wait on, and
  // queued_: an eventfd semaphore in it, one unit per item of ready_.
  UniqueFd connections_epoll_;
  UniqueFd queued_;
  int port_ = 0;
  int max_connections_ = 0;
  absl::Duration sweep_interval_;
  std::thread poller_;
  std::vector<std::thread> pool_;
  std::atomic<int64_t> calls_{0};
  std::atomic<int64_t> pending_{0};
  std::atomic<int64_t> buffer_bytes_{0};

  // Lock order: a connection's own mutex (held during its Turn) before mu_.
  absl::Mutex mu_;
  absl::CondVar stranger_work_;  // ready_unproven_ has work, or the end
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Open connections by descriptor.
  absl::flat_hash_map<int, Slot> slots_ ABSL_GUARDED_BY(mu_);
  std::deque<int> ready_ ABSL_GUARDED_BY(mu_);           // proven ones
  std::deque<int> ready_unproven_ ABSL_GUARDED_BY(mu_);  // not yet past a job check
  int unproven_ ABSL_GUARDED_BY(mu_) = 0;
  // Threads serving unproven connections (started when more are queued than
  // threads not in a Turn, at most max_unproven_connections), and how many of
  // them are in a Turn.
  std::vector<std::thread> stranger_threads_ ABSL_GUARDED_BY(mu_);
  int strangers_in_turn_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_refusal_logged_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_SERVICE_DATA_PLANE_SERVER_H_
