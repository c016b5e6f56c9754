// Options of `psctl local`, shared by the parameter-server path
// (local_run.h) and the single-process path (one_device.h).
#ifndef PSCLUSTER_CLIENT_LOCAL_RUN_OPTIONS_H_
#define PSCLUSTER_CLIENT_LOCAL_RUN_OPTIONS_H_

#include <string>

#include "client/output_format.h"

namespace pscluster {

struct LocalRunOptions {
  // The job YAML's path as the user gave it (for messages and SubmitJob).
  std::string spec_path;
  // Cluster size (parameter_server only); both >= 1.
  int num_ps = 2;
  int num_workers = 2;
  // Elastic PS (docs/elastic_ps.md): the job starts on the first job_ps PS
  // (0: all); the others are spare, for `psctl rescale`.
  int job_ps = 0;
  // kText: progress (a bar on a TTY, else plain lines) and a summary on
  // stdout. kJson/kYaml: nothing on stdout but one object at the end
  // (result_json.h); progress lines go to stderr.
  OutputFormat output = OutputFormat::kText;
  // Logs and port files go here. Empty: a fresh /tmp/psctl-XXXXXX that is
  // removed at exit when the job succeeded, unless keep_run_dir; a failed,
  // cancelled or timed-out run keeps it (and says where). A given directory
  // is never removed.
  std::string run_dir;
  bool keep_run_dir = false;
  // Every server child serves Prometheus metrics on a free 127.0.0.1 port
  // (--metrics_address); their addresses are printed and go into the result.
  // parameter_server only: a one_device run serves no metrics.
  bool metrics = false;
  // --tls: throwaway CA and cluster certificate (client/local_tls.h), mutual
  // TLS on every channel, and a bearer token on the job service.
  bool tls = false;
  // Print the variable layout and what each PS holds (psctl describe) at the
  // end of the job, before the cluster stops.
  bool describe = false;
  // Cancel the job after this many seconds; 0 means no limit.
  double timeout_s = 0;
  // Restart a child that dies during the job (same command line, same
  // address; see LocalCluster), and follow the job across a coordinator
  // restart. false (--no_restart): a death is reported and the job's own
  // error handling decides.
  bool restart = true;
  // Server binaries; empty: found next to psctl (FindSiblingBinary).
  std::string ps_server_bin;
  std::string worker_server_bin;
  std::string coordinator_bin;
  // --log_level for the children (trace|debug|info|warn|error|off), passed
  // only to binaries that list the flag in --helpfull. Empty: not passed.
  std::string log_level;
};

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_LOCAL_RUN_OPTIONS_H_
