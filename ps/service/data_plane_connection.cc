#include "ps/service/data_plane_connection.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <utility>

#include "absl/strings/str_cat.h"
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

DataPlaneConnection::DataPlaneConnection(int fd, absl::Time first_frame_deadline,
                                         const Settings& settings, JobStores* jobs, Host* host)
    : fd_(fd),
      first_frame_deadline_(first_frame_deadline),
      settings_(settings),
      jobs_(jobs),
      host_(host) {}

DataPlaneConnection::~DataPlaneConnection() { Close(); }

DataPlaneConnection::Next DataPlaneConnection::Turn(absl::Span<char> read_ahead) {
  absl::MutexLock lock(&mu_);
  if (closed_) return Next::kClose;
  const bool opening = !opened_;
  if (opening && !Open()) return Next::kClose;
  if (plain_ != nullptr) plain_->Lend(read_ahead);
  const Next next = TurnLocked(opening);
  // Bytes read ahead and not served (a frame sent before the last push was
  // answered) stay with the stream.
  if (plain_ != nullptr) plain_->Return();
  return next;
}

DataPlaneConnection::Next DataPlaneConnection::TurnLocked(bool opening) {
  if (awaiting_push_) {
    if (!FinishPush()) return Next::kClose;
  } else if (!opening || settings_.tls == nullptr) {
    // The socket is readable, so a frame (or the end) is there. Not so
    // after a TLS handshake: it took what was there (a frame that came with
    // it is in the stream, served below).
    if (!ServeFrame()) return Next::kClose;
  }
  for (int frames = 1;; ++frames) {
    if (awaiting_push_) return Next::kWaitForPush;
    ReleaseIfAsked();
    // Bytes the stream already took off the socket (read ahead, or TLS
    // records) would never wake epoll; in plaintext, a next frame that came
    // while this one was answered is served now: parking it would wake
    // another thread for it.
    const bool more = frames < kMaxFramesPerTurn;
    if (!stream_->HasBufferedBytes() && !(more && plain_ != nullptr && plain_->TryReadAhead())) {
      return Next::kPark;
    }
    if (!more) return Next::kAgain;
    if (!ServeFrame()) return Next::kClose;
  }
}

bool DataPlaneConnection::Open() {
  opened_ = true;
  if (!SetNoDelay(fd()).ok()) return false;
  if (settings_.tls == nullptr) {
    auto plain = std::make_unique<DataPlaneSocketStream>(fd());
    plain_ = plain.get();
    stream_ = std::move(plain);
    return true;
  }
  // Blocks this pool thread, but never past the first-frame deadline.
  absl::StatusOr<std::unique_ptr<TlsStream>> secured =
      settings_.tls->Accept(fd(), first_frame_deadline_);
  if (!secured.ok()) {
    spdlog::debug("data plane: TLS handshake refused: {}", std::string(secured.status().message()));
    return false;
  }
  role_refusal_ = CheckRole(RoleOfCertificate((*secured)->peer_certificate()),
                            {"worker", "coordinator"}, "the data plane (Push, Pull)");
  stream_ = std::move(*secured);
  return true;
}

bool DataPlaneConnection::ServeFrame() {
  FrameLimits limits;
  limits.max_bytes = settings_.max_message_bytes;
  limits.max_meta_bytes = proven_ ? settings_.max_message_bytes : settings_.max_unproven_meta_bytes;
  limits.grow = [this](uint64_t bytes) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    absl::Status s = host_->ReserveFrameBytes(static_cast<int64_t>(bytes));
    if (s.ok()) reserved_.frame += static_cast<int64_t>(bytes);
    return s;
  };
  bool closed = false;
  // Woken because bytes came; a stranger's first frame must still come by
  // its deadline, and a TLS record may be partial.
  const absl::Time first_byte_deadline =
      proven_ ? absl::Now() + settings_.frame_timeout : first_frame_deadline_;
  absl::Status status = ReadFrameHead(*stream_, limits, first_byte_deadline,
                                      settings_.frame_timeout, &head_, &closed);
  if (!status.ok()) {
    EndFrame();
    // The peer's end (or Shutdown) is the normal way out; a bad frame is
    // answered so that its sender sees why.
    if (!closed && (absl::IsInvalidArgument(status) || absl::IsResourceExhausted(status))) {
      WriteError(*stream_, status);
    }
    return false;
  }
  const absl::Time start = absl::Now();
  const bool push = head_.kind == kDataPlanePush;
  if (!push && head_.kind != kDataPlanePull) {
    EndFrame();
    // Its payloads were not read: the connection is out of step.
    WriteError(*stream_, absl::InvalidArgumentError(
                             absl::StrCat("unknown data-plane frame kind ", head_.kind)));
    return false;
  }
  const char* method = push ? "Push" : "Pull";
  // The meta, checked before a byte of the payloads is read.
  status = push ? ParseFrameMeta(head_, &push_, &kept_) : ParseFrameMeta(head_, &pull_, &kept_);
  if (!status.ok()) {
    kept_.clear();
    EndFrame();
    WriteError(*stream_, status);
    return false;
  }
  const absl::Status auth = !role_refusal_.ok() ? role_refusal_
                            : push              ? jobs_->CheckPushAuth(push_)
                                                : jobs_->CheckPullAuth(pull_);
  if (!auth.ok()) {
    kept_.clear();
    EndFrame();
    host_->Answered(method, auth, start);
    WriteError(*stream_, auth);
    // Dropped unread-into-memory, so that a sender still writing them sees
    // the answer (a restarted PS's NOT_FOUND) rather than a reset.
    (void)Discard(*stream_, head_.payload_bytes, head_.deadline);
    return false;
  }
  if (!proven_) {
    proven_ = true;
    host_->Proven(fd());
  }
  in_call_ = true;
  status = push ? ReadFramePayloads(*stream_, head_, &push_, &kept_, head_.deadline, limits.grow)
                : ReadFramePayloads(*stream_, head_, &pull_, &kept_, head_.deadline, limits.grow);
  kept_.clear();
  if (head_.meta.capacity() > kKeepHeadBytes) head_.meta = std::string();
  if (head_.payload_sizes.capacity() * sizeof(uint64_t) > kKeepHeadBytes) {
    head_.payload_sizes = std::vector<uint64_t>();
  }
  EndFrame();
  if (!status.ok()) {
    in_call_ = false;
    if (absl::IsInvalidArgument(status) || absl::IsResourceExhausted(status)) {
      WriteError(*stream_, status);
    }
    return false;
  }
  if (push) {
    pushed_.Clear();
    push_start_ = start;
    awaiting_push_ = true;
    // Answered here, or on the thread of the call that completes a
    // synchronous step (ps/core/sync_steps.h): then no pool thread waits for
    // it, the connection does (Host::Resume takes it up again).
    push_owners_.store(2);
    jobs_->PushAsync(push_, &pushed_, [self = shared_from_this()](absl::Status s) {
      self->push_result_ = std::move(s);
      if (self->push_owners_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        self->host_->Resume(self);
      }
    });
    if (push_owners_.fetch_sub(1, std::memory_order_acq_rel) == 1) return FinishPush();
    return true;
  }
  pulled_.Clear();
  const absl::Status result = jobs_->Pull(pull_, &pulled_);
  host_->Answered(method, result, start);
  status = result.ok() ? WriteMessage(*stream_, kDataPlaneAnswer, &pulled_,
                                      absl::Now() + settings_.frame_timeout)
                       : (WriteError(*stream_, result), absl::OkStatus());
  if (pulled_.ByteSizeLong() > kKeepBuffersBytes) Release();
  in_call_ = false;
  return status.ok();
}

bool DataPlaneConnection::FinishPush() {
  awaiting_push_ = false;
  host_->Answered("Push", push_result_, push_start_);
  const absl::Status status = push_result_.ok()
                                  ? WriteMessage(*stream_, kDataPlaneAnswer, &pushed_,
                                                 absl::Now() + settings_.frame_timeout)
                                  : (WriteError(*stream_, push_result_), absl::OkStatus());
  if (head_.payload_bytes > kKeepBuffersBytes) Release();
  in_call_ = false;
  return status.ok();
}

void DataPlaneConnection::EndFrame() {
  host_->FrameBytesArrived(reserved_.frame);
  const int64_t head_now = HeadCapacity(head_);
  const int64_t kept_now = PayloadCapacity(&push_) + PayloadCapacity(&pull_);
  host_->AdjustBufferBytes(head_now + kept_now - (reserved_.head + kept_bytes_ + reserved_.frame));
  reserved_.frame = 0;
  reserved_.head = head_now;
  kept_bytes_ = kept_now;
}

void DataPlaneConnection::Release() {
  push_ = PushRequest();
  pushed_ = PushResponse();
  pull_ = PullRequest();
  pulled_ = PullResponse();
  host_->AdjustBufferBytes(-kept_bytes_);
  kept_bytes_ = 0;
}

void DataPlaneConnection::ReleaseIfAsked() {
  if (in_call_ || !release_.load() || !release_.exchange(false)) return;
  Release();
  head_ = FrameHead();
  host_->AdjustBufferBytes(-reserved_.head);
  reserved_.head = 0;
}

void DataPlaneConnection::RequestRelease() {
  // Flagged first: a Turn checks the flag before it parks the connection,
  // so the release is never left for a later call.
  release_.store(true);
  if (mu_.TryLock()) {
    ReleaseIfAsked();
    mu_.Unlock();
  }
}

void DataPlaneConnection::Close() {
  absl::MutexLock lock(&mu_);
  if (closed_) return;
  closed_ = true;
  // A push in flight still writes pushed_ (its callback holds a reference,
  // so the server never closes such a connection before Resume).
  if (awaiting_push_) return;
  Release();
  head_ = FrameHead();
  host_->AdjustBufferBytes(-reserved_.head);
  reserved_.head = 0;
  plain_ = nullptr;
  stream_.reset();  // before the socket is closed
  // The peer sees the end now, not when the last reference to this object
  // goes (the number stays taken until then): a client that checks its
  // pooled connection after the server counted it closed finds it closed.
  shutdown(fd(), SHUT_RDWR);
}

}  // namespace pscluster
