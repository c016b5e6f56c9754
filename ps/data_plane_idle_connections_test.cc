// Issue 25: "A PS with 2,000 idle connections stays under a stated memory
// bound". A real ps_server process (the binary, started and stopped here by
// pid) gets 2,000 data-plane connections from this test, each proven by one
// Pull and then idle, as workers between steps. Then a real push and pull on
// a new connection still work, the PS's thread count has not grown with the
// connections (/proc/PID/status Threads), and its resident memory grew by
// less than 64 KiB per connection (VmRSS). Before the pool the data plane
// ran a thread per connection and refused connection 513.
//
// usage: data_plane_idle_connections_test PS_SERVER (BUILD passes it)
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "protos/ps.pb.h"
#include "ps/service/data_plane_test_util.h"
#include "ps/service/data_plane_wire.h"
#include "ps/service/remote_ps_client.h"
#include "rpc/frame_socket.h"

extern char** environ;

namespace pscluster {
namespace {

using data_plane_test::Call;
using data_plane_test::Floats;
using data_plane_test::Soon;

constexpr int kIdleConnections = 2000;
constexpr int64_t kMaxBytesPerConnection = 64 << 10;
// Threads the PS may start while connections come, whatever their number:
// those serving unproven connections (started when every one is busy, at
// most DataPlaneServer::Options::max_unproven_connections, 64 in ps_server),
// and a few of gRPC's own. A thread per connection would be 2,000.
constexpr int kThreadSlack = 64 + 4;

// The ps_server binary: the test's first argument (BUILD passes it).
std::string PsServerBinary() {
  const std::vector<std::string> args = ::testing::internal::GetArgvs();
  return args.size() > 1 ? args[1] : "";
}

// A field ("VmRSS:", "Threads:") of /proc/PID/status, its first number; -1
// when the process is gone.
int64_t StatusField(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) != 0) continue;
    std::istringstream rest(line.substr(field.size()));
    int64_t value = -1;
    rest >> value;
    return value;
  }
  return -1;
}

// ps_server in a temporary directory, logging to a file; killed by pid when
// destroyed.
class PsProcess {
 public:
  ~PsProcess() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    for (int i = 0; i < 50 && waitpid(pid_, nullptr, WNOHANG) == 0; ++i) {
      absl::SleepFor(absl::Milliseconds(100));
    }
    if (kill(pid_, 0) == 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  // Starts it and waits (at most 30 s) for its gRPC and data-plane ports.
  absl::Status Start(const std::string& bin) {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = tmp != nullptr ? tmp : "/tmp";
    log_ = dir_ + "/ps_server.log";
    const std::string port_file = dir_ + "/ps_port";
    std::remove(port_file.c_str());
    std::vector<std::string> args = {bin, "--address=127.0.0.1:0",
                                     absl::StrCat("--port_file=", port_file),
                                     "--allow_keyless_jobs", "--data_plane_port=0"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    const int rc = posix_spawn(&pid_, bin.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      pid_ = -1;
      return absl::NotFoundError(absl::StrCat("cannot run ", bin, ": ", strerror(rc)));
    }
    const std::string marker = "data plane (Push, Pull as raw frames) on 127.0.0.1:";
    for (int i = 0; i < 300; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return absl::InternalError(absl::StrCat("ps_server exited; see ", log_));
      }
      std::ifstream port_in(port_file);
      if (!(port_in >> grpc_port_)) grpc_port_ = 0;
      std::ifstream log_in(log_);
      std::string line;
      while (data_port_ == 0 && std::getline(log_in, line)) {
        const size_t at = line.find(marker);
        if (at != std::string::npos) {
          (void)absl::SimpleAtoi(line.substr(at + marker.size()), &data_port_);
        }
      }
      if (grpc_port_ > 0 && data_port_ > 0) return absl::OkStatus();
      absl::SleepFor(absl::Milliseconds(100));
    }
    return absl::DeadlineExceededError(absl::StrCat("no ports from ps_server; see ", log_));
  }

  pid_t pid() const { return pid_; }
  int grpc_port() const { return grpc_port_; }
  int data_port() const { return data_port_; }
  const std::string& log() const { return log_; }

 private:
  pid_t pid_ = -1;
  std::string dir_, log_;
  int grpc_port_ = 0;
  int data_port_ = 0;
};

TEST(DataPlaneIdleConnectionsTest, TwoThousandIdleConnectionsStayUnderTheMemoryBound) {
  // This process holds the test's ends, the PS the others: each needs a
  // descriptor per connection and some to spare. The PS inherits the limit.
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  const rlim_t needed = kIdleConnections + 512;
  if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max < needed) {
    GTEST_SKIP() << "RLIMIT_NOFILE's hard limit is " << limit.rlim_max << ", below the " << needed
                 << " descriptors " << kIdleConnections
                 << " connections need; raise it (ulimit -Hn) to run this test";
  }
  limit.rlim_cur = limit.rlim_max;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0) << strerror(errno);

  ASSERT_FALSE(PsServerBinary().empty()) << "usage: data_plane_idle_connections_test PS_SERVER";
  PsProcess ps;
  const absl::Status started = ps.Start(PsServerBinary());
  ASSERT_TRUE(started.ok()) << started;

  RemotePsClient::Options options;
  options.target = absl::StrCat("127.0.0.1:", ps.grpc_port());
  options.wait_for_ready = true;
  options.call_timeout = std::chrono::seconds(10);
  RemotePsClient setup(options);
  CreateVariablesRequest create;
  create.set_job("idle");
  VariableSpecProto* spec = create.add_variables();
  spec->set_name("w");
  spec->set_dtype(DT_FLOAT32);
  spec->add_shape(4);
  spec->mutable_initializer()->set_type("ones");
  spec->mutable_optimizer()->set_type("sgd");
  spec->mutable_optimizer()->set_learning_rate(0.5f);
  CreateVariablesResponse created;
  ASSERT_TRUE(setup.CreateVariables(create, &created).ok());
  PullRequest pull;
  pull.set_job("idle");
  pull.add_names("w");

  // A few connections first, so that what is measured is per connection,
  // not the first call's setup.
  std::vector<UniqueFd> idle;
  auto open_one = [&]() -> absl::Status {
    absl::StatusOr<UniqueFd> fd = DialTcp("127.0.0.1", ps.data_port(), Soon());
    if (!fd.ok()) return fd.status();
    PullResponse pulled;
    absl::Status s = Call(fd->get(), kDataPlanePull, pull, &pulled);
    if (!s.ok()) return s;
    idle.push_back(std::move(*fd));
    return absl::OkStatus();
  };
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(open_one().ok());
  absl::SleepFor(absl::Milliseconds(300));
  const int64_t rss_before = StatusField(ps.pid(), "VmRSS:") * 1024;
  const int64_t threads_before = StatusField(ps.pid(), "Threads:");
  ASSERT_GT(rss_before, 0);
  ASSERT_GT(threads_before, 0);

  const absl::Time deadline = absl::Now() + absl::Minutes(3);
  while (static_cast<int>(idle.size()) < kIdleConnections) {
    const absl::Status s = open_one();
    ASSERT_TRUE(s.ok()) << "connection " << idle.size() + 1 << ": " << s << " (log " << ps.log()
                        << ")";
    ASSERT_LT(absl::Now(), deadline) << "only " << idle.size() << " connections in 3 minutes";
  }
  absl::SleepFor(absl::Milliseconds(300));
  const int64_t rss_after = StatusField(ps.pid(), "VmRSS:") * 1024;
  const int64_t threads_after = StatusField(ps.pid(), "Threads:");
  const int added = kIdleConnections - 16;
  const int64_t per_connection = (rss_after - rss_before) / added;
  std::printf(
      "PS: %d idle data-plane connections; VmRSS %.1f -> %.1f MiB (%.1f KiB per "
      "connection, bound %lld KiB); threads %lld -> %lld\n",
      kIdleConnections, rss_before / 1048576.0, rss_after / 1048576.0, per_connection / 1024.0,
      static_cast<long long>(kMaxBytesPerConnection >> 10), static_cast<long long>(threads_before),
      static_cast<long long>(threads_after));
  EXPECT_LT(per_connection, kMaxBytesPerConnection);
  EXPECT_LE(threads_after, threads_before + kThreadSlack);

  // A real push and pull on one more connection: the PS still serves.
  absl::StatusOr<UniqueFd> fd = DialTcp("127.0.0.1", ps.data_port(), Soon());
  ASSERT_TRUE(fd.ok()) << fd.status();
  PushRequest push;
  push.set_job("idle");
  NamedTensor* g = push.add_gradients();
  g->set_name("w");
  g->mutable_tensor()->set_dtype(DT_FLOAT32);
  g->mutable_tensor()->add_shape(4);
  const std::vector<float> ones(4, 1.0f);
  g->mutable_tensor()->set_data(reinterpret_cast<const char*>(ones.data()), 16);
  PushResponse pushed;
  const absl::Status push_status = Call(fd->get(), kDataPlanePush, push, &pushed);
  ASSERT_TRUE(push_status.ok()) << push_status;
  PullResponse pulled;
  ASSERT_TRUE(Call(fd->get(), kDataPlanePull, pull, &pulled).ok());
  EXPECT_EQ(Floats(pulled), std::vector<float>(4, 0.5f));
  // And an old idle one too.
  ASSERT_TRUE(Call(idle.front().get(), kDataPlanePull, pull, &pulled).ok());
  EXPECT_EQ(Floats(pulled), std::vector<float>(4, 0.5f));
}

}  // namespace
}  // namespace pscluster
