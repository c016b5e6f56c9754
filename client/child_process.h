// ChildProcess: a supervised child started with fork+exec for `psctl local`.
//
// The child gets PR_SET_PDEATHSIG(SIGKILL) before exec, so it never outlives
// psctl, even when psctl itself is killed with SIGKILL. Its stdout and stderr
// go to a log file, stdin reads /dev/null, and it runs in its own process
// group (a Ctrl-C on the terminal reaches only psctl, which then cancels the
// job and stops the children in order).
//
// Thread-safety: not thread-safe. Spawn children from the main thread only:
// Linux sends PDEATHSIG when the *thread* that forked exits, so a child forked
// from a short-lived thread would be killed when that thread ends. Use one
// ChildProcess from one thread.
#ifndef PSCLUSTER_CLIENT_CHILD_PROCESS_H_
#define PSCLUSTER_CLIENT_CHILD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pscluster {

struct SpawnOptions {
  // A short name for messages ("ps-0", "coordinator").
  std::string name;
  // argv[0] is the path of the executable (execv: no PATH search).
  std::vector<std::string> argv;
  // File that receives the child's stdout and stderr (created or truncated).
  // Empty: the child inherits psctl's stdout/stderr.
  std::string log_path;
  // Append to log_path instead of truncating it (a restarted child keeps
  // its earlier output).
  bool append_log = false;
};

class ChildProcess {
 public:
  // Starts the child. INVALID_ARGUMENT for an empty argv; NOT_FOUND or
  // PERMISSION_DENIED (from the exec errno) if the binary cannot be run;
  // INTERNAL if fork or the log file fails. On success the exec has happened.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const SpawnOptions& options);

  // Kills (SIGKILL) and reaps the child if it is still running.
  ~ChildProcess();

  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  const std::string& name() const { return name_; }
  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }

  // Returns true while the child runs; reaps it (non-blocking) once it exits.
  bool IsRunning();

  // The waitpid status once the child has been reaped, else nullopt.
  std::optional<int> wait_status() const { return wait_status_; }

  // "running", "exited with status N" or "killed by signal N (Killed)".
  std::string DescribeState() const;

  // The last `lines` lines of the log file ("" if there is none).
  std::string LogTail(int lines) const;

  // Sends `sig` if the child is still running (not yet reaped).
  void Signal(int sig);

  // Blocks until the child is reaped or `timeout` passes; true if reaped.
  bool WaitFor(absl::Duration timeout);

  // SIGTERM, wait up to `grace`, then SIGKILL and reap. Returns at once if
  // the child was already reaped.
  void Stop(absl::Duration grace);

 private:
  ChildProcess(std::string name, pid_t pid, std::string log_path)
      : name_(std::move(name)), pid_(pid), log_path_(std::move(log_path)) {}

  std::string name_;
  pid_t pid_;
  std::string log_path_;
  std::optional<int> wait_status_;
};

// Stops several children together: SIGTERM to all, one shared `grace` period
// of polling, then SIGKILL to whatever remains, and reaps every one.
void StopAll(const std::vector<ChildProcess*>& children, absl::Duration grace);

// The last `lines` lines of the file at `path`; "" if it cannot be read.
std::string TailFile(const std::string& path, int lines);

// "exited with status N" / "killed by signal N (name)" for a waitpid status.
std::string DescribeWaitStatus(int status);

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_CHILD_PROCESS_H_
