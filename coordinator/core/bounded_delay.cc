#include "coordinator/core/bounded_delay.h"

#include <algorithm>
#include <iterator>

namespace pscluster {

BoundedDelay::BoundedDelay(int64_t max_staleness)
    : max_staleness_(std::max<int64_t>(0, max_staleness)) {}

int64_t BoundedDelay::Add() {
  const int64_t seq = next_++;
  unfinished_.insert(seq);
  return seq;
}

bool BoundedDelay::MayStart(int64_t seq) const {
  // Every closure below seq - S finished: the oldest unfinished is at least
  // seq - S (nothing unfinished: anything may start).
  return unfinished_.empty() || seq - *unfinished_.begin() <= max_staleness_;
}

int64_t BoundedDelay::Start(int64_t seq) {
  const int64_t staleness =
      static_cast<int64_t>(std::distance(unfinished_.begin(), unfinished_.lower_bound(seq)));
  max_observed_ = std::max(max_observed_, staleness);
  return staleness;
}

void BoundedDelay::Finish(int64_t seq) { unfinished_.erase(seq); }

}  // namespace pscluster
