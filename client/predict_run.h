// `psctl predict CHECKPOINT_DIR|JOB.yaml -o predictions.csv`: batch
// prediction on a fresh local cluster. Starts a LocalCluster (real
// ps_server, worker_server and coordinator processes on 127.0.0.1, as
// `psctl local`), calls the coordinator's Predict RPC (it restores the
// checkpoint onto the PS and runs PREDICT closures on the workers; see
// coordinator/core/predict_runner.h), prints progress on stderr (every 1 %
// of the closures, each retry, the last), writes the CSV (one line per input
// row, in input order) to a temporary file beside FILE as the rows stream
// in, renames it into place once every row is in, and stops the cluster. A child that dies is restarted (unless
// --no_restart), as with `psctl local`.
//
// Not thread-safe; see RunPredict's REQUIRES.
#ifndef PSCLUSTER_CLIENT_PREDICT_RUN_H_
#define PSCLUSTER_CLIENT_PREDICT_RUN_H_

#include <cstdint>
#include <string>

#include "client/local_run_options.h"

namespace pscluster {

struct PredictRunOptions {
  // A checkpoint directory, or a JOB.yaml with checkpoint.dir.
  std::string source;
  // --data: a YAML file holding one data source (the job spec's data.eval
  // keys); empty: the job's data.eval.
  std::string data_path;
  // -o: the CSV to write (replaced atomically).
  std::string output_path;
  // --closure_rows: rows per PREDICT closure (>= 1).
  int64_t closure_rows = 500;
  // The cluster: num_ps, num_workers, run_dir, keep_run_dir, timeout_s,
  // restart, the binaries and log_level (the rest is not used).
  LocalRunOptions cluster;
};

// Returns psctl's exit code: 0 when every row was predicted and FILE
// written; 2 for bad input (no such checkpoint directory or spec, a data
// file missing, unreadable or malformed, an unwritable FILE, a binary
// missing, or an error of the request the coordinator names, such as no
// committed checkpoint); 1 when the run failed (the cluster did not come up,
// a closure failed for good, a row missing) — FILE is then left as it was;
// 130 after SIGINT/SIGTERM.
// REQUIRES: called from the main thread before any other thread exists (as
// RunParameterServerJob).
int RunPredict(const PredictRunOptions& options);

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_PREDICT_RUN_H_
