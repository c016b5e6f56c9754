#include "rpc/tls_stream.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace pscluster {
namespace {

// Small pieces are gathered into records of up to this (TLS's largest
// plaintext record).
constexpr size_t kRecordBytes = 16 << 10;

// The socket BIO under every TlsStream. It sends with MSG_NOSIGNAL (OpenSSL's
// own socket BIO uses write(), which raises SIGPIPE, ending the process, when
// the peer has closed), and gathers the records OpenSSL writes (16 KiB each)
// into sends of up to kSendBytes: a tensor is thousands of records, and each
// send costs the kernel a fixed amount. What is gathered goes out when the
// buffer is full, and on BIO_flush (TlsStream after each frame; OpenSSL after
// each handshake flight) or before a read.
struct SocketBio {
  int fd = -1;
  std::string out;  // records not yet sent
  size_t sent = 0;  // of `out`, already sent
};
constexpr size_t kSendBytes = 256 << 10;

SocketBio* StateOf(BIO* bio) { return static_cast<SocketBio*>(BIO_get_data(bio)); }

// Sends what is gathered: 1 when all of it is out; -1 with errno otherwise
// (the retry flag set for a timeout slice).
int SendGathered(BIO* bio, SocketBio* state) {
  while (state->sent < state->out.size()) {
    const ssize_t n = send(state->fd, state->out.data() + state->sent,
                           state->out.size() - state->sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (BIO_sock_should_retry(-1)) BIO_set_retry_write(bio);
      return -1;
    }
    state->sent += static_cast<size_t>(n);
  }
  state->out.clear();
  state->sent = 0;
  return 1;
}

int BioWrite(BIO* bio, const char* data, int size) {
  SocketBio* state = StateOf(bio);
  BIO_clear_retry_flags(bio);
  const size_t bytes = static_cast<size_t>(size);
  if (state->out.size() + bytes > kSendBytes && SendGathered(bio, state) < 0) return -1;
  if (bytes >= kSendBytes) {  // too large to gather: sent as it is
    errno = 0;
    const ssize_t n = send(state->fd, data, bytes, MSG_NOSIGNAL);
    if (n <= 0 && BIO_sock_should_retry(static_cast<int>(n))) BIO_set_retry_write(bio);
    return static_cast<int>(n);
  }
  if (state->out.capacity() < kSendBytes) state->out.reserve(kSendBytes);
  state->out.append(data, bytes);
  return size;
}

int BioRead(BIO* bio, char* data, int size) {
  SocketBio* state = StateOf(bio);
  BIO_clear_retry_flags(bio);
  // Whatever the peer is to answer must have left first.
  if (!state->out.empty() && SendGathered(bio, state) < 0) return -1;
  errno = 0;
  const ssize_t n = recv(state->fd, data, static_cast<size_t>(size), 0);
  if (n < 0 && BIO_sock_should_retry(static_cast<int>(n))) BIO_set_retry_read(bio);
  return static_cast<int>(n);
}

long BioCtrl(BIO* bio, int command, long, void* arg) {
  SocketBio* state = StateOf(bio);
  switch (command) {
    case BIO_C_GET_FD:
      if (arg != nullptr) *static_cast<int*>(arg) = state->fd;
      return state->fd;
    case BIO_CTRL_FLUSH:
      BIO_clear_retry_flags(bio);
      return SendGathered(bio, state);
    case BIO_CTRL_WPENDING:
      return static_cast<long>(state->out.size() - state->sent);
    default:
      return 0;
  }
}

int BioCreate(BIO* bio) {
  BIO_set_data(bio, new SocketBio());
  BIO_set_init(bio, 1);
  return 1;
}

int BioDestroy(BIO* bio) {
  delete StateOf(bio);
  BIO_set_data(bio, nullptr);
  return 1;
}

// The method table: immutable once made, shared by every stream (a BIO
// points to it for its whole life).
const BIO_METHOD* SocketBioMethod() {
  static const BIO_METHOD* const method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR,
                                 "pscluster socket");
    BIO_meth_set_write(m, BioWrite);
    BIO_meth_set_read(m, BioRead);
    BIO_meth_set_ctrl(m, BioCtrl);
    BIO_meth_set_create(m, BioCreate);
    BIO_meth_set_destroy(m, BioDestroy);
    return m;
  }();
  return method;
}

// OpenSSL's queued errors, oldest first, and clears them.
std::string SslErrors() {
  std::string text;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    absl::StrAppend(&text, text.empty() ? "" : "; ", buf);
  }
  return text.empty() ? "no detail" : text;
}

// Both socket timeouts at the time left (an SSL read may write, and a write
// may read, e.g. during the handshake).
absl::Status SetDeadline(int fd, absl::Time deadline) {
  if (absl::Status s = SetSocketTimeout(fd, SO_RCVTIMEO, deadline); !s.ok()) return s;
  return SetSocketTimeout(fd, SO_SNDTIMEO, deadline);
}

// What to do after an SSL call returned `ret` <= 0: OK to retry it (a timeout
// slice ended before `deadline`, EINTR), or the error that ends the call.
// `*closed` is set when the peer ended the stream cleanly.
absl::Status AfterFailure(SSL* ssl, int fd, int ret, const char* what, absl::Time deadline,
                          bool* closed) {
  const int saved_errno = errno;
  const int error = SSL_get_error(ssl, ret);
  switch (error) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
      ERR_clear_error();
      if (absl::Now() >= deadline)
        return absl::DeadlineExceededError(absl::StrCat(what, ": timed out"));
      return SetDeadline(fd, deadline);
    case SSL_ERROR_ZERO_RETURN:
      ERR_clear_error();
      if (closed != nullptr) *closed = true;
      return absl::UnavailableError("connection closed by the peer");
    case SSL_ERROR_SYSCALL:
      if (saved_errno == EINTR) {
        ERR_clear_error();
        return absl::OkStatus();
      }
      if (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK) {
        ERR_clear_error();
        if (absl::Now() >= deadline) {
          return absl::DeadlineExceededError(absl::StrCat(what, ": timed out"));
        }
        return SetDeadline(fd, deadline);
      }
      if (saved_errno == 0) {
        ERR_clear_error();
        if (closed != nullptr) *closed = true;
        return absl::UnavailableError("connection closed by the peer");
      }
      ERR_clear_error();
      return absl::UnavailableError(absl::StrCat(what, ": ", strerror(saved_errno)));
    default:  // SSL_ERROR_SSL: the peer broke the protocol, or sent an alert
      return absl::UnavailableError(absl::StrCat(what, ": ", SslErrors()));
  }
}

// Every certificate in `pem`, in order.
std::vector<X509*> ReadCertificates(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  std::vector<X509*> certs;
  while (X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) certs.push_back(cert);
  ERR_clear_error();  // the end of the text reads as an error
  BIO_free(bio);
  return certs;
}

// Loads `pem` into `ctx`: chain, key, CA; INVALID_ARGUMENT naming what fails.
absl::Status Load(SSL_CTX* ctx, const TlsPem& pem) {
  std::vector<X509*> chain = ReadCertificates(pem.cert);
  std::vector<X509*> cas = ReadCertificates(pem.ca);
  absl::Status status;
  if (chain.empty()) {
    status = absl::InvalidArgumentError("TLS: the certificate holds no PEM certificate");
  } else if (cas.empty()) {
    status = absl::InvalidArgumentError("TLS: the CA holds no PEM certificate");
  } else if (SSL_CTX_use_certificate(ctx, chain[0]) != 1) {
    status = absl::InvalidArgumentError(absl::StrCat("TLS: certificate: ", SslErrors()));
  }
  for (size_t i = 1; status.ok() && i < chain.size(); ++i) {
    if (SSL_CTX_add1_chain_cert(ctx, chain[i]) != 1) {
      status = absl::InvalidArgumentError(absl::StrCat("TLS: certificate chain: ", SslErrors()));
    }
  }
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  for (size_t i = 0; status.ok() && i < cas.size(); ++i) {
    if (X509_STORE_add_cert(store, cas[i]) != 1) {
      status = absl::InvalidArgumentError(absl::StrCat("TLS: CA: ", SslErrors()));
    }
  }
  for (X509* c : chain) X509_free(c);
  for (X509* c : cas) X509_free(c);
  if (!status.ok()) return status;
  BIO* bio = BIO_new_mem_buf(pem.key.data(), static_cast<int>(pem.key.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS: the key holds no unencrypted PEM private key: ", SslErrors()));
  }
  const bool used = SSL_CTX_use_PrivateKey(ctx, key) == 1 && SSL_CTX_check_private_key(ctx) == 1;
  EVP_PKEY_free(key);
  if (!used) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS: the key is not the certificate's: ", SslErrors()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TlsContext>> TlsContext::Create(Side side, const TlsPem& pem) {
  SSL_CTX* ctx = SSL_CTX_new(side == Side::kServer ? TLS_server_method() : TLS_client_method());
  if (ctx == nullptr) return absl::InternalError(absl::StrCat("SSL_CTX_new: ", SslErrors()));
  std::unique_ptr<TlsContext> context(new TlsContext(side, ctx));
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  // AES-128-GCM first (as gRPC's BoringSSL): the data plane's bulk cost is
  // the cipher, and it is the fastest of TLS 1.3's with AES-NI.
  SSL_CTX_set_ciphersuites(ctx,
                           "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
                           "TLS_CHACHA20_POLY1305_SHA256");
  // A peer's close without close_notify ends the stream (frames say whether
  // it ended where it should); renegotiation does not exist in TLS 1.3.
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_TICKET);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_AUTO_RETRY | SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_read_ahead(ctx, 1);
  SSL_CTX_set_default_read_buffer_len(ctx, kTlsReadBufferBytes);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  if (side == Side::kServer) {
    SSL_CTX_set_num_tickets(ctx, 0);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  } else {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  }
  if (absl::Status s = Load(ctx, pem); !s.ok()) return s;
  return context;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

absl::StatusOr<std::unique_ptr<TlsStream>> TlsContext::Accept(int fd, absl::Time deadline) const {
  return Handshake(UniqueFd(), fd, "", deadline);
}

absl::StatusOr<std::unique_ptr<TlsStream>> TlsContext::Connect(UniqueFd fd,
                                                               const std::string& peer_name,
                                                               absl::Time deadline) const {
  const int raw_fd = fd.get();
  return Handshake(std::move(fd), raw_fd, peer_name, deadline);
}

absl::StatusOr<std::unique_ptr<TlsStream>> TlsContext::Handshake(UniqueFd owned, int raw_fd,
                                                                 const std::string& peer_name,
                                                                 absl::Time deadline) const {
  ERR_clear_error();
  SSL* ssl = SSL_new(ctx_);
  if (ssl == nullptr) return absl::InternalError(absl::StrCat("SSL_new: ", SslErrors()));
  // From here the stream holds the raw_fd and the SSL, also on error.
  std::unique_ptr<TlsStream> stream(new TlsStream(std::move(owned), raw_fd, ssl));
  BIO* bio = BIO_new(SocketBioMethod());
  if (bio == nullptr) return absl::InternalError(absl::StrCat("BIO_new: ", SslErrors()));
  StateOf(bio)->fd = raw_fd;
  SSL_set_bio(ssl, bio, bio);  // the SSL owns it
  if (side_ == Side::kClient) {
    in6_addr ip{};
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    const bool is_ip = inet_pton(AF_INET, peer_name.c_str(), &ip) == 1 ||
                       inet_pton(AF_INET6, peer_name.c_str(), &ip) == 1;
    const bool named = is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, peer_name.c_str()) == 1
                             : X509_VERIFY_PARAM_set1_host(param, peer_name.c_str(), 0) == 1 &&
                                   SSL_set_tlsext_host_name(ssl, peer_name.c_str()) == 1;
    if (peer_name.empty() || !named) {
      return absl::InvalidArgumentError(
          absl::StrCat("TLS: cannot check a server's certificate against \"", peer_name, "\""));
    }
  }
  if (absl::Status s = SetDeadline(raw_fd, deadline); !s.ok()) return s;
  for (;;) {
    ERR_clear_error();
    const int ret = side_ == Side::kServer ? SSL_accept(ssl) : SSL_connect(ssl);
    if (ret == 1) break;
    const long verified = SSL_get_verify_result(ssl);
    absl::Status s = AfterFailure(ssl, raw_fd, ret, "TLS handshake", deadline, nullptr);
    if (s.ok()) continue;
    if (verified != X509_V_OK) {
      return absl::UnauthenticatedError(
          absl::StrCat("TLS handshake: the peer's certificate does not verify: ",
                       X509_verify_cert_error_string(verified)));
    }
    if (absl::IsUnavailable(s) && SSL_get_error(ssl, ret) == SSL_ERROR_SSL) {
      return absl::UnauthenticatedError(s.message());  // e.g. no client certificate
    }
    return s;
  }
  if (side_ == Side::kServer && stream->peer_certificate() == nullptr) {
    return absl::UnauthenticatedError("TLS handshake: the client sent no certificate");
  }
  return stream;
}

TlsStream::~TlsStream() { SSL_free(ssl_); }

X509* TlsStream::peer_certificate() const { return SSL_get0_peer_certificate(ssl_); }

bool TlsStream::HasBufferedBytes() const { return SSL_has_pending(ssl_) == 1; }

absl::Status TlsStream::ReadSome(char* data, size_t size, absl::Time deadline, size_t* got,
                                 bool* closed) {
  for (;;) {
    ERR_clear_error();
    const int ret = SSL_read_ex(ssl_, data, size, got);
    if (ret == 1) return absl::OkStatus();
    if (absl::Status s = AfterFailure(ssl_, fd_, ret, "TLS read", deadline, closed); !s.ok()) {
      return s;
    }
  }
}

absl::Status TlsStream::ReadFirstByte(char* byte, absl::Time deadline, bool* closed) {
  *closed = false;
  if (absl::Status s = SetDeadline(fd_, deadline); !s.ok()) return s;
  size_t got = 0;
  return ReadSome(byte, 1, deadline, &got, closed);
}

absl::Status TlsStream::ReadFull(char* data, size_t size, absl::Time deadline) {
  if (size == 0) return absl::OkStatus();
  if (absl::Status s = SetDeadline(fd_, deadline); !s.ok()) return s;
  bool closed = false;
  while (size > 0) {
    size_t got = 0;
    if (absl::Status s = ReadSome(data, size, deadline, &got, &closed); !s.ok()) return s;
    data += got;
    size -= got;
  }
  return absl::OkStatus();
}

absl::Status TlsStream::WriteAll(const char* data, size_t size, absl::Time deadline) {
  while (size > 0) {
    ERR_clear_error();
    size_t written = 0;
    const int ret = SSL_write_ex(ssl_, data, size, &written);
    if (ret == 1) {
      data += written;
      size -= written;
      continue;
    }
    if (absl::Status s = AfterFailure(ssl_, fd_, ret, "TLS write", deadline, nullptr); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status TlsStream::WritePieces(absl::Span<const absl::string_view> pieces,
                                    absl::Time deadline) {
  if (absl::Status s = SetDeadline(fd_, deadline); !s.ok()) return s;
  batch_.clear();
  batch_.reserve(kRecordBytes);
  for (absl::string_view piece : pieces) {
    if (batch_.size() + piece.size() <= kRecordBytes) {
      batch_.append(piece.data(), piece.size());
      continue;
    }
    // A large piece: the batch is topped up with its start (one full
    // record), the rest written from the caller's memory.
    const size_t top_up = kRecordBytes - batch_.size();
    batch_.append(piece.data(), top_up);
    if (absl::Status s = WriteAll(batch_.data(), batch_.size(), deadline); !s.ok()) return s;
    batch_.clear();
    piece.remove_prefix(top_up);
    if (piece.size() < kRecordBytes) {
      batch_.append(piece.data(), piece.size());
      continue;
    }
    if (absl::Status s = WriteAll(piece.data(), piece.size(), deadline); !s.ok()) return s;
  }
  if (!batch_.empty()) {
    if (absl::Status s = WriteAll(batch_.data(), batch_.size(), deadline); !s.ok()) return s;
  }
  // The records still gathered in the socket BIO go out now.
  BIO* wbio = SSL_get_wbio(ssl_);
  while (BIO_flush(wbio) <= 0) {
    if (!BIO_should_retry(wbio)) {
      return absl::UnavailableError(absl::StrCat("TLS write: ", strerror(errno)));
    }
    if (absl::Now() >= deadline) return absl::DeadlineExceededError("TLS write: timed out");
    if (absl::Status s = SetDeadline(fd_, deadline); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace pscluster
