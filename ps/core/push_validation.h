// Push validation: the checks a push (PushRequest) passes before any of it
// is applied, so that a bad push changes nothing. Every gradient must name a
// known variable of a kind that takes it; a whole gradient must match its
// variable's dtype, shape and byte count; a sparse gradient's ids must be
// well formed, distinct and (DENSE) in range, and its rows [n, row_width];
// every value must be finite; an update key must not be negative. Each error
// names the variable (and the job, for a non-finite value) and what is
// wrong, so a user can act on it.
//
// The row-id checks are shared with Pull's lookups.
//
// Internal to VariableStore, which resolves the variables under its locks
// (FindVariable). The functions hold no state and take no lock themselves;
// they read only the immutable parts of a variable (spec, shape,
// row_width). Thread-safe.
#ifndef PSCLUSTER_PS_CORE_PUSH_VALIDATION_H_
#define PSCLUSTER_PS_CORE_PUSH_VALIDATION_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "protos/ps.pb.h"
#include "ps/core/variable_store_internal.h"

namespace pscluster {
namespace variable_store_internal {

// Resolves a variable by name: NOT_FOUND naming it when unknown.
using FindVariable = absl::FunctionRef<absl::StatusOr<Variable*>(const std::string& name)>;

// A lookup or sparse gradient, checked.
struct RowRequest {
  Variable* var = nullptr;
  std::vector<uint64_t> ids;  // as sent
  std::vector<int64_t> rows;  // DENSE: the ids as row numbers
};

// A push's gradients, checked, ready to apply. The spans point into the
// request's tensors: valid while the request is.
struct CheckedPush {
  // Whole gradients (PushRequest.gradients) and their DENSE variables.
  std::vector<std::pair<Variable*, absl::Span<const float>>> dense;
  // Sparse gradients: their rows and the [n, row_width] gradient rows.
  std::vector<std::pair<RowRequest, absl::Span<const float>>> sparse;
  // Gradient payload bytes, as pscluster_ps_bytes_pushed_total counts them.
  int64_t bytes = 0;
};

// INVALID_ARGUMENT naming the closure when `key` has step < 0 or a
// global_step < 0.
absl::Status CheckUpdateKey(const UpdateKey& key);

// Resolves the variable `name` of a lookup or sparse gradient (`what`, as
// the messages name it) and decodes its `ids` (common/row_ids.h).
// NOT_FOUND from `find`. INVALID_ARGUMENT: the variable is not rank-2 DENSE
// or HASH_TABLE (the message names its shape); ids not a multiple of 8
// bytes; (DENSE) an id outside [0, rows).
absl::StatusOr<RowRequest> CheckRowIds(FindVariable find, const std::string& name,
                                       const std::string& ids, const char* what);

// Checks every gradient and sparse gradient of `request`, in request order,
// stopping at the first bad one (the update key and the fused pull are not
// checked here). NOT_FOUND: an unknown variable. INVALID_ARGUMENT as
// VariableStore::Push describes: a whole gradient for a hash table, or not
// matching its variable's dtype, shape or byte count; a sparse gradient
// failing CheckRowIds, with a repeated id, or rows not [n, row_width]; a
// NaN or Inf (naming the job, the variable and the first bad element's
// index), in which case `*non_finite` is set to true if it is not null.
absl::StatusOr<CheckedPush> CheckGradients(const PushRequest& request, FindVariable find,
                                           bool* non_finite = nullptr);

}  // namespace variable_store_internal
}  // namespace pscluster

#endif  // PSCLUSTER_PS_CORE_PUSH_VALIDATION_H_
