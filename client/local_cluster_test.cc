#include "client/local_cluster.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

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

std::string PortOf(const std::string& run_dir, const std::string& name) {
  const std::string port = ReadAll(absl::StrCat(run_dir, "/", name, ".port"));
  return port.substr(0, port.find('\n'));
}

// Polls until an event comes (or 10 s pass) and returns the events.
std::vector<ChildEvent> PollUntilEvent(LocalCluster* cluster) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  std::vector<ChildEvent> events;
  while (events.empty() && absl::Now() < deadline) {
    events = cluster->Poll();
    absl::SleepFor(absl::Milliseconds(10));
  }
  return events;
}

// Writes an executable shell script at `path`.
std::string WriteScript(const std::string& path, const std::string& body) {
  std::ofstream(path) << "#!/bin/sh\n" << body;
  chmod(path.c_str(), 0755);
  return path;
}

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
  EXPECT_TRUE((*cluster)->Poll().empty());
  EXPECT_EQ((*cluster)->restarts(),
            (std::map<std::string, int>{{"coordinator", 0}, {"ps-0", 0}, {"ps-1", 0},
                                        {"worker-0", 0}, {"worker-1", 0}, {"worker-2", 0}}));

  (*cluster)->Stop(absl::Seconds(5));
  for (pid_t p : pids.ps) EXPECT_FALSE(Exists(p));
  for (pid_t p : pids.worker) EXPECT_FALSE(Exists(p));
  EXPECT_FALSE(Exists(pids.coordinator));
}

TEST(LocalClusterTest, WorkerCommandReplacesTheWorkerBinary) {
  // As Cluster.local(worker="python") starts python3 -m pscluster.worker.
  LocalClusterOptions options = FakeOptions("worker_command");
  options.num_workers = 1;
  options.worker_server_bin = "/nonexistent/worker_server";
  options.worker_command = {"/bin/sh", Runfile("client/testdata/fake_server.sh"), "-m-like"};
  auto cluster = LocalCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  // The command's arguments come first, then the server flags.
  EXPECT_THAT(ReadAll(options.run_dir + "/worker-0.log"),
              HasSubstr("args: -m-like --address=127.0.0.1:0 --port_file="));
  (*cluster)->Stop(absl::Seconds(5));
}

TEST(RestartDelayTest, DoublesFromInitialUpToMax) {
  const RestartPolicy policy;  // 0.2 s doubling to 5 s
  EXPECT_EQ(RestartDelay(policy, 1), absl::Milliseconds(200));
  EXPECT_EQ(RestartDelay(policy, 2), absl::Milliseconds(400));
  EXPECT_EQ(RestartDelay(policy, 5), absl::Milliseconds(3200));
  EXPECT_EQ(RestartDelay(policy, 6), absl::Seconds(5));
  EXPECT_EQ(RestartDelay(policy, 60), absl::Seconds(5));
}

TEST(LocalClusterTest, RestartsADeadChildAtItsPortWithTheSameCommandLine) {
  LocalClusterOptions options = FakeOptions("restart");
  options.coordinator_flags = {"--state_dir=/some/dir"};
  auto cluster = LocalCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string port = PortOf(options.run_dir, "worker-1");
  const std::string coordinator_port = PortOf(options.run_dir, "coordinator");

  for (int round = 1; round <= 2; ++round) {
    const pid_t old_pid = (*cluster)->pids().worker[1];
    kill(old_pid, SIGKILL);
    const absl::Time killed = absl::Now();
    std::vector<ChildEvent> events = PollUntilEvent(cluster->get());
    ASSERT_EQ(events.size(), 1u);
    const ChildEvent& e = events[0];
    EXPECT_EQ(e.kind, ChildEvent::Kind::kRestarted);
    EXPECT_EQ(e.name, "worker-1");
    EXPECT_EQ(e.pid, old_pid);
    EXPECT_THAT(e.how, HasSubstr("killed by signal 9"));
    // The backoff: 0.2 s, then 0.4 s.
    EXPECT_GE(absl::Now() - killed, absl::Milliseconds(round == 1 ? 190 : 390));
    EXPECT_NE(e.new_pid, old_pid);
    EXPECT_TRUE(Exists(e.new_pid));
    EXPECT_EQ((*cluster)->pids().worker[1], e.new_pid);
    EXPECT_EQ((*cluster)->restarts().at("worker-1"), round);
  }
  // The restarted process was given the port of the first one, and the log
  // kept the first start's output.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (PortOf(options.run_dir, "worker-1").empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(PortOf(options.run_dir, "worker-1"), port);
  const std::string log = ReadAll(options.run_dir + "/worker-1.log");
  EXPECT_THAT(log, MatchesRegex("args: --address=127\\.0\\.0\\.1:0 [^\n]*\n"
                                "--- restarted ---\n"
                                "args: --address=127\\.0\\.0\\.1:" + port + " [^\n]*\n"
                                "--- restarted ---\n"
                                "args: --address=127\\.0\\.0\\.1:" + port + " [^\n]*\n"));

  // The coordinator comes back with all of its flags, at its address.
  kill((*cluster)->pids().coordinator, SIGKILL);
  std::vector<ChildEvent> events = PollUntilEvent(cluster->get());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].name, "coordinator");
  EXPECT_EQ((*cluster)->restarts().at("coordinator"), 1);
  EXPECT_EQ((*cluster)->restarts().at("worker-0"), 0);
  const std::string coordinator_log = ReadAll(options.run_dir + "/coordinator.log");
  EXPECT_THAT(coordinator_log,
              HasSubstr("--- restarted ---\nargs: --address=127.0.0.1:" + coordinator_port +
                        " --port_file=" + options.run_dir + "/coordinator.port --ps=127.0.0.1:"));
  EXPECT_THAT(coordinator_log.substr(coordinator_log.find("restarted")),
              HasSubstr(" --state_dir=/some/dir\n"));

  // Stop kills the latest processes and restarts nothing.
  const ClusterPids pids = (*cluster)->pids();
  (*cluster)->Stop(absl::Seconds(5));
  EXPECT_FALSE(Exists(pids.worker[1]));
  EXPECT_FALSE(Exists(pids.coordinator));
  EXPECT_TRUE((*cluster)->Poll().empty());
}

TEST(LocalClusterTest, WithoutRestartsADeathIsReportedOnce) {
  LocalClusterOptions options = FakeOptions("no_restart");
  options.restart.enabled = false;
  // No backoff: a restart that wrongly came would come in the Poll that
  // sees the death, or the next one, with no wait to sit out.
  options.restart.initial_backoff = absl::ZeroDuration();
  options.restart.max_backoff = absl::ZeroDuration();
  auto cluster = LocalCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const pid_t pid = (*cluster)->pids().worker[1];
  kill(pid, SIGKILL);
  std::vector<ChildEvent> events = PollUntilEvent(cluster->get());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, ChildEvent::Kind::kExited);
  EXPECT_EQ(events[0].name, "worker-1");
  EXPECT_EQ(events[0].pid, pid);
  EXPECT_THAT(events[0].how, HasSubstr("signal 9"));
  EXPECT_EQ(events[0].reason, "restarts are off");
  EXPECT_EQ(events[0].log_path, options.run_dir + "/worker-1.log");
  EXPECT_TRUE((*cluster)->Poll().empty());
  EXPECT_TRUE((*cluster)->Poll().empty());
  EXPECT_EQ((*cluster)->pids().worker[1], pid);
  EXPECT_EQ((*cluster)->restarts().at("worker-1"), 0);
  EXPECT_THAT(ReadAll(options.run_dir + "/worker-1.log"), Not(HasSubstr("restarted")));
}

TEST(LocalClusterTest, GivesUpOnAChildThatCannotComeBack) {
  LocalClusterOptions options = FakeOptions("give_up");
  options.num_workers = 1;
  // Serves when started on port 0; a restart "cannot bind" its port.
  options.worker_server_bin = WriteScript(
      options.run_dir + "/once.sh",
      absl::StrCat("case \"$1\" in *:0) exec ", Runfile("client/testdata/fake_server.sh"),
                   " \"$@\";; esac\necho 'cannot bind' >&2\nexit 1\n"));
  options.restart.initial_backoff = absl::Milliseconds(10);
  options.restart.max_backoff = absl::Milliseconds(40);
  options.restart.max_consecutive = 3;
  auto cluster = LocalCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  kill((*cluster)->pids().worker[0], SIGKILL);
  std::vector<ChildEvent> all;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while ((all.empty() || all.back().kind != ChildEvent::Kind::kExited) &&
         absl::Now() < deadline) {
    for (ChildEvent& e : (*cluster)->Poll()) all.push_back(std::move(e));
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(all.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(all[i].kind, ChildEvent::Kind::kRestarted);
  EXPECT_THAT(all[1].how, HasSubstr("exited with status 1"));
  EXPECT_EQ(all[3].kind, ChildEvent::Kind::kExited);
  EXPECT_THAT(all[3].reason, HasSubstr("gave up after 3 restarts"));
  EXPECT_EQ((*cluster)->restarts().at("worker-0"), 3);
  EXPECT_THAT(ReadAll(options.run_dir + "/worker-0.log"), HasSubstr("cannot bind"));
}

TEST(BinaryHasFlagTest, ReadsTheHelpText) {
  const std::string dir = FreshDir("help");
  const std::string with = WriteScript(
      dir + "/with.sh", "echo '    -state_dir (Durable job registry); default: \"\";'\nexit 1\n");
  const std::string without = WriteScript(
      dir + "/without.sh", "echo '    -state_dirs_elsewhere (no); default: \"\";'\nexit 1\n");
  absl::StatusOr<bool> has = BinaryHasFlag(with, "state_dir", dir + "/scratch");
  ASSERT_TRUE(has.ok()) << has.status();
  EXPECT_TRUE(*has);
  has = BinaryHasFlag(without, "state_dir", dir + "/scratch");
  ASSERT_TRUE(has.ok()) << has.status();
  EXPECT_FALSE(*has);
  EXPECT_EQ(BinaryHasFlag(dir + "/missing", "state_dir", dir + "/scratch").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(LocalClusterTest, AChildThatExitsFailsStartWithItsLog) {
  LocalClusterOptions options = FakeOptions("failing");
  options.worker_server_bin = Runfile("client/testdata/failing_server.sh");
  const absl::Time start = absl::Now();
  auto cluster = LocalCluster::Start(options);
  // Fails at the child's exit, not at the start timeout (which would be
  // DEADLINE_EXCEEDED, below).
  EXPECT_LT(absl::Now() - start, options.start_timeout);
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
