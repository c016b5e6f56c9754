#include "bench/tcp_ping_pong.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pscluster {
namespace bench {
namespace {

absl::Status Errno(const std::string &what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", strerror(errno)));
}

absl::Status SetSocketOptions(int fd, int buffer_bytes) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    return Errno("TCP_NODELAY");
  }
  if (buffer_bytes > 0) {
    // SO_*BUFFORCE (root) may exceed net.core.[rw]mem_max; else fall back.
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buffer_bytes, sizeof(buffer_bytes)) != 0 &&
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof(buffer_bytes)) != 0) {
      return Errno("SO_SNDBUF");
    }
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buffer_bytes, sizeof(buffer_bytes)) != 0 &&
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof(buffer_bytes)) != 0) {
      return Errno("SO_RCVBUF");
    }
  }
  return absl::OkStatus();
}

// Send and receive timeouts: a blocking call that waits longer fails (EAGAIN).
absl::Status SetTimeouts(int fd, std::chrono::seconds timeout) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count());
  if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0) return Errno("SO_RCVTIMEO");
  if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) return Errno("SO_SNDTIMEO");
  return absl::OkStatus();
}

// MSG_WAITALL: one wake-up when the whole message is in, not one per
// segment batch (the same as the pscluster data plane's reads, so the
// baseline is not handicapped by its reads).
absl::Status ReadFull(int fd, char *data, size_t size) {
  while (size > 0) {
    const ssize_t n = recv(fd, data, size, MSG_WAITALL);
    if (n == 0) return absl::UnavailableError("connection closed");
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("recv");
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status WriteFull(int fd, const char *data, size_t size) {
  while (size > 0) {
    const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("send");
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpPingPong>> TcpPingPong::Create(int buffer_bytes,
                                                                 std::chrono::seconds timeout) {
  auto p = std::unique_ptr<TcpPingPong>(new TcpPingPong());
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0) return Errno("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  // Buffer sizes are set before listen/connect so the window scale fits them.
  absl::Status s = SetSocketOptions(listener, buffer_bytes);
  if (s.ok() && (bind(listener, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) != 0 ||
                 listen(listener, 1) != 0 ||
                 getsockname(listener, reinterpret_cast<sockaddr *>(&addr), &len) != 0)) {
    s = Errno("bind/listen on 127.0.0.1:0");
  }
  if (s.ok()) {
    p->client_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (p->client_fd_ < 0) s = Errno("socket");
  }
  if (s.ok()) s = SetSocketOptions(p->client_fd_, buffer_bytes);
  if (s.ok() && connect(p->client_fd_, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) != 0) {
    s = Errno("connect");
  }
  if (s.ok()) {
    p->server_fd_ = accept(listener, nullptr, nullptr);
    if (p->server_fd_ < 0) s = Errno("accept");
  }
  if (s.ok()) s = SetSocketOptions(p->server_fd_, buffer_bytes);
  if (s.ok()) s = SetTimeouts(p->client_fd_, timeout);
  close(listener);
  if (!s.ok()) return s;
  p->server_ = std::thread([fd = p->server_fd_] { Serve(fd); });
  return p;
}

TcpPingPong::~TcpPingPong() {
  if (client_fd_ >= 0) {
    const uint64_t stop = 0;
    (void)WriteFull(client_fd_, reinterpret_cast<const char *>(&stop), sizeof(stop));
    // Closing (not only stopping) ends the server thread's read or write
    // with EOF or a reset even if a failed round trip left it mid-message,
    // so the join below cannot hang.
    close(client_fd_);
  }
  if (server_.joinable()) server_.join();
  if (server_fd_ >= 0) close(server_fd_);
}

absl::Status TcpPingPong::RoundTrip(const std::string &data, std::string *reply) {
  reply->resize(data.size());
  absl::Status s = Send(data);
  if (s.ok()) s = Receive(reply);
  return s;
}

absl::Status TcpPingPong::Send(const std::string &data) {
  const uint64_t size = data.size();
  absl::Status s = WriteFull(client_fd_, reinterpret_cast<const char *>(&size), sizeof(size));
  if (s.ok()) s = WriteFull(client_fd_, data.data(), data.size());
  return s;
}

absl::Status TcpPingPong::Receive(std::string *reply) {
  return ReadFull(client_fd_, &(*reply)[0], reply->size());
}

void TcpPingPong::Serve(int fd) {
  std::string buffer;
  while (true) {
    uint64_t size = 0;
    if (!ReadFull(fd, reinterpret_cast<char *>(&size), sizeof(size)).ok() || size == 0) return;
    buffer.resize(size);
    if (!ReadFull(fd, &buffer[0], size).ok()) return;
    if (!WriteFull(fd, buffer.data(), size).ok()) return;
  }
}

}  // namespace bench
}  // namespace pscluster
