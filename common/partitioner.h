// TensorFlow's variable partitioners and "div" shard layout, as a pure library.
//
// Mirrors what tf.distribute.experimental.ParameterServerStrategy (PSS) does
// when it creates a variable under a `variable_partitioner`
// (reference/tf-ps-semantics.md §4.2-§4.3):
//   1. rank-0 variables are never partitioned;
//   2. the partitioner (Fixed / MinSize / MaxSize) returns a shard count for
//      axis 0; a count of 1 means "not partitioned" (the variable keeps its
//      name);
//   3. otherwise PSS clamps n = min(count, shape[0]) and splits axis 0 in the
//      "div" layout into shards named "{var}/part_{i}";
//   4. every created variable (each shard, each plain variable) takes the next
//      PS task from one strategy-wide round-robin counter.
//
// Integer arithmetic is used throughout; TF computes MinSize/MaxSize with
// Python floats, which agrees for all byte counts below 2^53.
//
// Not modelled: variables created under colocation (optimizer slots) are
// never partitioned in TF; callers must not pass them through a partitioner.
//
// Thread-safety: the free functions are pure and thread-safe.
// RoundRobinPlacer is thread-compatible (external locking for shared use).
#ifndef PSCLUSTER_COMMON_PARTITIONER_H_
#define PSCLUSTER_COMMON_PARTITIONER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace pscluster {

struct PartitionerSpec {
  enum class Type {
    kNone,     // No partitioner: every variable is a single variable.
    kFixed,    // tf.distribute.experimental.partitioners.FixedShardsPartitioner
    kMinSize,  // ...MinSizePartitioner (min_max_variable_partitioner)
    kMaxSize,  // ...MaxSizePartitioner (variable_axis_size_partitioner)
  };
  Type type = Type::kNone;
  // kFixed: shards requested along axis 0 (>= 1).
  int64_t num_shards = 1;
  // kMinSize: target minimum bytes per shard (>= 1). Approximate: TF rounds
  // the shard count up, so shards may be smaller (1.5 x min => 2 shards).
  int64_t min_shard_bytes = 256 << 10;
  // kMaxSize: maximum bytes per shard (required, >= 1). Violated when one row
  // alone exceeds it (every row becomes a shard) or max_shards is reached.
  int64_t max_shard_bytes = 0;
  // kMinSize: upper bound on shards (>= 1); TF's default 1 means "never
  // shard" unless raised (docs recommend num_ps).
  // kMaxSize: upper bound on shards, 0 = unlimited (TF's None).
  // NOTE: the field default (1) is MinSize's; a kMaxSize spec built by hand
  // must set 0 for unlimited. Prefer the factories below.
  int64_t max_shards = 1;
  // Element size to use for string variables (>= 1). Callers pass it as
  // `elem_bytes` for string dtypes; it is validated here.
  int64_t bytes_per_string = 16;

  // Factories with TF's constructor defaults.
  static PartitionerSpec Fixed(int64_t num_shards);
  static PartitionerSpec MinSize(int64_t min_shard_bytes = 256 << 10, int64_t max_shards = 1);
  static PartitionerSpec MaxSize(int64_t max_shard_bytes, int64_t max_shards = 0);
};

// OK, or INVALID_ARGUMENT naming the offending field (TF raises ValueError for
// these at construction, or for Fixed's 0 at variable creation):
//   kFixed: num_shards >= 1; kMinSize: min_shard_bytes >= 1, max_shards >= 1;
//   kMaxSize: max_shard_bytes >= 1, max_shards >= 0; all: bytes_per_string >= 1.
absl::Status ValidatePartitioner(const PartitionerSpec& spec);

// The raw shard count the partitioner returns for axis 0, before PSS's clamp
// (1 for kNone and for scalars, which PSS never hands to a partitioner).
// A result of 1 means the variable is created unpartitioned.
// INVALID_ARGUMENT for an invalid spec, elem_bytes < 1, a negative dimension,
// a byte size overflowing int64, or where TF itself fails:
//   * kMaxSize with shape[0] == 0 or any other dimension 0 (division by zero
//     on bytes per row);
//   * kFixed with num_shards >= 2 and shape[0] == 0 (PSS clamps to 0 shards
//     and divides by zero).
// kMinSize on an empty variable and kFixed(1) on shape[0] == 0 give 1, as TF.
absl::StatusOr<int64_t> RequestedShards(const PartitionerSpec& spec,
                                        absl::Span<const int64_t> shape, int64_t elem_bytes);

// Number of shards along axis 0 for a variable of `shape` whose elements are
// `elem_bytes` wide (4 for float32; spec.bytes_per_string for strings), after
// PSS's clamp n = min(n, shape[0]); always >= 1. Scalars give 1.
// Errors: as RequestedShards.
absl::StatusOr<int64_t> NumShards(const PartitionerSpec& spec, absl::Span<const int64_t> shape,
                                  int64_t elem_bytes);

// One piece of a variable: rows [row_offset, row_offset + rows) of axis 0,
// placed on PS task `ps_task`, created under `name`.
struct Shard {
  int64_t index = 0;
  int64_t row_offset = 0;
  int64_t rows = 0;
  int ps_task = 0;
  std::string name;
};

// TF's "div" layout: base = rows / n; the first rows % n shards get one extra
// row; offsets are cumulative. Shard i is named "{var_name}/part_{i}" and
// placed on (first_ps_task + i) % num_ps.
// REQUIRES: num_shards >= 1, rows >= 0, num_ps >= 1, first_ps_task >= 0.
std::vector<Shard> ShardLayout(const std::string& var_name, int64_t rows, int64_t num_shards,
                               int first_ps_task, int num_ps);

// Index (into `shards`) of the shard holding `row`, by binary search over the
// offsets. REQUIRES: `shards` is a layout from ShardLayout (sorted, contiguous
// from 0) and 0 <= row < total rows.
int64_t ShardForRow(const std::vector<Shard>& shards, int64_t row);

// Holds PSS's strategy-wide round-robin counter and places variables in
// creation order. Thread-compatible.
class RoundRobinPlacer {
 public:
  // REQUIRES: num_ps >= 1.
  explicit RoundRobinPlacer(int num_ps);

  // Partitions and places one variable, advancing the counter by the number
  // of variables created. An unpartitioned variable (RequestedShards == 1,
  // including scalars and kNone) is one Shard named `var_name` covering all
  // rows (rows = 1 for a scalar). A partitioned one is NumShards shards named
  // "{var_name}/part_{i}" - even when PSS's clamp leaves a single shard
  // (kFixed(n >= 2) on a 1-row variable gives one "{var_name}/part_0", as TF).
  // On error (see RequestedShards) the counter is unchanged.
  absl::StatusOr<std::vector<Shard>> Place(const std::string& var_name,
                                           absl::Span<const int64_t> shape, int64_t elem_bytes,
                                           const PartitionerSpec& spec);

  // Variables created so far (the next one goes to counter() % num_ps).
  int64_t counter() const { return counter_; }
  int num_ps() const { return num_ps_; }

 private:
  int num_ps_;
  int64_t counter_ = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_PARTITIONER_H_
