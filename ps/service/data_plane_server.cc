#include "ps/service/data_plane_server.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pscluster {
namespace {

// Descriptors left to the rest of the process (gRPC, files, checkpoints)
// when RLIMIT_NOFILE bounds the connections.
constexpr int kReservedDescriptors = 128;
// Events taken from epoll per wake of the poller.
constexpr int kEventsPerWait = 256;

int SoftDescriptorLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return -1;
  return static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 1 << 30));
}

absl::Status EpollError(const char* what) {
  return absl::InternalError(absl::StrCat("data plane: ", what, ": ", strerror(errno)));
}

}  // namespace

DataPlaneServer::DataPlaneServer(const Options& options, JobStores* jobs, RpcHandler* handler)
    : options_(options),
      settings_{options.max_message_bytes, options.max_unproven_meta_bytes, options.frame_timeout,
                options.tls},
      jobs_(jobs),
      handler_(handler) {}

absl::StatusOr<std::unique_ptr<DataPlaneServer>> DataPlaneServer::Start(const Options& options,
                                                                        JobStores* jobs,
                                                                        RpcHandler* handler) {
  std::unique_ptr<DataPlaneServer> server(new DataPlaneServer(options, jobs, handler));
  DataPlaneServer& s = *server;
  absl::StatusOr<UniqueFd> listener = ListenTcp(options.host, options.port, &s.port_);
  if (!listener.ok()) return listener.status();
  s.listener_ = std::move(*listener);
  const int flags = fcntl(s.listener_.get(), F_GETFL);
  if (flags < 0 || fcntl(s.listener_.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return EpollError("fcntl(O_NONBLOCK) on the listener");
  }
  s.epoll_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  if (!s.epoll_.valid()) return EpollError("epoll_create1");
  s.wake_ = UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!s.wake_.valid()) return EpollError("eventfd");
  s.connections_epoll_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  if (!s.connections_epoll_.valid()) return EpollError("epoll_create1");
  // A semaphore: each unit wakes one pool thread from epoll_wait.
  s.queued_ = UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC | EFD_SEMAPHORE));
  if (!s.queued_.valid()) return EpollError("eventfd");
  for (const auto& [set, fd] :
       {std::pair(s.epoll_.get(), s.listener_.get()), std::pair(s.epoll_.get(), s.wake_.get()),
        std::pair(s.connections_epoll_.get(), s.queued_.get())}) {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = fd;
    if (epoll_ctl(set, EPOLL_CTL_ADD, fd, &event) != 0) return EpollError("epoll_ctl(ADD)");
  }

  s.max_connections_ = std::max(1, options.max_connections);
  const int descriptors = SoftDescriptorLimit();
  if (descriptors > 0 && descriptors - kReservedDescriptors < s.max_connections_) {
    s.max_connections_ = std::max(1, descriptors - kReservedDescriptors);
    // Said again, as a warning, when a connection is refused for it.
    spdlog::info(
        "data plane: RLIMIT_NOFILE is {}: serving at most {} connections, not "
        "max_connections {}; raise the limit (ulimit -n) to serve more",
        descriptors, s.max_connections_, options.max_connections);
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads =
      options.serving_threads > 0 ? options.serving_threads : std::max(4, 2 * cores);
  // Parked connections are checked against their deadlines this often.
  s.sweep_interval_ = std::clamp(std::min(options.idle_timeout, options.frame_timeout) / 8,
                                 absl::Milliseconds(10), absl::Seconds(1));

  s.poller_ = std::thread([&s] { s.PollLoop(); });
  s.pool_.reserve(threads);
  for (int i = 0; i < threads; ++i) s.pool_.emplace_back([&s] { s.ServeLoop(); });
  return server;
}

DataPlaneServer::~DataPlaneServer() { Shutdown(); }

void DataPlaneServer::Wake() {
  const uint64_t one = 1;
  (void)!write(wake_.get(), &one, sizeof(one));
}

void DataPlaneServer::WakePool(uint64_t threads) {
  (void)!write(queued_.get(), &threads, sizeof(threads));
}

void DataPlaneServer::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    shutdown(listener_.get(), SHUT_RDWR);
    for (auto& [fd, slot] : slots_) {
      // Ends every blocking read and write of a Turn (end of file).
      shutdown(fd, SHUT_RDWR);
      if (slot.state == State::kParked) {
        epoll_ctl(connections_epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
        slot.close_next = true;
        Enqueue(fd, &slot);
      }
    }
    stranger_work_.SignalAll();
  }
  WakePool(pool_.size());
  Wake();
  if (poller_.joinable()) poller_.join();
  // The pool ends when every connection is closed: those being served end
  // with their read, a waiting push when the core answers it. No stranger
  // thread starts after that (nothing is queued).
  for (std::thread& thread : pool_) {
    if (thread.joinable()) thread.join();
  }
  std::vector<std::thread> strangers;
  {
    absl::MutexLock lock(&mu_);
    strangers.swap(stranger_threads_);
  }
  for (std::thread& thread : strangers) thread.join();
}

void DataPlaneServer::PollLoop() {
  epoll_event events[kEventsPerWait];
  absl::Time next_sweep = absl::Now() + sweep_interval_;
  absl::Time listener_paused_until = absl::InfinitePast();
  bool listener_paused = false;
  for (;;) {
    const int64_t wait_ms = std::max<int64_t>(
        0,
        absl::ToInt64Milliseconds(
            std::min(next_sweep, listener_paused ? listener_paused_until : absl::InfiniteFuture()) -
            absl::Now()) +
            1);
    const int n = epoll_wait(epoll_.get(), events, kEventsPerWait, static_cast<int>(wait_ms));
    if (n < 0 && errno != EINTR) spdlog::warn("data plane: epoll_wait: {}", strerror(errno));
    std::vector<std::shared_ptr<DataPlaneConnection>> expired;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      bool accept = false;
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == listener_.get()) {
          accept = true;
        } else if (fd == wake_.get()) {
          uint64_t count;
          (void)!read(wake_.get(), &count, sizeof(count));
        }
      }
      const absl::Time now = absl::Now();
      if (listener_paused && now >= listener_paused_until) {
        epoll_event event{};
        event.events = EPOLLIN;
        event.data.fd = listener_.get();
        listener_paused = epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, listener_.get(), &event) != 0;
        accept = !listener_paused;
        listener_paused_until = now + absl::Milliseconds(100);
      }
      if (accept && !AcceptAll()) {
        // Out of descriptors or memory: the connection stays in the backlog
        // and the listener readable; look again a little later.
        epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, listener_.get(), nullptr);
        listener_paused = true;
        listener_paused_until = now + absl::Milliseconds(100);
      }
      if (now >= next_sweep) {
        for (auto& [fd, slot] : slots_) {
          if (slot.state != State::kParked || slot.deadline > now) continue;
          epoll_ctl(connections_epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
          slot.state = State::kClosing;
          expired.push_back(slot.connection);
        }
        next_sweep = now + sweep_interval_;
      }
    }
    for (const auto& connection : expired) Finish(connection);
  }
}

bool DataPlaneServer::AcceptAll() {
  for (;;) {
    const int fd = accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (absl::Now() - last_refusal_logged_ > absl::Seconds(10)) {
        spdlog::warn(
            "data plane: accept: {} ({} connections open; RLIMIT_NOFILE {}, max_connections {})",
            strerror(errno), slots_.size(), SoftDescriptorLimit(), max_connections_);
        last_refusal_logged_ = absl::Now();
      }
      return false;
    }
    const bool full = slots_.size() >= static_cast<size_t>(max_connections_);
    if (full || unproven_ >= options_.max_unproven_connections) {
      if (absl::Now() - last_refusal_logged_ > absl::Seconds(10)) {
        spdlog::warn(
            "data plane: {} connections open (limit {}: max_connections {}, RLIMIT_NOFILE {}), "
            "{} of them not yet past a job check (limit {}); refusing more",
            slots_.size(), max_connections_, options_.max_connections, SoftDescriptorLimit(),
            unproven_, options_.max_unproven_connections);
        last_refusal_logged_ = absl::Now();
      }
      close(fd);
      continue;
    }
    const absl::Time first_frame_deadline =
        absl::Now() + std::min(options_.idle_timeout, options_.frame_timeout);
    Slot slot;
    slot.connection = std::make_shared<DataPlaneConnection>(
        fd, first_frame_deadline, settings_, jobs_, static_cast<DataPlaneConnection::Host*>(this));
    slot.first_frame_deadline = first_frame_deadline;
    slot.deadline = first_frame_deadline;
    epoll_event event{};
    event.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
    event.data.fd = fd;
    if (epoll_ctl(connections_epoll_.get(), EPOLL_CTL_ADD, fd, &event) != 0) {
      spdlog::warn("data plane: epoll_ctl(ADD): {}", strerror(errno));
      continue;  // the connection closes its socket
    }
    ++unproven_;
    slots_.emplace(fd, std::move(slot));
  }
}

void DataPlaneServer::Enqueue(int fd, Slot* slot) {
  slot->state = State::kQueued;
  if (slot->proven) {
    ready_.push_back(fd);
    WakePool(1);
    return;
  }
  ready_unproven_.push_back(fd);
  // Unproven connections never wait for each other: one that stalls mid-frame
  // or mid-handshake holds its own thread, until its first-frame deadline.
  const int available = static_cast<int>(stranger_threads_.size()) - strangers_in_turn_;
  if (static_cast<int>(ready_unproven_.size()) > available &&
      static_cast<int>(stranger_threads_.size()) < options_.max_unproven_connections) {
    stranger_threads_.emplace_back([this] { ServeStrangers(); });
  } else {
    stranger_work_.Signal();
  }
}

void DataPlaneServer::Park(int fd, Slot* slot) {
  slot->state = State::kParked;
  slot->deadline = slot->proven ? absl::Now() + options_.idle_timeout : slot->first_frame_deadline;
  epoll_event event{};
  event.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
  event.data.fd = fd;
  if (epoll_ctl(connections_epoll_.get(), EPOLL_CTL_MOD, fd, &event) != 0) {
    spdlog::warn("data plane: epoll_ctl(MOD): {}", strerror(errno));
    slot->close_next = true;
    Enqueue(fd, slot);
  }
}

void DataPlaneServer::ServeLoop() {
  std::vector<char> read_ahead(DataPlaneConnection::kReadAheadBytes);
  for (;;) {
    std::shared_ptr<DataPlaneConnection> connection;
    bool close = false;
    int fd = -1;
    {
      absl::MutexLock lock(&mu_);
      if (!ready_.empty()) {
        fd = ready_.front();
        ready_.pop_front();
        Slot& slot = slots_.at(fd);
        slot.state = State::kServing;
        slot.resumed = false;
        connection = slot.connection;
        close = slot.close_next || stopping_;
      } else if (stopping_ && slots_.empty()) {
        return;
      }
    }
    if (connection == nullptr) {
      // Wait for a parked connection's bytes, or for queued work: the thread
      // that epoll wakes serves the connection itself (no hand-off).
      epoll_event event{};
      const int n = epoll_wait(connections_epoll_.get(), &event, 1, -1);
      if (n <= 0) continue;
      if (event.data.fd == queued_.get()) {
        uint64_t one;
        (void)!read(queued_.get(), &one, sizeof(one));
        continue;
      }
      absl::MutexLock lock(&mu_);
      auto it = slots_.find(event.data.fd);
      if (it == slots_.end() || it->second.state != State::kParked) continue;
      if (!it->second.proven) {
        Enqueue(it->first, &it->second);  // to the threads for strangers
        continue;
      }
      fd = it->first;
      it->second.state = State::kServing;
      it->second.resumed = false;
      connection = it->second.connection;
      close = stopping_;
    }
    Serve(fd, connection, close, absl::MakeSpan(read_ahead));
  }
}

void DataPlaneServer::ServeStrangers() {
  std::vector<char> read_ahead(DataPlaneConnection::kReadAheadBytes);
  for (;;) {
    std::shared_ptr<DataPlaneConnection> connection;
    bool close = false;
    int fd = -1;
    {
      absl::MutexLock lock(&mu_);
      while (ready_unproven_.empty()) {
        if (stopping_ && slots_.empty()) return;
        stranger_work_.Wait(&mu_);
      }
      fd = ready_unproven_.front();
      ready_unproven_.pop_front();
      Slot& slot = slots_.at(fd);
      slot.state = State::kServing;
      slot.resumed = false;
      connection = slot.connection;
      close = slot.close_next || stopping_;
      ++strangers_in_turn_;
    }
    const DataPlaneConnection::Next next =
        close ? DataPlaneConnection::Next::kClose : connection->Turn(absl::MakeSpan(read_ahead));
    {
      // Free for the next stranger from here (another thread would only
      // start if more are queued than threads not in a Turn).
      absl::MutexLock lock(&mu_);
      --strangers_in_turn_;
    }
    AfterTurn(fd, connection, next);
  }
}

void DataPlaneServer::Serve(int fd, const std::shared_ptr<DataPlaneConnection>& connection,
                            bool close, absl::Span<char> read_ahead) {
  AfterTurn(fd, connection,
            close ? DataPlaneConnection::Next::kClose : connection->Turn(read_ahead));
}

void DataPlaneServer::AfterTurn(int fd, const std::shared_ptr<DataPlaneConnection>& connection,
                                DataPlaneConnection::Next next) {
  if (next == DataPlaneConnection::Next::kClose) {
    Finish(connection);
    return;
  }
  absl::MutexLock lock(&mu_);
  Slot& slot = slots_.at(fd);
  if (next == DataPlaneConnection::Next::kWaitForPush) {
    if (slot.resumed) {
      Enqueue(fd, &slot);
    } else {
      slot.state = State::kWaitingForPush;
    }
  } else if (stopping_) {
    slot.close_next = true;
    Enqueue(fd, &slot);
  } else if (next == DataPlaneConnection::Next::kAgain) {
    Enqueue(fd, &slot);  // behind the connections already queued
  } else {
    Park(fd, &slot);
  }
}

void DataPlaneServer::Finish(const std::shared_ptr<DataPlaneConnection>& connection) {
  connection->Close();
  absl::MutexLock lock(&mu_);
  const int fd = connection->fd();
  auto it = slots_.find(fd);
  if (it == slots_.end()) return;
  // Before the socket closes with the connection (its number is then free).
  epoll_ctl(connections_epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  if (!it->second.proven) --unproven_;
  slots_.erase(it);
  if (stopping_ && slots_.empty()) {
    WakePool(pool_.size());
    stranger_work_.SignalAll();
  }
}

void DataPlaneServer::Resume(std::shared_ptr<DataPlaneConnection> connection) {
  absl::MutexLock lock(&mu_);
  auto it = slots_.find(connection->fd());
  if (it == slots_.end()) return;
  if (it->second.state == State::kWaitingForPush) {
    Enqueue(it->first, &it->second);
  } else {
    it->second.resumed = true;  // its Turn has not yet returned
  }
}

void DataPlaneServer::Proven(int fd) {
  absl::MutexLock lock(&mu_);
  auto it = slots_.find(fd);
  if (it == slots_.end() || it->second.proven) return;
  it->second.proven = true;
  --unproven_;
}

void DataPlaneServer::Answered(const char* method, const absl::Status& status, absl::Time start) {
  if (handler_ != nullptr) handler_->Record(method, status, start);
  calls_.fetch_add(1);
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

void DataPlaneServer::FrameBytesArrived(int64_t bytes) { pending_.fetch_sub(bytes); }

absl::Status DataPlaneServer::ReserveFrameBytes(int64_t n) {
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
  return absl::OkStatus();
}

void DataPlaneServer::ReleaseBuffers() {
  absl::MutexLock lock(&mu_);
  // RequestRelease only tries the connection's mutex: no lock-order issue.
  for (const auto& [fd, slot] : slots_) slot.connection->RequestRelease();
}

}  // namespace pscluster
