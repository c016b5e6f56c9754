// ClusterProbe: whether the coordinator can reach its cluster, whether or
// not a job runs. A thread checks every PS and worker (HealthChecker) each
// `interval`, reports how many answer to CoordinatorMetrics
// (pscluster_cluster_tasks_healthy), and tells `on_reachable` whether all of
// them did: the coordinator's gRPC health service answers NOT_SERVING while
// any does not. Workers are asked with CheckWorkerWithin(w, interval): over
// the coordinator's shared ClusterLiveness, a worker that a running job's
// HealthWatch (or its own RPCs) vouched for within the interval costs no RPC.
// Thread-safe; the thread is owned and joined.
#ifndef PSCLUSTER_COORDINATOR_CORE_CLUSTER_PROBE_H_
#define PSCLUSTER_COORDINATOR_CORE_CLUSTER_PROBE_H_

#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "coordinator/core/coordinator_metrics.h"
#include "coordinator/core/health_checker.h"

namespace pscluster {

class ClusterProbe {
 public:
  struct Options {
    int num_ps = 0;
    int num_workers = 0;
    // Elastic workers: the indices of the workers to check now (the
    // roster's members), instead of 0..num_workers-1. Null: those.
    std::function<std::vector<int>()> worker_indices;
    absl::Duration interval = absl::Seconds(2);
    // Not owned; null: no metrics.
    CoordinatorMetrics* metrics = nullptr;
    // Called after the first round and whenever reachability changes, on the
    // probe's thread. Null: not called.
    std::function<void(bool reachable)> on_reachable;
  };

  // `health` is not owned and must outlive the probe. The thread starts
  // here, with a first round at once.
  ClusterProbe(HealthChecker* health, Options options);
  // Stops and joins the thread.
  ~ClusterProbe();

  // One round of checks now; true when every task answered.
  bool CheckOnce();

 private:
  void Loop();

  HealthChecker* const health_;
  const Options options_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_CLUSTER_PROBE_H_
