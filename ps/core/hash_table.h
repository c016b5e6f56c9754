// HashTable: a dynamic embedding table, uint64 id -> float row of width dim,
// with the optimizer slots of each row. Backs HASH_TABLE variables.
//
// A row is created on first touch (lookup or update) by RowInitializer, so
// its start value depends only on (initializer, logical table name, id).
//
// Memory is bounded: with max_rows > 0 the table never holds more rows; a new
// id past that evicts a resident row, chosen by an approximate, sampled policy
// (as Redis does): sample `eviction_samples` resident rows uniformly and evict
// the worst, i.e.
//   LFU: the fewest touches (ties: least recently touched);
//   AGE: the least recently touched, by a logical clock that ticks once per
//        Lookup / ApplyGradients call.
// Rows touched by the current call are evicted only when every sample is one
// of them (a call with more distinct ids than max_rows). Touch counts never
// decay, so under LFU a row that was hot long ago stays; AGE forgets it.
// An evicted row's values and slots are lost; touching its id again creates
// it afresh from the initializer.
//
// Layout: rows live in contiguous arenas (weights and one arena per optimizer
// slot, row-major, row stride dim) indexed by a uint32 arena slot; an
// absl::flat_hash_map maps id -> slot. A new row is appended while the table
// is under max_rows; past it the victim's slot is reused in place, so the
// arenas never have holes and sampling a slot is O(1). Per row, besides the
// floats, the table keeps its id (8 bytes), touch count (4) and last-touch
// tick (8), plus the map entry (16 bytes + 1 control byte per bucket at load
// factor 7/16..7/8, i.e. ~19-39 bytes): about 40-59 bytes of overhead per
// row. The arenas grow by doubling but never past max_rows, so a full bounded
// table has no spare capacity (an unbounded one may carry up to 2x).
// Rows are never removed except by eviction, which reuses the slot at once,
// so no free list is needed.
//
// Thread-safe: one mutex per table serialises lookups and updates.
#ifndef PSCLUSTER_PS_CORE_HASH_TABLE_H_
#define PSCLUSTER_PS_CORE_HASH_TABLE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "protos/ps.pb.h"
#include "ps/core/optimizer.h"
#include "ps/core/row_initializer.h"

namespace prometheus {
class Counter;
}  // namespace prometheus

namespace pscluster {

class HashTable {
 public:
  // Most rows a table holds (uint32 arena slots); also the bound of an
  // "unbounded" (max_rows = 0) table.
  static constexpr int64_t kMaxRows = (int64_t{1} << 32) - 1;

  struct Options {
    // The variable's name; a shard's "<table>/part_<i>" is fine (rows are
    // initialised by the logical name).
    std::string name;
    // Row width. Must be >= 1.
    int64_t dim = 0;
    // Most rows held; 0 means kMaxRows.
    int64_t max_rows = 0;
    EvictionPolicy eviction = LFU;
    // Row initializer. REQUIRES: ValidateInitializer OK.
    InitializerProto initializer;
    // Updates rows and defines their slots. Not owned; must be non-null and
    // outlive the table.
    const Optimizer* optimizer = nullptr;
    // Rows sampled per eviction. Must be >= 1.
    int eviction_samples = 16;
    // If set, incremented once per eviction. Not owned; must outlive the table.
    prometheus::Counter* evictions_counter = nullptr;
  };

  // INVALID_ARGUMENT naming the table for dim < 1, max_rows outside
  // [0, kMaxRows], or eviction_samples < 1. REQUIRES: optimizer non-null.
  static absl::StatusOr<std::unique_ptr<HashTable>> Create(Options options);

  HashTable(const HashTable&) = delete;
  HashTable& operator=(const HashTable&) = delete;

  int64_t dim() const { return options_.dim; }
  const std::string& name() const { return options_.name; }

  // Bytes one resident row counts for (MemoryBudget, Stats): its weights
  // and its optimizer slots, dim * 4 * (1 + slots).
  int64_t row_bytes() const {
    return options_.dim * static_cast<int64_t>(sizeof(float)) *
           (1 + static_cast<int64_t>(slot_initial_values_.size()));
  }

  // Rows that can still be added before the table is full (max_rows, or
  // kMaxRows): past that, new ids evict instead of growing the table.
  int64_t FreeRows() const ABSL_LOCKS_EXCLUDED(mu_);

  // How many rows a Lookup or ApplyGradients of `ids` would add now: its
  // distinct ids not resident, at most FreeRows(). Touches nothing. Since a
  // table only grows until it is full and evicts only once full, a later call
  // with the same ids adds at most this many rows, whatever runs in between.
  int64_t RowsToAdd(absl::Span<const uint64_t> ids) const ABSL_LOCKS_EXCLUDED(mu_);

  // Copies the row of ids[i] to out[i * dim, (i + 1) * dim), creating missing
  // rows (which may evict others). Repeated ids are fine and get equal rows.
  // Returns the rows added to the table (not those that replaced an evicted
  // row). REQUIRES: out.size() == ids.size() * dim.
  int64_t Lookup(absl::Span<const uint64_t> ids, absl::Span<float> out) ABSL_LOCKS_EXCLUDED(mu_);

  // Applies one gradient with the optimizer: row i of `grads` updates the row
  // of ids[i] (created first if missing) and its slots; no other row changes.
  // `step` is the variable's 1-based update count (Adam's bias correction);
  // `global_step`, the job's step this update belongs to, picks the
  // learning rate of a schedule (Optimizer::ApplyRowsAt; -1: the configured
  // rate), times `rate_scale` (a staleness-aware rate). Returns the rows
  // added, as Lookup.
  // REQUIRES: ids are distinct; grads.size() == ids.size() * dim.
  int64_t ApplyGradients(int64_t step, absl::Span<const uint64_t> ids,
                         absl::Span<const float> grads, int64_t global_step = -1,
                         float rate_scale = 1.0f) ABSL_LOCKS_EXCLUDED(mu_);

  // True if `id` has a resident row. Touches nothing.
  bool Contains(uint64_t id) const ABSL_LOCKS_EXCLUDED(mu_);

  // Resident rows in arena order, with their optimizer slots and eviction
  // state (checkpoints).
  struct Rows {
    std::vector<uint64_t> ids;
    std::vector<float> values;              // ids.size() * dim
    std::vector<std::vector<float>> slots;  // one per optimizer slot, as values
    std::vector<uint32_t> touches;          // LFU touch counts
    std::vector<uint64_t> ages;             // table calls since the last touch
  };

  // Copies rows [first, first + count) of the arena (clamped to the rows
  // held). Touches nothing.
  Rows ExportRows(int64_t first, int64_t count) const ABSL_LOCKS_EXCLUDED(mu_);

  // Every resident row's id and weights, in arena order (ids[i]'s row is
  // values[i * dim, (i + 1) * dim)), copied under one lock: what a lookup of
  // ids[i] would return now, without the optimizer slots or eviction state
  // ExportRows adds. Touches nothing (no row is created or aged).
  void ExportValues(std::vector<uint64_t>* ids, std::vector<float>* values) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Fills an empty table with `rows` (a restore) and adds `evicted` (rows the
  // caller dropped to fit max_rows) to the eviction count. A row's last touch
  // is set `ages[i]` calls before now, so AGE keeps its order.
  // FAILED_PRECONDITION if the table is not empty; INVALID_ARGUMENT naming
  // the table for mismatched sizes, more rows than max_rows, or a repeated id.
  absl::Status Load(Rows rows, int64_t evicted) ABSL_LOCKS_EXCLUDED(mu_);

  struct Stats {
    int64_t rows = 0;             // resident rows
    int64_t evictions = 0;        // rows evicted so far
    int64_t parameter_bytes = 0;  // rows * dim * 4
    int64_t slot_bytes = 0;       // rows * dim * 4 * number of slots
  };
  Stats GetStats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  explicit HashTable(Options options);

  // Returns the arena slot of `id`, creating its row if missing, and records
  // the touch at `tick`. Calls `before_evicting_current` before it reuses the
  // slot of a row already touched at `tick`.
  uint32_t Touch(uint64_t id, uint64_t tick, absl::FunctionRef<void()> before_evicting_current)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The slot to evict. REQUIRES: the table is not empty.
  uint32_t PickVictim(uint64_t tick) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends an empty row to every arena and returns its slot.
  uint32_t AppendRow() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t NextRandom() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const int64_t capacity_;  // max_rows, or kMaxRows
  const RowInitializer initializer_;
  const std::vector<float> slot_initial_values_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, uint32_t> slot_of_ ABSL_GUARDED_BY(mu_);
  // Arenas, all indexed by slot: weights and each optimizer slot hold dim
  // floats per row; the others one entry per row.
  std::vector<float> values_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<float>> slots_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> ids_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> touches_ ABSL_GUARDED_BY(mu_);  // saturating
  std::vector<uint64_t> last_touch_ ABSL_GUARDED_BY(mu_);
  uint64_t clock_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t evictions_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t rng_state_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_CORE_HASH_TABLE_H_
