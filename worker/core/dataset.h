// In-memory labelled data sets for a worker, and the per-epoch order in which
// closures visit them.
//
// The coordinator hands out splits as index ranges [begin, end) of an epoch's
// permutation. EpochPermutation is a pure function of (size, seed, epoch), so
// every worker, and a retried closure, sees the same examples for a split.
#ifndef PSCLUSTER_WORKER_CORE_DATASET_H_
#define PSCLUSTER_WORKER_CORE_DATASET_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_spec.h"

namespace pscluster {

// Dense features (float32, row-major [count, features]) with int32 class labels.
// Immutable after loading; safe to share across threads.
struct Dataset {
  int64_t count = 0;
  int64_t features = 0;
  int64_t num_classes = 0;  // 1 + the largest label
  std::vector<float> x;
  std::vector<int32_t> y;
};

// Loads an idx image/label pair; pixels are scaled to [0, 1]. NOT_FOUND names a
// missing file; INVALID_ARGUMENT names a malformed one or an image/label count
// mismatch.
absl::StatusOr<Dataset> LoadDataset(const DataSourceSpec& source);

// The order of examples in `epoch`: a seeded shuffle, or 0..size-1 when
// `shuffle` is false.
std::vector<int64_t> EpochPermutation(int64_t size, uint64_t seed, int64_t epoch, bool shuffle);

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_DATASET_H_
