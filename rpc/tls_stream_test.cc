// TlsStream on 127.0.0.1: frames round trip over mutual TLS, large payloads
// included; the client checks the server's name and CA; the server refuses
// a client without a certificate of the cluster CA.
#include "rpc/tls_stream.h"

#include <sys/socket.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "rpc/frame_socket.h"
#include "rpc/peer_role.h"
#include "rpc/test_certs.h"

namespace pscluster {
namespace {

absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

class TlsStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ca_ = MakeTestCa("cluster-ca");
    auto server =
        TlsContext::Create(TlsContext::Side::kServer, TestPem(ca_, MakeTestCert(ca_, "ps0", "ps")));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    absl::StatusOr<UniqueFd> listener = ListenTcp("127.0.0.1", 0, &port_);
    ASSERT_TRUE(listener.ok()) << listener.status();
    listener_ = std::move(*listener);
  }

  // Accepts one connection and does the handshake; then echoes one frame
  // (its kind, meta and payloads) when `echo`.
  std::thread ServeOne(absl::Status* handshake, std::string* client_role) {
    return std::thread([this, handshake, client_role] {
      UniqueFd fd(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      absl::StatusOr<std::unique_ptr<TlsStream>> stream = server_->Accept(fd.get(), Soon());
      *handshake = stream.status();
      if (!stream.ok()) return;
      *client_role = RoleOfCertificate((*stream)->peer_certificate()).value_or("");
      FrameHead head;
      bool closed = false;
      if (!ReadFrameHead(**stream, 1 << 30, Soon(), absl::Seconds(10), &head, &closed).ok()) {
        return;
      }
      std::vector<std::string> payloads(head.payload_sizes.size());
      for (size_t i = 0; i < payloads.size(); ++i) {
        if (!ReadGrowing(**stream, head.payload_sizes[i], &payloads[i], Soon()).ok()) return;
      }
      std::vector<absl::string_view> views(payloads.begin(), payloads.end());
      (void)WriteFrame(**stream, head.kind, 0, head.meta, views, Soon());
    });
  }

  absl::StatusOr<std::unique_ptr<TlsStream>> Connect(const TlsPem& pem,
                                                     const std::string& name = "127.0.0.1") {
    auto client = TlsContext::Create(TlsContext::Side::kClient, pem);
    if (!client.ok()) return client.status();
    absl::StatusOr<UniqueFd> fd = DialTcp("127.0.0.1", port_, Soon());
    if (!fd.ok()) return fd.status();
    return (*client)->Connect(std::move(*fd), name, Soon());
  }

  TestCert ca_;
  std::unique_ptr<TlsContext> server_;
  UniqueFd listener_;
  int port_ = 0;
};

TEST_F(TlsStreamTest, FramesRoundTripWithSmallAndLargePayloads) {
  absl::Status handshake;
  std::string role;
  std::thread server = ServeOne(&handshake, &role);
  auto stream = Connect(TestPem(ca_, MakeTestCert(ca_, "w0", "worker")));
  ASSERT_TRUE(stream.ok()) << stream.status();
  std::string big(9 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  const std::string small = "abc";
  const std::vector<absl::string_view> sent = {small, big, small, absl::string_view(big).substr(5)};
  ASSERT_TRUE(WriteFrame(**stream, 7, 0, "meta", sent, Soon()).ok());
  FrameHead head;
  bool closed = false;
  ASSERT_TRUE(ReadFrameHead(**stream, 1 << 30, Soon(), absl::Seconds(10), &head, &closed).ok());
  EXPECT_EQ(head.kind, 7);
  EXPECT_EQ(head.meta, "meta");
  ASSERT_EQ(head.payload_sizes.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) {
    std::string got;
    ASSERT_TRUE(ReadGrowing(**stream, head.payload_sizes[i], &got, Soon()).ok());
    EXPECT_TRUE(got == sent[i]) << "payload " << i;
  }
  server.join();
  EXPECT_TRUE(handshake.ok()) << handshake;
  EXPECT_EQ(role, "worker");
}

TEST_F(TlsStreamTest, TheClientChecksTheServersName) {
  absl::Status handshake;
  std::string role;
  std::thread server = ServeOne(&handshake, &role);
  auto stream = Connect(TestPem(ca_, MakeTestCert(ca_, "w0", "worker")), "ps.example.com");
  EXPECT_TRUE(absl::IsUnauthenticated(stream.status())) << stream.status();
  server.join();
  EXPECT_FALSE(handshake.ok());
}

TEST_F(TlsStreamTest, TheServerRefusesAStrangersCertificate) {
  absl::Status handshake;
  std::string role;
  std::thread server = ServeOne(&handshake, &role);
  const TestCert stranger_ca = MakeTestCa("stranger-ca");
  // The stranger trusts the cluster CA (so its side of the handshake ends),
  // but its own certificate is signed by another.
  TlsPem pem = TestPem(stranger_ca, MakeTestCert(stranger_ca, "w9", "worker"));
  pem.ca = ca_.cert;
  auto stream = Connect(pem);
  if (stream.ok()) {  // TLS 1.3: the refusal arrives with the first read
    (void)WriteFrame(**stream, 7, 0, "meta", {},
                     Soon());  // may already see the refusal
    FrameHead head;
    bool closed = false;
    EXPECT_FALSE(ReadFrameHead(**stream, 1 << 20, Soon(), absl::Seconds(10), &head, &closed).ok());
  }
  server.join();
  EXPECT_TRUE(absl::IsUnauthenticated(handshake)) << handshake;
}

}  // namespace
}  // namespace pscluster
