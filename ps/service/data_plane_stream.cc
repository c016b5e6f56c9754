#include "ps/service/data_plane_stream.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"

namespace pscluster {

void DataPlaneSocketStream::Lend(absl::Span<char> buffer) {
  if (capacity_ > 0 || buffer.empty()) return;  // lent already, or nothing to lend
  const size_t kept = end_ - begin_;
  if (kept > buffer.size()) return;  // read from own_ until it is drained
  if (kept > 0) std::memcpy(buffer.data(), buffer_ + begin_, kept);
  own_ = std::string();
  buffer_ = buffer.data();
  capacity_ = buffer.size();
  begin_ = 0;
  end_ = kept;
}

void DataPlaneSocketStream::Return() {
  if (capacity_ == 0) return;
  if (begin_ < end_) {
    own_.assign(buffer_ + begin_, end_ - begin_);
    buffer_ = own_.data();
    begin_ = 0;
    end_ = own_.size();
  } else {
    buffer_ = nullptr;
    begin_ = end_ = 0;
  }
  capacity_ = 0;
}

size_t DataPlaneSocketStream::Take(char* data, size_t size) {
  const size_t n = std::min(size, end_ - begin_);
  if (n == 0) return 0;
  std::memcpy(data, buffer_ + begin_, n);
  begin_ += n;
  if (begin_ == end_ && capacity_ == 0) {  // own_ drained
    own_ = std::string();
    buffer_ = nullptr;
    begin_ = end_ = 0;
  }
  return n;
}

bool DataPlaneSocketStream::TryReadAhead() {
  if (begin_ < end_) return true;
  if (capacity_ == 0) return false;
  begin_ = end_ = 0;
  ssize_t n;
  do {
    n = recv(fd_, buffer_, capacity_, MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return false;
  end_ = static_cast<size_t>(n);
  return true;
}

absl::Status DataPlaneSocketStream::Fill(absl::Time deadline, bool* closed) {
  begin_ = end_ = 0;
  for (;;) {
    const ssize_t n = recv(fd_, buffer_, capacity_, MSG_DONTWAIT);
    if (n > 0) {
      end_ = static_cast<size_t>(n);
      return absl::OkStatus();
    }
    if (n == 0) {
      *closed = true;
      return absl::UnavailableError("connection closed by the peer");
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return absl::UnavailableError(absl::StrCat("recv: ", strerror(errno)));
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) return absl::DeadlineExceededError("recv: timed out");
    int timeout_ms = -1;
    if (deadline != absl::InfiniteFuture()) {
      timeout_ms = static_cast<int>(
          std::min<int64_t>(absl::ToInt64Milliseconds(deadline - now) + 1, INT_MAX));
    }
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) < 0 && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("poll: ", strerror(errno)));
    }
  }
}

absl::Status DataPlaneSocketStream::ReadFirstByte(char* byte, absl::Time deadline, bool* closed) {
  *closed = false;
  if (begin_ == end_) {
    if (capacity_ == 0) return plain_.ReadFirstByte(byte, deadline, closed);
    if (absl::Status s = Fill(deadline, closed); !s.ok()) return s;
  }
  Take(byte, 1);
  return absl::OkStatus();
}

absl::Status DataPlaneSocketStream::ReadFull(char* data, size_t size, absl::Time deadline) {
  for (;;) {
    const size_t took = Take(data, size);
    data += took;
    size -= took;
    if (size == 0) return absl::OkStatus();
    if (size >= capacity_) break;  // into the caller's memory, not through the buffer
    bool closed = false;
    if (absl::Status s = Fill(deadline, &closed); !s.ok()) return s;
  }
  // What has arrived, then the rest blocking (SO_RCVTIMEO, MSG_WAITALL).
  const ssize_t n = recv(fd_, data, size, MSG_DONTWAIT);
  if (n == 0) return absl::UnavailableError("connection closed by the peer");
  if (n > 0) {
    data += n;
    size -= static_cast<size_t>(n);
  }
  return plain_.ReadFull(data, size, deadline);
}

absl::Status DataPlaneSocketStream::WritePieces(absl::Span<const absl::string_view> pieces,
                                                absl::Time deadline) {
  if (pieces.size() > IOV_MAX) return plain_.WritePieces(pieces, deadline);
  absl::InlinedVector<iovec, 8> iov;
  size_t total = 0;
  for (absl::string_view p : pieces) {
    iov.push_back({const_cast<char*>(p.data()), p.size()});
    total += p.size();
  }
  msghdr msg{};
  msg.msg_iov = iov.data();
  msg.msg_iovlen = iov.size();
  ssize_t n;
  do {
    n = sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return absl::UnavailableError(absl::StrCat("send: ", strerror(errno)));
    }
    n = 0;
  }
  size_t sent = static_cast<size_t>(n);
  if (sent == total) return absl::OkStatus();
  // The socket's buffer is full: the rest blocking, under SO_SNDTIMEO.
  absl::InlinedVector<absl::string_view, 8> rest;
  for (absl::string_view p : pieces) {
    if (sent >= p.size()) {
      sent -= p.size();
      continue;
    }
    rest.push_back(p.substr(sent));
    sent = 0;
  }
  return plain_.WritePieces(rest, deadline);
}

}  // namespace pscluster
