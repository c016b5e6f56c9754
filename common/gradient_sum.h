// GradientSum: a weighted sum of pushes' gradients — dense tensors by
// variable name, embedding rows by (variable, id) — written out as one
// PushRequest scaled by a factor. The synchronous strategies build a step's
// update with it: sum_r(examples_r * g_r), then scale 1 / sum_r(examples_r)
// (ps/core/sync_steps.h on a PS, worker/core/mirrored_ps_client.h for the
// rows of a mirrored step).
//
// Sums are float, added in the order Add* is called (rows of an id in the
// order their pushes came): the same calls give bitwise the same result.
// Not thread-safe.
#ifndef PSCLUSTER_COMMON_GRADIENT_SUM_H_
#define PSCLUSTER_COMMON_GRADIENT_SUM_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "protos/ps.pb.h"

namespace pscluster {

class GradientSum {
 public:
  // Adds weight x the gradient. INVALID_ARGUMENT naming the variable when
  // its element count differs from what was added for it before.
  absl::Status AddDense(const NamedTensor& gradient, float weight);
  // Adds weight x each row to its id's sum. INVALID_ARGUMENT naming the
  // variable when its row width differs from what was added before, or the
  // rows are not ids x width floats.
  absl::Status AddRows(const SparseGradient& gradient, float weight);
  // Both, for every gradient of `request`.
  absl::Status Add(const PushRequest& request, float weight);

  // Appends every sum x scale to `out`: dense gradients (dtype and shape of
  // the first added) and sparse gradients (ids in first-seen order), each
  // kind in variable-name order; variables without rows are left out.
  void WriteTo(float scale, PushRequest* out) const;

  // `n` little-endian floats x scale, as tensor bytes.
  static std::string FloatBytes(const float* values, size_t n, float scale);

 private:
  struct Dense {
    TensorProto like;  // dtype and shape (data empty)
    std::vector<float> sum;
  };
  struct Rows {
    absl::flat_hash_map<uint64_t, size_t> index;  // id -> its row in `rows`
    std::vector<uint64_t> ids;
    std::vector<float> rows;
    int64_t width = 0;
  };
  std::map<std::string, Dense> dense_;
  std::map<std::string, Rows> rows_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_GRADIENT_SUM_H_
