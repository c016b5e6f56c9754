// `psctl local` for `strategy: parameter_server`: starts a LocalCluster,
// submits the job to its coordinator, renders progress while supervising the
// children, and stops everything at the end.
//
// Not thread-safe; see RunParameterServerJob's REQUIRES.
#ifndef PSCLUSTER_CLIENT_LOCAL_RUN_H_
#define PSCLUSTER_CLIENT_LOCAL_RUN_H_

#include "client/local_run_options.h"
#include "common/job_spec.h"

namespace pscluster {

// Runs `spec` on a fresh local cluster of options.num_ps PS and
// options.num_workers workers. Returns psctl's exit code: 0 when the job
// SUCCEEDED, 1 when it failed or the cluster did not come up, 2 when the
// coordinator rejected the spec or a binary is missing, 130 after
// SIGINT/SIGTERM (the job is cancelled, the children stopped).
// REQUIRES: called from the main thread before any other thread exists: it
// blocks SIGINT/SIGTERM to wait for them itself, and the children must be
// forked by a thread that lives until they are stopped.
int RunParameterServerJob(const JobSpec& spec, const LocalRunOptions& options);

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_LOCAL_RUN_H_
