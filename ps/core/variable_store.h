// VariableStore: the variables one PS task holds — dense tensors and hash
// tables (protos/ps.proto VariableKind) — and the optimizer step applied to
// them when gradients arrive.
//
// A rank-2 DENSE variable (an embedding table or one shard of it) and a
// HASH_TABLE can also be read and updated by row: PullRequest.lookups gathers
// rows, PushRequest.sparse applies the optimizer to the given rows and their
// slot rows only. A DENSE variable's row ids are local row numbers in
// [0, shape[0]); a hash table's are uint64 keys, and a key's row is created
// on first touch (see hash_table.h).
//
// Exactly-once updates: a push carrying an UpdateKey (closure_id, step) is
// applied at most once; a repeat is acknowledged with duplicate = true and
// changes nothing. The set of applied keys (AppliedUpdateLedger,
// applied_update_ledger.h) is part of the state a checkpoint saves and a
// restore loads, so after a rollback the steps past the checkpoint apply
// again. Every push is checked whole before anything of it is applied
// (push_validation.h).
//
// Checkpoints (docs/checkpoint_format.md): Save writes every variable as
// slices of its logical variable (a shard knows its slice from
// VariableSpecProto.full_shape / row_offset) plus the applied keys; Restore
// replaces the whole state with a new layout filled from any set of saved
// files, whatever layout wrote them.
//
// The API is proto-level so each ParameterServer RPC is one call here; the
// store knows nothing of gRPC. Training is asynchronous: there is no lock
// across variables. A state lock is held shared by every call but Save and
// Restore, which hold it exclusively (so a save is a consistent snapshot and
// a restore swaps the state in at once). A reader-mostly map lock guards the
// name -> variable map (written by CreateVariables and Restore) and each
// variable has its own mutex, so pushes to different variables run in
// parallel and a pull copies each variable under its lock. A hash table
// additionally locks itself, as a lookup may create and evict rows. Lock
// order: state_mu_, map_mu_, a variable's mu, its table's. The ledger of
// applied keys locks itself, and is called holding state_mu_ or no lock.
//
// Thread-safe.
#ifndef PSCLUSTER_PS_CORE_VARIABLE_STORE_H_
#define PSCLUSTER_PS_CORE_VARIABLE_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "protos/ps.pb.h"
#include "ps/core/applied_update_ledger.h"

namespace prometheus {
class Counter;
class Registry;
}  // namespace prometheus

namespace pscluster {
class MemoryBudget;  // memory_budget.h

namespace variable_store_internal {
struct Variable;     // variable_store_internal.h
struct CheckedPush;  // push_validation.h
}  // namespace variable_store_internal

class VariableStore {
 public:
  struct Options {
    // Largest variable accepted, in elements. Default 2^28 float32 = 1 GiB,
    // the most one gRPC message carries.
    int64_t max_variable_elements = int64_t{1} << 28;
    // If set, the store exports pscluster_ps_* counters here (shared, so the
    // registry may outlive or be outlived by the store).
    std::shared_ptr<prometheus::Registry> registry;
    // If set, the PS's memory limit, shared by every job's store: the
    // parameter and slot bytes of variables and hash-table rows are reserved
    // here before they are allocated, and released when the store frees
    // them (at the latest when it is destroyed). Null: no limit.
    std::shared_ptr<MemoryBudget> memory_budget;
    // The directory checkpoint names (SaveRequest.name, RestoreRequest
    // files' names) are resolved under (common/confined_path.h); a name whose
    // real path leaves it is refused. Empty: Save and Restore are refused
    // (FAILED_PRECONDITION naming --checkpoint_root).
    std::string checkpoint_root;
  };

  explicit VariableStore(Options options);
  VariableStore() : VariableStore(Options()) {}
  ~VariableStore();

  VariableStore(const VariableStore&) = delete;
  VariableStore& operator=(const VariableStore&) = delete;

  // Creates every variable of `request`, initialised with its initializer,
  // or none of them. A variable that already exists with an identical spec
  // is left as it is and counted in response->existing.
  // INVALID_ARGUMENT: empty name, dtype not DT_FLOAT32, bad shape or too many
  //   elements, bad initializer or optimizer, unknown kind or eviction policy,
  //   a HASH_TABLE whose shape is not [dim] or max_rows out of range, a DENSE
  //   variable with max_rows; a name twice with different specs.
  // ALREADY_EXISTS: a name exists with a different shape, kind, max_rows,
  //   eviction, initializer or optimizer.
  // RESOURCE_EXHAUSTED: the parameter and slot bytes of the new variables
  //   would take the memory budget past its limit (the message names the
  //   bytes requested, held and the limit).
  absl::Status CreateVariables(const CreateVariablesRequest& request,
                               CreateVariablesResponse* response);

  // Copies the named variables into response->tensors, and for each lookup
  // the [n, dim] rows of its n ids (repeats included, in id order) into
  // response->rows, both in request order. Hash-table rows missing so far
  // are created. Everything is checked first; on error nothing is returned
  // and no row is created. response->version: the job's pushes applied here
  // before the values were read (docs/staleness.md).
  // NOT_FOUND naming the first unknown variable.
  // INVALID_ARGUMENT: a hash table in `names`; a lookup of a variable that is
  //   not rank-2 DENSE or HASH_TABLE, ids not a multiple of 8 bytes, or
  //   (DENSE) an id outside [0, rows).
  // RESOURCE_EXHAUSTED: hash-table rows the lookups would create would take
  //   the memory budget past its limit.
  absl::Status Pull(const PullRequest& request, PullResponse* response);

  // Applies each gradient, whole (gradients) or by row (sparse), with its
  // variable's optimizer; a sparse gradient changes only its rows and their
  // slots. Each gradient counts as one update of its variable, at the rate
  // of its optimizer's learning-rate schedule for the update key's
  // global_step when both exist, else at the configured learning_rate. All gradients
  // are checked first; if any is bad, none is applied and, with an
  // `update` key, the key is not recorded. With an `update` key that was
  // applied before, nothing is applied and response->duplicate is set; of
  // concurrent pushes with the same key exactly one applies.
  // NOT_FOUND: an unknown variable.
  // INVALID_ARGUMENT: a gradient's dtype, shape or byte count does not match
  //   its variable (the message names the variable and both shapes); a whole
  //   gradient for a hash table; a sparse gradient for a variable that is not
  //   rank-2 DENSE or HASH_TABLE, with ids not a multiple of 8 bytes, a
  //   repeated id (named), (DENSE) an id outside [0, rows), or rows not
  //   [n, dim]; an update key with step < 0 or global_step < 0; a dense gradient or sparse
  //   gradient rows holding a NaN or Inf (the message names the job, the
  //   variable and the first bad element's index; counted in
  //   pscluster_ps_rejected_pushes_total{reason="non_finite"}).
  // RESOURCE_EXHAUSTED: hash-table rows the sparse gradients (or the fused
  //   pull's lookups) would create would take the memory budget past its
  //   limit.
  // On any error the fused pull (request.pull) is not answered.
  // A push whose key carries pulled_version has its staleness measured (the
  // pushes applied since that version; response->staleness,
  // pscluster_ps_push_staleness) and, where the variable's optimizer has
  // inverse_staleness_lr, is applied at its rate / max(1, staleness).
  absl::Status Push(const PushRequest& request, PushResponse* response);

  // Push's checks of the gradients (not of the update key or the fused
  // pull), applying nothing: OK when Push would accept them.
  absl::Status CheckPush(const PushRequest& request);

  // True when the update key (closure_id, step) has been applied (or its
  // closure is below the pruning watermark): a push with it is a duplicate.
  bool KeyApplied(int64_t closure_id, int64_t step);
  // Counts a keyed push dropped as a duplicate elsewhere (a synchronous
  // share of a step already applied: SyncSteps), as Push counts its own.
  void CountDuplicate();

  // Per-variable kind, sizes, rows, evictions and update counts (sorted by
  // name), the total, and the keyed pushes applied and dropped as duplicates
  // by this process.
  absl::Status Stats(const StatsRequest& request, StatsResponse* response);

  // The rows hash table (or hash-table shard) `name` holds now: its keys,
  // and in `values` their rows ([keys, dim], row i for keys[i]), in the
  // table's own order, without optimizer slots. Creates, evicts and ages
  // nothing. Not an RPC: for tools that read a store of their own process
  // whole (client/checkpoint_params.h restores a checkpoint into one and
  // exports every row); a worker reads rows by key (Pull).
  // NOT_FOUND naming an unknown variable; INVALID_ARGUMENT when it is not
  // a HASH_TABLE.
  absl::Status ReadTable(const std::string& name, std::vector<uint64_t>* keys,
                         std::vector<float>* values);

  // Forgets the applied keys of every closure below
  // request.below_closure_id (a committed checkpoint covers them) and from
  // then on drops any push of such a closure as a duplicate; the watermark
  // only rises, and Save and Restore keep it. Returns the keys forgotten and
  // those still held. Never fails.
  absl::Status PruneKeys(const PruneKeysRequest& request, PruneKeysResponse* response);

  // Writes every variable (values, optimizer slots, update counters, hash
  // rows with their eviction state) and the applied update keys to the file
  // of checkpoint name request.name under options.checkpoint_root (via
  // "<path>.tmp.<pid>", fsync, rename, directory fsync) and returns its size
  // and XXH3-64 checksum. Blocks every other call while it runs.
  // FAILED_PRECONDITION: no checkpoint root. INVALID_ARGUMENT naming the
  // name: a malformed name, or one that leads outside the root. I/O errors
  // with the errno's code naming the file (NOT_FOUND for a missing
  // directory).
  absl::Status Save(const SaveRequest& request, SaveResponse* response);

  // Replaces everything this store holds by request.variables, filled from
  // the checkpoint files (names resolved as Save's, and refused alike: no
  // file is opened unless every name is good): each file is verified (size,
  // checksum) first; a
  // DENSE variable or shard (full_shape / row_offset) gets its rows, slots
  // and update counter (the largest of its logical variable's saved slices)
  // from whichever saved slices cover them; a HASH_TABLE shard
  // "<name>/part_<i>" gets the saved rows of <name> with
  // HashTableShard(id, num_ps) == i, with their slots. Rows past max_rows
  // are evicted by the table's policy (LFU: fewest touches; AGE: least
  // recently touched) and counted as evictions. Applied keys become the union
  // of the files'. All or nothing: on error the store is unchanged.
  // INVALID_ARGUMENT: num_ps < 1, a bad spec (as CreateVariables), a name
  //   twice, a HASH_TABLE not named "<name>/part_<i>" with i in [0, num_ps).
  // NOT_FOUND: a file is missing. DATA_LOSS naming the file: a size or
  //   checksum mismatch, a malformed record; or saved slices that do not
  //   cover all rows of a variable, or a hash id saved twice.
  // FAILED_PRECONDITION naming the variable: missing from the checkpoint,
  //   or saved with a different shape, row width or optimizer.
  // RESOURCE_EXHAUSTED: the new variables' bytes (checked before they are
  //   allocated) or their restored hash-table rows would take the memory
  //   budget past its limit; what this store held before counts as freed.
  absl::Status Restore(const RestoreRequest& request, RestoreResponse* response);

 private:
  using Variable = variable_store_internal::Variable;
  using CheckedPush = variable_store_internal::CheckedPush;

  // The file of checkpoint name `name` under options_.checkpoint_root
  // (ResolveCheckpointName: FAILED_PRECONDITION or INVALID_ARGUMENT), which
  // must be a data file ("*.data": INVALID_ARGUMENT otherwise).
  absl::StatusOr<std::string> CheckpointPath(const std::string& name) const;
  struct Metrics;
  struct CheckedPull;
  class RowReservation;
  using VariableMap = absl::flat_hash_map<std::string, std::unique_ptr<Variable>>;

  // Validates `request` (as CreateVariables) and builds its variables, not
  // yet initialised nor published. An exact duplicate within the request is
  // dropped unless `allow_duplicates` is false (INVALID_ARGUMENT).
  absl::StatusOr<std::vector<std::unique_ptr<Variable>>> NewVariables(
      const CreateVariablesRequest& request, bool allow_duplicates);
  // Runs the initializers (DENSE) or creates the empty tables (HASH_TABLE)
  // of the non-null entries of `vars`. Errors from HashTable::Create.
  absl::Status InitializeVariables(std::vector<std::unique_ptr<Variable>>& vars);

  // Push's checks of every gradient and sparse gradient against this
  // store's variables (push_validation.h; nothing applied), counting a
  // refusal for a non-finite value.
  absl::StatusOr<CheckedPush> CheckGradients(const PushRequest& request)
      ABSL_SHARED_LOCKS_REQUIRED(state_mu_) ABSL_LOCKS_EXCLUDED(map_mu_);

  // Pull's checks: every named variable and lookup resolved, the bytes of
  // the hash-table rows its lookups may create reserved in `rows`, nothing
  // read.
  absl::StatusOr<CheckedPull> CheckPull(const PullRequest& request, RowReservation* rows)
      ABSL_SHARED_LOCKS_REQUIRED(state_mu_) ABSL_LOCKS_EXCLUDED(map_mu_);
  // Reads a checked pull into `response` (appending), charging the rows it
  // created to `rows`.
  void ReadPull(const CheckedPull& pull, PullResponse* response, RowReservation* rows)
      ABSL_SHARED_LOCKS_REQUIRED(state_mu_);

  // Looks up `name`. NOT_FOUND if unknown. The pointer stays valid while the
  // caller holds state_mu_ (only Restore removes variables).
  absl::StatusOr<Variable*> Find(const std::string& name) ABSL_SHARED_LOCKS_REQUIRED(state_mu_)
      ABSL_LOCKS_EXCLUDED(map_mu_);

  const Options options_;
  std::unique_ptr<Metrics> metrics_;  // Null without a registry.
  // Bytes this store has reserved in options_.memory_budget (0 without
  // one): its variables and hash-table rows. Released by the destructor.
  std::atomic<int64_t> budget_bytes_{0};

  // Shared by every call, exclusive in Save and Restore. Variable pointers
  // taken under it stay valid until it is released.
  absl::Mutex state_mu_ ABSL_ACQUIRED_BEFORE(map_mu_);

  absl::Mutex map_mu_;
  VariableMap variables_ ABSL_GUARDED_BY(map_mu_);

  // (closure_id, step) of every keyed push applied (or being applied), the
  // pruning watermark and the applied / duplicate step counts. Locks itself;
  // a push claims its key under state_mu_ (shared), so Save and Restore
  // (exclusive) never see a key claimed but not yet applied.
  AppliedUpdateLedger ledger_;

  std::atomic<int64_t> applied_updates_{0};
  // Pushes applied and finished (PullResponse.version): a pull reads it
  // before its values, a push measures its staleness against it
  // (docs/staleness.md). Not saved: it counts from 0 again after a restart,
  // and a push whose pull came from before one reads as 0 stale.
  std::atomic<int64_t> push_version_{0};
  // Random per store (per PS process): tells a restarted PS from one that
  // kept its state (StatsResponse.incarnation).
  const uint64_t incarnation_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_CORE_VARIABLE_STORE_H_
