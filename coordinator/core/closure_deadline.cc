#include "coordinator/core/closure_deadline.h"

#include <algorithm>

namespace pscluster {

ClosureDeadline::ClosureDeadline(ClosureDeadlineOptions options) : options_(options) {}

absl::Duration ClosureDeadline::For(int closures) const {
  absl::MutexLock lock(&mu_);
  if (longest_ == absl::ZeroDuration()) return options_.cap;
  const absl::Duration d = longest_ * (options_.multiple * std::max(closures, 1));
  return std::clamp(d, options_.floor, std::max(options_.floor, options_.cap));
}

void ClosureDeadline::Observe(absl::Duration elapsed, int closures) {
  const absl::Duration per_closure = elapsed / std::max(closures, 1);
  absl::MutexLock lock(&mu_);
  longest_ = std::max(longest_, per_closure);
}

absl::Duration ClosureDeadline::longest() const {
  absl::MutexLock lock(&mu_);
  return longest_;
}

}  // namespace pscluster
