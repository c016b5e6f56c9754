#include "bench/pslite_launcher.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pscluster {
namespace bench {

absl::StatusOr<std::unique_ptr<PsliteLauncher>> PsliteLauncher::Start(
    const std::string& binary, int servers, int workers, std::chrono::seconds timeout) {
  if (access(binary.c_str(), X_OK) != 0) {
    return absl::UnavailableError(absl::StrCat(
        binary, " is not an executable (build it with bench/pslite/build_pslite.sh)"));
  }
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0) return absl::UnavailableError(absl::StrCat("pipe: ", strerror(errno)));
  if (pipe(from_child) != 0) {
    close(to_child[0]);
    close(to_child[1]);
    return absl::UnavailableError(absl::StrCat("pipe: ", strerror(errno)));
  }
  const std::string servers_flag = absl::StrCat("--servers=", servers);
  const std::string workers_flag = absl::StrCat("--workers=", workers);
  // A write to a launcher that died must fail with EPIPE, not kill us.
  signal(SIGPIPE, SIG_IGN);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::UnavailableError(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {
    // Child: killed with this process; stdin/stdout are the pipes, stderr
    // (ps-lite's log) is shared.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(to_child[0], 0);
    dup2(from_child[1], 1);
    close(to_child[0]);
    close(to_child[1]);
    close(from_child[0]);
    close(from_child[1]);
    execl(binary.c_str(), binary.c_str(), "launch", servers_flag.c_str(), workers_flag.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  auto launcher = std::unique_ptr<PsliteLauncher>(new PsliteLauncher());
  launcher->pid_ = pid;
  launcher->to_child_ = to_child[1];
  launcher->from_child_ = from_child[0];
  launcher->timeout_ = timeout;
  absl::StatusOr<std::string> line = launcher->ReadLine();
  if (!line.ok()) return line.status();
  if (*line != "ready") {
    return absl::UnavailableError(absl::StrCat(binary, " did not start: ", *line));
  }
  return launcher;
}

PsliteLauncher::~PsliteLauncher() {
  if (to_child_ >= 0) {
    static constexpr char kQuit[] = "quit\n";
    (void)!write(to_child_, kQuit, sizeof(kQuit) - 1);
    close(to_child_);
  }
  if (from_child_ >= 0) close(from_child_);
  if (pid_ > 0) {
    for (int i = 0; i < 100; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

absl::StatusOr<std::string> PsliteLauncher::ReadLine() {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (true) {
    const size_t newline = buffered_.find('\n');
    if (newline != std::string::npos) {
      std::string line = buffered_.substr(0, newline);
      buffered_.erase(0, newline + 1);
      return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return absl::DeadlineExceededError("ps-lite launcher did not answer");
    pollfd p{from_child_, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    char chunk[4096];
    const ssize_t n = read(from_child_, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError("ps-lite launcher exited (see its log above)");
    buffered_.append(chunk, static_cast<size_t>(n));
  }
}

absl::StatusOr<PsliteLauncher::Result> PsliteLauncher::Run(const std::string& mode,
                                                           int64_t bytes, double seconds,
                                                           int64_t min_iterations,
                                                           int64_t max_iterations) {
  const std::string command = absl::StrFormat("run %s %d %.9g %d %d\n", mode, bytes, seconds,
                                              min_iterations, max_iterations);
  size_t written = 0;
  while (written < command.size()) {
    const ssize_t n = write(to_child_, command.data() + written, command.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError("ps-lite launcher exited (see its log above)");
    written += static_cast<size_t>(n);
  }
  absl::StatusOr<std::string> line = ReadLine();
  if (!line.ok()) return line.status();
  Result result;
  long long fewest = 0;
  if (sscanf(line->c_str(), "ok %lf %lld", &result.gbps, &fewest) != 2) {
    return absl::InternalError(absl::StrCat("ps-lite: ", *line));
  }
  result.fewest_round_trips = fewest;
  return result;
}

}  // namespace bench
}  // namespace pscluster
