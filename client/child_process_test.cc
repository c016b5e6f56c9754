#include "client/child_process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

// True once `pid` no longer exists or is a zombie nobody reaped yet.
bool IsGone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() || line[paren + 2] == 'Z';
}

TEST(ChildProcessTest, StopsARunningChild) {
  auto child = ChildProcess::Spawn({"sleep", {"/bin/sleep", "30"}, TempPath("sleep.log")});
  ASSERT_TRUE(child.ok()) << child.status();
  const pid_t pid = (*child)->pid();
  EXPECT_TRUE((*child)->IsRunning());
  EXPECT_FALSE(IsGone(pid));
  (*child)->Stop(absl::Seconds(5));
  EXPECT_FALSE((*child)->IsRunning());
  ASSERT_TRUE((*child)->wait_status().has_value());
  EXPECT_TRUE(WIFSIGNALED(*(*child)->wait_status()));
  EXPECT_EQ(WTERMSIG(*(*child)->wait_status()), SIGTERM);
  EXPECT_THAT((*child)->DescribeState(), HasSubstr("killed by signal 15"));
  EXPECT_TRUE(IsGone(pid));
}

TEST(ChildProcessTest, EscalatesToSigkillWhenSigtermIsIgnored) {
  // The shell ignores SIGTERM and execs nothing, so only SIGKILL ends it.
  auto child = ChildProcess::Spawn(
      {"stubborn", {"/bin/sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.05; done"},
       TempPath("stubborn.log")});
  ASSERT_TRUE(child.ok()) << child.status();
  // Wait until the trap is installed.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (TailFile((*child)->log_path(), 1) != "ready" && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  const absl::Time start = absl::Now();
  (*child)->Stop(absl::Milliseconds(300));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(250));
  ASSERT_TRUE((*child)->wait_status().has_value());
  EXPECT_EQ(WTERMSIG(*(*child)->wait_status()), SIGKILL);
}

TEST(ChildProcessTest, RedirectsOutputToLogAndReportsExitStatus) {
  const std::string log = TempPath("echo.log");
  auto child = ChildProcess::Spawn(
      {"echo", {"/bin/sh", "-c", "echo one; echo two >&2; echo three; exit 3"}, log});
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_TRUE((*child)->WaitFor(absl::Seconds(10)));
  EXPECT_EQ((*child)->DescribeState(), "exited with status 3");
  EXPECT_EQ((*child)->LogTail(2), "two\nthree");
  EXPECT_EQ((*child)->LogTail(20), "one\ntwo\nthree");
}

TEST(ChildProcessTest, AppendsToTheLogWhenAsked) {
  const std::string log = TempPath("append.log");
  for (const char* word : {"first", "second"}) {
    auto child = ChildProcess::Spawn({"echo", {"/bin/echo", word}, log});
    ASSERT_TRUE(child.ok()) << child.status();
    EXPECT_TRUE((*child)->WaitFor(absl::Seconds(10)));
  }
  EXPECT_EQ(TailFile(log, 20), "second");  // truncated by default
  SpawnOptions append{"echo", {"/bin/echo", "third"}, log};
  append.append_log = true;
  auto child = ChildProcess::Spawn(append);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_TRUE((*child)->WaitFor(absl::Seconds(10)));
  EXPECT_EQ(TailFile(log, 20), "second\nthird");
}

TEST(ChildProcessTest, MissingBinaryIsNotFound) {
  auto child = ChildProcess::Spawn({"nope", {"/nonexistent/binary"}, ""});
  EXPECT_EQ(child.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(child.status().message()), HasSubstr("/nonexistent/binary"));
}

TEST(ChildProcessTest, StopAllStopsEveryChild) {
  std::vector<std::unique_ptr<ChildProcess>> children;
  std::vector<ChildProcess*> raw;
  for (int i = 0; i < 3; ++i) {
    auto c = ChildProcess::Spawn({"sleep", {"/bin/sleep", "30"}, ""});
    ASSERT_TRUE(c.ok()) << c.status();
    raw.push_back(c->get());
    children.push_back(std::move(*c));
  }
  StopAll(raw, absl::Seconds(5));
  for (ChildProcess* c : raw) {
    EXPECT_FALSE(c->IsRunning());
    EXPECT_TRUE(IsGone(c->pid()));
  }
}

// The property `psctl local` relies on: when the process that spawned the
// children is killed with SIGKILL (no cleanup code runs), they die too.
TEST(ChildProcessTest, ChildDiesWhenItsParentIsKilled) {
  // Orphans are re-parented to us, so we can reap the sleep ourselves and
  // do not depend on what PID 1 does with zombies.
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t helper = fork();
  ASSERT_GE(helper, 0);
  if (helper == 0) {
    close(pipe_fds[0]);
    auto child = ChildProcess::Spawn({"sleep", {"/bin/sleep", "30"}, ""});
    const pid_t pid = child.ok() ? (*child)->pid() : -1;
    if (write(pipe_fds[1], &pid, sizeof(pid)) != sizeof(pid)) _exit(1);
    for (;;) pause();
  }
  close(pipe_fds[1]);
  pid_t sleep_pid = -1;
  ASSERT_EQ(read(pipe_fds[0], &sleep_pid, sizeof(sleep_pid)), sizeof(sleep_pid));
  close(pipe_fds[0]);
  ASSERT_GT(sleep_pid, 0);
  EXPECT_FALSE(IsGone(sleep_pid));

  ASSERT_EQ(kill(helper, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(helper, &status, 0), helper);

  // The sleep is now our child (subreaper): reap it, bounded.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  bool reaped = false;
  while (absl::Now() < deadline) {
    const pid_t r = waitpid(sleep_pid, &status, WNOHANG);
    if (r == sleep_pid || (r < 0 && IsGone(sleep_pid))) {
      reaped = true;
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (!reaped) kill(sleep_pid, SIGKILL);  // never leave it behind
  ASSERT_TRUE(reaped) << "child outlived its killed parent";
  EXPECT_TRUE(IsGone(sleep_pid));
}

}  // namespace
}  // namespace pscluster
