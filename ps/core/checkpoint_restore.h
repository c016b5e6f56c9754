// RestoreTargets: fills the variables of a new layout from the records of
// checkpoint data files written by any layout (VariableStore::Restore).
//
// Each target is matched to its logical variable: a DENSE variable or shard
// (VariableSpecProto.full_shape / row_offset) takes the overlap of every
// saved slice of that variable with its rows; a HASH_TABLE shard
// "<name>/part_<i>" takes the saved rows of <name> whose
// HashTableShard(id, num_ps) is i. Saved variables that no target wants are
// skipped. Format: docs/checkpoint_format.md.
//
// Internal to VariableStore. Thread-compatible; the targets must not be
// published to other threads before Finish() returns.
#ifndef PSCLUSTER_PS_CORE_CHECKPOINT_RESTORE_H_
#define PSCLUSTER_PS_CORE_CHECKPOINT_RESTORE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "protos/checkpoint_data.pb.h"
#include "ps/core/applied_update_ledger.h"
#include "ps/core/hash_table.h"
#include "ps/core/variable_store_internal.h"

namespace pscluster {
namespace variable_store_internal {

class RestoreTargets {
 public:
  // REQUIRES: num_ps >= 1.
  explicit RestoreTargets(int num_ps) : num_ps_(num_ps) {}

  // Adds a new, initialised variable to fill (not owned; must outlive this).
  // INVALID_ARGUMENT: a HASH_TABLE not named "<name>/part_<i>" with i in
  // [0, num_ps); a logical variable both DENSE and HASH_TABLE, or whose
  // shards disagree on its full shape.
  absl::Status Add(Variable* var);

  // Reads one data file (verified before: size and checksum) into the
  // targets and its AppliedKeys record into *saved.
  // DATA_LOSS naming the file: a malformed or inconsistent record (an
  //   applied-keys record SavedLedgers::Add refuses), no header, or no final
  //   applied-keys record.
  // FAILED_PRECONDITION: another format version; a saved variable whose
  //   kind, shape, row width or optimizer differs from its target's.
  absl::Status ReadFile(const std::string& path, SavedLedgers* saved);

  // After every file: checks that every target was found and fully covered,
  // loads the hash tables (evicting rows past max_rows by policy), sets the
  // update counters. Returns the rows restored (dense rows + table rows).
  // FAILED_PRECONDITION naming a variable missing from the checkpoint;
  // DATA_LOSS naming a variable whose saved slices miss rows, or a hash id
  // saved twice.
  absl::StatusOr<int64_t> Finish();

 private:
  struct DenseTarget {
    Variable* var;
    int64_t row_offset;
    int64_t rows;
    int64_t row_elements;
    std::vector<std::pair<int64_t, int64_t>> covered;  // logical rows [lo, hi)
  };
  struct TableTarget {
    Variable* var;
    HashTable::Rows rows;
  };
  struct Logical {
    bool is_table = false;
    std::vector<int64_t> full_shape;  // DENSE
    std::vector<DenseTarget> dense;
    absl::flat_hash_map<int, TableTarget> tables;  // by shard index
    bool saved = false;                            // seen in a file
    int64_t updates = 0;
  };

  absl::Status ReadDense(const std::string& path, const DenseSlice& slice);
  absl::Status ReadTable(const std::string& path, const HashTableChunk& chunk);
  // FAILED_PRECONDITION unless the saved optimizer matches `var`'s.
  static absl::Status CheckOptimizer(const std::string& name, const std::string& saved_type,
                                     int saved_slots, const Variable& var);

  const int num_ps_;
  absl::flat_hash_map<std::string, Logical> logical_;
};

}  // namespace variable_store_internal
}  // namespace pscluster

#endif  // PSCLUSTER_PS_CORE_CHECKPOINT_RESTORE_H_
