// HealthChecker: whether the cluster's PS tasks and workers answer, asked
// quickly (a short deadline, no waiting for a connection), so that the
// coordinator notices a dead process within a health-check interval.
// The gRPC implementation is GrpcHealthChecker (coordinator/service).
// Implementations are thread-safe.
#ifndef PSCLUSTER_COORDINATOR_CORE_HEALTH_CHECKER_H_
#define PSCLUSTER_COORDINATOR_CORE_HEALTH_CHECKER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pscluster {

class HealthChecker {
 public:
  virtual ~HealthChecker() = default;
  // PS task `index`'s incarnation (changes when it restarts) when it answers;
  // UNAVAILABLE or DEADLINE_EXCEEDED when not.
  virtual absl::StatusOr<uint64_t> CheckPs(int index) = 0;
  // OK when worker `index` answers.
  virtual absl::Status CheckWorker(int index) = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_HEALTH_CHECKER_H_
