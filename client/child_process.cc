#include "client/child_process.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace pscluster {
namespace {

// Closes a file descriptor on scope exit.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void Reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

absl::Status ErrnoStatus(int err, const std::string& what) {
  const std::string message = absl::StrCat(what, ": ", strerror(err));
  switch (err) {
    case ENOENT: return absl::NotFoundError(message);
    case EACCES:
    case EPERM: return absl::PermissionDeniedError(message);
    default: return absl::InternalError(message);
  }
}

// Runs in the forked child: only async-signal-safe calls until exec.
[[noreturn]] void ExecChild(pid_t parent, int log_fd, int null_fd, int report_fd,
                            char* const* argv) {
  // Die with the forking thread of psctl. If psctl already died between fork
  // and prctl, PDEATHSIG will never fire: check the parent is still ours.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
  setpgid(0, 0);
  // Undo what psctl may have changed: blocked signals (psctl blocks
  // SIGINT/SIGTERM to wait for them) and ignored ones (gRPC ignores SIGPIPE)
  // are both inherited across exec.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  signal(SIGPIPE, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
  if (log_fd >= 0) {
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
  }
  execv(argv[0], argv);
  const int err = errno;
  ssize_t ignored = write(report_fd, &err, sizeof(err));
  (void)ignored;
  _exit(127);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(const SpawnOptions& options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("empty argv for " + options.name);
  // Everything the child needs is prepared before fork: after fork in a
  // multi-threaded process only async-signal-safe calls are allowed.
  std::vector<char*> argv;
  for (const std::string& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  Fd log_fd(options.log_path.empty()
                ? -1
                : open(options.log_path.c_str(),
                       O_WRONLY | O_CREAT | O_CLOEXEC | (options.append_log ? O_APPEND : O_TRUNC),
                       0644));
  if (!options.log_path.empty() && log_fd.get() < 0) {
    return ErrnoStatus(errno, "cannot create log file " + options.log_path);
  }
  Fd null_fd(open("/dev/null", O_RDONLY | O_CLOEXEC));
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe2");
  Fd report_read(report[0]);
  Fd report_write(report[1]);

  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return ErrnoStatus(errno, "fork for " + options.name);
  if (pid == 0) ExecChild(parent, log_fd.get(), null_fd.get(), report_write.get(), argv.data());

  // Also set the group from the parent side, so it holds before we return.
  setpgid(pid, pid);
  report_write.Reset();
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(report_read.get(), &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof(child_errno))) {
    int status = 0;
    waitpid(pid, &status, 0);
    return ErrnoStatus(child_errno, absl::StrCat("cannot execute ", options.argv[0]));
  }
  return std::unique_ptr<ChildProcess>(new ChildProcess(options.name, pid, options.log_path));
}

ChildProcess::~ChildProcess() {
  if (!wait_status_) Stop(absl::ZeroDuration());
}

bool ChildProcess::IsRunning() {
  if (wait_status_) return false;
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid_, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    wait_status_ = status;
    return false;
  }
  if (r < 0) {  // ECHILD: reaped elsewhere; treat as gone.
    wait_status_ = 0;
    return false;
  }
  return true;
}

std::string ChildProcess::DescribeState() const {
  if (!wait_status_) return "running";
  return DescribeWaitStatus(*wait_status_);
}

std::string ChildProcess::LogTail(int lines) const {
  if (log_path_.empty()) return "";
  return TailFile(log_path_, lines);
}

void ChildProcess::Signal(int sig) {
  if (!wait_status_) kill(pid_, sig);
}

bool ChildProcess::WaitFor(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (IsRunning()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

void ChildProcess::Stop(absl::Duration grace) { StopAll({this}, grace); }

void StopAll(const std::vector<ChildProcess*>& children, absl::Duration grace) {
  for (ChildProcess* c : children) {
    if (c->IsRunning()) c->Signal(SIGTERM);
  }
  const absl::Time deadline = absl::Now() + grace;
  for (;;) {
    const bool any_running = std::any_of(children.begin(), children.end(),
                                         [](ChildProcess* c) { return c->IsRunning(); });
    if (!any_running || absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  for (ChildProcess* c : children) {
    if (!c->IsRunning()) continue;
    c->Signal(SIGKILL);
    // SIGKILL cannot be caught; the reap is bounded by the kernel tearing
    // the process down.
    while (!c->WaitFor(absl::Seconds(1))) {
    }
  }
}

std::string TailFile(const std::string& path, int lines) {
  constexpr std::streamoff kMaxBytes = 64 * 1024;
  std::ifstream in(path, std::ios::binary);
  if (!in || lines <= 0) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff start = std::max<std::streamoff>(0, size - kMaxBytes);
  in.seekg(start);
  std::string data(static_cast<size_t>(size - start), '\0');
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<size_t>(in.gcount()));
  while (!data.empty() && data.back() == '\n') data.pop_back();
  if (data.empty()) return "";
  std::vector<std::string> all = absl::StrSplit(data, '\n');
  if (start > 0 && all.size() > 1) all.erase(all.begin());  // a partial first line
  const size_t keep = std::min(all.size(), static_cast<size_t>(lines));
  return absl::StrJoin(all.end() - keep, all.end(), "\n");
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = strsignal(sig);
    return absl::StrCat("killed by signal ", sig, " (", name ? name : "?", ")");
  }
  return absl::StrCat("stopped (wait status ", status, ")");
}

}  // namespace pscluster
