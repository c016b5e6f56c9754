// LocalCluster: a whole pscluster on loopback, as child processes of psctl,
// supervised the way Kubernetes supervises the production cluster.
//
// Start() launches N ps_server and M worker_server processes on 127.0.0.1
// with kernel-picked ports, waits until each has written its port file, then
// launches the coordinator pointing at them and waits for it too. Each
// child's stdout+stderr go to RUN_DIR/<name>.log (ps-0, worker-1,
// coordinator); port files are RUN_DIR/<name>.port. Children die with psctl
// (see child_process.h).
//
// After Start, Poll() restarts a child that died (RestartPolicy): the same
// command line at the same address (--address=127.0.0.1:<its first port>
// instead of port 0), so the coordinator's addresses for the PS and workers,
// and psctl's for the coordinator, stay valid. The log is appended to after a
// "--- restarted ---" line.
//
// Thread-safety: not thread-safe. Create, poll and stop it from the main
// thread (the forking thread must outlive the children).
#ifndef PSCLUSTER_CLIENT_LOCAL_CLUSTER_H_
#define PSCLUSTER_CLIENT_LOCAL_CLUSTER_H_

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/child_process.h"
#include "client/result_json.h"

namespace pscluster {

// When and how often a dead child is started again.
struct RestartPolicy {
  // false: a dead child stays dead and Poll reports it (kExited).
  bool enabled = true;
  // Delay before the first restart; doubles with each consecutive restart...
  absl::Duration initial_backoff = absl::Milliseconds(200);
  // ...up to this.
  absl::Duration max_backoff = absl::Seconds(5);
  // A child that ran at least this long before dying is restarted after
  // initial_backoff again (its run of consecutive restarts is over).
  absl::Duration reset_after = absl::Seconds(10);
  // Consecutive restarts (each dying within reset_after, e.g. because the
  // port cannot be bound again) before Poll gives up on the child (kExited).
  int max_consecutive = 10;
};

// The delay before the `attempt`-th consecutive restart (1-based):
// initial_backoff * 2^(attempt-1), at most max_backoff.
absl::Duration RestartDelay(const RestartPolicy& policy, int attempt);

struct LocalClusterOptions {
  int num_ps = 2;       // >= 0 (0: multi_worker_mirrored jobs only)
  int num_workers = 2;  // >= 1
  // Elastic PS (docs/elastic_ps.md): jobs start on the first job_ps PS (the
  // coordinator's --job_ps); the rest are spare, for `psctl rescale`. 0: all.
  int job_ps = 0;
  // Existing directory for logs and port files.
  std::string run_dir;
  // Paths of the three server binaries.
  std::string ps_server_bin;
  std::string worker_server_bin;
  std::string coordinator_bin;
  // The workers' command before their flags, replacing worker_server_bin
  // when set, e.g. {"/usr/bin/python3", "-m", "pscluster.worker"} for
  // Python workers (python/pscluster/worker.py); [0] is an executable path.
  std::vector<std::string> worker_command;
  // Extra flags for every start of the coordinator (e.g. --state_dir=...)
  // and of each worker.
  std::vector<std::string> coordinator_flags;
  std::vector<std::string> worker_flags;
  // Extra flags for every start of each PS, and of every server (all three
  // kinds, e.g. --tls_cert=...).
  std::vector<std::string> ps_flags;
  std::vector<std::string> server_flags;
  // Every child serves Prometheus metrics (--metrics_address=127.0.0.1:0 at
  // its first start; a restart keeps its metrics port).
  bool metrics = false;
  // How long each start-up phase (PS+workers, then coordinator) may take.
  absl::Duration start_timeout = absl::Seconds(30);
  // Polled while waiting for port files; returning true aborts Start with
  // CANCELLED (e.g. psctl got SIGINT). May be empty.
  std::function<bool()> interrupted;
  RestartPolicy restart;
};

// Something Poll() saw happen to a child.
struct ChildEvent {
  enum class Kind {
    kRestarted,  // it died and was started again
    kExited,     // it died and stays dead (restarts off, or given up)
  };
  Kind kind;
  std::string name;      // "worker-1"
  pid_t pid = 0;         // the process that died
  std::string how;       // "killed by signal 9 (Killed)"
  pid_t new_pid = 0;     // kRestarted: the new process
  std::string log_path;  // the child's log (kept across restarts)
  // kExited: why it stays dead ("restarts are off", "gave up after ...").
  std::string reason;
};

class LocalCluster {
 public:
  // Starts the cluster. On any error every child already started is stopped
  // and the error names the failing child with the tail of its log:
  // INVALID_ARGUMENT (bad counts), NOT_FOUND (binary missing),
  // DEADLINE_EXCEEDED (no port file in time), ABORTED (a child exited during
  // start-up; no restarts happen before Start returns), CANCELLED
  // (`interrupted` returned true).
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(const LocalClusterOptions& options);

  // Stops every child (as Stop()).
  ~LocalCluster();

  // "127.0.0.1:PORT" of the coordinator (the same across its restarts).
  const std::string& coordinator_address() const { return coordinator_address_; }
  // The pids of the current (latest) processes.
  ClusterPids pids() const;
  // Each child's metrics address; nullopt unless options.metrics.
  std::optional<ClusterMetricsAddresses> metrics_addresses() const;
  // Restarts so far, for every child by name ("ps-0", ..., "coordinator").
  std::map<std::string, int> restarts() const;

  // Reaps children that died, restarts those whose backoff has passed, and
  // returns what happened since the previous call (each death once: as
  // kRestarted when its restart happened, or kExited). Never blocks. Does
  // nothing after Stop.
  std::vector<ChildEvent> Poll();

  // SIGTERM to all children, up to `grace` for them to exit, SIGKILL for
  // the rest; all are reaped and none is restarted after. Idempotent.
  void Stop(absl::Duration grace = absl::Seconds(5));

 private:
  // One supervised child and its history.
  struct Slot {
    std::string name;
    std::string bin;
    std::vector<std::string> bin_args;  // right after bin (worker_command's rest)
    std::vector<std::string> flags;  // after --address and --port_file
    int port = 0;                    // 0 until the first port file is read
    int metrics_port = 0;            // likewise, with options.metrics
    std::unique_ptr<ChildProcess> process;  // the latest process
    absl::Time started;
    int restarts = 0;
    int consecutive = 0;  // restarts since the child last stayed up reset_after
    // Set while the child is dead and waiting for its restart.
    std::optional<absl::Time> restart_at;
    pid_t dead_pid = 0;
    std::string dead_how;
    bool given_up = false;
  };

  LocalCluster() = default;
  // Starts (or restarts) `slot`'s process; the address uses slot->port.
  absl::Status Launch(Slot* slot, bool restart);
  // Waits until every slot in [begin, end) has a port file; sets their ports.
  absl::Status WaitForPorts(size_t begin, size_t end);
  // Handles one slot in Poll.
  void PollSlot(Slot* slot, absl::Time now, std::vector<ChildEvent>* events);

  LocalClusterOptions options_;
  std::vector<Slot> slots_;  // ps..., workers..., coordinator
  std::string coordinator_address_;
  bool stopped_ = false;
};

// The default path of a server binary next to the running executable
// (/proc/self/exe): first `<dir>/<name>` (an install layout), then the Bazel
// layout `<dir>/../<bazel_package>/<name>`. NOT_FOUND naming both places if
// neither is an executable file.
absl::StatusOr<std::string> FindSiblingBinary(const std::string& name,
                                              const std::string& bazel_package);

// A server binary for psctl: `*path` itself when set (NOT_FOUND "--FLAG=PATH
// is not an executable" otherwise), else FindSiblingBinary(name,
// bazel_package) written to `*path` (NOT_FOUND naming both places and
// "pass --FLAG").
absl::Status ResolveServerBinary(std::string* path, const std::string& name,
                                 const std::string& bazel_package, const std::string& flag);

// Reads a port file ("PORT\n"). NOT_FOUND while it does not exist,
// DATA_LOSS if its content is not a port number.
absl::StatusOr<int> ReadPortFile(const std::string& path);

// Whether `bin --helpfull` lists the flag `flag` (name without dashes), so
// psctl can pass a newer flag only to servers that know it. The help text
// goes to `scratch_path` (overwritten). Errors from starting `bin`;
// DEADLINE_EXCEEDED if it has not exited within `timeout`.
absl::StatusOr<bool> BinaryHasFlag(const std::string& bin, const std::string& flag,
                                   const std::string& scratch_path,
                                   absl::Duration timeout = absl::Seconds(10));

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_LOCAL_CLUSTER_H_
