// AppliedUpdateLedger: the exactly-once record of one VariableStore — which
// update keys (closure_id, step) its pushes applied, the pruning watermark
// below which whole closures are retired, and the count of keyed pushes
// applied and dropped as duplicates (StatsResponse.applied_steps /
// duplicate_steps, the coordinator's step accounting).
//
// A push whose key the ledger holds, or whose closure is below the
// watermark, is a duplicate. The ledger is part of the state a checkpoint
// saves (one AppliedKeys record, docs/checkpoint_format.md) and a restore
// replaces; SavedLedgers merges the records of the files a restore reads.
//
// The ledger only records: the store decides when a push may claim its key
// (after every check, so a claimed key is always applied) and keeps a save
// from seeing a key claimed but not yet applied (its state lock).
#ifndef PSCLUSTER_PS_CORE_APPLIED_UPDATE_LEDGER_H_
#define PSCLUSTER_PS_CORE_APPLIED_UPDATE_LEDGER_H_

#include <cstdint>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "protos/checkpoint_data.pb.h"

namespace pscluster {

// Thread-safe: one mutex guards everything; no call blocks on anything else.
class AppliedUpdateLedger {
 public:
  // (closure_id, step).
  using Key = std::pair<int64_t, int64_t>;

  // Everything the ledger holds: what a checkpoint saves and Restore loads.
  struct State {
    absl::flat_hash_set<Key> keys;
    // Closures below this id are retired: their keys are gone and any push
    // of theirs is a duplicate. 0: none retired.
    int64_t retired_below = 0;
    // Keyed pushes applied, and dropped as duplicates, so far.
    int64_t applied_steps = 0;
    int64_t duplicate_steps = 0;
  };

  // What Stats reports, read at one instant.
  struct Counts {
    int64_t applied_steps = 0;
    int64_t duplicate_steps = 0;
    int64_t held_keys = 0;
  };

  // What RetireBelow did.
  struct Pruned {
    int64_t pruned = 0;     // keys forgotten by this call
    int64_t remaining = 0;  // keys still held
  };

  AppliedUpdateLedger() = default;
  AppliedUpdateLedger(const AppliedUpdateLedger&) = delete;
  AppliedUpdateLedger& operator=(const AppliedUpdateLedger&) = delete;

  // Records the key of a push about to be applied. True when the key is new:
  // it is recorded and counted as an applied step, and the caller must apply
  // the push. False for a duplicate (the key was claimed before, or its
  // closure is retired), counted as one: the caller applies nothing. Of
  // concurrent claims of one key exactly one returns true.
  bool Claim(int64_t closure_id, int64_t step) ABSL_LOCKS_EXCLUDED(mu_);

  // True when a push with this key would be a duplicate: the key was claimed,
  // or its closure is retired.
  bool Contains(int64_t closure_id, int64_t step) const ABSL_LOCKS_EXCLUDED(mu_);

  // Counts a keyed push dropped as a duplicate by the caller itself (a
  // synchronous share of a step already applied), as Claim counts its own.
  void CountDuplicate() ABSL_LOCKS_EXCLUDED(mu_);

  // Retires every closure below `closure_id`: forgets their keys and from
  // then on answers their pushes as duplicates. The watermark only rises; a
  // lower or equal `closure_id` forgets nothing.
  Pruned RetireBelow(int64_t closure_id) ABSL_LOCKS_EXCLUDED(mu_);

  Counts GetCounts() const ABSL_LOCKS_EXCLUDED(mu_);

  // The checkpoint record: the keys (sorted by closure, then step), the
  // watermark and the counters.
  AppliedKeys ToProto() const ABSL_LOCKS_EXCLUDED(mu_);

  // Replaces everything the ledger holds by `state` (a restore).
  void Replace(State state) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_set<Key> keys_ ABSL_GUARDED_BY(mu_);
  int64_t retired_below_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t applied_steps_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t duplicate_steps_ ABSL_GUARDED_BY(mu_) = 0;
};

// The AppliedKeys records of the checkpoint files one restore reads, merged
// into the ledger the restored store starts with. Thread-compatible.
class SavedLedgers {
 public:
  // Adds the record of a file saved by PS `ps_index`
  // (CheckpointDataHeader.ps_index). INVALID_ARGUMENT ("closure_ids and
  // steps differ in length") for a malformed record, which adds nothing.
  absl::Status Add(int ps_index, const AppliedKeys& record);

  // The ledger a store restored as PS `ps_index` starts with: the union of
  // the keys, the highest watermark, and the counters of the file that PS
  // index saved (the same layout restored), else the highest of any file
  // (every step reaches every PS that holds a dense variable, so their
  // counts agree). Empty when nothing was added.
  AppliedUpdateLedger::State Merged(int ps_index) &&;

 private:
  AppliedUpdateLedger::State merged_;  // counters unset until Merged
  // Each file's counters (applied, duplicate) by the PS that saved it.
  absl::flat_hash_map<int, std::pair<int64_t, int64_t>> counters_by_ps_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_CORE_APPLIED_UPDATE_LEDGER_H_
