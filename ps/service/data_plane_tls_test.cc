// DataPlaneServer over mutual TLS (issue 22 item 5), on 127.0.0.1 with
// certificates made in the test (rpc/test_certs.h): a worker's push and pull
// round trip; clients without a certificate, or with one of a stranger CA,
// are refused at the handshake and served nothing while the server goes on
// serving; a 'ps'-role certificate is refused Push and Pull.
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/control_auth.h"
#include "common/tensor.h"
#include "common/update_lease.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/core/job_stores.h"
#include "ps/core/memory_budget.h"
#include "ps/service/data_plane_server.h"
#include "ps/service/data_plane_test_util.h"
#include "ps/service/data_plane_wire.h"
#include "ps/service/ps_service.h"
#include "ps/service/remote_ps_client.h"
#include "rpc/frame_socket.h"
#include "rpc/rpc_util.h"
#include "rpc/test_certs.h"
#include "rpc/tls_stream.h"
#include "rpc/transport.h"

namespace pscluster {
namespace {

using data_plane_test::Call;
using data_plane_test::Floats;
using data_plane_test::Soon;

using ::testing::HasSubstr;

constexpr char kJob[] = "job-a";
constexpr int64_t kFloats = 1 << 20;  // "big": 4 MiB, many TLS records

bool WaitFor(const std::function<bool()>& done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

// A keyed job with "big" (kFloats zeros, SGD at 0.5) behind a TLS data plane
// whose certificate is the cluster CA's 'ps' one.
class TlsServer {
 public:
  explicit TlsServer(std::function<void(DataPlaneServer::Options*)> tune = {})
      : ca_(MakeTestCa("cluster-ca")), key_(RandomSecret()) {
    jobs_ = std::make_unique<JobStores>(VariableStore::Options());
    CreateVariablesRequest create;
    create.set_job(kJob);
    create.set_job_key(key_);
    VariableSpecProto* spec = create.add_variables();
    spec->set_name("big");
    spec->set_dtype(DT_FLOAT32);
    spec->add_shape(kFloats);
    spec->mutable_initializer()->set_type("zeros");
    spec->mutable_optimizer()->set_type("sgd");
    spec->mutable_optimizer()->set_learning_rate(0.5f);
    SignRequest(key_, "CreateVariables", &create);
    CreateVariablesResponse created;
    const absl::Status s = jobs_->CreateVariables(create, &created);
    EXPECT_TRUE(s.ok()) << s;
    auto tls =
        TlsContext::Create(TlsContext::Side::kServer, TestPem(ca_, MakeTestCert(ca_, "ps0", "ps")));
    EXPECT_TRUE(tls.ok()) << tls.status();
    DataPlaneServer::Options options;
    options.frame_timeout = absl::Seconds(20);
    options.tls = std::move(*tls);
    if (tune) tune(&options);
    auto started = DataPlaneServer::Start(options, jobs_.get(), nullptr);
    EXPECT_TRUE(started.ok()) << started.status();
    server_ = std::move(*started);
  }

  DataPlaneServer& server() { return *server_; }
  const TestCert& ca() const { return ca_; }

  // A TLS connection with a certificate of `ca` (the cluster's by default).
  absl::StatusOr<std::unique_ptr<TlsStream>> Connect(const std::string& role,
                                                     const TestCert* ca = nullptr) {
    const TestCert& issuer = ca != nullptr ? *ca : ca_;
    TlsPem pem = TestPem(issuer, MakeTestCert(issuer, "client", role));
    pem.ca = ca_.cert;  // every client trusts the cluster's server
    auto context = TlsContext::Create(TlsContext::Side::kClient, pem);
    if (!context.ok()) return context.status();
    absl::StatusOr<UniqueFd> fd = DialTcp("127.0.0.1", server_->port(), Soon());
    if (!fd.ok()) return fd.status();
    return (*context)->Connect(std::move(*fd), "127.0.0.1", Soon());
  }

  UpdateKey Lease(int64_t closure_id, int64_t steps) const {
    UpdateKey u;
    u.set_closure_id(closure_id);
    u.set_lease_steps(steps);
    u.set_lease(MakeLease(key_, kJob, closure_id, steps));
    return u;
  }

  PullRequest Pull() const {
    PullRequest pull;
    pull.set_job(kJob);
    pull.add_names("big");
    *pull.mutable_lease() = Lease(1, 1);
    return pull;
  }

  // A push of ones to "big", step `step`, with the pull fused.
  PushRequest Push(int64_t step) const {
    PushRequest push;
    push.set_job(kJob);
    NamedTensor* g = push.add_gradients();
    g->set_name("big");
    g->mutable_tensor()->set_dtype(DT_FLOAT32);
    g->mutable_tensor()->add_shape(kFloats);
    const std::vector<float> ones(kFloats, 1.0f);
    g->mutable_tensor()->set_data(reinterpret_cast<const char*>(ones.data()), 4 * kFloats);
    *push.mutable_update() = Lease(7, 1000);
    push.mutable_update()->set_step(step);
    *push.mutable_pull() = Pull();
    return push;
  }

 private:
  TestCert ca_;
  std::string key_;
  std::unique_ptr<JobStores> jobs_;
  std::unique_ptr<DataPlaneServer> server_;
};

// A worker's push and pull: the same answers as in plaintext.
void ExpectServed(TlsServer& s, FrameStream& stream, int64_t step) {
  PushResponse pushed;
  const absl::Status st = Call(stream, kDataPlanePush, s.Push(step), &pushed);
  ASSERT_TRUE(st.ok()) << st;
  const std::vector<float> big = Floats(pushed.pulled());
  ASSERT_EQ(big.size(), static_cast<size_t>(kFloats));
  EXPECT_EQ(big[0], -0.5f * (step + 1));
  EXPECT_EQ(big[kFloats - 1], -0.5f * (step + 1));
  PullResponse pulled;
  ASSERT_TRUE(Call(stream, kDataPlanePull, s.Pull(), &pulled).ok());
  EXPECT_EQ(Floats(pulled), big);
}

TEST(DataPlaneTlsTest, AWorkersPushAndPullRoundTrip) {
  TlsServer s;
  auto stream = s.Connect("worker");
  ASSERT_TRUE(stream.ok()) << stream.status();
  for (int step = 0; step < 3; ++step) ExpectServed(s, **stream, step);
  EXPECT_EQ(s.server().calls(), 6);
  // A certificate without a role OU may call everything, as on gRPC.
  auto plain = s.Connect("");
  ASSERT_TRUE(plain.ok()) << plain.status();
  ExpectServed(s, **plain, 3);
}

TEST(DataPlaneTlsTest, AStrangerCasCertificateIsRefusedAndTheServerGoesOn) {
  TlsServer s;
  const TestCert stranger_ca = MakeTestCa("stranger-ca");
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto stream = s.Connect("worker", &stranger_ca);
    if (stream.ok()) {  // TLS 1.3: the server's refusal arrives with the first
                        // read
      PushResponse pushed;
      EXPECT_FALSE(Call(**stream, kDataPlanePush, s.Push(0), &pushed).ok());
    }
  }
  EXPECT_TRUE(WaitFor([&] { return s.server().connections() == 0; }));
  EXPECT_EQ(s.server().calls(), 0);
  auto worker = s.Connect("worker");
  ASSERT_TRUE(worker.ok()) << worker.status();
  ExpectServed(s, **worker, 0);
}

TEST(DataPlaneTlsTest, AClientWithoutACertificateOrWithoutTlsIsRefused) {
  TlsServer s;
  // OpenSSL directly: TlsContext always presents a certificate.
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  absl::StatusOr<UniqueFd> fd = DialTcp("127.0.0.1", s.server().port(), Soon());
  ASSERT_TRUE(fd.ok()) << fd.status();
  timeval tv = absl::ToTimeval(absl::Seconds(10));
  setsockopt(fd->get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd->get());
  if (SSL_connect(ssl) == 1) {
    const std::string frame = EncodeFrameHead(kDataPlanePull, 0, 0, {}, 0);
    (void)SSL_write(ssl, frame.data(), static_cast<int>(frame.size()));
    char byte;
    EXPECT_LE(SSL_read(ssl, &byte, 1), 0);  // refused, nothing answered
  }
  ERR_clear_error();
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  fd->Reset();

  // A plaintext frame on the TLS port is no handshake either.
  absl::StatusOr<UniqueFd> plain = DialTcp("127.0.0.1", s.server().port(), Soon());
  ASSERT_TRUE(plain.ok()) << plain.status();
  PullResponse pulled;
  FdStream plain_stream(plain->get());
  EXPECT_FALSE(Call(plain_stream, kDataPlanePull, s.Pull(), &pulled).ok());
  plain->Reset();

  EXPECT_TRUE(WaitFor([&] { return s.server().connections() == 0; }));
  EXPECT_EQ(s.server().calls(), 0);
  auto worker = s.Connect("worker");
  ASSERT_TRUE(worker.ok()) << worker.status();
  ExpectServed(s, **worker, 0);
}

TEST(DataPlaneTlsTest, APsCertificateIsRefusedPushAndPull) {
  TlsServer s;
  for (const uint16_t kind : {kDataPlanePush, kDataPlanePull}) {
    auto stream = s.Connect("ps");
    ASSERT_TRUE(stream.ok()) << stream.status();
    absl::Status st;
    if (kind == kDataPlanePush) {
      PushResponse pushed;
      st = Call(**stream, kind, s.Push(0), &pushed);
    } else {
      PullResponse pulled;
      st = Call(**stream, kind, s.Pull(), &pulled);
    }
    EXPECT_TRUE(absl::IsPermissionDenied(st)) << st;
    EXPECT_THAT(std::string(st.message()), HasSubstr("'ps' certificate"));
  }
  // Nothing was applied: a worker's first push sees the zeros minus one step.
  auto worker = s.Connect("worker");
  ASSERT_TRUE(worker.ok()) << worker.status();
  ExpectServed(s, **worker, 0);
}

// The pool (issue 25): TLS connections hold no thread either.
TEST(DataPlaneTlsTest, TlsConnectionsShareAFewServingThreads) {
  TlsServer s([](DataPlaneServer::Options* o) { o->serving_threads = 2; });
  std::vector<std::unique_ptr<TlsStream>> streams;
  for (int i = 0; i < 8; ++i) {
    auto stream = s.Connect("worker");
    ASSERT_TRUE(stream.ok()) << stream.status();
    streams.push_back(std::move(*stream));
  }
  for (int round = 0; round < 2; ++round) {
    for (auto& stream : streams) {
      PullResponse pulled;
      ASSERT_TRUE(Call(*stream, kDataPlanePull, s.Pull(), &pulled).ok());
      EXPECT_EQ(Floats(pulled).size(), static_cast<size_t>(kFloats));
    }
  }
  ExpectServed(s, *streams[3], 0);
  EXPECT_EQ(s.server().connections(), 8);
}

// Two frames sent at once arrive together: the second waits decrypted (or
// read ahead) in OpenSSL, where epoll cannot see it, and is served anyway.
TEST(DataPlaneTlsTest, AFrameOpenSslAlreadyReadIsServedWithoutNewBytes) {
  TlsServer s([](DataPlaneServer::Options* o) { o->serving_threads = 1; });
  auto stream = s.Connect("worker");
  ASSERT_TRUE(stream.ok()) << stream.status();
  PullRequest meta;
  std::vector<absl::string_view> payloads;
  SplitRequest(s.Pull(), &meta, &payloads);
  const std::string bytes = meta.SerializeAsString();
  const std::string frame =
      EncodeFrameHead(kDataPlanePull, 0, static_cast<uint32_t>(bytes.size()), {}, 0) + bytes;
  const std::string two = frame + frame;
  ASSERT_TRUE((*stream)->WritePieces({two}, Soon()).ok());
  for (int i = 0; i < 2; ++i) {
    FrameHead head;
    bool closed = false;
    ASSERT_TRUE(ReadFrameHead(**stream, 64 << 20, Soon(), absl::Seconds(10), &head, &closed).ok())
        << "answer " << i;
    ASSERT_EQ(head.code, 0) << head.meta;
    PullResponse pulled;
    ASSERT_TRUE(ReceiveMessage(**stream, head, &pulled, head.deadline).ok());
    EXPECT_EQ(Floats(pulled).size(), static_cast<size_t>(kFloats));
  }
}

// A handshake that stalls holds a serving thread only until the first-frame
// deadline; then it is closed and a worker is served.
TEST(DataPlaneTlsTest, AStalledHandshakeEndsAtTheFirstFrameDeadline) {
  TlsServer s([](DataPlaneServer::Options* o) {
    o->serving_threads = 1;
    o->frame_timeout = absl::Milliseconds(500);
  });
  absl::StatusOr<UniqueFd> stalled = DialTcp("127.0.0.1", s.server().port(), Soon());
  ASSERT_TRUE(stalled.ok()) << stalled.status();
  // A handshake record header announcing 512 bytes, and none of them.
  const char record[] = {0x16, 0x03, 0x01, 0x02, 0x00};
  ASSERT_EQ(send(stalled->get(), record, sizeof(record), MSG_NOSIGNAL),
            static_cast<ssize_t>(sizeof(record)));
  char byte;
  timeval tv = absl::ToTimeval(absl::Seconds(10));
  setsockopt(stalled->get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const ssize_t n = recv(stalled->get(), &byte, 1, 0);
  EXPECT_TRUE(n == 0 || (n < 0 && errno == ECONNRESET)) << "still open after 10 s";
  EXPECT_TRUE(WaitFor([&] { return s.server().connections() == 0; }));
  auto worker = s.Connect("worker");
  ASSERT_TRUE(worker.ok()) << worker.status();
  PullResponse pulled;
  ASSERT_TRUE(Call(**worker, kDataPlanePull, s.Pull(), &pulled).ok());
}

std::string WriteTestFile(const std::string& name, const std::string& text) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// The process's transport is TLS (as ps_server and worker_server configure
// it): RemotePsClient finds the data plane over its TLS channel and speaks TLS
// to it, checking the PS's certificate against 127.0.0.1. Last: the
// transport stays TLS for the rest of the process.
TEST(DataPlaneTlsTest, RemotePsClientPushesAndPullsOnTheTlsDataPlane) {
  const TestCert ca = MakeTestCa("cluster-ca");
  const TestCert node = MakeTestCert(ca, "node", "");  // no role: may call everything
  TransportOptions transport;
  transport.tls.cert = WriteTestFile("node.pem", node.cert);
  transport.tls.key = WriteTestFile("node.key", node.key);
  transport.tls.ca = WriteTestFile("ca.pem", ca.cert);
  ASSERT_TRUE(ConfigureTransport(transport).ok());

  JobStores jobs;
  ParameterServerService service(&jobs, nullptr);
  auto server = StartServer(ServerOptions(), {&service}, nullptr);
  ASSERT_TRUE(server.ok()) << server.status();
  auto tls = TlsContext::Create(TlsContext::Side::kServer, TransportTlsPem());
  ASSERT_TRUE(tls.ok()) << tls.status();
  DataPlaneServer::Options options;
  options.tls = std::move(*tls);
  auto data_plane = DataPlaneServer::Start(options, &jobs, service.handler());
  ASSERT_TRUE(data_plane.ok()) << data_plane.status();
  service.set_data_plane(data_plane->get());

  RemotePsClient::Options client_options;
  client_options.target = absl::StrCat("127.0.0.1:", (*server)->port());
  client_options.call_timeout = std::chrono::seconds(10);
  RemotePsClient client(client_options);
  CreateVariablesRequest create;
  create.set_job("tls-job");
  VariableSpecProto* spec = create.add_variables();
  spec->set_name("w");
  spec->set_dtype(DT_FLOAT32);
  spec->add_shape(4);
  spec->mutable_initializer()->set_type("ones");
  spec->mutable_optimizer()->set_type("sgd");
  spec->mutable_optimizer()->set_learning_rate(0.5f);
  CreateVariablesResponse created;
  ASSERT_TRUE(client.CreateVariables(create, &created).ok());

  PushRequest push;
  push.set_job("tls-job");
  NamedTensor* g = push.add_gradients();
  g->set_name("w");
  EncodeTensor(Shape{4}, std::vector<float>(4, 1.0f), g->mutable_tensor());
  PushResponse pushed;
  const absl::Status st = client.Push(push, &pushed);
  ASSERT_TRUE(st.ok()) << st;
  PullRequest pull;
  pull.set_job("tls-job");
  pull.add_names("w");
  PullResponse pulled;
  ASSERT_TRUE(client.Pull(pull, &pulled).ok());
  EXPECT_EQ(Floats(pulled), std::vector<float>(4, 0.5f));
  EXPECT_EQ((*data_plane)->calls(), 2);  // both on the data plane, not gRPC

  service.set_data_plane(nullptr);
  (*data_plane)->Shutdown();
  (*server)->Shutdown();
}

}  // namespace
}  // namespace pscluster
