#include "rpc/server_flags.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

ABSL_FLAG(std::string, address, "127.0.0.1:0",
          "host:port to serve gRPC on; port 0 lets the kernel pick one.");
ABSL_FLAG(std::string, port_file, "",
          "If set, the bound port is written here once the server is ready.");
ABSL_FLAG(std::string, metrics_address, "",
          "host:port for Prometheus /metrics; empty turns metrics serving off.");

namespace pscluster {
namespace {

// absl::ParseCommandLine exits with 1 on an unknown flag or a missing value;
// check those first so every flag error is reported the same way.
absl::Status CheckFlagNames(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    arg.remove_prefix(arg[1] == '-' ? 2 : 1);
    const absl::string_view name = arg.substr(0, arg.find('='));
    if (name == "help" || name == "helpfull" || name == "version") continue;
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

}  // namespace

absl::StatusOr<ServerOptions> ParseServerCommandLine(int argc, char** argv) {
  if (absl::Status s = CheckFlagNames(argc, argv); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(s.message(), " (see --help)"));
  }
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", positional[1], "' (only flags are accepted)"));
  }
  ServerOptions options;
  options.address = absl::GetFlag(FLAGS_address);
  options.port_file = absl::GetFlag(FLAGS_port_file);
  options.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  if (absl::Status s = CheckAddress("address", options.address); !s.ok()) return s;
  if (!options.metrics_address.empty()) {
    if (absl::Status s = CheckAddress("metrics_address", options.metrics_address); !s.ok()) {
      return s;
    }
  }
  return options;
}

}  // namespace pscluster
