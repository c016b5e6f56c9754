// RowInitializer: the initial value of one hash-table row, computed from the
// row's id alone.
//
// A hash table creates a row on first touch, on whichever shard (and PS) owns
// the id at the time. The value depends only on (initializer, logical table
// name, id) — not on the shard, the order of touches, or what was evicted —
// so re-sharding or re-creating an evicted row gives the same start.
//
// Generator: per row, a splitmix64 stream seeded with
// XXH3_64(id, seed = XXH3_64(logical name, seed = initializer seed)). One
// stream costs a hash, not the 2.5 KB state of a std::mt19937_64, so creating
// a row stays O(dim). Uniform floats take the top 24 bits of each draw;
// normals use Box-Muller in double. The values are not those of the dense
// initializer (common/initializer) for the same seed.
//
// Immutable after construction; thread-safe.
#ifndef PSCLUSTER_PS_CORE_ROW_INITIALIZER_H_
#define PSCLUSTER_PS_CORE_ROW_INITIALIZER_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "protos/ps.pb.h"

namespace pscluster {

// `name` without a trailing "/part_<i>" (a shard's suffix): "emb/part_3" ->
// "emb"; any other name is returned as it is.
std::string LogicalTableName(absl::string_view name);

class RowInitializer {
 public:
  // `table_name` may be a shard's name; its logical name is used.
  // glorot_uniform treats a row as a [dim] variable (fan_in = fan_out = dim),
  // as RunInitializer does for rank 1.
  // REQUIRES: ValidateInitializer(init) is OK; dim >= 1.
  RowInitializer(const InitializerProto& init, absl::string_view table_name, int64_t dim);

  // Writes the initial row of `id`. REQUIRES: out.size() == dim.
  void Fill(uint64_t id, absl::Span<float> out) const;

 private:
  enum class Kind { kConstant, kUniform, kNormal };

  Kind kind_ = Kind::kConstant;
  float constant_ = 0.0f;
  float lo_ = 0.0f, hi_ = 0.0f;        // kUniform
  float mean_ = 0.0f, stddev_ = 1.0f;  // kNormal
  uint64_t table_seed_ = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_CORE_ROW_INITIALIZER_H_
