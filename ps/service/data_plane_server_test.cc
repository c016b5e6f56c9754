// DataPlaneServer against strangers (issue 22, "the data plane authenticates
// before it allocates"): a real server on 127.0.0.1 over JobStores holding
// one keyed job, driven with raw frames (EncodeFrameHead / WriteFrame) to
// claim sizes that are never sent, push with bad leases and open many
// connections, checking what the server then holds: its MemoryBudget, its
// pending and buffer bytes, and (outside sanitizers) the process's VmRSS.
#include "ps/service/data_plane_server.h"

#include <sys/socket.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/control_auth.h"
#include "common/update_lease.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/core/job_stores.h"
#include "ps/core/memory_budget.h"
#include "ps/service/data_plane_test_util.h"
#include "ps/service/data_plane_wire.h"
#include "rpc/frame_socket.h"

namespace pscluster {
namespace {

using data_plane_test::Call;
using data_plane_test::Floats;
using data_plane_test::ReadAnswer;
using data_plane_test::Soon;

using ::testing::HasSubstr;

constexpr char kJob[] = "job-a";
constexpr int64_t kMiB = 1 << 20;
// "big": a variable of 4 MiB, to push payloads that take the growth path.
constexpr int64_t kBigFloats = 1 << 20;

// Waits until `done` holds, at most `timeout`; returns whether it did.
bool WaitFor(const std::function<bool()>& done, absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

// This process's resident set (the server runs in it), from /proc.
int64_t ResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

bool UnderSanitizer() {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return true;
#endif
#endif
  return false;
}

// A JobStores holding kJob under a key, with "w" (4 floats, ones) and "big"
// (kBigFloats, zeros), SGD at 0.5, and a DataPlaneServer over it; both share
// one MemoryBudget.
class Server {
 public:
  explicit Server(int64_t memory_limit, std::function<void(DataPlaneServer::Options*)> tune = {})
      : budget_(std::make_shared<MemoryBudget>(memory_limit)), key_(RandomSecret()) {
    VariableStore::Options store_options;
    store_options.memory_budget = budget_;
    jobs_ = std::make_unique<JobStores>(store_options);
    CreateVariablesRequest create;
    create.set_job(kJob);
    create.set_job_key(key_);
    AddVariable(&create, "w", 4, "ones");
    AddVariable(&create, "big", kBigFloats, "zeros");
    SignRequest(key_, "CreateVariables", &create);
    CreateVariablesResponse created;
    const absl::Status s = jobs_->CreateVariables(create, &created);
    EXPECT_TRUE(s.ok()) << s;
    parameter_bytes_ = budget_->held();
    DataPlaneServer::Options options;
    options.memory_budget = budget_;
    options.frame_timeout = absl::Seconds(20);
    if (tune) tune(&options);
    auto started = DataPlaneServer::Start(options, jobs_.get(), nullptr);
    EXPECT_TRUE(started.ok()) << started.status();
    server_ = std::move(*started);
  }

  DataPlaneServer& server() { return *server_; }
  const MemoryBudget& budget() const { return *budget_; }
  // What the budget holds beyond the job's variables.
  int64_t extra_held() const { return budget_->held() - parameter_bytes_; }

  UniqueFd Dial() {
    absl::StatusOr<UniqueFd> fd =
        DialTcp("127.0.0.1", server_->port(), absl::Now() + absl::Seconds(5));
    EXPECT_TRUE(fd.ok()) << fd.status();
    return fd.ok() ? std::move(*fd) : UniqueFd();
  }

  UpdateKey Lease(int64_t closure_id, int64_t steps) const {
    UpdateKey u;
    u.set_closure_id(closure_id);
    u.set_lease_steps(steps);
    u.set_lease(MakeLease(key_, kJob, closure_id, steps));
    return u;
  }

  PullRequest PullOf(const std::string& name) const {
    PullRequest pull;
    pull.set_job(kJob);
    pull.add_names(name);
    *pull.mutable_lease() = Lease(1, 1);
    return pull;
  }

  // A push of `floats` gradients of `value` to `name`, step `step` of
  // closure 7 (leased for 1000 steps).
  PushRequest PushOf(const std::string& name, int64_t floats, float value, int64_t step) const {
    PushRequest push;
    push.set_job(kJob);
    NamedTensor* g = push.add_gradients();
    g->set_name(name);
    g->mutable_tensor()->set_dtype(DT_FLOAT32);
    g->mutable_tensor()->add_shape(floats);
    const std::vector<float> values(static_cast<size_t>(floats), value);
    g->mutable_tensor()->set_data(reinterpret_cast<const char*>(values.data()), 4 * floats);
    *push.mutable_update() = Lease(7, 1000);
    push.mutable_update()->set_step(step);
    return push;
  }

 private:
  static void AddVariable(CreateVariablesRequest* create, const std::string& name, int64_t floats,
                          const std::string& init) {
    VariableSpecProto* spec = create->add_variables();
    spec->set_name(name);
    spec->set_dtype(DT_FLOAT32);
    spec->add_shape(floats);
    spec->mutable_initializer()->set_type(init);
    spec->mutable_optimizer()->set_type("sgd");
    spec->mutable_optimizer()->set_learning_rate(0.5f);
  }

  std::shared_ptr<MemoryBudget> budget_;
  std::string key_;
  std::unique_ptr<JobStores> jobs_;
  int64_t parameter_bytes_ = 0;
  std::unique_ptr<DataPlaneServer> server_;
};

// True once the server has closed `fd` (a read sees the end or a reset).
bool ClosedByServer(int fd) {
  char byte;
  timeval tv = absl::ToTimeval(absl::Seconds(10));
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  for (;;) {
    const ssize_t n = recv(fd, &byte, 1, 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    if (n < 0 && errno != EINTR) return false;  // timed out: still open
    // An answer's bytes: read past them.
  }
}

TEST(DataPlaneServerTest, KeyedPushAndPullWorkAndTheirBuffersAreCounted) {
  Server s(256 * kMiB);
  UniqueFd fd = s.Dial();
  PullResponse pulled;
  ASSERT_TRUE(Call(fd.get(), kDataPlanePull, s.PullOf("w"), &pulled).ok());
  EXPECT_EQ(Floats(pulled), std::vector<float>(4, 1.0f));

  // The first 4 MiB push grows its buffer as the bytes arrive; the second,
  // of the same size, is read into the buffer the connection kept.
  for (int step = 0; step < 2; ++step) {
    PushRequest push = s.PushOf("big", kBigFloats, 1.0f, step);
    *push.mutable_pull() = s.PullOf("big");
    PushResponse pushed;
    const absl::Status st = Call(fd.get(), kDataPlanePush, push, &pushed);
    ASSERT_TRUE(st.ok()) << st;
    const std::vector<float> big = Floats(pushed.pulled());
    ASSERT_EQ(big.size(), static_cast<size_t>(kBigFloats));
    EXPECT_EQ(big[0], -0.5f * (step + 1));
    EXPECT_EQ(big[kBigFloats - 1], -0.5f * (step + 1));
    // The kept request buffer (4 MiB, plus a little head) is reserved.
    EXPECT_GE(s.server().buffer_bytes(), 4 * kMiB);
    EXPECT_LT(s.server().buffer_bytes(), 4 * kMiB + kMiB);
    EXPECT_EQ(s.extra_held(), s.server().buffer_bytes());
    EXPECT_EQ(s.server().pending_bytes(), 0);
  }
  PushResponse pushed;
  ASSERT_TRUE(Call(fd.get(), kDataPlanePush, s.PushOf("w", 4, 1.0f, 2), &pushed).ok());
  ASSERT_TRUE(Call(fd.get(), kDataPlanePull, s.PullOf("w"), &pulled).ok());
  EXPECT_EQ(Floats(pulled), std::vector<float>(4, 0.5f));

  // Freed buffers give their reservation back.
  s.server().ReleaseBuffers();  // at once, or as soon as the call lets go
  EXPECT_TRUE(WaitFor([&] { return s.server().buffer_bytes() < kMiB; }))
      << s.server().buffer_bytes();
  fd.Reset();
  ASSERT_TRUE(WaitFor([&] { return s.server().connections() == 0; }));
  EXPECT_EQ(s.server().buffer_bytes(), 0);
  EXPECT_EQ(s.extra_held(), 0);
}

TEST(DataPlaneServerTest, AHeaderClaimingAHugeMetaAllocatesNothingForIt) {
  Server s(256 * kMiB);
  const int64_t rss_before = ResidentBytes();
  const std::string claim = EncodeFrameHead(kDataPlanePush, 0, 255 * kMiB, {}, 0);

  // A stranger's: refused at once (its meta may be 256 KiB at most).
  UniqueFd stranger = s.Dial();
  ASSERT_EQ(send(stranger.get(), claim.data(), claim.size(), 0),
            static_cast<ssize_t>(claim.size()));
  PushResponse ignored;
  absl::Status st = ReadAnswer(stranger.get(), &ignored);
  EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
  EXPECT_THAT(st.message(), HasSubstr("bytes of meta"));
  EXPECT_TRUE(ClosedByServer(stranger.get()));
  EXPECT_EQ(s.extra_held(), 0);

  // A proven connection's: its meta buffer grows only as bytes arrive.
  UniqueFd fd = s.Dial();
  PullResponse pulled;
  ASSERT_TRUE(Call(fd.get(), kDataPlanePull, s.PullOf("w"), &pulled).ok());
  const int64_t held_before = s.extra_held();
  ASSERT_EQ(send(fd.get(), claim.data(), claim.size(), 0), static_cast<ssize_t>(claim.size()));
  ASSERT_EQ(send(fd.get(), "\x0a\x01", 2, 0), 2);  // and then silence
  ASSERT_TRUE(WaitFor([&] { return s.server().pending_bytes() > 0; }));
  EXPECT_LE(s.server().pending_bytes(), 64 << 10);
  EXPECT_LE(s.extra_held() - held_before, 64 << 10);
  if (!UnderSanitizer()) {
    EXPECT_LT(ResidentBytes() - rss_before, 64 * kMiB);
  }

  fd.Reset();
  ASSERT_TRUE(WaitFor([&] { return s.server().connections() == 0; }));
  EXPECT_EQ(s.server().pending_bytes(), 0);
  EXPECT_EQ(s.extra_held(), 0);
}

TEST(DataPlaneServerTest, ManySlowStrangersHoldLittleAndProvenClientsAreStillServed) {
  Server s(256 * kMiB, [](DataPlaneServer::Options* o) { o->max_pending_bytes = 32 * kMiB; });
  UniqueFd proven = s.Dial();
  PullResponse pulled;
  ASSERT_TRUE(Call(proven.get(), kDataPlanePull, s.PullOf("w"), &pulled).ok());
  const int64_t rss_before = ResidentBytes();
  const int64_t held_before = s.extra_held();

  // Three kinds of stranger, each announcing about 255 MiB and then silent:
  // a huge meta; a 200 KiB meta of which 100 bytes come, before a 255 MiB
  // payload; a push with a bad lease before a 200 MiB tensor.
  const std::string huge_meta = EncodeFrameHead(kDataPlanePush, 0, 255 * kMiB, {}, 0);
  const std::string slow_meta =
      EncodeFrameHead(kDataPlanePush, 0, 200 << 10, {255 * kMiB}, 255 * kMiB) +
      std::string(100, '\x0a');
  PushRequest bad = s.PushOf("w", 4, 1.0f, 0);
  bad.mutable_gradients(0)->mutable_tensor()->clear_data();
  bad.mutable_update()->set_lease("not a lease");
  const std::string bad_meta = bad.SerializeAsString();
  const std::string bad_lease =
      EncodeFrameHead(kDataPlanePush, 0, static_cast<uint32_t>(bad_meta.size()), {200 * kMiB},
                      200 * kMiB) +
      bad_meta;
  const std::string* kinds[] = {&huge_meta, &slow_meta, &bad_lease};
  std::vector<UniqueFd> strangers;
  for (int i = 0; i < 512; ++i) {
    absl::StatusOr<UniqueFd> fd =
        DialTcp("127.0.0.1", s.server().port(), absl::Now() + absl::Seconds(5));
    if (!fd.ok()) continue;  // the listen queue was full for a moment
    const std::string& bytes = *kinds[i % 3];
    (void)send(fd->get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
    strangers.push_back(std::move(*fd));
  }
  EXPECT_GT(strangers.size(), 256u);
  // The slow ones fill the slots of unproven connections; no more are taken.
  // A huge meta still queued for a thread when the loop ended held a slot
  // until it was refused: slow ones top the slots up, until all 64 have been
  // taken for 50 ms running (WaitFor looks every 5 ms).
  int full_looks = 0;
  ASSERT_TRUE(WaitFor([&] {
    if (s.server().unproven_connections() == 64) return ++full_looks >= 10;
    full_looks = 0;
    absl::StatusOr<UniqueFd> fd =
        DialTcp("127.0.0.1", s.server().port(), absl::Now() + absl::Seconds(5));
    if (fd.ok()) {
      (void)send(fd->get(), slow_meta.data(), slow_meta.size(), MSG_NOSIGNAL);
      strangers.push_back(std::move(*fd));
    }
    return false;
  })) << s.server().unproven_connections();
  ASSERT_TRUE(WaitFor([&] { return s.server().pending_bytes() > 0; }));
  EXPECT_LE(s.server().connections(), 65);
  EXPECT_LE(s.server().pending_bytes(), 64 * (64 << 10) + kMiB);
  EXPECT_LE(s.extra_held() - held_before, 8 * kMiB);
  if (!UnderSanitizer()) {
    EXPECT_LT(ResidentBytes() - rss_before, 64 * kMiB);
  }

  // A new connection now is closed at once ...
  UniqueFd late = s.Dial();
  EXPECT_TRUE(ClosedByServer(late.get()));
  // ... while one that proved itself before is served.
  ASSERT_TRUE(Call(proven.get(), kDataPlanePull, s.PullOf("w"), &pulled).ok());
  EXPECT_EQ(Floats(pulled), std::vector<float>(4, 1.0f));

  strangers.clear();
  ASSERT_TRUE(WaitFor([&] { return s.server().connections() == 1; })) << s.server().connections();
  EXPECT_EQ(s.server().unproven_connections(), 0);
  EXPECT_EQ(s.server().pending_bytes(), 0);
  EXPECT_EQ(s.extra_held(), held_before);
  UniqueFd fresh = s.Dial();
  ASSERT_TRUE(Call(fresh.get(), kDataPlanePull, s.PullOf("w"), &pulled).ok());
  EXPECT_EQ(Floats(pulled), std::vector<float>(4, 1.0f));
}

TEST(DataPlaneServerTest, APushWithABadLeaseIsRefusedBeforeItsTensorIsRead) {
  Server s(256 * kMiB);
  PushRequest push = s.PushOf("w", 4, 1.0f, 0);
  push.mutable_update()->set_lease("not a lease");
  PushRequest meta;
  std::vector<absl::string_view> payloads;
  SplitRequest(push, &meta, &payloads);
  const std::string bytes = meta.SerializeAsString();
  // The header announces a 64 MiB tensor; only the header and meta are sent.
  UniqueFd fd = s.Dial();
  const std::string head = EncodeFrameHead(kDataPlanePush, 0, static_cast<uint32_t>(bytes.size()),
                                           {64 * kMiB}, 64 * kMiB) +
                           bytes;
  ASSERT_EQ(send(fd.get(), head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
  PushResponse pushed;
  absl::Status st = ReadAnswer(fd.get(), &pushed);
  EXPECT_TRUE(absl::IsPermissionDenied(st)) << st;
  EXPECT_THAT(st.message(), HasSubstr("lease"));
  EXPECT_EQ(s.server().pending_bytes(), 0);
  EXPECT_LT(s.extra_held(), 64 << 10);
  // The connection is closed once the frame is over.
  shutdown(fd.get(), SHUT_WR);
  EXPECT_TRUE(ClosedByServer(fd.get()));

  // A sender that writes the whole frame (8 MiB, more than the socket
  // buffers take) still reads the answer, not a reset; nothing was applied.
  push = s.PushOf("w", 2 * kMiB, 1.0f, 0);
  push.mutable_update()->set_lease("not a lease");
  UniqueFd whole = s.Dial();
  st = Call(whole.get(), kDataPlanePush, push, &pushed);
  EXPECT_TRUE(absl::IsPermissionDenied(st)) << st;
  // A job this PS does not hold: NOT_FOUND, as a restarted PS answers.
  push = s.PushOf("w", 4, 1.0f, 0);
  push.set_job("job-gone");
  UniqueFd other = s.Dial();
  st = Call(other.get(), kDataPlanePush, push, &pushed);
  EXPECT_TRUE(absl::IsNotFound(st)) << st;

  UniqueFd check = s.Dial();
  PullResponse pulled;
  ASSERT_TRUE(Call(check.get(), kDataPlanePull, s.PullOf("w"), &pulled).ok());
  EXPECT_EQ(Floats(pulled), std::vector<float>(4, 1.0f));
}

// Sends `push`'s header, meta and the first `sent` bytes of its payloads,
// then reads the answer.
absl::Status SendPartOfAPush(int fd, const PushRequest& push, size_t sent) {
  PushRequest meta;
  std::vector<absl::string_view> payloads;
  SplitRequest(push, &meta, &payloads);
  const std::string bytes = meta.SerializeAsString();
  std::vector<uint64_t> sizes;
  uint64_t total = 0;
  for (absl::string_view p : payloads) {
    sizes.push_back(p.size());
    total += p.size();
  }
  const std::string frame =
      EncodeFrameHead(kDataPlanePush, 0, static_cast<uint32_t>(bytes.size()), sizes, total) +
      bytes + std::string(payloads[0].substr(0, sent));
  size_t done = 0;
  while (done < frame.size()) {
    const ssize_t n = send(fd, frame.data() + done, frame.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return absl::UnavailableError(absl::StrCat("send: ", strerror(errno)));
    done += static_cast<size_t>(n);
  }
  PushResponse pushed;
  return ReadAnswer(fd, &pushed);
}

TEST(DataPlaneServerTest, AFrameThatWouldPassTheMemoryLimitIsResourceExhausted) {
  // The variables take 4 MiB; 2 MiB are left for everything else. The 4 MiB
  // push grows its buffer to 1 MiB, then would need 2 MiB more.
  Server s(4 * kMiB + 2 * kMiB);
  UniqueFd fd = s.Dial();
  absl::Status st = SendPartOfAPush(fd.get(), s.PushOf("big", kBigFloats, 1.0f, 0), kMiB);
  EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
  EXPECT_THAT(st.message(), HasSubstr("--max_memory_bytes"));
  EXPECT_TRUE(ClosedByServer(fd.get()));
  ASSERT_TRUE(WaitFor([&] { return s.server().connections() == 0; }));
  EXPECT_EQ(s.extra_held(), 0);
  EXPECT_EQ(s.server().pending_bytes(), 0);

  // Small requests still pass.
  UniqueFd again = s.Dial();
  PullResponse pulled;
  ASSERT_TRUE(Call(again.get(), kDataPlanePull, s.PullOf("w"), &pulled).ok());
}

TEST(DataPlaneServerTest, FramesPastTheLimitOfPendingBytesAreResourceExhausted) {
  // A 4 MiB push on a new connection grows its buffer to 512 KiB, then
  // would put it at 1 MiB: past the limit with the meta's bytes.
  Server s(0, [](DataPlaneServer::Options* o) { o->max_pending_bytes = kMiB; });
  UniqueFd fd = s.Dial();
  absl::Status st = SendPartOfAPush(fd.get(), s.PushOf("big", kBigFloats, 1.0f, 0), 512 << 10);
  EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
  EXPECT_THAT(st.message(), HasSubstr("--data_plane_max_pending_bytes"));
  EXPECT_TRUE(ClosedByServer(fd.get()));
  ASSERT_TRUE(WaitFor([&] { return s.server().connections() == 0; }));
  EXPECT_EQ(s.server().pending_bytes(), 0);
  EXPECT_EQ(s.server().buffer_bytes(), 0);
}

// The pool (issue 25): connections hold no thread; a few serving threads
// take each one when its bytes come.

TEST(DataPlaneServerTest, ManyMoreConnectionsThanServingThreadsAreAllServed) {
  Server s(256 * kMiB, [](DataPlaneServer::Options* o) { o->serving_threads = 2; });
  ASSERT_EQ(s.server().serving_threads(), 2);
  constexpr int kConnections = 40;
  std::vector<UniqueFd> fds;
  for (int i = 0; i < kConnections; ++i) fds.push_back(s.Dial());
  // Every connection proven, then used again from several threads at once.
  for (UniqueFd& fd : fds) {
    PullResponse pulled;
    ASSERT_TRUE(Call(fd.get(), kDataPlanePull, s.PullOf("w"), &pulled).ok());
  }
  EXPECT_EQ(s.server().connections(), kConnections);
  EXPECT_EQ(s.server().unproven_connections(), 0);
  std::vector<std::thread> clients;
  std::vector<int> served(8, 0);
  for (int t = 0; t < 8; ++t) {
    clients.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        for (int i = t; i < kConnections; i += 8) {
          PullResponse pulled;
          if (Call(fds[i].get(), kDataPlanePull, s.PullOf("w"), &pulled).ok() &&
              Floats(pulled) == std::vector<float>(4, 1.0f)) {
            ++served[t];
          }
        }
      }
    });
  }
  for (std::thread& c : clients) c.join();
  int total = 0;
  for (int n : served) total += n;
  EXPECT_EQ(total, 5 * kConnections);
  EXPECT_EQ(s.server().calls(), 6 * kConnections);
}

TEST(DataPlaneServerTest, AStalledFrameAndIdleConnectionsDoNotBlockTheOthers) {
  // Two pool threads: a proven connection stalled mid-frame holds one; a
  // stranger stalled mid-frame holds a thread for strangers, not the pool's.
  Server s(256 * kMiB, [](DataPlaneServer::Options* o) { o->serving_threads = 2; });
  UniqueFd stalled = s.Dial();
  PullResponse pulled;
  ASSERT_TRUE(Call(stalled.get(), kDataPlanePull, s.PullOf("w"), &pulled).ok());
  // A header announcing a 100-byte meta, and 10 bytes of it.
  const std::string half = EncodeFrameHead(kDataPlanePull, 0, 100, {}, 0) + std::string(10, 'x');
  const ssize_t size = static_cast<ssize_t>(half.size());
  ASSERT_EQ(send(stalled.get(), half.data(), half.size(), MSG_NOSIGNAL), size);
  UniqueFd stranger = s.Dial();
  ASSERT_EQ(send(stranger.get(), half.data(), half.size(), MSG_NOSIGNAL), size);
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 20; ++i) {
    idle.push_back(s.Dial());
    ASSERT_TRUE(Call(idle.back().get(), kDataPlanePull, s.PullOf("w"), &pulled).ok());
  }
  for (int i = 0; i < 10; ++i) idle.push_back(s.Dial());  // silent strangers, parked
  ASSERT_TRUE(WaitFor([&] { return s.server().pending_bytes() > 0; }));
  // Both stalled frames are being read; everyone else is still served.
  UniqueFd fresh = s.Dial();
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(Call(fresh.get(), kDataPlanePull, s.PullOf("w"), &pulled).ok());
    ASSERT_TRUE(Call(idle[i].get(), kDataPlanePull, s.PullOf("w"), &pulled).ok());
  }
  EXPECT_EQ(Floats(pulled), std::vector<float>(4, 1.0f));
  EXPECT_EQ(s.server().connections(), 33);
}

TEST(DataPlaneServerTest, AnUnprovenConnectionOverTheLimitIsClosedAndProvenOnesFreeSlots) {
  Server s(256 * kMiB, [](DataPlaneServer::Options* o) {
    o->serving_threads = 2;
    o->max_unproven_connections = 2;
  });
  UniqueFd a = s.Dial();
  UniqueFd b = s.Dial();
  ASSERT_TRUE(WaitFor([&] { return s.server().unproven_connections() == 2; }));
  UniqueFd over = s.Dial();
  EXPECT_TRUE(ClosedByServer(over.get()));
  EXPECT_EQ(s.server().connections(), 2);
  // `a` proves itself: a slot for a stranger is free again.
  PullResponse pulled;
  ASSERT_TRUE(Call(a.get(), kDataPlanePull, s.PullOf("w"), &pulled).ok());
  EXPECT_EQ(s.server().unproven_connections(), 1);
  UniqueFd c = s.Dial();
  ASSERT_TRUE(Call(c.get(), kDataPlanePull, s.PullOf("w"), &pulled).ok());
  EXPECT_EQ(s.server().connections(), 3);
}

TEST(DataPlaneServerTest, ParkedConnectionsAreClosedAtTheirDeadlines) {
  // A stranger's first frame must come within min(idle, frame timeout); a
  // proven connection is closed after idle_timeout without a frame.
  Server s(256 * kMiB, [](DataPlaneServer::Options* o) {
    o->serving_threads = 1;
    o->idle_timeout = absl::Milliseconds(300);
  });
  UniqueFd silent = s.Dial();
  UniqueFd proven = s.Dial();
  PullResponse pulled;
  ASSERT_TRUE(Call(proven.get(), kDataPlanePull, s.PullOf("w"), &pulled).ok());
  EXPECT_TRUE(ClosedByServer(silent.get()));
  EXPECT_TRUE(ClosedByServer(proven.get()));
  ASSERT_TRUE(WaitFor([&] { return s.server().connections() == 0; }));
  EXPECT_EQ(s.server().unproven_connections(), 0);
}

TEST(DataPlaneServerTest, PushesWaitingForASynchronousStepHoldNoServingThread) {
  // One serving thread, three replicas: the first two shares wait for the
  // third, which must still be read and served.
  Server s(256 * kMiB, [](DataPlaneServer::Options* o) { o->serving_threads = 1; });
  constexpr int kReplicas = 3;
  std::vector<UniqueFd> fds;
  for (int r = 0; r < kReplicas; ++r) fds.push_back(s.Dial());
  auto share = [&](int replica) {
    PushRequest push = s.PushOf("w", 4, 2.0f, 0);
    SyncShare* sync = push.mutable_update()->mutable_sync();
    sync->set_replica(replica);
    sync->set_replicas(kReplicas);
    sync->set_examples(1);
    *push.mutable_pull() = s.PullOf("w");
    PushRequest meta;
    std::vector<absl::string_view> payloads;
    SplitRequest(push, &meta, &payloads);
    return WriteFrame(fds[replica].get(), kDataPlanePush, 0, meta.SerializeAsString(), payloads,
                      Soon());
  };
  for (int r = 0; r < kReplicas; ++r) ASSERT_TRUE(share(r).ok());
  for (int r = 0; r < kReplicas; ++r) {
    PushResponse pushed;
    const absl::Status st = ReadAnswer(fds[r].get(), &pushed);
    ASSERT_TRUE(st.ok()) << "replica " << r << ": " << st;
    // One step of the mean gradient 2 at rate 0.5: 1 - 1 = 0.
    EXPECT_EQ(Floats(pushed.pulled()), std::vector<float>(4, 0.0f)) << "replica " << r;
  }
  EXPECT_EQ(s.server().calls(), kReplicas);
}

// The bytes of `request` as one frame of `kind`, as WriteFrame sends them.
template <typename Request>
std::string FrameBytes(uint16_t kind, const Request& request) {
  Request meta;
  std::vector<absl::string_view> payloads;
  SplitRequest(request, &meta, &payloads);
  const std::string meta_bytes = meta.SerializeAsString();
  std::vector<uint64_t> sizes;
  uint64_t total = 0;
  for (absl::string_view p : payloads) {
    sizes.push_back(p.size());
    total += p.size();
  }
  std::string out = EncodeFrameHead(kind, 0, meta_bytes.size(), sizes, total) + meta_bytes;
  for (absl::string_view p : payloads) out.append(p.data(), p.size());
  return out;
}

bool SendAll(int fd, const std::string& bytes) {
  return send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

TEST(DataPlaneServerTest, FramesSentAheadAreAllAnsweredInOrder) {
  // One serving thread. A client that sends many frames before reading an
  // answer has them served a bounded number per turn (the rest read ahead
  // and kept, or still on the socket); another connection is served too.
  Server s(256 * kMiB, [](DataPlaneServer::Options* o) { o->serving_threads = 1; });
  UniqueFd busy = s.Dial();
  UniqueFd other = s.Dial();
  PullResponse pulled;
  ASSERT_TRUE(Call(busy.get(), kDataPlanePull, s.PullOf("w"), &pulled).ok());
  ASSERT_TRUE(Call(other.get(), kDataPlanePull, s.PullOf("w"), &pulled).ok());
  constexpr int kFrames = 3 * DataPlaneConnection::kMaxFramesPerTurn + 5;
  std::string frames;
  for (int i = 0; i < kFrames; ++i) {
    // Pushes of 1 to "w" (each step one down), each answered with the pull.
    PushRequest push = s.PushOf("w", 4, 1.0f, i);
    *push.mutable_pull() = s.PullOf("w");
    frames += FrameBytes(kDataPlanePush, push);
  }
  ASSERT_TRUE(SendAll(busy.get(), frames));
  ASSERT_TRUE(Call(other.get(), kDataPlanePull, s.PullOf("w"), &pulled).ok());
  for (int i = 0; i < kFrames; ++i) {
    PushResponse pushed;
    const absl::Status st = ReadAnswer(busy.get(), &pushed);
    ASSERT_TRUE(st.ok()) << "frame " << i << ": " << st;
    EXPECT_EQ(Floats(pushed.pulled()), std::vector<float>(4, 1.0f - 0.5f * (i + 1)))
        << "frame " << i;
  }
  EXPECT_EQ(s.server().calls(), kFrames + 3);
}

TEST(DataPlaneServerTest, AFrameSentBehindAWaitingPushIsServedAfterIt) {
  // A synchronous step's first share (its fused pull waits for the second
  // share); the frame its sender wrote right behind it, read ahead with it,
  // is served once that push is answered, on another turn.
  Server s(256 * kMiB, [](DataPlaneServer::Options* o) { o->serving_threads = 1; });
  UniqueFd first = s.Dial();
  UniqueFd second = s.Dial();
  auto share = [&](int replica) {
    PushRequest push = s.PushOf("w", 4, 2.0f, 0);
    SyncShare* sync = push.mutable_update()->mutable_sync();
    sync->set_replica(replica);
    sync->set_replicas(2);
    sync->set_examples(1);
    *push.mutable_pull() = s.PullOf("w");
    return push;
  };
  ASSERT_TRUE(SendAll(first.get(), FrameBytes(kDataPlanePush, share(0)) +
                                       FrameBytes(kDataPlanePull, s.PullOf("w"))));
  // Its first frame read (its buffers are counted then), the share waits.
  ASSERT_TRUE(WaitFor([&] { return s.server().buffer_bytes() > 0; }));
  EXPECT_EQ(s.server().calls(), 0);
  PushResponse pushed;
  ASSERT_TRUE(Call(second.get(), kDataPlanePush, share(1), &pushed).ok());
  // One step of the mean gradient 2 at rate 0.5: 1 - 1 = 0.
  EXPECT_EQ(Floats(pushed.pulled()), std::vector<float>(4, 0.0f));
  ASSERT_TRUE(ReadAnswer(first.get(), &pushed).ok());
  EXPECT_EQ(Floats(pushed.pulled()), std::vector<float>(4, 0.0f));
  PullResponse pulled;
  const absl::Status st = ReadAnswer(first.get(), &pulled);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(Floats(pulled), std::vector<float>(4, 0.0f));
  EXPECT_EQ(s.server().calls(), 3);
}

}  // namespace
}  // namespace pscluster
