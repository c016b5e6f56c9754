// Binary-classifier metrics that can be merged across workers: predicted
// probabilities are counted in fixed buckets, and the AUC is computed from the
// merged counts (as tf.keras.metrics.AUC does with its thresholds).
//
// Thread-safety: pure functions, thread-safe.
#ifndef PSCLUSTER_COMMON_METRICS_H_
#define PSCLUSTER_COMMON_METRICS_H_

#include <cstdint>

#include "absl/types/span.h"

namespace pscluster {

// Number of equal-width probability buckets over [0, 1]; bucket b holds
// probabilities in [b / kAucBuckets, (b + 1) / kAucBuckets) and the last one
// also holds 1.
inline constexpr int kAucBuckets = 1000;

// The bucket of probability `p`; values outside [0, 1] (and NaN) are clamped
// to the first or last bucket.
int AucBucket(double p);

// Area under the ROC curve from per-bucket counts of positive and negative
// examples: the probability that a random positive scores above a random
// negative, with pairs in the same bucket counted as ties (1/2). Exact for
// scores that are constant within each bucket; otherwise off by at most the
// share of positive-negative pairs that share a bucket.
// The spans may differ in length (missing buckets count as 0). Returns NaN
// when there are no positives or no negatives (the AUC is undefined).
double AucFromHistograms(absl::Span<const int64_t> positive, absl::Span<const int64_t> negative);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_METRICS_H_
