// Mutual TLS 1.3 (OpenSSL) on a TCP socket, for the PS's raw data plane
// (ps/service/data_plane_server.h): a secured cluster keeps the data plane's
// framing and buffers, with the cluster CA's certificates (the same files as
// the process's gRPC transport, rpc/transport.h) on both sides.
//
// A TlsContext holds one side's configuration: its certificate chain and key,
// and the cluster CA that the peer's certificate must be signed by. The
// server side requires a client certificate; the client side checks the
// server's certificate against the CA and against the name it dialled (an IP
// address against the certificate's IP SANs, a host name against its DNS
// SANs / CN), as gRPC does. Only TLS 1.3 is spoken; no session tickets.
//
// A TlsStream is one connection: frames (rpc/frame_socket.h) are read with
// SSL_read straight into the callers' buffers (one record at a time; OpenSSL
// reads ahead up to kTlsReadBufferBytes per system call and decrypts into
// its own buffer, so receiving costs one user-space copy more than
// plaintext), and written with SSL_write from the callers' memory, small
// pieces (a frame's header and meta, small tensors) gathered into one record
// first, so a frame's header does not cost a record of its own. Under
// OpenSSL is our own socket BIO: it sends with MSG_NOSIGNAL (a peer that
// closed gives an error, not SIGPIPE) and gathers the 16 KiB records into
// sends of up to 256 KiB, flushed at the end of each frame (one send per
// record cost the data plane a third of its TLS throughput). Kernel TLS
// (kTLS) is not used.
//
// TlsContext is thread-safe (immutable after Create); a TlsStream is not (one
// call at a time, as every FrameStream).
#ifndef PSCLUSTER_RPC_TLS_STREAM_H_
#define PSCLUSTER_RPC_TLS_STREAM_H_

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "rpc/frame_socket.h"

namespace pscluster {

// PEM texts: a certificate (chain: the leaf first), its private key
// (unencrypted), and the cluster CA certificate(s).
struct TlsPem {
  std::string cert;
  std::string key;
  std::string ca;
};

// OpenSSL's read buffer per connection: with read-ahead, up to this much
// arrives per system call.
inline constexpr int kTlsReadBufferBytes = 256 << 10;

class TlsStream;

class TlsContext {
 public:
  enum class Side { kServer, kClient };

  // INVALID_ARGUMENT when a PEM text holds no certificate / key, the key is
  // not the certificate's, or OpenSSL refuses the configuration.
  static absl::StatusOr<std::unique_ptr<TlsContext>> Create(Side side, const TlsPem& pem);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  Side side() const { return side_; }

  // Server side: the handshake on an accepted socket `fd`, which the caller
  // keeps and closes after the stream is gone, finished by `deadline`.
  // UNAUTHENTICATED when the
  // client sent no certificate, one the CA did not sign, or broke the
  // protocol; DEADLINE_EXCEEDED; UNAVAILABLE when the connection broke.
  absl::StatusOr<std::unique_ptr<TlsStream>> Accept(int fd, absl::Time deadline) const;

  // Client side: the handshake on a connected socket, which the stream owns
  // (closed on error too), verifying the server's
  // certificate against the CA and `peer_name` (an IP address or a DNS
  // name). Errors as Accept's. Under TLS 1.3 a server that refuses the
  // client's certificate says so after the client's handshake is done: the
  // first read of the stream then fails (UNAVAILABLE / UNAUTHENTICATED).
  absl::StatusOr<std::unique_ptr<TlsStream>> Connect(UniqueFd fd, const std::string& peer_name,
                                                     absl::Time deadline) const;

 private:
  TlsContext(Side side, SSL_CTX* ctx) : side_(side), ctx_(ctx) {}
  absl::StatusOr<std::unique_ptr<TlsStream>> Handshake(UniqueFd owned, int fd,
                                                       const std::string& peer_name,
                                                       absl::Time deadline) const;

  const Side side_;
  SSL_CTX* const ctx_;
};

class TlsStream final : public FrameStream {
 public:
  ~TlsStream() override;
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  int fd() const override { return fd_; }
  // The peer's certificate (verified by the handshake), owned by the stream;
  // never null on the server side.
  X509* peer_certificate() const;

  absl::Status ReadFirstByte(char* byte, absl::Time deadline, bool* closed) override;
  absl::Status ReadFull(char* data, size_t size, absl::Time deadline) override;
  absl::Status WritePieces(absl::Span<const absl::string_view> pieces,
                           absl::Time deadline) override;
  // Decrypted or read-ahead bytes OpenSSL holds (SSL_has_pending).
  bool HasBufferedBytes() const override;

 private:
  friend class TlsContext;
  TlsStream(UniqueFd owned, int fd, SSL* ssl) : owned_(std::move(owned)), fd_(fd), ssl_(ssl) {}

  // SSL_write_ex of all of `data`.
  absl::Status WriteAll(const char* data, size_t size, absl::Time deadline);
  // Reads up to `size` bytes (at least one) into `data`; `*got` the count.
  absl::Status ReadSome(char* data, size_t size, absl::Time deadline, size_t* got, bool* closed);

  UniqueFd owned_;  // invalid when the socket is borrowed (Accept)
  const int fd_;
  SSL* const ssl_;
  std::string batch_;  // small pieces gathered into one record
};

}  // namespace pscluster

#endif  // PSCLUSTER_RPC_TLS_STREAM_H_
