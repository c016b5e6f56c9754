// WaitForCluster: waits, with a bound, until every PS task and worker of the
// cluster has answered a health check, so that a job on a cluster whose
// processes are still starting (a Kubernetes rollout, a worker started late)
// waits for them instead of failing, and a task that never comes is named.
#ifndef PSCLUSTER_COORDINATOR_CORE_CLUSTER_HEALTH_H_
#define PSCLUSTER_COORDINATOR_CORE_CLUSTER_HEALTH_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/core/health_checker.h"

namespace pscluster {

// Asks `health` about PS tasks 0..num_ps-1 and workers 0..num_workers-1
// every `poll` until each has answered once (a task that answered is not
// asked again) or `deadline` passes. The addresses only name the tasks in the
// error (index i = task i; missing or empty entries are left out).
//
// Returns OK when every task answered; UNAVAILABLE naming each task that did
// not, with its address: "after 60 s, not healthy: ps 0 (10.0.0.3:2222),
// worker 1 (worker-1.ps:2222)"; CANCELLED as soon as `cancelled` (may be
// null) returns true. A deadline already past still checks every task once.
// Thread-safe if `health` is; blocks the calling thread.
absl::Status WaitForCluster(HealthChecker &health, int num_ps, int num_workers,
                            const std::vector<std::string> &ps_addresses,
                            const std::vector<std::string> &worker_addresses, absl::Time deadline,
                            absl::Duration poll, const std::function<bool()> &cancelled = nullptr);

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_CLUSTER_HEALTH_H_
