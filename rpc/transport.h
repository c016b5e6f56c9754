// How a pscluster process's gRPC servers and channels talk: plaintext or
// mutual TLS with one cluster CA, and the largest message either side accepts.
//
// This is one setting per process, like its log level: every server and
// channel of a process uses the same cluster credentials, and channels are made
// in several layers (PS clients, worker clients, health checkers, psctl), so
// main() calls ConfigureTransport once, before it starts a server or makes a
// channel; StartServer and MakeChannel (rpc_util.h) read it. Until then the
// process is plaintext with kDefaultMaxMessageBytes.
//
// With TLS, a server asks every client for a certificate and accepts only one
// signed by the cluster CA (GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY),
// and a channel checks the server's certificate against the same CA and
// against the host it dials (or TlsFiles::server_name when set).
#ifndef PSCLUSTER_RPC_TRANSPORT_H_
#define PSCLUSTER_RPC_TRANSPORT_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/cluster_config.h"
#include "rpc/tls_stream.h"

namespace pscluster {

// 256 MiB: well above any single request of the jobs the admission limits
// allow per PS (a Push carries one PS's share of a step's gradients), well
// under gRPC's hard 2 GiB, so a stranger's oversized message is refused by
// gRPC with RESOURCE_EXHAUSTED before it is buffered.
inline constexpr int64_t kDefaultMaxMessageBytes = int64_t{256} << 20;
// Bounds of --max_message_bytes.
inline constexpr int64_t kMinMaxMessageBytes = int64_t{1} << 20;
inline constexpr int64_t kMaxMaxMessageBytes = (int64_t{1} << 31) - 1;

struct TransportOptions {
  // All empty: plaintext. Otherwise cert, key and ca must all be set.
  TlsFiles tls;
  int64_t max_message_bytes = kDefaultMaxMessageBytes;
};

// Checks and applies `options` for the whole process. Reads the PEM files and
// checks them with OpenSSL: NOT_FOUND names a file that cannot be read;
// INVALID_ARGUMENT names a file that is not a PEM certificate / key, a key
// that does not belong to the certificate, a certificate not signed by the CA,
// only some of cert/key/ca, or max_message_bytes outside [1 MiB, 2 GiB).
// Nothing changes on error. Not thread-safe with StartServer/MakeChannel:
// call it first.
absl::Status ConfigureTransport(const TransportOptions& options);

// What ConfigureTransport set (plaintext and the default size before).
bool TransportUsesTls();
int64_t MaxMessageBytes();
// The name peers' certificates are checked against instead of the dialled
// host; empty when not set.
std::string TransportServerName();
// The PEM texts ConfigureTransport read (all empty without TLS), for the
// connections that are not gRPC's: the PS's data plane (rpc/tls_stream.h)
// speaks mutual TLS with the same certificate, key and CA.
TlsPem TransportTlsPem();
std::shared_ptr<grpc::ChannelCredentials> TransportChannelCredentials();
std::shared_ptr<grpc::ServerCredentials> TransportServerCredentials();

}  // namespace pscluster

#endif  // PSCLUSTER_RPC_TRANSPORT_H_
