// worker_server: serves the Worker RPCs for one worker task.
//
//   worker_server --address=127.0.0.1:0 --port_file=F [--metrics_address=127.0.0.1:0]
//
// Wiring only: flags, the WorkerState with gRPC PS clients, the server.
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "ps/service/grpc_ps_client.h"
#include "rpc/rpc_util.h"
#include "worker/core/worker_state.h"
#include "worker/service/worker_service.h"

ABSL_FLAG(std::string, address, "127.0.0.1:0", "host:port to serve on (port 0 picks a free one)");
ABSL_FLAG(std::string, port_file, "", "write the bound port here once serving");
ABSL_FLAG(std::string, metrics_address, "", "serve Prometheus /metrics here (empty: off)");
ABSL_FLAG(int, ps_timeout_ms, 30000, "deadline of each Pull/Push to a PS");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Serves a pscluster worker task.");
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::cerr << "worker_server: unexpected argument '" << rest[1] << "'\n";
    return 2;
  }
  pscluster::BlockTerminationSignals();
  auto registry = std::make_shared<prometheus::Registry>();
  const int ps_timeout_ms = absl::GetFlag(FLAGS_ps_timeout_ms);
  pscluster::WorkerState state([ps_timeout_ms](const std::string& address) {
    pscluster::GrpcPsClient::Options o;
    o.target = address;
    o.call_timeout = std::chrono::milliseconds(ps_timeout_ms);
    return std::make_unique<pscluster::GrpcPsClient>(o);
  });
  pscluster::WorkerService service(&state, registry);
  pscluster::ServerOptions options;
  options.address = absl::GetFlag(FLAGS_address);
  options.port_file = absl::GetFlag(FLAGS_port_file);
  options.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  auto server = pscluster::StartServer(options, {&service}, registry);
  if (!server.ok()) {
    std::cerr << "worker_server: " << server.status().message() << "\n";
    return 1;
  }
  std::printf("worker_server listening on 127.0.0.1:%d\n", (*server)->port());
  std::fflush(stdout);
  spdlog::info("worker serving on port {}, metrics port {}", (*server)->port(),
               (*server)->metrics_port());
  pscluster::WaitForTerminationSignal();
  spdlog::info("worker shutting down");
  (*server)->Shutdown();
  return 0;
}
