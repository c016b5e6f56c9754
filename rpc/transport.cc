#include "rpc/transport.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace pscluster {
namespace {

struct TransportState {
  bool tls = false;
  int64_t max_message_bytes = kDefaultMaxMessageBytes;
  std::string server_name;
  std::string cert_pem, key_pem, ca_pem;
};

absl::Mutex& StateMutex() {
  static absl::Mutex* mu = new absl::Mutex();
  return *mu;
}

TransportState& State() {
  static TransportState* state = new TransportState();
  return *state;
}

absl::Status ReadFile(const std::string& flag, const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  *out = text.str();
  return absl::OkStatus();
}

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "not PEM";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

// Every certificate in `pem`, in order; INVALID_ARGUMENT when there is none.
absl::StatusOr<std::vector<X509*>> ReadCertificates(const std::string& flag,
                                                    const std::string& path,
                                                    const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  std::vector<X509*> certs;
  while (X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) certs.push_back(cert);
  ERR_clear_error();  // the end of the file reads as an error
  BIO_free(bio);
  if (certs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " holds no PEM certificate"));
  }
  return certs;
}

void FreeAll(std::vector<X509*>& certs) {
  for (X509* c : certs) X509_free(c);
  certs.clear();
}

// Checks that cert/key/ca are PEM, that the key is the certificate's and that
// the CA signed the certificate (with any intermediates in the cert file).
absl::Status CheckTlsFiles(const TlsFiles& files, const std::string& cert_pem,
                           const std::string& key_pem, const std::string& ca_pem) {
  absl::StatusOr<std::vector<X509*>> chain = ReadCertificates("tls cert", files.cert, cert_pem);
  if (!chain.ok()) return chain.status();
  absl::StatusOr<std::vector<X509*>> cas = ReadCertificates("tls ca", files.ca, ca_pem);
  if (!cas.ok()) {
    FreeAll(*chain);
    return cas.status();
  }
  BIO* bio = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  absl::Status status;
  if (key == nullptr) {
    status = absl::InvalidArgumentError(absl::StrCat(
        "tls key: ", files.key, " holds no unencrypted PEM private key (", OpenSslError(), ")"));
  } else if (X509_check_private_key((*chain)[0], key) != 1) {
    ERR_clear_error();
    status = absl::InvalidArgumentError(
        absl::StrCat("tls key: ", files.key, " is not the key of the certificate in ", files.cert));
  } else {
    X509_STORE* store = X509_STORE_new();
    for (X509* ca : *cas) X509_STORE_add_cert(store, ca);
    STACK_OF(X509)* untrusted = sk_X509_new_null();
    for (size_t i = 1; i < chain->size(); ++i) sk_X509_push(untrusted, (*chain)[i]);
    X509_STORE_CTX* ctx = X509_STORE_CTX_new();
    X509_STORE_CTX_init(ctx, store, (*chain)[0], untrusted);
    if (X509_verify_cert(ctx) != 1) {
      status = absl::InvalidArgumentError(
          absl::StrCat("tls cert: ", files.cert, " does not verify against the CA in ", files.ca,
                       ": ", X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx))));
    }
    X509_STORE_CTX_free(ctx);
    sk_X509_free(untrusted);
    X509_STORE_free(store);
    ERR_clear_error();
  }
  EVP_PKEY_free(key);
  FreeAll(*chain);
  FreeAll(*cas);
  return status;
}

}  // namespace

absl::Status ConfigureTransport(const TransportOptions& options) {
  if (options.max_message_bytes < kMinMaxMessageBytes ||
      options.max_message_bytes > kMaxMaxMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat("max_message_bytes ", options.max_message_bytes,
                                                   " is outside [", kMinMaxMessageBytes, ", ",
                                                   kMaxMaxMessageBytes, "]"));
  }
  TransportState next;
  next.max_message_bytes = options.max_message_bytes;
  const TlsFiles& tls = options.tls;
  if (!tls.empty()) {
    if (tls.cert.empty() || tls.key.empty() || tls.ca.empty()) {
      return absl::InvalidArgumentError(
          "TLS needs all three of a certificate, its key and the cluster CA (--tls_cert, "
          "--tls_key, --tls_ca)");
    }
    if (absl::Status s = ReadFile("tls cert", tls.cert, &next.cert_pem); !s.ok()) return s;
    if (absl::Status s = ReadFile("tls key", tls.key, &next.key_pem); !s.ok()) return s;
    if (absl::Status s = ReadFile("tls ca", tls.ca, &next.ca_pem); !s.ok()) return s;
    if (absl::Status s = CheckTlsFiles(tls, next.cert_pem, next.key_pem, next.ca_pem); !s.ok()) {
      return s;
    }
    next.tls = true;
    next.server_name = tls.server_name;
  } else if (!tls.server_name.empty()) {
    return absl::InvalidArgumentError("a TLS server name is set without TLS files");
  }
  absl::MutexLock lock(&StateMutex());
  State() = std::move(next);
  return absl::OkStatus();
}

bool TransportUsesTls() {
  absl::MutexLock lock(&StateMutex());
  return State().tls;
}

int64_t MaxMessageBytes() {
  absl::MutexLock lock(&StateMutex());
  return State().max_message_bytes;
}

std::string TransportServerName() {
  absl::MutexLock lock(&StateMutex());
  return State().server_name;
}

TlsPem TransportTlsPem() {
  absl::MutexLock lock(&StateMutex());
  const TransportState& s = State();
  if (!s.tls) return TlsPem();
  return TlsPem{s.cert_pem, s.key_pem, s.ca_pem};
}

std::shared_ptr<grpc::ChannelCredentials> TransportChannelCredentials() {
  absl::MutexLock lock(&StateMutex());
  const TransportState& s = State();
  if (!s.tls) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = s.ca_pem;
  o.pem_private_key = s.key_pem;
  o.pem_cert_chain = s.cert_pem;
  return grpc::SslCredentials(o);
}

std::shared_ptr<grpc::ServerCredentials> TransportServerCredentials() {
  absl::MutexLock lock(&StateMutex());
  const TransportState& s = State();
  if (!s.tls) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions o(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = s.ca_pem;
  o.pem_key_cert_pairs.push_back({s.key_pem, s.cert_pem});
  return grpc::SslServerCredentials(o);
}

}  // namespace pscluster
