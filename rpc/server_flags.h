// The flags every pscluster server takes (--address, --port_file,
// --metrics_address) and their checking, so that each main.cc is wiring only
// and every server treats bad flags alike: a message and exit code 2.
#ifndef PSCLUSTER_RPC_SERVER_FLAGS_H_
#define PSCLUSTER_RPC_SERVER_FLAGS_H_

#include "absl/status/statusor.h"
#include "rpc/rpc_util.h"

namespace pscluster {

// Exit code of a server started with bad flags.
inline constexpr int kExitBadFlags = 2;

// Parses the command line (all flags defined in the binary, the common server
// flags among them) and returns the ServerOptions they give. INVALID_ARGUMENT
// names an unknown flag, a flag without its value, a positional argument, or
// an address that is not host:port. Unlike absl::ParseCommandLine alone it
// never exits the process itself (except for --help).
absl::StatusOr<ServerOptions> ParseServerCommandLine(int argc, char** argv);

}  // namespace pscluster

#endif  // PSCLUSTER_RPC_SERVER_FLAGS_H_
