// PeerRole: the role a TLS peer's certificate names, for the per-role
// certificates of a secured cluster (issue 22): the subject's OU is
// "coordinator", "ps" or "worker" (psctl local --tls, deploy/ and the tests
// issue them so). A server checks it before the RPCs that role may not call:
// the PS's control RPCs and the worker's SetupJob/RunClosure take only a
// coordinator's certificate; Push and Pull a worker's or the coordinator's;
// the workers' all-reduce only a worker's. So a stolen worker certificate
// cannot steer a PS, even for a job of its own making.
//
// Without TLS there is no certificate: the job key's MACs (common/
// control_auth.h) are then the only proof. A certificate without a role OU
// (one cluster certificate for everybody, as before per-role certificates)
// may call everything, as before.
#ifndef PSCLUSTER_RPC_PEER_ROLE_H_
#define PSCLUSTER_RPC_PEER_ROLE_H_

#include <grpcpp/grpcpp.h>
#include <openssl/x509.h>

#include <initializer_list>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pscluster {

// The OU of an RFC 2253 subject ("CN=w0,OU=worker,O=pscluster" -> "worker");
// nullopt if it has none.
std::optional<std::string> RoleOfSubject(absl::string_view subject);

// The role of the authenticated TLS peer of `context`; nullopt without TLS
// or without a role OU.
std::optional<std::string> PeerRole(const grpc::ServerContextBase& context);

// The role (subject OU) of a verified peer certificate, for connections that
// are not gRPC's (the PS's TLS data plane, rpc/tls_stream.h); nullopt
// without an OU.
std::optional<std::string> RoleOfCertificate(const X509* cert);

// OK when `role` is absent or in `allowed`; else PERMISSION_DENIED naming
// the role and the method.
absl::Status CheckRole(const std::optional<std::string>& role,
                       std::initializer_list<absl::string_view> allowed, absl::string_view method);

// OK when the peer may call `method`: no TLS, no role, or a role in
// `allowed`; else PERMISSION_DENIED naming the role and the method.
grpc::Status CheckPeerRole(const grpc::ServerContextBase& context,
                           std::initializer_list<absl::string_view> allowed,
                           absl::string_view method);

}  // namespace pscluster

#endif  // PSCLUSTER_RPC_PEER_ROLE_H_
