#include "ps/core/variable_spec.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/initializer.h"
#include "common/tensor.h"
#include "ps/core/hash_table.h"

namespace pscluster {
namespace {

bool SameMessage(const google::protobuf::Message& a, const google::protobuf::Message& b) {
  return a.SerializeAsString() == b.SerializeAsString();
}

// OK if full_shape / row_offset describe a slice of rows of a logical
// variable whose other dimensions are the variable's own (or are unset).
absl::Status ValidateSlice(const VariableSpecProto& spec) {
  if (spec.full_shape_size() == 0) {
    if (spec.row_offset() != 0) {
      return absl::InvalidArgumentError("row_offset is set without full_shape");
    }
    return absl::OkStatus();
  }
  const Shape shape(spec.shape().begin(), spec.shape().end());
  const Shape full(spec.full_shape().begin(), spec.full_shape().end());
  const bool same_rank = spec.kind() == DENSE && !shape.empty() && full.size() == shape.size();
  if (!same_rank || !std::equal(shape.begin() + 1, shape.end(), full.begin() + 1) ||
      spec.row_offset() < 0 || full[0] < 0 || spec.row_offset() > full[0] - shape[0]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shape ", ShapeString(shape), " at row_offset ", spec.row_offset(),
        " is not a slice of rows of full_shape ", ShapeString(full),
        " (a DENSE shard of rank >= 1 only)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckSameSpec(const VariableSpecProto& existing, const VariableSpecProto& wanted) {
  const Shape have(existing.shape().begin(), existing.shape().end());
  const Shape want(wanted.shape().begin(), wanted.shape().end());
  if (have != want || existing.dtype() != wanted.dtype() ||
      !std::equal(existing.full_shape().begin(), existing.full_shape().end(),
                  wanted.full_shape().begin(), wanted.full_shape().end()) ||
      existing.row_offset() != wanted.row_offset()) {
    return absl::AlreadyExistsError(absl::StrCat("variable '", wanted.name(),
                                                 "' already exists with shape ", ShapeString(have),
                                                 " (requested ", ShapeString(want),
                                                 "), or as a different slice of its variable"));
  }
  if (existing.kind() != wanted.kind() || existing.max_rows() != wanted.max_rows() ||
      existing.eviction() != wanted.eviction()) {
    return absl::AlreadyExistsError(absl::StrCat(
        "variable '", wanted.name(), "' already exists as ", VariableKind_Name(existing.kind()),
        " with max_rows ", existing.max_rows(), " and eviction ",
        EvictionPolicy_Name(existing.eviction()), " (requested ", VariableKind_Name(wanted.kind()),
        ", ", wanted.max_rows(), ", ", EvictionPolicy_Name(wanted.eviction()), ")"));
  }
  if (!SameMessage(existing.initializer(), wanted.initializer())) {
    return absl::AlreadyExistsError(
        absl::StrCat("variable '", wanted.name(), "' already exists with a different initializer"));
  }
  if (!SameMessage(existing.optimizer(), wanted.optimizer())) {
    return absl::AlreadyExistsError(
        absl::StrCat("variable '", wanted.name(), "' already exists with a different optimizer"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Optimizer>> ValidateSpec(const VariableSpecProto& spec,
                                                        int64_t max_elements) {
  if (spec.name().empty()) return absl::InvalidArgumentError("variable with an empty name");
  auto fail = [&](const absl::Status& s) {
    return absl::InvalidArgumentError(absl::StrCat("variable '", spec.name(), "': ", s.message()));
  };
  if (spec.dtype() != DT_FLOAT32) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "dtype ", DType_Name(spec.dtype()), " is not supported (expected DT_FLOAT32)")));
  }
  if (absl::Status s = ValidateShape(spec.shape(), max_elements); !s.ok()) return fail(s);
  if (!VariableKind_IsValid(spec.kind())) {
    return fail(absl::InvalidArgumentError(absl::StrCat("unknown kind ", spec.kind())));
  }
  if (spec.kind() == HASH_TABLE) {
    if (spec.shape_size() != 1 || spec.shape(0) < 1) {
      const Shape got(spec.shape().begin(), spec.shape().end());
      return fail(absl::InvalidArgumentError(absl::StrCat(
          "a HASH_TABLE's shape is its row shape [dim] with dim >= 1, got ", ShapeString(got))));
    }
    if (spec.max_rows() < 0 || spec.max_rows() > HashTable::kMaxRows) {
      return fail(absl::InvalidArgumentError(absl::StrCat(
          "max_rows must be in [0, ", HashTable::kMaxRows, "], got ", spec.max_rows())));
    }
    if (!EvictionPolicy_IsValid(spec.eviction())) {
      return fail(absl::InvalidArgumentError(absl::StrCat("unknown eviction ", spec.eviction())));
    }
  } else if (spec.max_rows() != 0) {
    return fail(absl::InvalidArgumentError("max_rows applies to HASH_TABLE variables only"));
  }
  if (absl::Status s = ValidateSlice(spec); !s.ok()) return fail(s);
  if (absl::Status s = ValidateInitializer(spec.initializer()); !s.ok()) return fail(s);
  auto optimizer = Optimizer::Create(spec.optimizer());
  if (!optimizer.ok()) return fail(optimizer.status());
  return optimizer;
}

}  // namespace pscluster
