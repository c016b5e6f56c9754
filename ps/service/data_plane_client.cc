#include "ps/service/data_plane_client.h"

#include <poll.h>
#include <spdlog/spdlog.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "ps/service/data_plane_wire.h"
#include "rpc/rpc_util.h"
#include "rpc/transport.h"

namespace pscluster {
namespace {

// An idle connection the server has closed (it restarted, or shut down) is
// readable (end of file) or hung up; a live one has nothing to read.
bool LooksClosed(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  return poll(&p, 1, 0) != 0;
}

}  // namespace

// One call on a connection: the request is written at construction, the
// answer read by Wait.
class DataPlaneClient::Call : public PendingPsCall {
 public:
  template <typename Request, typename Response>
  Call(DataPlaneClient* client, std::unique_ptr<FrameStream> connection, uint16_t kind,
       const Request& request, Response* response)
      : client_(client),
        connection_(std::move(connection)),
        deadline_(absl::Now() + absl::FromChrono(client->options_.call_timeout)) {
    Request meta;
    std::vector<absl::string_view> payloads;
    SplitRequest(request, &meta, &payloads);
    const std::string serialized = meta.SerializeAsString();
    uint64_t bytes = serialized.size();
    for (absl::string_view p : payloads) bytes += p.size();
    // As gRPC does for its messages: the limit is checked before sending.
    if (bytes > static_cast<uint64_t>(MaxMessageBytes())) {
      status_ = absl::ResourceExhaustedError(
          absl::StrCat("request of ", bytes, " bytes is larger than the limit of ",
                       MaxMessageBytes(), " bytes (--max_message_bytes)"));
      return;
    }
    status_ = WriteFrame(*connection_, kind, 0, serialized, payloads, deadline_);
    receive_ = [response](FrameStream& stream, const FrameHead& head, absl::Time deadline) {
      return ReceiveMessage(stream, head, response, deadline);
    };
  }

  ~Call() override {
    if (!waited_) (void)Wait();
  }

  absl::Status Wait() override {
    waited_ = true;
    bool clean = false;  // the connection is in step for the next call
    if (status_.ok()) {
      FrameHead head;
      bool closed = false;
      status_ = ReadFrameHead(*connection_, MaxMessageBytes(), deadline_,
                              absl::FromChrono(client_->options_.call_timeout), &head, &closed);
      if (status_.ok() && head.kind != kDataPlaneAnswer) {
        status_ = absl::InternalError(absl::StrCat("data plane: answer of kind ", head.kind));
      } else if (status_.ok() && head.code != 0) {
        // The server's error; its message is the meta.
        const bool known =
            head.code > 0 && head.code <= static_cast<int>(absl::StatusCode::kUnauthenticated);
        status_ = absl::Status(
            known ? static_cast<absl::StatusCode>(head.code) : absl::StatusCode::kUnknown,
            head.meta);
      } else if (status_.ok()) {
        status_ = receive_(*connection_, head, deadline_);
        clean = status_.ok();
      } else if (absl::IsInvalidArgument(status_) || absl::IsResourceExhausted(status_)) {
        status_ = absl::InternalError(absl::StrCat("data plane: bad answer: ", status_.message()));
      }
    }
    if (clean) {
      client_->Release(std::move(connection_));
    } else {
      connection_.reset();
      if (absl::IsUnavailable(status_) || absl::IsDeadlineExceeded(status_)) client_->Forget();
    }
    return client_->Named(status_);
  }

 private:
  DataPlaneClient* const client_;
  std::unique_ptr<FrameStream> connection_;
  const absl::Time deadline_;
  std::function<absl::Status(FrameStream&, const FrameHead&, absl::Time)> receive_;
  absl::Status status_;
  bool waited_ = false;
};

DataPlaneClient::DataPlaneClient(Options options, ParameterServer::Stub* stub)
    : options_(std::move(options)), stub_(stub) {
  int port = 0;
  usable_target_ = SplitHostPort(options_.target, &host_, &port).ok();
  tls_ = TransportUsesTls();
  if (usable_target_ && tls_) {
    absl::StatusOr<std::unique_ptr<TlsContext>> context =
        TlsContext::Create(TlsContext::Side::kClient, TransportTlsPem());
    if (context.ok()) {
      tls_context_ = std::move(*context);
    } else {
      spdlog::warn("ps {}: no TLS data plane ({}); Push and Pull go over gRPC", options_.target,
                   std::string(context.status().message()));
    }
    tls_peer_name_ = TransportServerName().empty() ? host_ : TransportServerName();
  }
}

absl::Status DataPlaneClient::Named(const absl::Status& status) const {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("ps ", options_.target, ": ", status.message()));
}

absl::StatusOr<int> DataPlaneClient::Discover() {
  grpc::ClientContext context;
  SetDeadline(&context, options_.call_timeout);
  context.set_wait_for_ready(options_.wait_for_ready);
  DataPlaneRequest request;
  DataPlaneResponse response;
  const grpc::Status status = stub_->DataPlane(&context, request, &response);
  if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) return 0;  // an older PS
  if (!status.ok()) return Named(FromGrpcStatus(status));
  return response.port();
}

absl::StatusOr<std::unique_ptr<FrameStream>> DataPlaneClient::Acquire() {
  if (!usable_target_ || (tls_ && tls_context_ == nullptr)) return nullptr;
  int port;
  {
    absl::MutexLock lock(&mu_);
    while (!idle_.empty()) {
      Idle idle = std::move(idle_.back());
      idle_.pop_back();
      // Idle too long: the PS may be about to close it (its idle timeout).
      if (absl::Now() - idle.since > options_.max_idle) continue;
      if (!LooksClosed(idle.connection->fd())) return std::move(idle.connection);
      // The PS went away since the last call: its port may have changed too.
      idle_.clear();
      port_ = 0;
    }
    if (absl::Now() < retry_at_) return nullptr;
    port = port_;
  }
  if (port == 0) {
    absl::StatusOr<int> found = Discover();
    if (!found.ok()) return found.status();
    absl::MutexLock lock(&mu_);
    if (*found == 0) {
      retry_at_ = absl::Now() + options_.retry_after;
      return nullptr;
    }
    port = port_ = *found;
  }
  const absl::Time deadline =
      absl::Now() + std::min(absl::FromChrono(options_.call_timeout), absl::Seconds(5));
  absl::StatusOr<std::unique_ptr<FrameStream>> dialled = Dial(port, deadline);
  if (!dialled.ok()) {
    spdlog::warn("ps {}: data plane on port {} not usable ({}); using gRPC for {}",
                 options_.target, port, std::string(dialled.status().message()),
                 absl::FormatDuration(options_.retry_after));
    absl::MutexLock lock(&mu_);
    port_ = 0;
    retry_at_ = absl::Now() + options_.retry_after;
    return nullptr;
  }
  return std::move(*dialled);
}

absl::StatusOr<std::unique_ptr<FrameStream>> DataPlaneClient::Dial(int port, absl::Time deadline) {
  absl::StatusOr<UniqueFd> dialled = DialTcp(host_, port, deadline);
  if (!dialled.ok()) return dialled.status();
  if (tls_context_ == nullptr) return std::make_unique<FdStream>(std::move(*dialled));
  absl::StatusOr<std::unique_ptr<TlsStream>> secured =
      tls_context_->Connect(std::move(*dialled), tls_peer_name_, deadline);
  if (!secured.ok()) return secured.status();
  return std::unique_ptr<FrameStream>(std::move(*secured));
}

void DataPlaneClient::Release(std::unique_ptr<FrameStream> connection) {
  absl::MutexLock lock(&mu_);
  idle_.push_back({std::move(connection), absl::Now()});
}

void DataPlaneClient::Forget() {
  absl::MutexLock lock(&mu_);
  idle_.clear();
  port_ = 0;
}

std::unique_ptr<PendingPsCall> DataPlaneClient::StartPush(std::unique_ptr<FrameStream> connection,
                                                          const PushRequest& request,
                                                          PushResponse* response) {
  return std::make_unique<Call>(this, std::move(connection), kDataPlanePush, request, response);
}

absl::Status DataPlaneClient::Pull(std::unique_ptr<FrameStream> connection, const PullRequest& request,
                                   PullResponse* response) {
  return Call(this, std::move(connection), kDataPlanePull, request, response).Wait();
}

}  // namespace pscluster
