#include "ps/service/data_plane_server.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "ps/service/data_plane_wire.h"
#include "rpc/peer_role.h"

namespace pscluster {
namespace {

// A connection keeps its last request's and answer's buffers for the next
// call (a worker sends the same tensors every step) unless the request was
// larger than this: then they are freed, as the gRPC path's pools do.
constexpr uint64_t kKeepBuffersBytes = 160 << 20;
// A meta (and payload sizes) buffer larger than this is not kept.
constexpr size_t kKeepHeadBytes = 1 << 20;

int64_t Capacity(const std::string& s) { return static_cast<int64_t>(s.capacity()); }

int64_t HeadCapacity(const FrameHead& head) {
  return Capacity(head.meta) +
         static_cast<int64_t>(head.payload_sizes.capacity() * sizeof(uint64_t));
}

// The capacity of a request's payload buffers.
template <typename Request>
int64_t PayloadCapacity(Request* request) {
  std::vector<std::string*> fields;
  PayloadFields(request, &fields);
  int64_t bytes = 0;
  for (const std::string* field : fields) bytes += Capacity(*field);
  return bytes;
}

// Answers with an error; best effort (the connection may be gone).
void WriteError(FrameStream& stream, const absl::Status& status) {
  const std::string message(status.message());
  (void)WriteFrame(stream, kDataPlaneAnswer, static_cast<int32_t>(status.code()), message, {},
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

void DataPlaneServer::AdjustBufferBytes(int64_t delta) {
  if (delta == 0) return;
  buffer_bytes_.fetch_add(delta);
  if (options_.memory_budget == nullptr) return;
  if (delta > 0) {
    options_.memory_budget->Charge(delta);
  } else {
    options_.memory_budget->Release(-delta);
  }
}

absl::Status DataPlaneServer::ReserveFrameBytes(uint64_t bytes, FrameBytes* reserved) {
  const int64_t n = static_cast<int64_t>(bytes);
  const int64_t pending = pending_.fetch_add(n) + n;
  if (pending > options_.max_pending_bytes) {
    pending_.fetch_sub(n);
    return absl::ResourceExhaustedError(absl::StrCat(
        "data plane: ", n, " more bytes for a frame would put ", pending,
        " bytes in frames still arriving over all connections, past the limit of ",
        options_.max_pending_bytes, " bytes (ps_server --data_plane_max_pending_bytes)"));
  }
  if (options_.memory_budget != nullptr) {
    absl::Status s =
        options_.memory_budget->Reserve(n, "data plane: buffers of a frame still arriving");
    if (!s.ok()) {
      pending_.fetch_sub(n);
      return s;
    }
  }
  buffer_bytes_.fetch_add(n);
  reserved->frame += n;
  return absl::OkStatus();
}

void DataPlaneServer::EndFrame(Connection* c, const FrameHead& head, FrameBytes* reserved) {
  pending_.fetch_sub(reserved->frame);
  const int64_t head_now = HeadCapacity(head);
  const int64_t kept_now = PayloadCapacity(&c->push) + PayloadCapacity(&c->pull);
  AdjustBufferBytes(head_now + kept_now - (reserved->head + c->kept_bytes + reserved->frame));
  reserved->frame = 0;
  reserved->head = head_now;
  c->kept_bytes = kept_now;
}

void DataPlaneServer::Release(Connection* c) {
  c->push = PushRequest();
  c->pushed = PushResponse();
  c->pull = PullRequest();
  c->pulled = PullResponse();
  AdjustBufferBytes(-c->kept_bytes);
  c->kept_bytes = 0;
}

void DataPlaneServer::ReleaseBuffers() {
  absl::MutexLock lock(&mu_);
  for (const auto& [fd, c] : connections_) {
    // Flagged first: a busy connection's thread checks the flag after it
    // lets go of its call, so the release is never left for a later call.
    c->release.store(true);
    if (c->mu.TryLock()) {
      if (c->release.exchange(false)) Release(c.get());
      c->mu.Unlock();
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
    if (connections_.size() >= static_cast<size_t>(options_.max_connections) ||
        unproven_ >= options_.max_unproven_connections) {
      if (absl::Now() - last_refusal_logged > absl::Seconds(10)) {
        spdlog::warn(
            "data plane: {} connections open, {} of them not yet past a job check; refusing "
            "more",
            connections_.size(), unproven_);
        last_refusal_logged = absl::Now();
      }
      close(fd);
      continue;
    }
    auto connection = std::make_shared<Connection>(fd);
    connections_.emplace(fd, connection);
    ++unproven_;
    std::thread([this, connection] { Serve(connection); }).detach();
  }
}

void DataPlaneServer::Serve(std::shared_ptr<Connection> c) {
  const int fd = c->fd;
  // A stranger's first frame must come soon; a proven connection may idle.
  const absl::Time first_frame_deadline =
      absl::Now() + std::min(options_.idle_timeout, options_.frame_timeout);
  FrameBytes reserved;
  FrameLimits limits;
  limits.max_bytes = options_.max_message_bytes;
  limits.max_meta_bytes = options_.max_unproven_meta_bytes;
  limits.grow = [this, &reserved](uint64_t bytes) { return ReserveFrameBytes(bytes, &reserved); };
  FrameHead head;                 // reused: its meta's buffer is kept for the next frame
  std::vector<std::string> kept;  // a request's payload buffers while its meta is checked
  bool proven = false;
  // OK, or why this connection's certificate may not Push or Pull.
  absl::Status role_refusal;
  std::unique_ptr<FrameStream> stream;  // reads and writes fd; Serve closes fd
  absl::Status status = SetNoDelay(fd);
  if (status.ok() && options_.tls == nullptr) {
    stream = std::make_unique<FdStream>(fd);
  } else if (status.ok()) {
    absl::StatusOr<std::unique_ptr<TlsStream>> secured =
        options_.tls->Accept(fd, first_frame_deadline);
    if (secured.ok()) {
      role_refusal = CheckRole(RoleOfCertificate((*secured)->peer_certificate()),
                               {"worker", "coordinator"}, "the data plane (Push, Pull)");
      stream = std::move(*secured);
    } else {
      status = secured.status();
      spdlog::debug("data plane: TLS handshake refused: {}", std::string(status.message()));
    }
  }
  while (status.ok()) {
    if (c->release.load()) {  // ReleaseBuffers came during the last call
      absl::MutexLock call_lock(&c->mu);
      if (c->release.exchange(false)) Release(c.get());
      head = FrameHead();
      AdjustBufferBytes(-reserved.head);
      reserved.head = 0;
    }
    bool closed = false;
    const absl::Time first_byte_deadline =
        proven ? absl::Now() + options_.idle_timeout : first_frame_deadline;
    status =
        ReadFrameHead(*stream, limits, first_byte_deadline, options_.frame_timeout, &head, &closed);
    // The messages are this call's until it is answered (ReleaseBuffers).
    absl::MutexLock call_lock(&c->mu);
    if (!status.ok()) {
      EndFrame(c.get(), head, &reserved);
      // The peer's end (or Shutdown) is the normal way out; a bad frame is
      // answered so that its sender sees why.
      if (!closed && (absl::IsInvalidArgument(status) || absl::IsResourceExhausted(status))) {
        WriteError(*stream, status);
      }
      break;
    }
    const absl::Time start = absl::Now();
    const bool push = head.kind == kDataPlanePush;
    if (!push && head.kind != kDataPlanePull) {
      EndFrame(c.get(), head, &reserved);
      // Its payloads were not read: the connection is out of step.
      WriteError(*stream, absl::InvalidArgumentError(
                         absl::StrCat("unknown data-plane frame kind ", head.kind)));
      break;
    }
    const char* method = push ? "Push" : "Pull";
    // The meta, checked before a byte of the payloads is read.
    status = push ? ParseFrameMeta(head, &c->push, &kept) : ParseFrameMeta(head, &c->pull, &kept);
    if (!status.ok()) {
      kept.clear();
      EndFrame(c.get(), head, &reserved);
      WriteError(*stream, status);
      break;
    }
    const absl::Status auth = !role_refusal.ok() ? role_refusal
                              : push             ? jobs_->CheckPushAuth(c->push)
                                                 : jobs_->CheckPullAuth(c->pull);
    if (!auth.ok()) {
      kept.clear();
      EndFrame(c.get(), head, &reserved);
      if (handler_ != nullptr) handler_->Record(method, auth, start);
      calls_.fetch_add(1);
      WriteError(*stream, auth);
      // Dropped unread-into-memory, so that a sender still writing them sees
      // the answer (a restarted PS's NOT_FOUND) rather than a reset.
      (void)Discard(*stream, head.payload_bytes, head.deadline);
      break;
    }
    if (!proven) {
      proven = true;
      limits.max_meta_bytes = options_.max_message_bytes;
      absl::MutexLock lock(&mu_);
      --unproven_;
    }
    status = push ? ReadFramePayloads(*stream, head, &c->push, &kept, head.deadline, limits.grow)
                  : ReadFramePayloads(*stream, head, &c->pull, &kept, head.deadline, limits.grow);
    kept.clear();
    if (head.meta.capacity() > kKeepHeadBytes) head.meta = std::string();
    if (head.payload_sizes.capacity() * sizeof(uint64_t) > kKeepHeadBytes) {
      head.payload_sizes = std::vector<uint64_t>();
    }
    EndFrame(c.get(), head, &reserved);
    if (!status.ok()) {
      if (absl::IsInvalidArgument(status) || absl::IsResourceExhausted(status)) {
        WriteError(*stream, status);
      }
      break;
    }
    absl::Status result;
    if (push) {
      c->pushed.Clear();
      absl::Notification done;
      // Answered on this thread, or by the thread of the call that completes
      // a synchronous step (ps/core/sync_steps.h).
      jobs_->PushAsync(c->push, &c->pushed, [&](absl::Status s) {
        result = std::move(s);
        done.Notify();
      });
      done.WaitForNotification();
      if (handler_ != nullptr) handler_->Record(method, result, start);
      calls_.fetch_add(1);
      status = result.ok() ? WriteMessage(*stream, kDataPlaneAnswer, &c->pushed,
                                          absl::Now() + options_.frame_timeout)
                           : (WriteError(*stream, result), absl::OkStatus());
      if (head.payload_bytes > kKeepBuffersBytes) Release(c.get());
    } else {
      c->pulled.Clear();
      result = jobs_->Pull(c->pull, &c->pulled);
      if (handler_ != nullptr) handler_->Record(method, result, start);
      calls_.fetch_add(1);
      status = result.ok() ? WriteMessage(*stream, kDataPlaneAnswer, &c->pulled,
                                          absl::Now() + options_.frame_timeout)
                           : (WriteError(*stream, result), absl::OkStatus());
      if (c->pulled.ByteSizeLong() > kKeepBuffersBytes) Release(c.get());
    }
  }
  {
    absl::MutexLock call_lock(&c->mu);
    Release(c.get());
  }
  AdjustBufferBytes(-reserved.head);
  stream.reset();  // before the socket is closed
  absl::MutexLock lock(&mu_);
  if (!proven) --unproven_;
  connections_.erase(fd);
  close(fd);
}

}  // namespace pscluster
