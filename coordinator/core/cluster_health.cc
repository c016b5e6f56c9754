#include "coordinator/core/cluster_health.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace pscluster {
namespace {

std::string TaskName(const char *type, int index, const std::vector<std::string> &addresses) {
  if (index < static_cast<int>(addresses.size()) && !addresses[index].empty()) {
    return absl::StrCat(type, " ", index, " (", addresses[index], ")");
  }
  return absl::StrCat(type, " ", index);
}

}  // namespace

absl::Status WaitForCluster(HealthChecker &health, int num_ps, int num_workers,
                            const std::vector<std::string> &ps_addresses,
                            const std::vector<std::string> &worker_addresses, absl::Time deadline,
                            absl::Duration poll, const std::function<bool()> &cancelled) {
  const absl::Time start = absl::Now();
  std::vector<bool> ps_ok(std::max(num_ps, 0), false);
  std::vector<bool> worker_ok(std::max(num_workers, 0), false);
  while (true) {
    bool all = true;
    for (int i = 0; i < num_ps; ++i) {
      if (!ps_ok[i]) ps_ok[i] = health.CheckPs(i).ok();
      all = all && ps_ok[i];
    }
    for (int i = 0; i < num_workers; ++i) {
      if (!worker_ok[i]) worker_ok[i] = health.CheckWorker(i).ok();
      all = all && worker_ok[i];
    }
    if (all) return absl::OkStatus();
    if (cancelled && cancelled()) {
      return absl::CancelledError("cancelled while waiting for the cluster to be healthy");
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) break;
    absl::SleepFor(std::min(poll, deadline - now));
    if (cancelled && cancelled()) {
      return absl::CancelledError("cancelled while waiting for the cluster to be healthy");
    }
  }
  std::vector<std::string> missing;
  for (int i = 0; i < num_ps; ++i) {
    if (!ps_ok[i]) missing.push_back(TaskName("ps", i, ps_addresses));
  }
  for (int i = 0; i < num_workers; ++i) {
    if (!worker_ok[i]) missing.push_back(TaskName("worker", i, worker_addresses));
  }
  // Whole seconds, or tenths below 10 s: "after 60 s", "after 0.5 s".
  const double waited = absl::ToDoubleSeconds(absl::Now() - start);
  const std::string after = waited >= 10 ? absl::StrFormat("%.0f", std::round(waited))
                                         : absl::StrFormat("%g", std::round(waited * 10) / 10);
  return absl::UnavailableError(
      absl::StrCat("after ", after, " s, not healthy: ", absl::StrJoin(missing, ", ")));
}

}  // namespace pscluster
