// DataPlaneConnection: one connection of the PS's raw data plane
// (ps/service/data_plane_server.h) — its socket, its stream (plain or TLS),
// the request and answer messages it reuses call after call, and the frame
// protocol: TLS handshake, head, job check, payloads, the core call, the
// answer. It holds no thread: the server's pool runs a Turn whenever the
// socket is readable (or a push it started has completed), and the Turn says
// whether to park the connection again, to wait for its push, to queue it
// (more frames at hand than one Turn serves), or to close it.
//
// Thread-safe: Turn, Close and RequestRelease may come from any thread; one
// Turn runs at a time (the server never runs two of one connection at once),
// and a push's completion may come from the core's thread.
#ifndef PSCLUSTER_PS_SERVICE_DATA_PLANE_CONNECTION_H_
#define PSCLUSTER_PS_SERVICE_DATA_PLANE_CONNECTION_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "protos/ps.pb.h"
#include "ps/core/job_stores.h"
#include "ps/service/data_plane_stream.h"
#include "rpc/frame_socket.h"
#include "rpc/tls_stream.h"

namespace pscluster {

class DataPlaneConnection : public std::enable_shared_from_this<DataPlaneConnection> {
 public:
  // What the connection asks of its server: accounting over all connections,
  // metrics, and taking it up again when a push it started completes.
  class Host {
   public:
    virtual ~Host() = default;
    // Counts `bytes` a frame in flight is about to allocate against the
    // pending limit and reserves them from the budget; RESOURCE_EXHAUSTED
    // naming the limit when either refuses.
    virtual absl::Status ReserveFrameBytes(int64_t bytes) = 0;
    // `bytes` reserved by ReserveFrameBytes are no longer pending (they stay
    // buffer bytes until AdjustBufferBytes gives them back).
    virtual void FrameBytesArrived(int64_t bytes) = 0;
    // Adds `delta` (may be negative) to the buffer bytes and the budget.
    virtual void AdjustBufferBytes(int64_t delta) = 0;
    // The connection's first frame passed the job check.
    virtual void Proven(int fd) = 0;
    // A Push or Pull was answered with `status` (errors included).
    virtual void Answered(const char* method, const absl::Status& status, absl::Time start) = 0;
    // A push this connection started (Turn returned kWaitForPush) has its
    // answer: run a Turn of it again. May come from any thread, before or
    // after the Turn that started the push has returned.
    virtual void Resume(std::shared_ptr<DataPlaneConnection> connection) = 0;
  };

  struct Settings {
    int64_t max_message_bytes = 0;
    int64_t max_unproven_meta_bytes = 0;
    absl::Duration frame_timeout;
    // Null: plaintext.
    std::shared_ptr<const TlsContext> tls;
  };

  // `fd`: an accepted socket, which the connection owns and closes when
  // destroyed. `first_frame_deadline`: when the TLS handshake and the first
  // frame's first byte must have come.
  DataPlaneConnection(int fd, absl::Time first_frame_deadline, const Settings& settings,
                      JobStores* jobs, Host* host);
  ~DataPlaneConnection();

  int fd() const { return fd_.get(); }

  // The size of the buffer a Turn is lent (DataPlaneSocketStream): a frame
  // up to about this size comes off a plaintext socket with one recv.
  static constexpr size_t kReadAheadBytes = 16 << 10;
  // Frames a Turn serves at most (the first, then those whose bytes are
  // already there), so that a busy connection does not keep a thread from
  // the others.
  static constexpr int kMaxFramesPerTurn = 32;

  enum class Next {
    kPark,         // wait for the socket to be readable, then Turn again
    kWaitForPush,  // Host::Resume comes when its push is answered
    kAgain,        // bytes are at hand, but others' turn first: queue it
    kClose,        // done (the peer's end, an error, Shutdown): call Close
  };
  // Serves what there is to serve now: the TLS handshake (blocking, until the
  // first-frame deadline), then frames while their bytes are at hand (one
  // frame, then more while the stream holds bytes it read ahead or, in
  // plaintext, the socket has the next one already: served by this thread,
  // without a trip through epoll; at most kMaxFramesPerTurn), or the answer
  // of a push that completed. `read_ahead` (the calling thread's, at least
  // kReadAheadBytes) is lent to a plaintext stream for the Turn; it may be
  // empty (then every piece of a frame is read with a call of its own).
  Next Turn(absl::Span<char> read_ahead);

  // Frees what the connection holds (its messages, their reservations, the
  // TLS state) once its last Turn has returned; the socket closes with the
  // object.
  void Close();

  // Frees the request and answer buffers kept for the next call: at once
  // when no call is being served, else when it has been answered.
  void RequestRelease();

 private:
  // What this connection has reserved besides its kept buffers.
  struct FrameBytes {
    int64_t frame = 0;  // growth for the frame in flight (also pending)
    int64_t head = 0;   // the reused FrameHead's meta and sizes
  };

  // Turn's work, with the read-ahead buffer lent; `opening`: the stream was
  // opened by this Turn.
  Next TurnLocked(bool opening) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads and serves one frame. False: close the connection.
  bool ServeFrame() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers the push that completed. False: close the connection.
  bool FinishPush() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The stream: plain, or after a TLS handshake. False: close.
  bool Open() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a frame (read, refused or failed): it is no longer pending, and the
  // reservations match the buffers the messages and head_ hold now.
  void EndFrame() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees the kept messages and their reservation.
  void Release() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Release, and the head's buffers too, when RequestRelease came.
  void ReleaseIfAsked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const UniqueFd fd_;
  const absl::Time first_frame_deadline_;
  const Settings settings_;
  JobStores* const jobs_;
  Host* const host_;

  absl::Mutex mu_;                    // held during a Turn
  std::atomic<bool> release_{false};  // RequestRelease came (set before trying mu_)
  std::unique_ptr<FrameStream> stream_ ABSL_GUARDED_BY(mu_);
  // stream_ in plaintext, else null.
  DataPlaneSocketStream* plain_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool opened_ ABSL_GUARDED_BY(mu_) = false;
  bool proven_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // OK, or why this connection's certificate may not Push or Pull.
  absl::Status role_refusal_ ABSL_GUARDED_BY(mu_);
  // A call's messages are in use (from its frame until its answer is sent).
  bool in_call_ ABSL_GUARDED_BY(mu_) = false;
  PushRequest push_ ABSL_GUARDED_BY(mu_);
  PushResponse pushed_ ABSL_GUARDED_BY(mu_);
  PullRequest pull_ ABSL_GUARDED_BY(mu_);
  PullResponse pulled_ ABSL_GUARDED_BY(mu_);
  // Bytes reserved for the payload buffers of push_ and pull_.
  int64_t kept_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  FrameHead head_ ABSL_GUARDED_BY(mu_);  // reused: its meta's buffer is kept
  FrameBytes reserved_ ABSL_GUARDED_BY(mu_);
  // A request's payload buffers while its meta is checked.
  std::vector<std::string> kept_ ABSL_GUARDED_BY(mu_);

  // A push in flight (Turn returned kWaitForPush until its answer is sent).
  bool awaiting_push_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time push_start_ ABSL_GUARDED_BY(mu_);
  // Two owners decrement it, the Turn that called PushAsync when it returns
  // and the push's callback; the one that takes it to 0 goes on.
  std::atomic<int> push_owners_{0};
  // Written by the push's callback before it decrements push_owners_, read
  // after push_owners_ reached 0.
  absl::Status push_result_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_SERVICE_DATA_PLANE_CONNECTION_H_
