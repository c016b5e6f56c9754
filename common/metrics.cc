#include "common/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace pscluster {

int AucBucket(double p) {
  if (!(p > 0.0)) return 0;  // also NaN
  const double b = std::floor(p * kAucBuckets);
  return b >= kAucBuckets ? kAucBuckets - 1 : static_cast<int>(b);
}

double AucFromHistograms(absl::Span<const int64_t> positive, absl::Span<const int64_t> negative) {
  const size_t n = std::max(positive.size(), negative.size());
  auto at = [n](absl::Span<const int64_t> h, size_t i) {
    return i < h.size() ? static_cast<double>(h[i]) : 0.0;
  };
  // Walk up the score buckets; every positive beats the negatives in lower
  // buckets and ties with those in its own.
  double negatives_below = 0, pairs_won = 0, positives = 0;
  for (size_t i = 0; i < n; ++i) {
    const double pos = at(positive, i);
    const double neg = at(negative, i);
    pairs_won += pos * (negatives_below + 0.5 * neg);
    negatives_below += neg;
    positives += pos;
  }
  if (positives == 0 || negatives_below == 0) return std::numeric_limits<double>::quiet_NaN();
  return pairs_won / (positives * negatives_below);
}

}  // namespace pscluster
