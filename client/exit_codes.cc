#include "client/exit_codes.h"

namespace pscluster {

const char kExitCodesHelp[] =
    "Exit codes:\n"
    "  0    success (`status` of a failed job included)\n"
    "  1    the job ended FAILED or CANCELLED (local, watch); no checkpoint restores\n"
    "       (checkpoint verify); the prediction failed (predict); another RPC error\n"
    "  2    usage or validation error: bad flags, malformed job YAML, missing or malformed\n"
    "       data (also when the workers find it so before training),\n"
    "       a job the coordinator rejects (INVALID_ARGUMENT, RESOURCE_EXHAUSTED,\n"
    "       FAILED_PRECONDITION) or does not know (NOT_FOUND); missing or wrong\n"
    "       credentials (UNAUTHENTICATED, PERMISSION_DENIED)\n"
    "  3    coordinator unreachable (UNAVAILABLE, DEADLINE_EXCEEDED)\n"
    "  130  interrupted (SIGINT/SIGTERM)\n";

int ExitCodeForRpcError(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return kExitUsage;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnreachable;
    default:
      return kExitJobFailed;
  }
}

int ExitCodeForJob(const JobStatusProto& status) {
  if (status.state() == SUCCEEDED) return kExitOk;
  if (status.state() == FAILED && status.invalid_input()) return kExitUsage;
  return kExitJobFailed;
}

}  // namespace pscluster
