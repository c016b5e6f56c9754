#include "rpc/frame_socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace pscluster {
namespace {

struct WireHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t kind;
  int32_t code;
  uint32_t meta_bytes;
  uint32_t payload_count;
  uint32_t reserved;
  uint64_t payload_bytes;
};
static_assert(sizeof(WireHeader) == 32, "the wire header is 32 bytes");

std::string ErrnoText() { return strerror(errno); }

// Sets SO_RCVTIMEO or SO_SNDTIMEO to the time left before `deadline`
// (at least 1 ms; 0 = block forever for an infinite deadline).
bool SetTimeout(int fd, int option, absl::Time deadline) {
  timeval tv{};
  if (deadline != absl::InfiniteFuture()) {
    const absl::Duration left = std::max(deadline - absl::Now(), absl::Milliseconds(1));
    tv = absl::ToTimeval(left);
  }
  return setsockopt(fd, SOL_SOCKET, option, &tv, sizeof(tv)) == 0;
}

// The error for a failed send/recv.
absl::Status IoError(const char* what, absl::Time deadline) {
  if (errno == EAGAIN || errno == EWOULDBLOCK) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(what, ": timed out"));
    }
    return absl::OkStatus();  // a timeout slice ended early: go on
  }
  return absl::UnavailableError(absl::StrCat(what, ": ", ErrnoText()));
}

// A buffer too small for what a peer announced grows by at least this much
// at a time (and at most to twice what has arrived).
constexpr size_t kGrowStepBytes = 64 << 10;

// ReadGrowing for a std::string or a std::vector of trivial values; `count`
// in elements.
template <typename Buffer>
absl::Status ReadGrowingInto(FrameStream& stream, size_t count, Buffer* buffer,
                             absl::Time deadline, const FrameGrowth& grow) {
  using T = typename Buffer::value_type;
  auto bytes = [buffer](size_t from) { return reinterpret_cast<char*>(buffer->data() + from); };
  if (buffer->capacity() >= count) {  // the steady state: a reused buffer
    buffer->resize(count);
    return stream.ReadFull(bytes(0), count * sizeof(T), deadline);
  }
  constexpr size_t kStep = kGrowStepBytes / sizeof(T);
  size_t arrived = 0;
  size_t target = std::min(count, std::max(buffer->capacity(), kStep));
  for (;;) {
    const size_t capacity = buffer->capacity();
    if (target > capacity) {
      if (grow) {
        if (absl::Status s = grow((target - capacity) * sizeof(T)); !s.ok()) return s;
      }
      // A fresh buffer of exactly `target` (growing in place may double the
      // capacity past it), with what has arrived copied over.
      Buffer bigger;
      bigger.reserve(target);
      bigger.assign(buffer->begin(), buffer->begin() + arrived);
      buffer->swap(bigger);
    }
    buffer->resize(target);
    if (absl::Status s = stream.ReadFull(bytes(arrived), (target - arrived) * sizeof(T), deadline);
        !s.ok()) {
      return s;
    }
    arrived = target;
    if (arrived == count) return absl::OkStatus();
    target = std::min(count, std::max(arrived + kStep, 2 * arrived));
  }
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    Reset();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void UniqueFd::Reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

absl::Status SplitHostPort(absl::string_view address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (address.find('/') != absl::string_view::npos || colon == absl::string_view::npos ||
      colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat("not a host:port address: \"", address, "\""));
  }
  absl::string_view h = address.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h.find(':') != absl::string_view::npos && address.front() != '[') {
    return absl::InvalidArgumentError(
        absl::StrCat("not a host:port address (IPv6 hosts need [brackets]): \"", address, "\""));
  }
  int p = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &p) || p < 0 || p > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("bad port in \"", address, "\""));
  }
  *host = std::string(h);
  *port = p;
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> ListenTcp(const std::string& host, int port, int* bound_port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int rc =
      getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rc)));
  }
  std::string last_error = "no address";
  UniqueFd result;
  for (addrinfo* a = found; a != nullptr && !result.valid(); a = a->ai_next) {
    UniqueFd fd(socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      last_error = ErrnoText();
      continue;
    }
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (a->ai_family == AF_INET6) {
      int zero = 0;  // "::" also takes IPv4, as gRPC's listeners do
      setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    }
    if (bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || listen(fd.get(), 128) != 0) {
      last_error = ErrnoText();
      continue;
    }
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      last_error = ErrnoText();
      continue;
    }
    *bound_port =
        ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                         : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    result = std::move(fd);
  }
  freeaddrinfo(found);
  if (!result.valid()) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", host, ":", port, ": ", last_error));
  }
  return result;
}

absl::StatusOr<UniqueFd> DialTcp(const std::string& host, int port, absl::Time deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rc)));
  }
  std::string last_error = "no address";
  UniqueFd result;
  bool timed_out = false;
  for (addrinfo* a = found; a != nullptr && !result.valid(); a = a->ai_next) {
    UniqueFd fd(
        socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
    if (!fd.valid()) {
      last_error = ErrnoText();
      continue;
    }
    if (connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        last_error = ErrnoText();
        continue;
      }
      pollfd p{fd.get(), POLLOUT, 0};
      const int64_t wait_ms =
          std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
      const int ready = poll(
          &p, 1, static_cast<int>(std::min<int64_t>(wait_ms, std::numeric_limits<int>::max())));
      if (ready <= 0) {
        timed_out = ready == 0;
        last_error = ready == 0 ? "timed out" : ErrnoText();
        continue;
      }
      int error = 0;
      socklen_t len = sizeof(error);
      getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &len);
      if (error != 0) {
        last_error = strerror(error);
        continue;
      }
    }
    const int flags = fcntl(fd.get(), F_GETFL);
    if (flags < 0 || fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) {
      last_error = ErrnoText();
      continue;
    }
    result = std::move(fd);
  }
  freeaddrinfo(found);
  if (!result.valid()) {
    const std::string message =
        absl::StrCat("cannot connect to ", host, ":", port, ": ", last_error);
    return timed_out ? absl::DeadlineExceededError(message) : absl::UnavailableError(message);
  }
  if (absl::Status s = SetNoDelay(result.get()); !s.ok()) return s;
  return result;
}

absl::Status SetSocketTimeout(int fd, int option, absl::Time deadline) {
  if (!SetTimeout(fd, option, deadline)) {
    return absl::UnavailableError(
        absl::StrCat(option == SO_RCVTIMEO ? "SO_RCVTIMEO: " : "SO_SNDTIMEO: ", ErrnoText()));
  }
  return absl::OkStatus();
}

absl::Status SetNoDelay(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    return absl::UnavailableError(absl::StrCat("TCP_NODELAY: ", ErrnoText()));
  }
  return absl::OkStatus();
}

std::string EncodeFrameHead(uint16_t kind, int32_t code, uint32_t meta_bytes,
                            absl::Span<const uint64_t> payload_sizes, uint64_t payload_bytes) {
  WireHeader header{};
  header.magic = kFrameMagic;
  header.version = kFrameVersion;
  header.kind = kind;
  header.code = code;
  header.meta_bytes = meta_bytes;
  header.payload_count = static_cast<uint32_t>(payload_sizes.size());
  header.payload_bytes = payload_bytes;
  std::string head(sizeof(header) + 8 * payload_sizes.size(), '\0');
  std::memcpy(head.data(), &header, sizeof(header));
  if (!payload_sizes.empty()) {
    std::memcpy(head.data() + sizeof(header), payload_sizes.data(), 8 * payload_sizes.size());
  }
  return head;
}

absl::Status WriteFrame(FrameStream& stream, uint16_t kind, int32_t code, absl::string_view meta,
                        absl::Span<const absl::string_view> payloads, absl::Time deadline) {
  if (payloads.size() > kMaxFramePayloads || meta.size() > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("frame too large to send: ", payloads.size(),
                                                   " payloads, ", meta.size(), " bytes of meta"));
  }
  std::vector<uint64_t> sizes;
  sizes.reserve(payloads.size());
  uint64_t payload_bytes = 0;
  for (absl::string_view p : payloads) {
    sizes.push_back(p.size());
    payload_bytes += p.size();
  }
  const std::string head =
      EncodeFrameHead(kind, code, static_cast<uint32_t>(meta.size()), sizes, payload_bytes);
  std::vector<absl::string_view> pieces;
  pieces.reserve(2 + payloads.size());
  pieces.push_back(head);
  if (!meta.empty()) pieces.push_back(meta);
  for (absl::string_view p : payloads) {
    if (!p.empty()) pieces.push_back(p);
  }
  return stream.WritePieces(pieces, deadline);
}

absl::Status WriteFrame(int fd, uint16_t kind, int32_t code, absl::string_view meta,
                        absl::Span<const absl::string_view> payloads, absl::Time deadline) {
  FdStream stream(fd);
  return WriteFrame(stream, kind, code, meta, payloads, deadline);
}

absl::Status FdStream::WritePieces(absl::Span<const absl::string_view> in, absl::Time deadline) {
  std::vector<iovec> pieces;
  pieces.reserve(in.size());
  for (absl::string_view p : in) pieces.push_back({const_cast<char*>(p.data()), p.size()});
  if (!SetTimeout(fd_, SO_SNDTIMEO, deadline)) {
    return absl::UnavailableError(absl::StrCat("SO_SNDTIMEO: ", ErrnoText()));
  }
  size_t next = 0;
  while (next < pieces.size()) {
    msghdr msg{};
    msg.msg_iov = &pieces[next];
    msg.msg_iovlen = std::min<size_t>(pieces.size() - next, IOV_MAX);
    const ssize_t n = sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (absl::Status s = IoError("send", deadline); !s.ok()) return s;
      continue;
    }
    size_t sent = static_cast<size_t>(n);
    while (next < pieces.size() && sent >= pieces[next].iov_len) {
      sent -= pieces[next].iov_len;
      ++next;
    }
    if (sent > 0) {
      pieces[next].iov_base = static_cast<char*>(pieces[next].iov_base) + sent;
      pieces[next].iov_len -= sent;
    }
  }
  return absl::OkStatus();
}

absl::Status FdStream::ReadFull(char* data, size_t size, absl::Time deadline) {
  if (size == 0) return absl::OkStatus();
  if (!SetTimeout(fd_, SO_RCVTIMEO, deadline)) {
    return absl::UnavailableError(absl::StrCat("SO_RCVTIMEO: ", ErrnoText()));
  }
  while (size > 0) {
    const ssize_t n = recv(fd_, data, size, MSG_WAITALL);
    if (n == 0) return absl::UnavailableError("connection closed by the peer");
    if (n < 0) {
      if (errno == EINTR) continue;
      if (absl::Status s = IoError("recv", deadline); !s.ok()) return s;
      continue;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status FdStream::ReadFirstByte(char* byte, absl::Time deadline, bool* closed) {
  *closed = false;
  if (!SetTimeout(fd_, SO_RCVTIMEO, deadline)) {
    return absl::UnavailableError(absl::StrCat("SO_RCVTIMEO: ", ErrnoText()));
  }
  for (;;) {
    const ssize_t n = recv(fd_, byte, 1, 0);
    if (n == 1) return absl::OkStatus();
    if (n == 0) {
      *closed = true;
      return absl::UnavailableError("connection closed by the peer");
    }
    if (errno == EINTR) continue;
    if (absl::Status s = IoError("recv", deadline); !s.ok()) return s;
  }
}

absl::Status ReadFull(int fd, char* data, size_t size, absl::Time deadline) {
  FdStream stream(fd);
  return stream.ReadFull(data, size, deadline);
}

absl::Status ReadGrowing(FrameStream& stream, size_t size, std::string* buffer,
                         absl::Time deadline, const FrameGrowth& grow) {
  return ReadGrowingInto(stream, size, buffer, deadline, grow);
}

absl::Status ReadGrowing(int fd, size_t size, std::string* buffer, absl::Time deadline,
                         const FrameGrowth& grow) {
  FdStream stream(fd);
  return ReadGrowingInto(stream, size, buffer, deadline, grow);
}

absl::Status Discard(FrameStream& stream, uint64_t size, absl::Time deadline) {
  char scratch[16 << 10];
  while (size > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(size, sizeof(scratch)));
    if (absl::Status s = stream.ReadFull(scratch, n, deadline); !s.ok()) return s;
    size -= n;
  }
  return absl::OkStatus();
}

absl::Status Discard(int fd, uint64_t size, absl::Time deadline) {
  FdStream stream(fd);
  return Discard(stream, size, deadline);
}

absl::Status ReadFrameHead(FrameStream& stream, int64_t max_bytes,
                           absl::Time first_byte_deadline, absl::Duration timeout,
                           FrameHead* head, bool* closed) {
  FrameLimits limits;
  limits.max_bytes = max_bytes;
  return ReadFrameHead(stream, limits, first_byte_deadline, timeout, head, closed);
}

absl::Status ReadFrameHead(int fd, int64_t max_bytes, absl::Time first_byte_deadline,
                           absl::Duration timeout, FrameHead* head, bool* closed) {
  FdStream stream(fd);
  return ReadFrameHead(stream, max_bytes, first_byte_deadline, timeout, head, closed);
}

absl::Status ReadFrameHead(int fd, const FrameLimits& limits, absl::Time first_byte_deadline,
                           absl::Duration timeout, FrameHead* head, bool* closed) {
  FdStream stream(fd);
  return ReadFrameHead(stream, limits, first_byte_deadline, timeout, head, closed);
}

absl::Status ReadFrameHead(FrameStream& stream, const FrameLimits& limits,
                           absl::Time first_byte_deadline, absl::Duration timeout,
                           FrameHead* head, bool* closed) {
  const int64_t max_bytes = limits.max_bytes;
  WireHeader header{};
  char* raw = reinterpret_cast<char*>(&header);
  // The first byte may take long (an idle connection between steps).
  if (absl::Status s = stream.ReadFirstByte(raw, first_byte_deadline, closed); !s.ok()) return s;
  const absl::Time deadline = absl::Now() + timeout;
  head->deadline = deadline;
  if (absl::Status s = stream.ReadFull(raw + 1, sizeof(header) - 1, deadline); !s.ok()) return s;
  if (header.magic != kFrameMagic) {
    return absl::InvalidArgumentError("not a pscluster data-plane frame (bad magic)");
  }
  if (header.version != kFrameVersion) {
    return absl::InvalidArgumentError(absl::StrCat("data-plane frame version ", header.version,
                                                   ", this build speaks ", kFrameVersion));
  }
  if (header.payload_count > kMaxFramePayloads) {
    return absl::InvalidArgumentError(absl::StrCat("data-plane frame with ", header.payload_count,
                                                   " payloads (at most ", kMaxFramePayloads, ")"));
  }
  const uint64_t total = uint64_t{header.meta_bytes} + header.payload_bytes;
  if (header.payload_bytes > static_cast<uint64_t>(max_bytes) ||
      total > static_cast<uint64_t>(max_bytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("data-plane frame of ", header.meta_bytes, " + ", header.payload_bytes,
                     " bytes is larger than the limit of ", max_bytes, " bytes"));
  }
  if (header.meta_bytes > static_cast<uint64_t>(limits.max_meta_bytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("data-plane frame with ", header.meta_bytes,
                     " bytes of meta; this connection takes at most ", limits.max_meta_bytes));
  }
  head->kind = header.kind;
  head->code = header.code;
  head->payload_bytes = header.payload_bytes;
  if (absl::Status s = ReadGrowingInto(stream, size_t{header.payload_count}, &head->payload_sizes,
                                       deadline, limits.grow);
      !s.ok()) {
    return s;
  }
  uint64_t sum = 0;
  for (uint64_t size : head->payload_sizes) {
    if (size > header.payload_bytes - sum) {
      return absl::InvalidArgumentError("data-plane frame's payload sizes exceed its total");
    }
    sum += size;
  }
  if (sum != header.payload_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("data-plane frame's payload sizes add up to ",
                                                   sum, ", its header says ",
                                                   header.payload_bytes));
  }
  return ReadGrowingInto(stream, size_t{header.meta_bytes}, &head->meta, deadline, limits.grow);
}

}  // namespace pscluster
