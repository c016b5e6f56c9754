// Update leases: binding a PS's exactly-once update keys to the job and the
// closures its coordinator actually handed out.
//
// A PS applies each (closure_id, step) of a job once (UpdateKey). Without a
// binding, any client could push empty updates under keys of closures not yet
// run, and the PS would then drop the real steps as duplicates. So each job
// has a secret job key: the coordinator derives it (DeriveJobKey, from a
// coordinator secret kept in its state directory, so a restarted coordinator
// derives the same one) and gives it to the PS only (CreateVariablesRequest /
// RestoreRequest, over the cluster's mutual-TLS channels). With every closure
// it dispatches, the coordinator sends the worker a lease, an HMAC-SHA256 under
// the job key of (job, closure id, steps), and the worker copies it into each
// UpdateKey of that closure; the PS recomputes it (CheckLease) and accepts
// only step indices below the leased step count. A worker learns leases of the
// closures it was given, never the key.
#ifndef PSCLUSTER_COMMON_UPDATE_LEASE_H_
#define PSCLUSTER_COMMON_UPDATE_LEASE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pscluster {

inline constexpr size_t kJobKeyBytes = 32;
inline constexpr size_t kLeaseBytes = 16;

// kJobKeyBytes from the system's CSPRNG (OpenSSL RAND_bytes).
std::string RandomSecret();

// The job key of `job_id` under `coordinator_secret` (HMAC-SHA256).
std::string DeriveJobKey(absl::string_view coordinator_secret, absl::string_view job_id);

// The lease of closure `closure_id` of `job_id`, for steps [0, steps).
std::string MakeLease(absl::string_view job_key, absl::string_view job_id, int64_t closure_id,
                      int64_t steps);

// True if `lease` is MakeLease(job_key, job_id, closure_id, steps); compared
// in constant time.
bool CheckLease(absl::string_view job_key, absl::string_view job_id, int64_t closure_id,
                int64_t steps, absl::string_view lease);

// The key a job's workers are held under (SetupJobRequest.worker_key),
// derived from the job key: a worker learns it, never the job key.
std::string DeriveWorkerKey(absl::string_view job_key);

// Proof that a control request comes from the job's coordinator: an
// HMAC-SHA256 under `key` of the RPC's method name and the request's bytes
// (with its MAC field cleared; common/control_auth.h does that for a proto).
std::string ControlMac(absl::string_view key, absl::string_view method,
                       absl::string_view request_bytes);
// True if `mac` is ControlMac(key, method, request_bytes); constant time.
bool CheckControlMac(absl::string_view key, absl::string_view method,
                     absl::string_view request_bytes, absl::string_view mac);

// Reads the coordinator secret at `path`, creating it (kJobKeyBytes random,
// mode 0600, written atomically) if it does not exist. UNAVAILABLE if it
// cannot be read or written; INVALID_ARGUMENT if it is not kJobKeyBytes long.
absl::StatusOr<std::string> LoadOrCreateSecret(const std::string& path);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_UPDATE_LEASE_H_
