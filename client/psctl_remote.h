// psctl's commands against a running coordinator: submit, status, watch,
// cancel, list, describe and logs. Each prints its result on stdout (table,
// JSON or YAML; see output_format.h), errors on stderr, and returns psctl's
// exit code (exit_codes.h): RPC errors through ExitCodeForRpcError.
//
// Not thread-safe: call from psctl's main thread.
#ifndef PSCLUSTER_CLIENT_PSCTL_REMOTE_H_
#define PSCLUSTER_CLIENT_PSCTL_REMOTE_H_

#include <string>

#include "client/output_format.h"
#include "protos/coordinator.grpc.pb.h"

namespace pscluster {

// `stub` is not owned. `argument` is JOB.yaml for submit, else the JOB_ID
// (empty for list; status without one lists every job).
// `command` is one of submit, status, watch, cancel, list, describe, logs.
// REQUIRES: `command` is one of those.
int RunRemoteCommand(const std::string& command, const std::string& argument, OutputFormat output,
                     Coordinator::Stub* stub);

// `rescale JOB_ID --ps N`: RescaleJob, then the move and its pause (text), or
// old_num_ps, num_ps, pause_ms, checkpoint_id and step (-o json|yaml).
int RunRescale(const std::string& job_id, int num_ps, OutputFormat output,
               Coordinator::Stub* stub);

// The job table of `status`/`list`: one row per job, with the queue position
// of QUEUED jobs; ends in a newline.
std::string FormatJobTable(const ListJobsResponse& jobs);

// The event log of `logs`: "TIME  KIND  MESSAGE" rows, times in UTC.
std::string FormatJobEvents(const GetJobEventsResponse& events);

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_PSCTL_REMOTE_H_
