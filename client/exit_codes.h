// psctl's exit codes, and the one mapping from an RPC's status to them.
// Documented in `psctl --help` and README.md; scripts depend on them.
//
// Pure functions; thread-safe.
#ifndef PSCLUSTER_CLIENT_EXIT_CODES_H_
#define PSCLUSTER_CLIENT_EXIT_CODES_H_

#include "absl/status/status.h"
#include "protos/coordinator.pb.h"

namespace pscluster {

// Success; also `status` of a job that failed (it printed what was asked).
inline constexpr int kExitOk = 0;
// The job ended FAILED or CANCELLED (`local`, `watch`), no checkpoint
// restores (`checkpoint verify`), or an RPC failed for another reason.
inline constexpr int kExitJobFailed = 1;
// Usage or validation: bad flags, a malformed job YAML, a missing data file,
// a job the coordinator rejects or does not know.
inline constexpr int kExitUsage = 2;
// The coordinator cannot be reached.
inline constexpr int kExitUnreachable = 3;
// Interrupted by SIGINT/SIGTERM (`local`: the job is cancelled first).
inline constexpr int kExitInterrupted = 130;

// The exit code for an RPC that failed with `code`:
//   INVALID_ARGUMENT, RESOURCE_EXHAUSTED (the queue is full),
//   FAILED_PRECONDITION, NOT_FOUND (no such job), ALREADY_EXISTS,
//   OUT_OF_RANGE, UNAUTHENTICATED, PERMISSION_DENIED -> kExitUsage
//   UNAVAILABLE, DEADLINE_EXCEEDED (psctl's unary RPCs are short; a deadline
//   passes when the coordinator does not answer the connection) -> kExitUnreachable
//   anything else (INTERNAL, UNIMPLEMENTED, ...)   -> kExitJobFailed
// OK maps to kExitOk.
int ExitCodeForRpcError(absl::StatusCode code);

// The exit code for a job that ended with `status` (local, watch):
// SUCCEEDED -> kExitOk; FAILED before training because of its own input
// (invalid_input: data files missing or malformed on the workers, a layout
// or device it cannot have) -> kExitUsage; otherwise kExitJobFailed.
int ExitCodeForJob(const JobStatusProto& status);

// The text of the exit codes above, for --help and the README.
extern const char kExitCodesHelp[];

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_EXIT_CODES_H_
