#include "common/partitioner.h"

#include <algorithm>
#include <cassert>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pscluster {
namespace {

absl::Status MustBePositive(const char* field, int64_t value) {
  if (value >= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("partitioner: ", field, " must be >= 1, got ", value));
}

// Product of shape[from:] times elem_bytes, or INVALID_ARGUMENT on overflow.
absl::StatusOr<int64_t> ByteProduct(absl::Span<const int64_t> shape, size_t from,
                                    int64_t elem_bytes) {
  int64_t bytes = elem_bytes;
  for (size_t i = from; i < shape.size(); ++i) {
    if (__builtin_mul_overflow(bytes, shape[i], &bytes)) {
      return absl::InvalidArgumentError("partitioner: variable byte size overflows int64");
    }
  }
  return bytes;
}

int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

}  // namespace

PartitionerSpec PartitionerSpec::Fixed(int64_t num_shards) {
  PartitionerSpec spec;
  spec.type = Type::kFixed;
  spec.num_shards = num_shards;
  return spec;
}

PartitionerSpec PartitionerSpec::MinSize(int64_t min_shard_bytes, int64_t max_shards) {
  PartitionerSpec spec;
  spec.type = Type::kMinSize;
  spec.min_shard_bytes = min_shard_bytes;
  spec.max_shards = max_shards;
  return spec;
}

PartitionerSpec PartitionerSpec::MaxSize(int64_t max_shard_bytes, int64_t max_shards) {
  PartitionerSpec spec;
  spec.type = Type::kMaxSize;
  spec.max_shard_bytes = max_shard_bytes;
  spec.max_shards = max_shards;
  return spec;
}

absl::Status ValidatePartitioner(const PartitionerSpec& spec) {
  using Type = PartitionerSpec::Type;
  switch (spec.type) {
    case Type::kNone:
      return absl::OkStatus();
    case Type::kFixed:
      return MustBePositive("num_shards", spec.num_shards);
    case Type::kMinSize:
      RETURN_IF_ERROR(MustBePositive("min_shard_bytes", spec.min_shard_bytes));
      RETURN_IF_ERROR(MustBePositive("max_shards", spec.max_shards));
      break;
    case Type::kMaxSize:
      RETURN_IF_ERROR(MustBePositive("max_shard_bytes", spec.max_shard_bytes));
      if (spec.max_shards < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "partitioner: max_shards must be >= 1 (or 0 for unlimited), got ", spec.max_shards));
      }
      break;
  }
  return MustBePositive("bytes_per_string", spec.bytes_per_string);
}

absl::StatusOr<int64_t> RequestedShards(const PartitionerSpec& spec,
                                        absl::Span<const int64_t> shape, int64_t elem_bytes) {
  using Type = PartitionerSpec::Type;
  RETURN_IF_ERROR(ValidatePartitioner(spec));
  RETURN_IF_ERROR(MustBePositive("elem_bytes", elem_bytes));
  for (int64_t dim : shape) {
    if (dim < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("partitioner: negative dimension ", dim, " in variable shape"));
    }
  }
  if (shape.empty() || spec.type == Type::kNone) return 1;  // PSS never partitions scalars.
  const int64_t rows = shape[0];
  switch (spec.type) {
    case Type::kNone:
      return 1;
    case Type::kFixed:
      if (rows == 0 && spec.num_shards >= 2) {
        return absl::InvalidArgumentError(
            "partitioner: cannot split a variable with shape[0] == 0 into num_shards >= 2 "
            "(TF divides by zero)");
      }
      return spec.num_shards;
    case Type::kMinSize: {
      // n = max(1, min(shape[0], max_shards, ceil(total / min_shard_bytes))).
      ASSIGN_OR_RETURN(const int64_t total, ByteProduct(shape, 0, elem_bytes));
      const int64_t by_size = CeilDiv(total, spec.min_shard_bytes);
      return std::max<int64_t>(1, std::min({rows, spec.max_shards, by_size}));
    }
    case Type::kMaxSize: {
      // rows_per_shard = max(1, floor(max_shard_bytes / bytes_per_row));
      // n = ceil(shape[0] / rows_per_shard), capped by max_shards if set.
      ASSIGN_OR_RETURN(const int64_t bytes_per_row, ByteProduct(shape, 1, elem_bytes));
      if (rows == 0 || bytes_per_row == 0) {
        return absl::InvalidArgumentError(
            "partitioner: MaxSize cannot partition a variable with a zero dimension "
            "(TF divides by zero)");
      }
      const int64_t rows_per_shard = std::max<int64_t>(1, spec.max_shard_bytes / bytes_per_row);
      int64_t n = CeilDiv(rows, rows_per_shard);
      if (spec.max_shards > 0) n = std::min(n, spec.max_shards);
      return n;
    }
  }
  return absl::InternalError("partitioner: unknown type");
}

absl::StatusOr<int64_t> NumShards(const PartitionerSpec& spec, absl::Span<const int64_t> shape,
                                  int64_t elem_bytes) {
  ASSIGN_OR_RETURN(const int64_t requested, RequestedShards(spec, shape, elem_bytes));
  if (requested == 1) return 1;
  return std::min(requested, shape[0]);  // requested >= 2 implies rank >= 1, shape[0] >= 1.
}

std::vector<Shard> ShardLayout(const std::string& var_name, int64_t rows, int64_t num_shards,
                               int first_ps_task, int num_ps) {
  assert(num_shards >= 1 && rows >= 0 && num_ps >= 1 && first_ps_task >= 0);
  const int64_t base = rows / num_shards;
  const int64_t extra = rows % num_shards;
  std::vector<Shard> shards;
  shards.reserve(num_shards);
  int64_t offset = 0;
  for (int64_t i = 0; i < num_shards; ++i) {
    Shard shard;
    shard.index = i;
    shard.row_offset = offset;
    shard.rows = base + (i < extra ? 1 : 0);
    shard.ps_task = static_cast<int>((first_ps_task + i) % num_ps);
    shard.name = absl::StrCat(var_name, "/part_", i);
    offset += shard.rows;
    shards.push_back(std::move(shard));
  }
  return shards;
}

int64_t ShardForRow(const std::vector<Shard>& shards, int64_t row) {
  assert(!shards.empty() && row >= 0);
  // First shard starting after `row`; the one before it holds `row`. Empty
  // trailing shards (only if num_shards > rows) start at the total row count,
  // past any valid row, so they are never chosen.
  auto it = std::upper_bound(shards.begin(), shards.end(), row,
                             [](int64_t r, const Shard& s) { return r < s.row_offset; });
  assert(it != shards.begin());
  return static_cast<int64_t>(it - shards.begin()) - 1;
}

RoundRobinPlacer::RoundRobinPlacer(int num_ps) : num_ps_(num_ps) { assert(num_ps >= 1); }

absl::StatusOr<std::vector<Shard>> RoundRobinPlacer::Place(const std::string& var_name,
                                                           absl::Span<const int64_t> shape,
                                                           int64_t elem_bytes,
                                                           const PartitionerSpec& spec) {
  ASSIGN_OR_RETURN(const int64_t requested, RequestedShards(spec, shape, elem_bytes));
  const int first = static_cast<int>(counter_ % num_ps_);
  std::vector<Shard> shards;
  if (requested == 1) {
    Shard plain;
    plain.rows = shape.empty() ? 1 : shape[0];
    plain.ps_task = first;
    plain.name = var_name;
    shards.push_back(std::move(plain));
  } else {
    const int64_t n = std::min(requested, shape[0]);
    shards = ShardLayout(var_name, shape[0], n, first, num_ps_);
  }
  counter_ += static_cast<int64_t>(shards.size());
  return shards;
}

}  // namespace pscluster
