// HealthChecker: whether the cluster's PS tasks and workers answer, asked
// quickly (a short deadline, no waiting for a connection), so that the
// coordinator notices a dead process within a health-check interval.
// The gRPC implementation is GrpcHealthChecker (coordinator/service); the
// coordinator shares one ClusterLiveness (cluster_liveness.h) over it among
// its health checkers, so that a worker heard from recently is not asked
// again. Implementations are thread-safe.
#ifndef PSCLUSTER_COORDINATOR_CORE_HEALTH_CHECKER_H_
#define PSCLUSTER_COORDINATOR_CORE_HEALTH_CHECKER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pscluster {

class HealthChecker {
 public:
  virtual ~HealthChecker() = default;
  // PS task `index`'s incarnation (changes when it restarts) when it answers;
  // UNAVAILABLE or DEADLINE_EXCEEDED when not.
  virtual absl::StatusOr<uint64_t> CheckPs(int index) = 0;
  // OK when worker `index` answers.
  virtual absl::Status CheckWorker(int index) = 0;
  // Like CheckWorker, but what is known of worker `index` from no more than
  // `max_age` ago will do (an answer to a health check by another user, or
  // to any RPC: WorkerAnswered). By default every call checks.
  virtual absl::Status CheckWorkerWithin(int index, absl::Duration max_age) {
    (void)max_age;
    return CheckWorker(index);
  }
  // Worker `index` just answered an RPC (e.g. RunClosure): it is alive, and
  // CheckWorkerWithin may say so without asking it. By default ignored.
  virtual void WorkerAnswered(int index) { (void)index; }
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_HEALTH_CHECKER_H_
