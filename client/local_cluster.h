// LocalCluster: a whole pscluster on loopback, as child processes of psctl.
//
// Start() launches N ps_server and M worker_server processes on 127.0.0.1
// with kernel-picked ports, waits until each has written its port file, then
// launches the coordinator pointing at them and waits for it too. Each
// child's stdout+stderr go to RUN_DIR/<name>.log (ps-0, worker-1,
// coordinator); port files are RUN_DIR/<name>.port. Children die with psctl
// (see child_process.h).
//
// Thread-safety: not thread-safe. Create, poll and stop it from the main
// thread (the forking thread must outlive the children).
#ifndef PSCLUSTER_CLIENT_LOCAL_CLUSTER_H_
#define PSCLUSTER_CLIENT_LOCAL_CLUSTER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/child_process.h"
#include "client/result_json.h"

namespace pscluster {

struct LocalClusterOptions {
  int num_ps = 2;       // >= 1
  int num_workers = 2;  // >= 1
  // Existing directory for logs and port files.
  std::string run_dir;
  // Paths of the three server binaries.
  std::string ps_server_bin;
  std::string worker_server_bin;
  std::string coordinator_bin;
  // How long each start-up phase (PS+workers, then coordinator) may take.
  absl::Duration start_timeout = absl::Seconds(30);
  // Polled while waiting for port files; returning true aborts Start with
  // CANCELLED (e.g. psctl got SIGINT). May be empty.
  std::function<bool()> interrupted;
};

class LocalCluster {
 public:
  // Starts the cluster. On any error every child already started is stopped
  // and the error names the failing child with the tail of its log:
  // INVALID_ARGUMENT (bad counts), NOT_FOUND (binary missing),
  // DEADLINE_EXCEEDED (no port file in time), ABORTED (a child exited during
  // start-up), CANCELLED (`interrupted` returned true).
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(const LocalClusterOptions& options);

  // Stops every child (as Stop()).
  ~LocalCluster();

  // "127.0.0.1:PORT" of the coordinator.
  const std::string& coordinator_address() const { return coordinator_address_; }
  ClusterPids pids() const;

  // Children that have exited since the previous call, each reported once.
  // Returned pointers stay valid for the cluster's lifetime.
  std::vector<ChildProcess*> CollectExited();

  // SIGTERM to all children, up to `grace` for them to exit, SIGKILL for
  // the rest; all are reaped. Idempotent.
  void Stop(absl::Duration grace = absl::Seconds(5));

 private:
  LocalCluster() = default;
  absl::StatusOr<ChildProcess*> Launch(const std::string& name, std::vector<std::string> argv);
  // Waits until every child in `children` has a port file; returns the ports.
  absl::StatusOr<std::vector<int>> WaitForPorts(const std::vector<ChildProcess*>& children);

  LocalClusterOptions options_;
  std::vector<std::unique_ptr<ChildProcess>> children_;  // ps..., workers..., coordinator
  std::vector<ChildProcess*> ps_;
  std::vector<ChildProcess*> workers_;
  ChildProcess* coordinator_ = nullptr;
  std::vector<bool> reported_;  // parallel to children_
  std::string coordinator_address_;
};

// The default path of a server binary next to the running executable
// (/proc/self/exe): first `<dir>/<name>` (an install layout), then the Bazel
// layout `<dir>/../<bazel_package>/<name>`. NOT_FOUND naming both places if
// neither is an executable file.
absl::StatusOr<std::string> FindSiblingBinary(const std::string& name,
                                              const std::string& bazel_package);

// Reads a port file ("PORT\n"). NOT_FOUND while it does not exist,
// DATA_LOSS if its content is not a port number.
absl::StatusOr<int> ReadPortFile(const std::string& path);

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_LOCAL_CLUSTER_H_
