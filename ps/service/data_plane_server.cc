#include "ps/service/data_plane_server.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "ps/service/data_plane_wire.h"

namespace pscluster {
namespace {

// A connection keeps its last request's and answer's buffers for the next
// call (a worker sends the same tensors every step) unless the request was
// larger than this: then they are freed, as the gRPC path's pools do.
constexpr uint64_t kKeepBuffersBytes = 160 << 20;

// Answers with an error; best effort (the connection may be gone).
void WriteError(int fd, const absl::Status& status) {
  const std::string message(status.message());
  (void)WriteFrame(fd, kDataPlaneAnswer, static_cast<int32_t>(status.code()), message, {},
                   absl::Now() + absl::Seconds(5));
}

}  // namespace

absl::StatusOr<std::unique_ptr<DataPlaneServer>> DataPlaneServer::Start(const Options& options,
                                                                        JobStores* jobs,
                                                                        RpcHandler* handler) {
  std::unique_ptr<DataPlaneServer> server(new DataPlaneServer(options, jobs, handler));
  absl::StatusOr<UniqueFd> listener = ListenTcp(options.host, options.port, &server->port_);
  if (!listener.ok()) return listener.status();
  server->listener_ = std::move(*listener);
  server->acceptor_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

DataPlaneServer::~DataPlaneServer() { Shutdown(); }

void DataPlaneServer::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    // Wakes accept() (EINVAL) and every connection's recv() (end of file).
    shutdown(listener_.get(), SHUT_RDWR);
    for (const auto& [fd, c] : connections_) shutdown(fd, SHUT_RDWR);
  }
  if (acceptor_.joinable()) acceptor_.join();
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](absl::flat_hash_map<int, std::shared_ptr<Connection>>* c) { return c->empty(); },
      &connections_));
}

void DataPlaneServer::Connection::Release() {
  push = PushRequest();
  pushed = PushResponse();
  pull = PullRequest();
  pulled = PullResponse();
}

void DataPlaneServer::ReleaseBuffers() {
  absl::MutexLock lock(&mu_);
  for (const auto& [fd, c] : connections_) {
    if (c->mu.TryLock()) {
      c->Release();
      c->mu.Unlock();
    } else {
      c->release.store(true);
    }
  }
}

void DataPlaneServer::AcceptLoop() {
  absl::Time last_refusal_logged = absl::InfinitePast();
  for (;;) {
    const int fd = accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      if (fd >= 0) close(fd);
      return;
    }
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      // Out of descriptors or memory: wait a little rather than spin.
      spdlog::warn("data plane: accept: {}", strerror(errno));
      mu_.Unlock();
      absl::SleepFor(absl::Milliseconds(100));
      mu_.Lock();
      continue;
    }
    if (connections_.size() >= static_cast<size_t>(options_.max_connections)) {
      if (absl::Now() - last_refusal_logged > absl::Seconds(10)) {
        spdlog::warn("data plane: {} connections open, refusing more", connections_.size());
        last_refusal_logged = absl::Now();
      }
      close(fd);
      continue;
    }
    auto connection = std::make_shared<Connection>(fd);
    connections_.emplace(fd, connection);
    std::thread([this, connection] { Serve(connection); }).detach();
  }
}

void DataPlaneServer::Serve(std::shared_ptr<Connection> c) {
  const int fd = c->fd;
  PushRequest& push = c->push;
  PushResponse& pushed = c->pushed;
  PullRequest& pull = c->pull;
  PullResponse& pulled = c->pulled;
  absl::Status status = SetNoDelay(fd);
  while (status.ok()) {
    FrameHead head;
    bool closed = false;
    status = ReadFrameHead(fd, options_.max_message_bytes, absl::Now() + options_.idle_timeout,
                           options_.frame_timeout, &head, &closed);
    if (!status.ok()) {
      // The peer's end (or Shutdown) is the normal way out; a bad frame is
      // answered so that its sender sees why.
      if (!closed && (absl::IsInvalidArgument(status) || absl::IsResourceExhausted(status))) {
        WriteError(fd, status);
      }
      break;
    }
    // The messages are this call's until it is answered (ReleaseBuffers).
    absl::MutexLock call_lock(&c->mu);
    const absl::Time start = absl::Now();
    absl::Status result;
    if (head.kind == kDataPlanePush) {
      status = ReceiveMessage(fd, head, &push, head.deadline);
      if (!status.ok()) {
        if (absl::IsInvalidArgument(status)) WriteError(fd, status);
        break;
      }
      pushed.Clear();
      absl::Notification done;
      // Answered on this thread, or by the thread of the call that completes
      // a synchronous step (ps/core/sync_steps.h).
      jobs_->PushAsync(push, &pushed, [&](absl::Status s) {
        result = std::move(s);
        done.Notify();
      });
      done.WaitForNotification();
      if (handler_ != nullptr) handler_->Record("Push", result, start);
      calls_.fetch_add(1);
      status = result.ok() ? WriteMessage(fd, kDataPlaneAnswer, &pushed,
                                          absl::Now() + options_.frame_timeout)
                           : (WriteError(fd, result), absl::OkStatus());
      if (head.payload_bytes > kKeepBuffersBytes) c->Release();
    } else if (head.kind == kDataPlanePull) {
      status = ReceiveMessage(fd, head, &pull, head.deadline);
      if (!status.ok()) {
        if (absl::IsInvalidArgument(status)) WriteError(fd, status);
        break;
      }
      pulled.Clear();
      result = jobs_->Pull(pull, &pulled);
      if (handler_ != nullptr) handler_->Record("Pull", result, start);
      calls_.fetch_add(1);
      status = result.ok() ? WriteMessage(fd, kDataPlaneAnswer, &pulled,
                                          absl::Now() + options_.frame_timeout)
                           : (WriteError(fd, result), absl::OkStatus());
      if (pulled.ByteSizeLong() > kKeepBuffersBytes) c->Release();
    } else {
      // Its payloads were not read: the connection is out of step.
      WriteError(fd, absl::InvalidArgumentError(
                         absl::StrCat("unknown data-plane frame kind ", head.kind)));
      break;
    }
    if (c->release.exchange(false)) c->Release();
  }
  absl::MutexLock lock(&mu_);
  connections_.erase(fd);
  close(fd);
}

}  // namespace pscluster
