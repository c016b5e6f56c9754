// Validation of VariableSpecProto for the PS: what a variable may be, and
// when an existing variable may stand for a requested one (CreateVariables is
// idempotent for an identical spec).
//
// Pure functions; thread-safe.
#ifndef PSCLUSTER_PS_CORE_VARIABLE_SPEC_H_
#define PSCLUSTER_PS_CORE_VARIABLE_SPEC_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "protos/ps.pb.h"
#include "ps/core/optimizer.h"

namespace pscluster {

// Checks everything about `spec` that does not depend on the store's
// contents and returns the variable's optimizer. INVALID_ARGUMENT naming the
// variable: see VariableStore::CreateVariables, plus full_shape / row_offset
// that are not a slice of rows of a DENSE variable of the same rank and row
// shape.
absl::StatusOr<std::unique_ptr<Optimizer>> ValidateSpec(const VariableSpecProto& spec,
                                                        int64_t max_elements);

// OK if `existing` may stand for `wanted` (same shape, slice, dtype, kind,
// max_rows, eviction, initializer and optimizer); ALREADY_EXISTS saying what
// differs.
absl::Status CheckSameSpec(const VariableSpecProto& existing, const VariableSpecProto& wanted);

}  // namespace pscluster

#endif  // PSCLUSTER_PS_CORE_VARIABLE_SPEC_H_
