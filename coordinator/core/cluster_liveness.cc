#include "coordinator/core/cluster_liveness.h"

#include <utility>

namespace pscluster {

ClusterLiveness::ClusterLiveness(HealthChecker* inner, Options options)
    : inner_(inner), options_(std::move(options)) {}

absl::StatusOr<uint64_t> ClusterLiveness::CheckPs(int index) { return inner_->CheckPs(index); }

absl::Status ClusterLiveness::CheckWorker(int index) {
  const absl::Time at = options_.now();
  worker_checks_.fetch_add(1);
  absl::Status status = inner_->CheckWorker(index);
  Record(index, at, status);
  return status;
}

absl::Status ClusterLiveness::CheckWorkerWithin(int index, absl::Duration max_age) {
  if (index >= 0) {
    absl::MutexLock lock(&mu_);
    if (static_cast<size_t>(index) < known_.size()) {
      const Known& k = known_[index];
      if (options_.now() - k.at <= max_age) {
        worker_checks_saved_.fetch_add(1);
        return k.status;
      }
    }
  }
  return CheckWorker(index);
}

void ClusterLiveness::WorkerAnswered(int index) { Record(index, options_.now(), absl::OkStatus()); }

void ClusterLiveness::Record(int index, absl::Time at, absl::Status status) {
  if (index < 0) return;
  absl::MutexLock lock(&mu_);
  if (static_cast<size_t>(index) >= known_.size()) known_.resize(static_cast<size_t>(index) + 1);
  Known& k = known_[index];
  if (at < k.at) return;  // a check that began earlier ended later: the newer news stands
  k.at = at;
  k.status = std::move(status);
}

}  // namespace pscluster
