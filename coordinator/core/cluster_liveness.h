// ClusterLiveness: the coordinator's one record of which workers answer,
// shared by everything that health-checks them (the readiness ClusterProbe,
// each running job's HealthWatch, PsRecovery, WaitForCluster), so that health
// checking costs at most one RPC per worker per interval, however many
// pollers ask, and none for a worker that answers RPCs anyway:
//  - CheckWorkerWithin(w, max_age) answers from what is known of worker w
//    when it is no older than max_age (the answer to any user's health
//    check, or WorkerAnswered: the worker answered some other RPC), and asks
//    the inner checker only otherwise;
//  - CheckWorker(w) always asks the inner checker (a caller that must see the
//    worker's state now: PsRecovery, WaitForCluster, a worker marked down);
//    its answer is recorded for the others;
//  - CheckPs passes through: the PS tasks are few, and PsRecovery must see a
//    restart (a new incarnation) at once.
// What is known is timed by when the check began (or when WorkerAnswered was
// called), so a slow check never makes an answer look younger than it is.
// Thread-safe; no lock is held across a check.
#ifndef PSCLUSTER_COORDINATOR_CORE_CLUSTER_LIVENESS_H_
#define PSCLUSTER_COORDINATOR_CORE_CLUSTER_LIVENESS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/core/health_checker.h"

namespace pscluster {

class ClusterLiveness final : public HealthChecker {
 public:
  struct Options {
    // The clock of the record (tests pass a fake one).
    std::function<absl::Time()> now = [] { return absl::Now(); };
  };

  // `inner` (not owned) asks the tasks themselves; it must outlive this.
  explicit ClusterLiveness(HealthChecker* inner) : ClusterLiveness(inner, Options()) {}
  ClusterLiveness(HealthChecker* inner, Options options);

  absl::StatusOr<uint64_t> CheckPs(int index) override;
  absl::Status CheckWorker(int index) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status CheckWorkerWithin(int index, absl::Duration max_age) override
      ABSL_LOCKS_EXCLUDED(mu_);
  void WorkerAnswered(int index) override ABSL_LOCKS_EXCLUDED(mu_);

  // Worker checks that reached the inner checker, and those answered from
  // the record instead (for the bench and tests).
  int64_t worker_checks() const { return worker_checks_.load(); }
  int64_t worker_checks_saved() const { return worker_checks_saved_.load(); }

 private:
  struct Known {
    absl::Time at = absl::InfinitePast();  // when it was learned
    absl::Status status;                   // what was learned
  };
  // Records `status` learned at `at` unless something newer is known.
  void Record(int index, absl::Time at, absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);

  HealthChecker* const inner_;
  const Options options_;
  absl::Mutex mu_;
  std::vector<Known> known_ ABSL_GUARDED_BY(mu_);  // by worker index, grown on demand
  std::atomic<int64_t> worker_checks_{0}, worker_checks_saved_{0};
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_CLUSTER_LIVENESS_H_
