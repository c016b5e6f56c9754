// Frames on a TCP socket: the transport of pscluster's raw data plane
// (ps/service/data_plane_server.h), which moves tensors between workers and PS
// without gRPC's HTTP/2 framing, thread hand-offs and protobuf copies.
//
// A frame is a fixed 32-byte header, the sizes of its payloads (8 bytes
// each), a small serialized protobuf `meta`, then the payloads' raw bytes:
//
//   magic "PSDP" | version | kind | status code | meta bytes | payload count
//   | payload bytes | sizes[count] | meta | payload 0 | payload 1 | ...
//
// Payloads are written from the caller's memory (sendmsg over iovecs) and
// read straight into the caller's buffers, so a tensor costs one kernel copy
// at each end and no user-space copy. Everything is little-endian, the
// host's order (pscluster's tensors are little-endian too).
//
// Frames travel on a FrameStream: a plain socket (FdStream, below) or mutual
// TLS on one (TlsStream, rpc/tls_stream.h); the frame logic is the same for
// both. The functions taking an `int fd` read and write that socket in
// plaintext.
//
// Sockets are blocking; every read and write is bounded by a deadline
// (SO_RCVTIMEO / SO_SNDTIMEO set to the time left), and a header announcing
// more than the limit the reader gives is refused before anything is
// allocated for it. Within the limit, a size a header announces is never
// allocated on its word alone: a buffer too small for what is announced grows
// as bytes arrive (ReadGrowing), and a reader may account for (or refuse)
// each growth before it is made (FrameGrowth), so a peer that announces much
// and sends little is given little memory.
#ifndef PSCLUSTER_RPC_FRAME_SOCKET_H_
#define PSCLUSTER_RPC_FRAME_SOCKET_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace pscluster {

// Owns a file descriptor; closes it when destroyed.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset();

 private:
  int fd_ = -1;
};

// Splits "host:port" / "[v6]:port" into host (brackets removed) and port.
// INVALID_ARGUMENT for anything else (a gRPC URI such as "dns:///h:1" or
// "unix:/path", a port outside 0..65535).
absl::Status SplitHostPort(absl::string_view address, std::string* host, int* port);

// A listening TCP socket on `host` (a name or address; "0.0.0.0", "::" for
// every interface) and `port` (0: a free one). `*bound_port` gets the port.
absl::StatusOr<UniqueFd> ListenTcp(const std::string& host, int port, int* bound_port);

// Connects to host:port, trying each address the name resolves to, until
// `deadline`. UNAVAILABLE naming the address when none accepts;
// DEADLINE_EXCEEDED when the deadline passed first.
absl::StatusOr<UniqueFd> DialTcp(const std::string& host, int port, absl::Time deadline);

// TCP_NODELAY on a connected socket (frames are written whole).
absl::Status SetNoDelay(int fd);

// Sets `option` (SO_RCVTIMEO or SO_SNDTIMEO) of `fd` to the time left before
// `deadline` (at least 1 ms; no timeout for absl::InfiniteFuture()), so that
// a blocking read or write ends with EAGAIN then. UNAVAILABLE if it fails.
absl::Status SetSocketTimeout(int fd, int option, absl::Time deadline);

// A connected byte stream that frames are read from and written to. Not
// thread-safe: one call at a time. Errors: UNAVAILABLE when the peer closed
// or the connection broke, DEADLINE_EXCEEDED when `deadline` passed (the
// stream is then unusable).
class FrameStream {
 public:
  virtual ~FrameStream() = default;

  // The socket underneath (to poll or shut it down); owned by the stream.
  virtual int fd() const = 0;
  // Reads one byte, waiting for it until `deadline` (absl::InfiniteFuture():
  // for ever). `*closed` is set when the peer ended the stream cleanly first.
  virtual absl::Status ReadFirstByte(char* byte, absl::Time deadline, bool* closed) = 0;
  // Reads exactly `size` bytes into `data`.
  virtual absl::Status ReadFull(char* data, size_t size, absl::Time deadline) = 0;
  // Writes every piece, in order.
  virtual absl::Status WritePieces(absl::Span<const absl::string_view> pieces,
                                   absl::Time deadline) = 0;
  // Whether bytes already taken off the socket wait in the stream (TLS keeps
  // records it read ahead): then the socket not being readable does not mean
  // that there is nothing to read. A plain socket keeps none.
  virtual bool HasBufferedBytes() const { return false; }
};

// A plain TCP socket: sendmsg over iovecs, recv(MSG_WAITALL) straight into
// the caller's buffers.
class FdStream final : public FrameStream {
 public:
  // Owns `fd` and closes it when destroyed.
  explicit FdStream(UniqueFd fd) : owned_(std::move(fd)), fd_(owned_.get()) {}
  // Reads and writes `fd`, which the caller keeps and closes.
  explicit FdStream(int fd) : fd_(fd) {}

  int fd() const override { return fd_; }
  absl::Status ReadFirstByte(char* byte, absl::Time deadline, bool* closed) override;
  absl::Status ReadFull(char* data, size_t size, absl::Time deadline) override;
  absl::Status WritePieces(absl::Span<const absl::string_view> pieces,
                           absl::Time deadline) override;

 private:
  UniqueFd owned_;
  const int fd_;
};

inline constexpr uint32_t kFrameMagic = 0x50445350;  // "PSDP" in memory order
inline constexpr uint16_t kFrameVersion = 1;
// More payloads than this in one frame is refused as malformed.
inline constexpr uint32_t kMaxFramePayloads = 1 << 20;

// A frame's header, as read: the meta, and the payloads' sizes (not yet read).
struct FrameHead {
  uint16_t kind = 0;
  int32_t code = 0;  // a status code, in answers
  std::string meta;
  std::vector<uint64_t> payload_sizes;
  uint64_t payload_bytes = 0;
  // When the whole frame must have been read: its first byte's arrival plus
  // the timeout given to ReadFrameHead. Read the payloads until then.
  absl::Time deadline;
};

// A frame's fixed header and payload sizes, the bytes WriteFrame sends before
// the meta. `payload_bytes` is the total the header announces (WriteFrame
// gives the sum of `payload_sizes`; a test may give another to make a bad
// frame).
std::string EncodeFrameHead(uint16_t kind, int32_t code, uint32_t meta_bytes,
                            absl::Span<const uint64_t> payload_sizes, uint64_t payload_bytes);

// Writes one frame. UNAVAILABLE when the peer is gone; DEADLINE_EXCEEDED when
// the peer did not take the bytes in time (the connection is then unusable).
absl::Status WriteFrame(FrameStream& stream, uint16_t kind, int32_t code, absl::string_view meta,
                        absl::Span<const absl::string_view> payloads, absl::Time deadline);
absl::Status WriteFrame(int fd, uint16_t kind, int32_t code, absl::string_view meta,
                        absl::Span<const absl::string_view> payloads, absl::Time deadline);

// Asked before a reader allocates memory for bytes a peer has announced but
// not yet sent, with the bytes about to be allocated (an upper bound: the
// allocator may round up). A non-OK status (e.g. RESOURCE_EXHAUSTED from a
// memory budget) stops the read, and the read returns it; the connection is
// then out of step. An empty FrameGrowth: nothing is asked.
using FrameGrowth = std::function<absl::Status(uint64_t bytes)>;

// What ReadFrameHead accepts of a frame.
struct FrameLimits {
  // The largest frame, meta and payloads together: RESOURCE_EXHAUSTED past it.
  int64_t max_bytes = 0;
  // The largest meta: RESOURCE_EXHAUSTED past it (a server allows a stranger
  // only a small one).
  int64_t max_meta_bytes = std::numeric_limits<int64_t>::max();
  // Asked before the buffers of the payload sizes and the meta grow.
  FrameGrowth grow;
};

// Reads a frame's header, sizes and meta. Waits for the first byte until
// `first_byte_deadline` (absl::InfiniteFuture(): until the peer sends or
// closes), then gives the whole frame `timeout` (head->deadline). `*closed` is set when the peer
// closed the connection before the first byte (a clean end, also an error here). INVALID_ARGUMENT
// names a bad magic/version, too many payloads, or sizes that do not add up; RESOURCE_EXHAUSTED a
// frame or meta past `limits`, or what `limits.grow` refused. `head` may be reused from the last
// frame: the capacity of its sizes and meta is read into (ReadGrowing).
absl::Status ReadFrameHead(FrameStream& stream, const FrameLimits& limits,
                           absl::Time first_byte_deadline, absl::Duration timeout, FrameHead* head,
                           bool* closed);
absl::Status ReadFrameHead(int fd, const FrameLimits& limits, absl::Time first_byte_deadline,
                           absl::Duration timeout, FrameHead* head, bool* closed);
// As above, with only a frame limit of `max_bytes`.
absl::Status ReadFrameHead(FrameStream& stream, int64_t max_bytes, absl::Time first_byte_deadline,
                           absl::Duration timeout, FrameHead* head, bool* closed);
absl::Status ReadFrameHead(int fd, int64_t max_bytes, absl::Time first_byte_deadline,
                           absl::Duration timeout, FrameHead* head, bool* closed);

// Reads exactly `size` bytes into `data`.
absl::Status ReadFull(int fd, char* data, size_t size, absl::Time deadline);

// Reads exactly `size` bytes into `*buffer`, whose size becomes `size`. When
// its capacity already holds them (a buffer reused from the last frame) they
// are read straight in. Otherwise what it holds is filled first, and it then
// grows as bytes arrive, to at most twice what has arrived (at least 64 KiB
// at a time, never past `size`), `grow` asked before each growth: a peer
// that announces `size` and sends k bytes costs about 2 k, not `size`.
absl::Status ReadGrowing(FrameStream& stream, size_t size, std::string* buffer, absl::Time deadline,
                         const FrameGrowth& grow = {});
absl::Status ReadGrowing(int fd, size_t size, std::string* buffer, absl::Time deadline,
                         const FrameGrowth& grow = {});

// Reads and drops `size` bytes through a small fixed buffer (nothing is
// allocated for them): the rest of a frame that is refused but whose sender
// should still see the answer rather than a reset connection.
absl::Status Discard(FrameStream& stream, uint64_t size, absl::Time deadline);
absl::Status Discard(int fd, uint64_t size, absl::Time deadline);

}  // namespace pscluster

#endif  // PSCLUSTER_RPC_FRAME_SOCKET_H_
