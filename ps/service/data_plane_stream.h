// DataPlaneSocketStream: the server's side of a plaintext data-plane
// connection (ps/service/data_plane_connection.h): a FrameStream over a
// blocking TCP socket that reads ahead into a buffer lent to it for a Turn,
// so that a small frame (its header, sizes, meta and payloads) comes off the
// socket with one recv instead of one recv and one setsockopt(SO_RCVTIMEO)
// per piece, as rpc/frame_socket.h's FdStream reads. Writes are one sendmsg
// while the socket takes the whole frame at once.
//
// Only the reads that fit the buffer go through it: a read of at least the
// buffer's size goes straight into the caller's memory (after the bytes
// already read ahead), so a large tensor still costs one kernel copy and
// at most a buffer's worth of user-space copy. The buffer is lent per Turn
// (a pool thread's, not the connection's), so an idle connection holds none;
// bytes still unread when it is taken back (a client that sent its next frame
// before its push was answered) move into the stream's own memory.
//
// Waiting is bounded by the deadlines as FdStream's: reads wait with poll(2)
// until the deadline; a write that the socket cannot take at once, and a
// large read, fall back to FdStream's blocking calls under
// SO_SNDTIMEO / SO_RCVTIMEO.
//
// Not thread-safe: one call at a time, as every FrameStream.
#ifndef PSCLUSTER_PS_SERVICE_DATA_PLANE_STREAM_H_
#define PSCLUSTER_PS_SERVICE_DATA_PLANE_STREAM_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "rpc/frame_socket.h"

namespace pscluster {

class DataPlaneSocketStream final : public FrameStream {
 public:
  // Reads and writes `fd`, which the caller keeps and closes.
  explicit DataPlaneSocketStream(int fd) : fd_(fd), plain_(fd) {}

  // Reads ahead into `buffer` from now until Return. REQUIRES: no buffer is
  // lent now; `buffer` outlives the lending.
  void Lend(absl::Span<char> buffer);
  // Stops using the lent buffer: bytes read ahead and not yet read move
  // into the stream's own memory. Without a lent buffer the stream reads
  // exactly what is asked.
  void Return();

  // Takes what the socket holds now into the lent buffer, without waiting.
  // True when there are bytes to read now (taken now or before). False when
  // there are none, the peer closed, or no buffer is lent: the next read
  // says which.
  bool TryReadAhead();

  int fd() const override { return fd_; }
  absl::Status ReadFirstByte(char* byte, absl::Time deadline, bool* closed) override;
  absl::Status ReadFull(char* data, size_t size, absl::Time deadline) override;
  absl::Status WritePieces(absl::Span<const absl::string_view> pieces,
                           absl::Time deadline) override;
  bool HasBufferedBytes() const override { return begin_ < end_; }

 private:
  // Reads what the socket has (at least one byte, waiting until `deadline`)
  // into the lent buffer, which is empty. `*closed`: the peer ended the
  // stream first.
  absl::Status Fill(absl::Time deadline, bool* closed);
  // Copies up to `size` buffered bytes to `data`; returns how many.
  size_t Take(char* data, size_t size);

  const int fd_;
  FdStream plain_;  // the blocking calls, and reads without a lent buffer
  // The buffer read from: the lent one, or own_ for bytes kept over a Return
  // (then capacity_ is 0: nothing more is read into it).
  char* buffer_ = nullptr;
  size_t capacity_ = 0;
  size_t begin_ = 0;  // the next byte to read
  size_t end_ = 0;    // past the last byte read ahead
  std::string own_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_SERVICE_DATA_PLANE_STREAM_H_
