#include "ps/core/push_validation.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/row_ids.h"
#include "common/status_macros.h"
#include "common/tensor.h"
#include "ps/core/optimizer_kernels.h"

namespace pscluster {
namespace variable_store_internal {
namespace {

// INVALID_ARGUMENT naming the job, the variable and the first NaN or Inf
// among `values`, if there is one.
absl::Status CheckFinite(absl::Span<const float> values, const std::string& job,
                         const std::string& what) {
  const int64_t bad = kernels::FirstNonFinite(values.data(), static_cast<int64_t>(values.size()));
  if (bad < 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "job '", job, "': ", what, " holds a non-finite value (", values[bad], ") at element ", bad,
      " of ", values.size(), "; the push is refused, nothing of it applied"));
}

// INVALID_ARGUMENT naming the first id of `r` that appears twice.
absl::Status CheckDistinct(const RowRequest& r, const std::string& name) {
  absl::flat_hash_set<uint64_t> seen;
  seen.reserve(r.ids.size());
  for (uint64_t id : r.ids) {
    if (!seen.insert(id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("sparse gradient of variable '", name, "': id ",
                       r.var->is_table() ? absl::StrCat(id) : absl::StrCat(int64_t(id)),
                       " appears more than once (ids must be distinct)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckUpdateKey(const UpdateKey& key) {
  if (key.step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("update key of closure ", key.closure_id(),
                                                   ": step ", key.step(), " is negative"));
  }
  if (key.has_global_step() && key.global_step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("update key of closure ", key.closure_id(),
                                                   ": global_step ", key.global_step(),
                                                   " is negative"));
  }
  return absl::OkStatus();
}

absl::StatusOr<RowRequest> CheckRowIds(FindVariable find, const std::string& name,
                                       const std::string& ids, const char* what) {
  RowRequest r;
  ASSIGN_OR_RETURN(r.var, find(name));
  const Variable& var = *r.var;
  if (var.row_width == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " of variable '", name, "': only a rank-2 DENSE variable or a HASH_TABLE has rows, '",
        name, "' has shape ", ShapeString(var.shape)));
  }
  ASSIGN_OR_RETURN(r.ids, DecodeRowIds(ids, absl::StrCat(what, " of variable '", name, "'")));
  if (var.is_table()) return r;
  const int64_t rows = var.shape[0];
  r.rows.reserve(r.ids.size());
  for (uint64_t id : r.ids) {
    const int64_t row = static_cast<int64_t>(id);
    if (row < 0 || row >= rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("id ", row, " outside [0, ", rows, ") of variable '", name, "'"));
    }
    r.rows.push_back(row);
  }
  return r;
}

absl::StatusOr<CheckedPush> CheckGradients(const PushRequest& request, FindVariable find,
                                           bool* non_finite) {
  CheckedPush out;
  out.dense.reserve(request.gradients_size());
  for (const NamedTensor& grad : request.gradients()) {
    ASSIGN_OR_RETURN(Variable * var, find(grad.name()));
    if (var->is_table()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "variable '", grad.name(), "' is a HASH_TABLE: push its gradient by row (sparse)"));
    }
    ASSIGN_OR_RETURN(absl::Span<const float> values,
                     TensorView(grad.tensor(), var->shape,
                                absl::StrCat("gradient for variable '", grad.name(), "'")));
    if (absl::Status s = CheckFinite(values, request.job(),
                                     absl::StrCat("the gradient for variable '", grad.name(), "'"));
        !s.ok()) {
      if (non_finite != nullptr) *non_finite = true;
      return s;
    }
    out.dense.emplace_back(var, values);
    out.bytes += static_cast<int64_t>(grad.tensor().data().size());
  }
  out.sparse.reserve(request.sparse_size());
  for (const SparseGradient& grad : request.sparse()) {
    ASSIGN_OR_RETURN(RowRequest r, CheckRowIds(find, grad.name(), grad.ids(), "sparse gradient"));
    RETURN_IF_ERROR(CheckDistinct(r, grad.name()));
    const int64_t n = static_cast<int64_t>(r.ids.size());
    ASSIGN_OR_RETURN(absl::Span<const float> rows,
                     TensorView(grad.rows(), {n, r.var->row_width},
                                absl::StrCat("gradient rows for variable '", grad.name(), "'")));
    if (absl::Status s =
            CheckFinite(rows, request.job(),
                        absl::StrCat("the sparse gradient rows for variable '", grad.name(), "'"));
        !s.ok()) {
      if (non_finite != nullptr) *non_finite = true;
      return s;
    }
    out.bytes += static_cast<int64_t>(grad.rows().data().size());
    out.sparse.emplace_back(std::move(r), rows);
  }
  return out;
}

}  // namespace variable_store_internal
}  // namespace pscluster
