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

// The ids of one categorical feature for every example: example i has
// ids[offsets[i], offsets[i+1]) (possibly none). For a fixed vocabulary the
// ids are row numbers in [0, vocab_size); for a hashed feature, hash-table keys.
struct CategoricalColumn {
  std::vector<int64_t> offsets;  // count + 1 entries, offsets[0] == 0
  std::vector<uint64_t> ids;
};

// Examples: dense features (float32, row-major [count, features]), int32
// labels (a class index; 0/1 for a binary model), and one CategoricalColumn
// per model.inputs.categorical feature, in spec order.
// Immutable after loading; safe to share across threads.
struct Dataset {
  int64_t count = 0;
  int64_t features = 0;
  int64_t num_classes = 0;  // 1 + the largest label
  std::vector<float> x;
  std::vector<int32_t> y;
  std::vector<CategoricalColumn> categorical;
};

// Loads a data source for `model`:
// - idx: an image/label pair; pixels scaled to [0, 1];
// - csv: typed columns, label, dense columns and categorical features
//   extracted as the model's CategoricalFeatureSpecs say;
// - synthetic_ctr: seeded Zipf-distributed ids for the model's features.
// NOT_FOUND names a missing file; INVALID_ARGUMENT names a malformed one
// (file, line, column), an id outside a fixed vocabulary, or an image/label
// count mismatch.
absl::StatusOr<Dataset> LoadDataset(const DataSourceSpec& source, const ModelSpec& model);

// The order of examples in `epoch`: a seeded shuffle, or 0..size-1 when
// `shuffle` is false.
std::vector<int64_t> EpochPermutation(int64_t size, uint64_t seed, int64_t epoch, bool shuffle);

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_DATASET_H_
