// The flags every pscluster server takes (--address, --port_file,
// --metrics_address, --log_level, the transport: --tls_cert, --tls_key,
// --tls_ca, --tls_server_name, --max_message_bytes, and the cluster: --cluster, --task_type,
// --task_index or the TF_CONFIG environment variable) and their checking, so
// that each main.cc is wiring only and every server treats bad flags alike: a
// message and exit code 2.
#ifndef PSCLUSTER_RPC_SERVER_FLAGS_H_
#define PSCLUSTER_RPC_SERVER_FLAGS_H_

#include <optional>

#include "absl/status/statusor.h"
#include "common/cluster_config.h"
#include "rpc/rpc_util.h"

namespace pscluster {

// Exit code of a server started with bad flags.
inline constexpr int kExitBadFlags = 2;

// Parses the command line (all flags defined in the binary, the common server
// flags among them) and returns the ServerOptions they give. Unlike
// absl::ParseCommandLine alone it never exits the process itself (except for
// --help). INVALID_ARGUMENT names an unknown flag, a flag without its value, a
// positional argument, an address that is not host:port, or a --log_level
// that is not one of trace, debug, info, warn, error, off.
absl::StatusOr<ServerOptions> ParseServerCommandLine(int argc, char** argv);

// The cluster this server belongs to and its task in it. REQUIRES:
// ParseServerCommandLine succeeded.
//
// Sources, first match wins: --cluster FILE (with --task_index, which an
// evaluator may leave out: it is task 0, and --task_type, which defaults to
// `self`), then `tf_config`, the text of the
// TF_CONFIG environment variable (null or empty: unset; --task_type and
// --task_index override its `task`, as in TF). nullopt when neither is given.
// The task's type must be `self`, the kind of task this binary runs.
//
// Unless --address was given, sets options->address to the task's entry in
// the cluster (an evaluator the cluster does not list keeps the default): that address when its host is an IP literal, 0.0.0.0:PORT
// when it is a DNS name (ListenAddressFor). Unless --tls_cert/--tls_key/
// --tls_ca were given, sets options->transport.tls to the cluster's `tls`.
//
// INVALID_ARGUMENT names the problem (see ParseTfConfig), a task of another
// type, or --task_type/--task_index without a cluster; NOT_FOUND an
// unreadable cluster file.
absl::StatusOr<std::optional<ClusterConfig>> ResolveServerCluster(TaskType self,
                                                                  const char* tf_config,
                                                                  ServerOptions* options);

}  // namespace pscluster

#endif  // PSCLUSTER_RPC_SERVER_FLAGS_H_
