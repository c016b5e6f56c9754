#include "rpc/rpc_util.h"

#include <fcntl.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/support/client_interceptor.h>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/checkpoint_file.h"
#include "rpc/process_metrics.h"

namespace pscluster {

grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

RunningServer::~RunningServer() { Shutdown(); }

void RunningServer::Shutdown() {
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

void RunningServer::SetServing(const std::string& service, bool serving) {
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health != nullptr) health->SetServingStatus(service, serving);
}

void RunningServer::AddCollectable(std::shared_ptr<prometheus::Collectable> collectable) {
  if (exposer_ == nullptr || collectable == nullptr) return;
  exposer_->RegisterCollectable(collectable);
  collectables_.push_back(std::move(collectable));
}

absl::StatusOr<std::unique_ptr<RunningServer>> StartServer(
    const ServerOptions& options, const std::vector<grpc::Service*>& services,
    std::shared_ptr<prometheus::Registry> registry) {
  grpc::EnableDefaultHealthCheckService(true);
  auto running = std::unique_ptr<RunningServer>(new RunningServer());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, TransportServerCredentials(), &running->port_);
  builder.SetMaxReceiveMessageSize(static_cast<int>(MaxMessageBytes()));
  builder.SetMaxSendMessageSize(static_cast<int>(MaxMessageBytes()));
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  for (grpc::Service* s : services) builder.RegisterService(s);
  running->server_ = builder.BuildAndStart();
  if (!running->server_ || running->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.address));
  }
  running->SetServing("", true);
  for (const std::string& name : options.health_services) running->SetServing(name, true);
  if (registry && !options.metrics_address.empty()) {
    try {
      // civetweb starts its threads with a 100 KiB stack; rpc/thread_stack.cc
      // raises it so that they can start in a process with large static TLS.
      auto exposer = std::make_shared<prometheus::Exposer>(options.metrics_address);
      exposer->RegisterCollectable(registry);
      auto ports = exposer->GetListeningPorts();
      running->metrics_port_ = ports.empty() ? 0 : ports.front();
      running->exposer_ = exposer;
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("cannot serve metrics on ",
                                                 options.metrics_address, ": ", e.what()));
    }
    running->AddCollectable(std::make_shared<ProcessMetrics>());
    spdlog::info("metrics on port {}", running->metrics_port_);
  }
  if (!options.port_file.empty()) {
    if (running->metrics_port_ != 0) {
      absl::Status s = WriteFileAtomically(options.port_file + ".metrics",
                                           absl::StrCat(running->metrics_port_, "\n"))
                           .status();
      if (!s.ok()) return s;
    }
    absl::Status s =
        WriteFileAtomically(options.port_file, absl::StrCat(running->port_, "\n")).status();
    if (!s.ok()) return s;
  }
  return running;
}

std::string ChannelTarget(const std::string& target) {
  // A URI already ("dns:///h:p", "ipv4:1.2.3.4:5", "unix:/path"). Without a
  // scheme gRPC would also fall back to DNS, but "host:port" parses as a URI
  // with scheme "host", so say which resolver is meant.
  for (absl::string_view scheme : {"dns:", "ipv4:", "ipv6:", "unix:", "unix-abstract:"}) {
    if (absl::StartsWith(target, scheme)) return target;
  }
  return absl::StrCat("dns:///", target);
}

namespace {

// Adds `authorization: Bearer TOKEN` to each call's initial metadata.
class BearerTokenInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit BearerTokenInterceptor(std::shared_ptr<const std::string> header)
      : header_(std::move(header)) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", *header_});
    }
    methods->Proceed();
  }

 private:
  std::shared_ptr<const std::string> header_;
};

class BearerTokenInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenInterceptorFactory(const std::string& token)
      : header_(std::make_shared<const std::string>("Bearer " + token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new BearerTokenInterceptor(header_);
  }

 private:
  std::shared_ptr<const std::string> header_;
};

}  // namespace

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
                                           const std::string& bearer_token) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(MaxMessageBytes()));
  args.SetMaxSendMessageSize(static_cast<int>(MaxMessageBytes()));
  if (const std::string name = TransportServerName(); !name.empty()) {
    args.SetSslTargetNameOverride(name);
  }
  // Each channel gets its own TCP connection rather than sharing a subchannel.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // A restarted PS, worker or coordinator is reconnected to within a second
  // (gRPC's default backoff grows to two minutes).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // DNS names are re-resolved when a connection fails (pick_first asks the
  // dns resolver again on TRANSIENT_FAILURE), but by default at most every
  // 30 s: a pod restarted at a new IP would wait that long. Nothing here may
  // turn re-resolution off; this only shortens its rate limit.
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 1000);
  if (bearer_token.empty()) {
    return grpc::CreateCustomChannel(ChannelTarget(target), TransportChannelCredentials(), args);
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<BearerTokenInterceptorFactory>(bearer_token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      ChannelTarget(target), TransportChannelCredentials(), args, std::move(interceptors));
}

void SetDeadline(grpc::ClientContext* ctx, std::chrono::milliseconds timeout) {
  ctx->set_deadline(std::chrono::system_clock::now() + timeout);
}

}  // namespace pscluster
