#include "bench/ps_child.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

extern char** environ;

namespace pscluster {
namespace bench {

absl::StatusOr<std::unique_ptr<PsServerChild>> PsServerChild::Start(
    const std::string& bin, const std::vector<std::string>& extra_args) {
  char dir_template[] = "/tmp/bench_ps.XXXXXX";
  if (mkdtemp(dir_template) == nullptr) return absl::InternalError("mkdtemp failed");
  auto p = std::unique_ptr<PsServerChild>(new PsServerChild(dir_template));
  std::vector<std::string> args = {bin, "--address=127.0.0.1:0",
                                   absl::StrCat("--port_file=", p->dir_, "/port"),
                                   "--allow_keyless_jobs"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const std::string log = p->dir_ + "/ps_server.log";
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  const int rc = posix_spawn(&p->pid_, bin.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    p->pid_ = -1;
    return absl::NotFoundError(absl::StrCat("cannot run ", bin, ": ", strerror(rc)));
  }
  for (int i = 0; i < 300; ++i) {  // up to 30 s
    std::ifstream in(p->dir_ + "/port");
    int port = 0;
    if (in >> port && port > 0) {
      p->port_ = port;
      return p;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::DeadlineExceededError(absl::StrCat("ps_server wrote no port; see ", log));
}

PsServerChild::~PsServerChild() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    for (int i = 0; i < 50 && waitpid(pid_, nullptr, WNOHANG) == 0; ++i) {
      absl::SleepFor(absl::Milliseconds(100));
    }
    if (kill(pid_, 0) == 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  for (const char* f : {"/ps_server.log", "/port"}) std::remove((dir_ + f).c_str());
  rmdir(dir_.c_str());
}

std::string PsServerChild::target() const { return absl::StrCat("127.0.0.1:", port_); }

absl::StatusOr<std::pair<int64_t, int64_t>> PsServerChild::Memory() const {
  std::ifstream in(absl::StrCat("/proc/", pid_, "/status"));
  std::string line;
  int64_t rss = -1, hwm = -1;
  while (std::getline(in, line)) {
    int64_t* into = line.rfind("VmRSS:", 0) == 0   ? &rss
                    : line.rfind("VmHWM:", 0) == 0 ? &hwm
                                                   : nullptr;
    if (into == nullptr) continue;
    std::istringstream fields(line.substr(6));
    int64_t kb = 0;
    fields >> kb;
    *into = kb * 1024;
  }
  if (rss < 0 || hwm < 0) return absl::UnavailableError("ps_server is gone");
  return std::make_pair(rss, hwm);
}

std::string PsServerChild::LastLogLine(const std::string& text) const {
  std::ifstream in(dir_ + "/ps_server.log");
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.find(text) != std::string::npos) last = line;
  }
  return last;
}

}  // namespace bench
}  // namespace pscluster
