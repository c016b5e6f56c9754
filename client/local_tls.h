// LocalTls: the throwaway credentials of `psctl local --tls`.
//
// Makes, with the openssl command (Debian's `openssl` package), a fresh CA
// and one cluster certificate it signs (EC P-256, valid for 2 days, subject
// alternative names IP:127.0.0.1 and DNS:localhost, usable as server and as
// client certificate), plus a random bearer token for the job service. Every
// server of the local cluster gets --tls_cert/--tls_key/--tls_ca, the
// coordinator --auth_tokens_file, and psctl itself uses the same certificate
// and the token. The CA key is deleted once the certificate is signed.
#ifndef PSCLUSTER_CLIENT_LOCAL_TLS_H_
#define PSCLUSTER_CLIENT_LOCAL_TLS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/cluster_config.h"

namespace pscluster {

struct LocalTls {
  TlsFiles files;           // cert, key, ca under the directory
  std::string tokens_file;  // "psctl:TOKEN", for the coordinator's --auth_tokens_file
  std::string token;        // what psctl sends

  // --tls_cert=... --tls_key=... --tls_ca=... for every server.
  std::vector<std::string> ServerFlags() const;
};

// Creates the directory `dir` (mode 0700) and the files in it. NOT_FOUND if
// the openssl command cannot be run; INTERNAL naming the step (and the log
// file openssl wrote to) if one fails.
absl::StatusOr<LocalTls> MakeLocalTls(const std::string& dir);

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_LOCAL_TLS_H_
