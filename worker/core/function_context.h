// FunctionContext: what a function scheduled by a ClusterCoordinator
// (api/pscluster/cluster_coordinator.h) sees of the cluster while it runs on
// a worker: the program's variables on the PS tasks, read and updated through
// the worker's PsClients (the same clients, and data plane, as YAML jobs).
//
//  * Pull reads whole variables (a partitioned one's shards assembled along
//    axis 0); PullRows reads only the named rows of a variable (an embedding
//    lookup: never the whole table). One request per PS per call.
//  * A hash table (VariableKind HASH_TABLE, a bounded dynamic vocabulary,
//    one shard per PS) is read and updated only by rows, its ids any int64
//    keys (as uint64, shard HashTableShard(id, num_ps)); a row is created
//    with the initializer on first touch, and past max_rows per shard the
//    PS evicts by the table's policy.
//  * Push / PushRows are ONE step each: one PushRequest per PS holding a
//    piece, keyed UpdateKey{closure id, step index} under the closure's
//    lease, step indices counting the closure's pushes from 0. A retried
//    closure (another worker, after a failure) pushes the same keys again,
//    and the PS drops the steps it had already applied: every update is
//    applied once, provided the function pushes in the same order each time
//    it runs (it is deterministic in its pushes, as TF's retried closures
//    must be).
//
// Two kinds of errors come out of these calls. A call the program got wrong
// (an unknown variable, a gradient of the wrong shape, a row outside the
// variable, more pushes than the lease covers) is INVALID_ARGUMENT naming
// it: the function's own error. A PS that failed (unreachable, restarted) is
// the cluster's: it is recorded (cluster_error()) and the closure fails with
// it, and is retried, whatever the function returns.
//
// Thread-compatible: one context per running closure, used by its thread.
#ifndef PSCLUSTER_WORKER_CORE_FUNCTION_CONTEXT_H_
#define PSCLUSTER_WORKER_CORE_FUNCTION_CONTEXT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/ps_client.h"
#include "common/tensor.h"
#include "protos/ps.pb.h"
#include "protos/worker.pb.h"

namespace pscluster {

// A program job's variables and where their pieces live: built once per
// SetupJob, shared (read-only, thread-safe) by every closure's context.
class VariableTable {
 public:
  // One variable or shard on one PS: rows [row_offset, row_offset + rows).
  struct Piece {
    std::string name;
    int ps = 0;
    int64_t row_offset = 0;
    int64_t rows = 0;
  };
  struct Variable {
    VariableSpecProto spec;
    // A hash table's is [dim]; its pieces are its shards in shard order.
    bool hash_table = false;
    Shape shape;
    int64_t row_elems = 1;  // elements per row of axis 0 (all of a scalar)
    std::vector<Piece> pieces;
  };

  // INVALID_ARGUMENT, naming the variable, when one is not float32, a hash
  // table is not [dim] or not one shard per PS, a variable has no placement
  // or two, a PS index outside [0, num_ps), or shards that
  // do not cover its rows contiguously from row 0.
  static absl::StatusOr<VariableTable> Create(const std::vector<VariableSpecProto>& variables,
                                              const std::vector<VariablePlacementProto>& placement,
                                              int num_ps);

  // Null for an unknown name.
  const Variable* Find(const std::string& name) const;
  // The names, for messages.
  std::string Names() const;
  int num_ps() const { return num_ps_; }

 private:
  int num_ps_ = 0;
  absl::flat_hash_map<std::string, Variable> variables_;
};

class FunctionContext {
 public:
  // Not owned: `table`, `ps` (PS task i at ps[i]); they outlive the context.
  // `closure`: its job, id, lease and lease steps key every call.
  FunctionContext(const VariableTable* table, const std::vector<PsClient*>* ps,
                  const RunClosureRequest& closure);

  // The variables named, each whole (shape as declared). One PullRequest
  // per PS. INVALID_ARGUMENT for an unknown name or a hash table; a PS's
  // error as it came.
  absl::StatusOr<std::vector<Tensor>> Pull(const std::vector<std::string>& variables);
  absl::StatusOr<Tensor> Pull(const std::string& variable);
  // Rows `ids` of `variable` (rank >= 1), as [ids.size(), row elements...]:
  // row k is row ids[k] (duplicates allowed). INVALID_ARGUMENT for an
  // unknown variable, a scalar, or an id outside [0, shape[0]). A hash
  // table's rows come as [ids.size(), dim], for any ids.
  absl::StatusOr<Tensor> PullRows(const std::string& variable, absl::Span<const int64_t> ids);

  // One step: each (variable, gradient) applied by the variable's optimizer,
  // gradients shaped as their variables. INVALID_ARGUMENT for an unknown
  // variable, a hash table (PushRows), a variable named twice, a wrong shape, or a step past the
  // lease (lease_steps); nothing is sent then.
  absl::Status Push(const std::vector<std::pair<std::string, Tensor>>& gradients);
  // One step as Push, and the variables `pull` (whole, as Pull) read in the
  // same round trip: each PS holding a piece of the step answers its pieces
  // of them as they are after applying it (also when the step was applied
  // before, by an earlier run of the closure), so that the function's next
  // Pull costs no round trip of its own (the trainer's fused pull, ps-lite's
  // PushPull). A PS the step does not reach is pulled after the pushes.
  // Errors as Push and Pull; nothing is sent for a bad gradient or name.
  absl::StatusOr<std::vector<Tensor>> PushAndPull(
      const std::vector<std::pair<std::string, Tensor>>& gradients,
      const std::vector<std::string>& pull);
  // A gradient in memory the caller keeps (a NumPy array's): encoded into
  // the request straight from there.
  struct GradientView {
    std::string name;
    Shape shape;
    absl::Span<const float> values;  // NumElements(shape) of them
  };
  // PushAndPull of gradients in the caller's memory (`pull` may be empty:
  // a Push).
  absl::StatusOr<std::vector<Tensor>> PushAndPull(absl::Span<const GradientView> gradients,
                                                  const std::vector<std::string>& pull);
  // One step: the gradients of rows `ids` of `variable` (row k's gradient is
  // row k of `row_gradients`, [ids.size(), row elements...]); a repeated
  // id's gradients are summed. Errors as Push, and for ids as PullRows.
  absl::Status PushRows(const std::string& variable, absl::Span<const int64_t> ids,
                        const Tensor& row_gradients);

  const std::string& args() const { return closure_.function_args(); }
  int64_t closure_id() const { return closure_.closure_id(); }
  // Steps pushed so far (each Push / PushRows call, duplicates included).
  int64_t steps() const { return steps_; }
  // The first PS failure of a call, OK if none: the closure fails with it.
  const absl::Status& cluster_error() const { return cluster_error_; }

 private:
  // Records a PS error as the cluster's and returns it.
  absl::Status Cluster(absl::Status s);
  // The next step's UpdateKey, or INVALID_ARGUMENT past the lease.
  absl::StatusOr<UpdateKey> NextStep();
  // Sends push[p] to every PS with work, in parallel, answers in
  // pushed_[p]; the first error.
  absl::Status SendPushes(std::vector<PushRequest>* push);
  // Push's requests for `gradients` (its checks), keyed by the next step.
  absl::StatusOr<std::vector<PushRequest>> PushRequests(absl::Span<const GradientView> gradients);
  // The pull of whole `vars`: their pieces' names added to (*pull)[p].
  void AddPulls(absl::Span<const VariableTable::Variable* const> vars,
                std::vector<PullRequest>* pull) const;
  // Sends (*pull)[p] to every PS with names and not `skip[p]`, answers in
  // pulled_[p].
  absl::Status SendPulls(std::vector<PullRequest>* pull, const std::vector<bool>& skip);
  // `vars` assembled from pulled_, the answers to AddPulls' requests.
  absl::StatusOr<std::vector<Tensor>> ReadPulls(
      absl::Span<const VariableTable::Variable* const> vars);
  UpdateKey LeaseKey() const;

  const VariableTable* const table_;
  const std::vector<PsClient*>* const ps_;
  const RunClosureRequest& closure_;
  int64_t steps_ = 0;
  absl::Status cluster_error_;
  // The answers of every call, reused from one to the next: a tensor is
  // read into the buffer its last answer left there (ps/service/
  // data_plane_wire.h), as the trainer's per-step buffers are.
  std::vector<PushResponse> pushed_;
  std::vector<PullResponse> pulled_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_FUNCTION_CONTEXT_H_
