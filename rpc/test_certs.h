// Certificates for tests of mutual TLS (rpc/tls_stream.h), made in memory
// with OpenSSL: a cluster CA and leaf certificates it signs, each naming
// 127.0.0.1 and localhost (IP and DNS SANs) and usable by either side, with
// an optional role OU (rpc/peer_role.h). Test-only.
#ifndef PSCLUSTER_RPC_TEST_CERTS_H_
#define PSCLUSTER_RPC_TEST_CERTS_H_

#include <string>

#include "rpc/tls_stream.h"

namespace pscluster {

// A certificate and its key, as PEM.
struct TestCert {
  std::string cert;
  std::string key;
};

// A self-signed CA named CN=`name`.
TestCert MakeTestCa(const std::string& name);

// A leaf certificate CN=`name` (and OU=`role` unless empty) signed by `ca`,
// for 127.0.0.1 and localhost.
TestCert MakeTestCert(const TestCert& ca, const std::string& name, const std::string& role);

// The PEM set a process with `leaf` in a cluster of `ca` configures.
TlsPem TestPem(const TestCert& ca, const TestCert& leaf);

}  // namespace pscluster

#endif  // PSCLUSTER_RPC_TEST_CERTS_H_
