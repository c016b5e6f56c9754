// Shared gRPC plumbing for pscluster's servers and clients: status conversion,
// server start-up on a chosen or kernel-picked port, and the thin-handler
// helper every RPC adapter uses (one core call, status conversion, metric).
#ifndef PSCLUSTER_RPC_RPC_UTIL_H_
#define PSCLUSTER_RPC_RPC_UTIL_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rpc/transport.h"

namespace prometheus {
class Collectable;
class Exposer;
class Registry;
}  // namespace prometheus

namespace pscluster {

grpc::Status ToGrpcStatus(const absl::Status& s);
absl::Status FromGrpcStatus(const grpc::Status& s);

struct ServerOptions {
  // "127.0.0.1:0" lets the kernel pick a free port.
  std::string address = "127.0.0.1:0";
  // If set, the bound port is written here (atomically: temp file + rename)
  // once the server is ready, for supervisors such as `psctl local`.
  std::string port_file;
  // If set, Prometheus /metrics is served on this address ("127.0.0.1:0"
  // picks a port; written to `port_file` + ".metrics" when port_file is set,
  // and logged as "metrics on port N"). The endpoint also carries the process
  // metrics (process_metrics.h).
  std::string metrics_address;
  // spdlog level name: trace, debug, info, warn, error or off (checked by
  // ParseServerCommandLine; each main.cc applies it).
  std::string log_level = "info";
  // Full gRPC service names (e.g. Worker::service_full_name()) the health
  // service answers SERVING for once the server starts, besides "" (the
  // server as a whole). Set by each main.cc, not by a flag.
  std::vector<std::string> health_services;
  // From --tls_cert/--tls_key/--tls_ca/--tls_server_name (or the cluster's
  // `tls`) and --max_message_bytes; each main.cc applies it with
  // ConfigureTransport before it starts the server.
  TransportOptions transport;
};

// A started gRPC server with the health-checking service, plus its metrics
// endpoint. Thread-safe: Shutdown may be called from any thread.
class RunningServer {
 public:
  ~RunningServer();
  int port() const { return port_; }
  // 0 when no metrics are served.
  int metrics_port() const { return metrics_port_; }
  grpc::Server* server() { return server_.get(); }
  void Wait() { server_->Wait(); }
  void Shutdown();

  // What the gRPC health service answers for `service` (a full service name
  // such as "pscluster.Worker"; "" is the server as a whole): SERVING or
  // NOT_SERVING. Names never set answer NOT_FOUND.
  void SetServing(const std::string& service, bool serving);

  // Adds `collectable` to the metrics endpoint (kept alive by the server);
  // a no-op when no metrics are served. Call from the thread that started the
  // server (scrapes may run meanwhile).
  void AddCollectable(std::shared_ptr<prometheus::Collectable> collectable);

 private:
  friend absl::StatusOr<std::unique_ptr<RunningServer>> StartServer(
      const ServerOptions&, const std::vector<grpc::Service*>&,
      std::shared_ptr<prometheus::Registry>);
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<prometheus::Exposer> exposer_;
  // Kept alive here: the Exposer holds them weakly.
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  int port_ = 0;
  int metrics_port_ = 0;
};

// Starts `services` on options.address with the process's transport
// (transport.h: plaintext or mutual TLS, and the largest message, larger ones
// refused by gRPC with RESOURCE_EXHAUSTED). One listening socket: SO_REUSEPORT
// is off (gRPC otherwise clones the listener once per server completion queue,
// and with port 0 the clone binds a second, kernel-picked port that nothing
// announces; reuseport would also let another process of the same user bind
// the same port and take a share of the connections). UNAVAILABLE if the
// address cannot be bound. `registry` (may be null) is exposed on options.metrics_address,
// together with the process metrics. The health service answers SERVING for
// "" and each of options.health_services (SetServing changes it).
absl::StatusOr<std::unique_ptr<RunningServer>> StartServer(
    const ServerOptions& options, const std::vector<grpc::Service*>& services,
    std::shared_ptr<prometheus::Registry> registry);

// A channel to `target` with the process's transport (transport.h: plaintext
// or mutual TLS, checking the server's certificate against the cluster CA and
// the dialled host or the configured server name) and message-size limit.
// A plain "host:port" target goes through gRPC's DNS resolver
// ("dns:///host:port"), which resolves the name again whenever the connection
// fails, so a peer that comes back at a new IP under the same name (a
// Kubernetes pod) is found; targets with a scheme ("ipv4:", "unix:", ...) are
// used as they are.
//
// A non-empty `bearer_token` is sent as `authorization: Bearer TOKEN` metadata
// on every call of the channel (a client interceptor), for the coordinator's
// job service (coordinator/core/job_auth.h).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
                                           const std::string& bearer_token = "");

// The gRPC target MakeChannel connects to for `target` (exposed for tests).
std::string ChannelTarget(const std::string& target);

// Sets a deadline `timeout` from now on `ctx`.
void SetDeadline(grpc::ClientContext* ctx, std::chrono::milliseconds timeout);

}  // namespace pscluster

#endif  // PSCLUSTER_RPC_RPC_UTIL_H_
