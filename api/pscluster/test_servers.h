// TestServers (testonly): real ps_server and recovery_test_worker processes
// on 127.0.0.1 for the ClusterCoordinator tests, started from the test's
// runfiles, stopped by pid (SIGKILL) when the object goes. A PS can be
// killed and restarted on the same port, sharing one checkpoint root.
//
// Not thread-safe: use it from the test's main thread (children die with the
// thread that forked them, client/child_process.h).
#ifndef PSCLUSTER_API_PSCLUSTER_TEST_SERVERS_H_
#define PSCLUSTER_API_PSCLUSTER_TEST_SERVERS_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/child_process.h"

namespace pscluster {

class TestServers {
 public:
  // Logs and the checkpoint root (`dir`/ckpt) go under `dir` (created).
  explicit TestServers(std::string dir);
  ~TestServers();

  // Starts PS `index` with --checkpoint_root (empty port: a free one) and
  // waits (at most 30 s) for its "listening on" line; returns its address.
  absl::StatusOr<std::string> StartPs(int index);
  // Starts recovery_test_worker `index`; returns its address.
  absl::StatusOr<std::string> StartWorker(int index);
  // SIGKILL to PS `index`, reaped.
  void KillPs(int index);
  // Starts PS `index` again on its port (a new process: it holds nothing).
  absl::StatusOr<std::string> RestartPs(int index);

  const std::string& checkpoint_root() const { return root_; }

 private:
  // Spawns `argv` as `name`, logging to dir_/`log`, and waits for its
  // "listening on HOST:PORT".
  absl::StatusOr<std::string> Start(const std::string& name, const std::string& log,
                                    std::vector<std::string> argv);

  const std::string dir_;
  std::string root_;
  std::map<std::string, std::unique_ptr<ChildProcess>> children_;
  std::map<int, std::string> ps_address_;
  int restarts_ = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_API_PSCLUSTER_TEST_SERVERS_H_
