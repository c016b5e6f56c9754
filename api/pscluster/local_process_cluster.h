// LocalProcessCluster: a whole pscluster on 127.0.0.1 as child processes of
// this program, as `psctl local` starts one, for a program that submits jobs
// with JobClient (and for pscluster.Cluster.local in Python).
//
// Start() runs N ps_server, M worker_server and one coordinator on
// kernel-picked ports through client/local_cluster.h's LocalCluster (the code
// psctl local uses), with:
//   - a random bearer token in the coordinator's --auth_tokens_file (or,
//     with tls, psctl local --tls's throwaway CA, certificate and token);
//   - --checkpoint_root=RUN_DIR/checkpoints for the PS and the coordinator;
//   - the data roots given (default: the coordinator's, /usr/share/datasets).
// Logs are RUN_DIR/<name>.log. Children die with the thread that started
// them (PR_SET_PDEATHSIG): start the cluster from a thread that outlives it,
// e.g. the main thread. A child that dies is not restarted (nothing polls).
//
// Thread-safety: not thread-safe; use it from the thread that started it.
#ifndef PSCLUSTER_API_PSCLUSTER_LOCAL_PROCESS_CLUSTER_H_
#define PSCLUSTER_API_PSCLUSTER_LOCAL_PROCESS_CLUSTER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "api/pscluster/job_client.h"

namespace pscluster {

class LocalCluster;

struct LocalProcessClusterOptions {
  int num_ps = 2;       // >= 1
  int num_workers = 2;  // >= 1
  // Mutual TLS between every process and for clients (client_options()
  // carries the files). Off: plaintext on loopback, still with a token.
  bool tls = false;
  // Logs, port files, the tokens file, TLS files and checkpoints. Empty: a
  // fresh /tmp/pscluster-XXXXXX, removed by Stop unless keep_run_dir. A
  // given directory (created if missing) is never removed.
  std::string run_dir;
  bool keep_run_dir = false;
  // Where the three server binaries are: `<dir>/<name>` or the Bazel layout
  // `<dir>/../<package>/<name>` (ps/ps_server, worker/worker_server,
  // coordinator/coordinator). Empty: the directory of the file this library
  // is linked into (the Python extension, or the program), then that of
  // /proc/self/exe.
  std::string bin_dir;
  // The workers' command before their flags instead of worker_server (e.g.
  // {python3, "-m", "pscluster.worker"}: Python workers that run a
  // ClusterCoordinator's pickled functions). [0] is an executable's path.
  std::vector<std::string> worker_command;
  // Directories the jobs' data files may lie under (the coordinator's and
  // workers' --data_root). Empty: the servers' default, /usr/share/datasets.
  std::vector<std::string> data_roots;
  // How long each start-up phase (PS and workers, then coordinator) may take.
  absl::Duration start_timeout = absl::Seconds(30);
  // Polled while waiting for the children; returning true aborts Start with
  // CANCELLED. May be empty.
  std::function<bool()> interrupted;
};

class LocalProcessCluster {
 public:
  // Starts the cluster; on error nothing is left running. INVALID_ARGUMENT
  // for bad counts; NOT_FOUND naming where a server binary was looked for;
  // the errors of LocalCluster::Start (DEADLINE_EXCEEDED, ABORTED with the
  // tail of the failing child's log, CANCELLED); errors creating run_dir or
  // the TLS files.
  static absl::StatusOr<std::unique_ptr<LocalProcessCluster>> Start(
      const LocalProcessClusterOptions& options);

  // Stops every child (as Stop()).
  ~LocalProcessCluster();

  LocalProcessCluster(const LocalProcessCluster&) = delete;
  LocalProcessCluster& operator=(const LocalProcessCluster&) = delete;

  // "127.0.0.1:PORT" of the coordinator.
  const std::string& address() const { return address_; }
  // The bearer token the coordinator accepts (user "pscluster").
  const std::string& token() const { return token_; }
  const std::string& run_dir() const { return run_dir_; }
  // What JobClient::Connect needs for this cluster: the token and, with
  // tls, the certificate, key and CA.
  JobClientOptions client_options() const { return client_options_; }
  // Pids of the children: PS first, then workers, then the coordinator.
  std::vector<int> pids() const;

  // SIGTERM to every child, up to `grace` for them to exit, SIGKILL for the
  // rest; removes the run directory if Start created it and !keep_run_dir.
  // Idempotent.
  void Stop(absl::Duration grace = absl::Seconds(5));

 private:
  LocalProcessCluster() = default;

  std::unique_ptr<LocalCluster> cluster_;
  std::string address_;
  std::string token_;
  std::string run_dir_;
  bool remove_run_dir_ = false;
  JobClientOptions client_options_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_API_PSCLUSTER_LOCAL_PROCESS_CLUSTER_H_
