#include "client/local_cluster.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

std::string Runfile(const std::string& path) {
  char cwd[4096];
  return absl::StrCat(getcwd(cwd, sizeof(cwd)), "/", path);
}

std::string FreshDir(const std::string& name) {
  const std::string dir = absl::StrCat(getenv("TEST_TMPDIR"), "/", name);
  mkdir(dir.c_str(), 0755);
  return dir;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

LocalClusterOptions FakeOptions(const std::string& dir) {
  LocalClusterOptions o;
  o.num_ps = 2;
  o.num_workers = 3;
  o.run_dir = FreshDir(dir);
  o.ps_server_bin = o.worker_server_bin = o.coordinator_bin =
      Runfile("client/testdata/fake_server.sh");
  o.start_timeout = absl::Seconds(20);
  return o;
}

bool Exists(pid_t pid) { return kill(pid, 0) == 0; }

TEST(ReadPortFileTest, ParsesAndRejects) {
  const std::string dir = FreshDir("ports");
  EXPECT_EQ(ReadPortFile(dir + "/missing").status().code(), absl::StatusCode::kNotFound);
  std::ofstream(dir + "/good") << "43125\n";
  EXPECT_EQ(*ReadPortFile(dir + "/good"), 43125);
  std::ofstream(dir + "/bad") << "port?\n";
  EXPECT_EQ(ReadPortFile(dir + "/bad").status().code(), absl::StatusCode::kDataLoss);
}

TEST(LocalClusterTest, StartsServersThenTheCoordinatorWithTheirAddresses) {
  const LocalClusterOptions options = FakeOptions("up");
  auto cluster = LocalCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_THAT((*cluster)->coordinator_address(), MatchesRegex("127\\.0\\.0\\.1:[0-9]+"));
  const ClusterPids pids = (*cluster)->pids();
  ASSERT_EQ(pids.ps.size(), 2u);
  ASSERT_EQ(pids.worker.size(), 3u);
  for (pid_t p : pids.ps) EXPECT_TRUE(Exists(p));
  EXPECT_TRUE(Exists(pids.coordinator));

  // The coordinator was told every PS and worker port, from the port files.
  const std::string log = ReadAll(options.run_dir + "/coordinator.log");
  const std::string ps0 = ReadAll(options.run_dir + "/ps-0.port");
  const std::string w2 = ReadAll(options.run_dir + "/worker-2.port");
  EXPECT_THAT(log, HasSubstr("--ps=127.0.0.1:" + ps0.substr(0, ps0.size() - 1) + ",127.0.0.1:"));
  EXPECT_THAT(log, HasSubstr(",127.0.0.1:" + w2.substr(0, w2.size() - 1) + "\n"));
  EXPECT_THAT(ReadAll(options.run_dir + "/worker-1.log"), HasSubstr("--address=127.0.0.1:0"));
  EXPECT_TRUE((*cluster)->CollectExited().empty());

  // A child that dies is reported once.
  kill(pids.worker[1], SIGKILL);
  std::vector<ChildProcess*> exited;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (exited.empty() && absl::Now() < deadline) {
    exited = (*cluster)->CollectExited();
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(exited.size(), 1u);
  EXPECT_EQ(exited[0]->name(), "worker-1");
  EXPECT_THAT(exited[0]->DescribeState(), HasSubstr("signal 9"));
  EXPECT_TRUE((*cluster)->CollectExited().empty());

  (*cluster)->Stop(absl::Seconds(5));
  for (pid_t p : pids.ps) EXPECT_FALSE(Exists(p));
  for (pid_t p : pids.worker) EXPECT_FALSE(Exists(p));
  EXPECT_FALSE(Exists(pids.coordinator));
}

TEST(LocalClusterTest, AChildThatExitsFailsStartWithItsLog) {
  LocalClusterOptions options = FakeOptions("failing");
  options.worker_server_bin = Runfile("client/testdata/failing_server.sh");
  const absl::Time start = absl::Now();
  auto cluster = LocalCluster::Start(options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));  // fails fast, not at the timeout
  ASSERT_EQ(cluster.status().code(), absl::StatusCode::kAborted) << cluster.status();
  EXPECT_THAT(std::string(cluster.status().message()),
              HasSubstr("exited with status 3 before serving"));
  EXPECT_THAT(std::string(cluster.status().message()), HasSubstr("address already in use"));
}

TEST(LocalClusterTest, TimesOutWithoutAPortFile) {
  LocalClusterOptions options = FakeOptions("silent");
  options.num_ps = 1;
  options.ps_server_bin = Runfile("client/testdata/silent_server.sh");
  options.start_timeout = absl::Milliseconds(500);
  auto cluster = LocalCluster::Start(options);
  EXPECT_EQ(cluster.status().code(), absl::StatusCode::kDeadlineExceeded) << cluster.status();
  EXPECT_THAT(std::string(cluster.status().message()), HasSubstr("ps-0 did not write its port"));
}

TEST(LocalClusterTest, InterruptAbortsStart) {
  LocalClusterOptions options = FakeOptions("interrupted");
  options.ps_server_bin = Runfile("client/testdata/silent_server.sh");
  options.interrupted = [] { return true; };
  auto cluster = LocalCluster::Start(options);
  EXPECT_EQ(cluster.status().code(), absl::StatusCode::kCancelled) << cluster.status();
}

TEST(LocalClusterTest, RejectsEmptyCluster) {
  LocalClusterOptions options = FakeOptions("empty");
  options.num_workers = 0;
  EXPECT_EQ(LocalCluster::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pscluster
