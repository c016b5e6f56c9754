#include "coordinator/core/cluster_probe.h"

#include <optional>
#include <utility>

namespace pscluster {

ClusterProbe::ClusterProbe(HealthChecker* health, Options options)
    : health_(health), options_(std::move(options)), thread_([this] { Loop(); }) {}

ClusterProbe::~ClusterProbe() {
  stop_.Notify();
  thread_.join();
}

bool ClusterProbe::CheckOnce() {
  int ps = 0, workers = 0;
  for (int p = 0; p < options_.num_ps; ++p) ps += health_->CheckPs(p).ok() ? 1 : 0;
  std::vector<int> indices;
  if (options_.worker_indices) {
    indices = options_.worker_indices();
  } else {
    for (int w = 0; w < options_.num_workers; ++w) indices.push_back(w);
  }
  for (int w : indices) workers += health_->CheckWorkerWithin(w, options_.interval).ok() ? 1 : 0;
  if (options_.metrics != nullptr) options_.metrics->ClusterHealth(ps, workers);
  return ps == options_.num_ps && workers == static_cast<int>(indices.size());
}

void ClusterProbe::Loop() {
  std::optional<bool> reported;
  do {
    const bool reachable = CheckOnce();
    if (options_.on_reachable && reported != reachable) options_.on_reachable(reachable);
    reported = reachable;
  } while (!stop_.WaitForNotificationWithTimeout(options_.interval));
}

}  // namespace pscluster
