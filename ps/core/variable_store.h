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
// The API is proto-level so each ParameterServer RPC is one call here; the
// store knows nothing of gRPC. Training is asynchronous: there is no lock
// across variables. A reader-mostly map lock guards the name -> variable map
// (written only by CreateVariables; variables are never removed) and each
// variable has its own mutex, so pushes to different variables run in
// parallel and a pull copies each variable under its lock. A hash table
// additionally locks itself, as a lookup may create and evict rows.
//
// Thread-safe.
#ifndef PSCLUSTER_PS_CORE_VARIABLE_STORE_H_
#define PSCLUSTER_PS_CORE_VARIABLE_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "protos/ps.pb.h"

namespace prometheus {
class Counter;
class Registry;
}  // namespace prometheus

namespace pscluster {

class VariableStore {
 public:
  struct Options {
    // Largest variable accepted, in elements. Default 2^28 float32 = 1 GiB,
    // the most one gRPC message carries.
    int64_t max_variable_elements = int64_t{1} << 28;
    // If set, the store exports pscluster_ps_* counters here (shared, so the
    // registry may outlive or be outlived by the store).
    std::shared_ptr<prometheus::Registry> registry;
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
  absl::Status CreateVariables(const CreateVariablesRequest& request,
                               CreateVariablesResponse* response);

  // Copies the named variables into response->tensors, and for each lookup
  // the [n, dim] rows of its n ids (repeats included, in id order) into
  // response->rows, both in request order. Hash-table rows missing so far
  // are created. Everything is checked first; on error nothing is returned
  // and no row is created.
  // NOT_FOUND naming the first unknown variable.
  // INVALID_ARGUMENT: a hash table in `names`; a lookup of a variable that is
  //   not rank-2 DENSE or HASH_TABLE, ids not a multiple of 8 bytes, or
  //   (DENSE) an id outside [0, rows).
  absl::Status Pull(const PullRequest& request, PullResponse* response);

  // Applies each gradient, whole (gradients) or by row (sparse), with its
  // variable's optimizer; a sparse gradient changes only its rows and their
  // slots. Each gradient counts as one update of its variable. All gradients
  // are checked first; if any is bad, none is applied.
  // NOT_FOUND: an unknown variable.
  // INVALID_ARGUMENT: a gradient's dtype, shape or byte count does not match
  //   its variable (the message names the variable and both shapes); a whole
  //   gradient for a hash table; a sparse gradient for a variable that is not
  //   rank-2 DENSE or HASH_TABLE, with ids not a multiple of 8 bytes, a
  //   repeated id (named), (DENSE) an id outside [0, rows), or rows not
  //   [n, dim].
  absl::Status Push(const PushRequest& request, PushResponse* response);

  // Per-variable kind, sizes, rows, evictions and update counts (sorted by
  // name), and the total.
  absl::Status Stats(const StatsRequest& request, StatsResponse* response);

 private:
  struct Variable;
  struct Metrics;
  struct RowRequest;

  // Finds the variable of a lookup or sparse gradient and decodes its ids.
  // NOT_FOUND or INVALID_ARGUMENT as Pull and Push describe.
  absl::StatusOr<RowRequest> CheckRowRequest(const std::string& name, const std::string& ids,
                                             const char* what) ABSL_LOCKS_EXCLUDED(map_mu_);

  // Looks up `name`. NOT_FOUND if unknown. The pointer stays valid for the
  // store's lifetime (variables are never removed).
  absl::StatusOr<Variable*> Find(const std::string& name) ABSL_LOCKS_EXCLUDED(map_mu_);

  const Options options_;
  std::unique_ptr<Metrics> metrics_;  // Null without a registry.

  absl::Mutex map_mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Variable>> variables_ ABSL_GUARDED_BY(map_mu_);

  std::atomic<int64_t> applied_updates_{0};
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_CORE_VARIABLE_STORE_H_
