// ExponentialBackoff: the wait before a retry, `base` doubled per attempt
// with the number of doublings capped: Before(1) = base, Before(2) = 2 base,
// ... up to base * 2^max_doublings. One type for the coordinator's retries
// (worker setup, closure dispatch, checkpoints), each with its own base and cap.
#ifndef PSCLUSTER_COMMON_BACKOFF_H_
#define PSCLUSTER_COMMON_BACKOFF_H_

#include <algorithm>
#include <cstdint>

#include "absl/time/time.h"

namespace pscluster {

struct ExponentialBackoff {
  absl::Duration base;
  int max_doublings = 5;

  // The wait before retry `attempt` (1-based; attempts below 1 count as 1).
  absl::Duration Before(int64_t attempt) const {
    const int64_t doublings =
        std::min<int64_t>(std::max<int64_t>(attempt, 1) - 1, std::max(max_doublings, 0));
    return base * static_cast<double>(int64_t{1} << doublings);
  }
};

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_BACKOFF_H_
