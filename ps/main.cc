// ps_server: one parameter-server task. Serves the ParameterServer gRPC
// service (plus gRPC health checking) and, optionally, Prometheus /metrics,
// until SIGINT or SIGTERM. Flag parsing and wiring only; logic is in ps/core.
//
// Exit codes: 0 after a clean shutdown, 1 if the server cannot start,
// 2 for invalid flags.
#include <prometheus/registry.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "ps/core/variable_store.h"
#include "ps/service/ps_service.h"
#include "rpc/rpc_util.h"

ABSL_FLAG(std::string, address, "127.0.0.1:0",
          "host:port to serve gRPC on; port 0 lets the kernel pick one.");
ABSL_FLAG(std::string, port_file, "",
          "If set, the bound port is written here once the server is ready.");
ABSL_FLAG(std::string, metrics_address, "",
          "host:port for Prometheus /metrics; empty turns metrics serving off.");

namespace pscluster {
namespace {

constexpr int kExitBadFlags = 2;

// absl::ParseCommandLine exits with 1 on an unknown flag or a missing value;
// check those first so every flag error exits with kExitBadFlags.
absl::Status CheckFlagNames(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    arg.remove_prefix(arg[1] == '-' ? 2 : 1);
    const absl::string_view name = arg.substr(0, arg.find('='));
    if (const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name)) {
      if (!flag->IsOfType<bool>() && !absl::StrContains(arg, '=') && i + 1 == argc) {
        return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
      }
      continue;
    }
    if (absl::StartsWith(name, "no") && absl::FindCommandLineFlag(name.substr(2)) != nullptr) {
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
  }
  return absl::OkStatus();
}

// Checks that `address` is "host:port" with port in [0, 65535].
absl::Status CheckAddress(const std::string& flag, const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(absl::string_view(address).substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "='", address, "' is not host:port (e.g. 127.0.0.1:0)"));
  }
  return absl::OkStatus();
}

absl::Status CheckFlags(const std::vector<char*>& positional, const ServerOptions& options) {
  if (positional.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", positional[1], "' (ps_server takes only flags)"));
  }
  if (absl::Status s = CheckAddress("address", options.address); !s.ok()) return s;
  if (!options.metrics_address.empty()) {
    return CheckAddress("metrics_address", options.metrics_address);
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Runs one pscluster parameter-server task.\n"
      "  ps_server --address=HOST:PORT [--port_file=FILE] [--metrics_address=HOST:PORT]");
  if (absl::Status s = CheckFlagNames(argc, argv); !s.ok()) {
    std::cerr << "ps_server: " << s.message() << " (see --help)\n";
    return kExitBadFlags;
  }
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  ServerOptions options;
  options.address = absl::GetFlag(FLAGS_address);
  options.port_file = absl::GetFlag(FLAGS_port_file);
  options.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  if (absl::Status s = CheckFlags(positional, options); !s.ok()) {
    std::cerr << "ps_server: " << s.message() << "\n";
    return kExitBadFlags;
  }

  // Logs go to stderr: stdout carries only the "listening on" line.
  spdlog::set_default_logger(spdlog::stderr_color_mt("ps_server"));

  // Before any thread starts, so every thread inherits the blocked signals.
  absl::Notification stop;
  OnTerminationSignal([&stop] { stop.Notify(); });

  auto registry = std::make_shared<prometheus::Registry>();
  VariableStore::Options store_options;
  store_options.registry = registry;
  VariableStore store(store_options);
  ParameterServerService service(&store, registry);
  auto server = StartServer(options, {&service}, registry);
  if (!server.ok()) {
    spdlog::error("cannot start: {}", server.status().ToString());
    return 1;
  }
  const std::string host = options.address.substr(0, options.address.rfind(':'));
  std::cout << "ps_server listening on " << host << ":" << (*server)->port() << std::endl;
  spdlog::info("serving ParameterServer on {}:{}", host, (*server)->port());
  if ((*server)->metrics_port() != 0) {
    spdlog::info("metrics on port {}", (*server)->metrics_port());
  }

  stop.WaitForNotification();
  spdlog::info("signal received, shutting down");
  (*server)->Shutdown();
  spdlog::info("stopped");
  return 0;
}

}  // namespace
}  // namespace pscluster

int main(int argc, char** argv) { return pscluster::Main(argc, argv); }
