// Internals of VariableStore shared by its implementation files
// (variable_store.cc: create, pull, push, stats; variable_store_checkpoint.cc:
// save and restore) and its parts (push_validation.h, checkpoint_restore.h).
// Not part of the store's API; include only from those.
#ifndef PSCLUSTER_PS_CORE_VARIABLE_STORE_INTERNAL_H_
#define PSCLUSTER_PS_CORE_VARIABLE_STORE_INTERNAL_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/tensor.h"
#include "protos/ps.pb.h"
#include "ps/core/hash_table.h"
#include "ps/core/optimizer.h"

namespace pscluster {
namespace variable_store_internal {

// Version of the data files Save writes; Restore reads only this one.
inline constexpr int kCheckpointFormatVersion = 1;

// One variable or shard. The spec and the optimizer are immutable; the
// values, slots and update counter are guarded by `mu`.
struct Variable {
  Variable(VariableSpecProto spec_in, std::unique_ptr<Optimizer> optimizer_in)
      : spec(std::move(spec_in)),
        shape(spec.shape().begin(), spec.shape().end()),
        optimizer(std::move(optimizer_in)),
        row_width(spec.kind() == HASH_TABLE ? shape[0]
                  : shape.size() == 2       ? shape[1]
                                            : 0) {}

  bool is_table() const { return spec.kind() == HASH_TABLE; }

  const VariableSpecProto spec;
  const Shape shape;  // a hash table's is its row shape, [dim]
  const std::unique_ptr<const Optimizer> optimizer;
  // Width of a row for lookups and sparse gradients; 0 if the variable has no
  // rows (a DENSE variable not of rank 2).
  const int64_t row_width;
  // HASH_TABLE only (else null); set before the variable is published, and
  // thread-safe itself.
  std::unique_ptr<HashTable> table;

  absl::Mutex mu;
  // DENSE only: the values and slots.
  std::vector<float> values ABSL_GUARDED_BY(mu);
  OptimizerSlots slots ABSL_GUARDED_BY(mu);
  int64_t updates ABSL_GUARDED_BY(mu) = 0;
};

// Bytes a new variable holds once initialised, as the memory budget and
// Stats count them: a DENSE variable's values and slots; a hash table starts
// empty (its rows are reserved as they come).
inline int64_t InitialBytes(const Variable& var) {
  if (var.is_table()) return 0;
  return NumElements(var.shape) * static_cast<int64_t>(sizeof(float)) *
         (1 + static_cast<int64_t>(var.optimizer->SlotNames().size()));
}

}  // namespace variable_store_internal
}  // namespace pscluster

#endif  // PSCLUSTER_PS_CORE_VARIABLE_STORE_INTERNAL_H_
