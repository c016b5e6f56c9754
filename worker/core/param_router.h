// ParamRouter: where a worker reads and writes each model variable, and how
// the per-PS pieces map back to the logical tensors the model sees.
//
// Two kinds of variables (common/model_variables.h):
//  * Whole-read variables (dense kernels and biases), unpartitioned on one PS
//    or split along axis 0 into contiguous row shards on several. A pull
//    names every shard; ReadPull assembles the shards into one logical
//    tensor and BuildPush splits its gradient back into shard gradients.
//  * Embedding tables ("tables", in ModelVariables order, i.e. the model's
//    categorical features in spec order), never read whole. For a batch the
//    worker dedupes the ids (DedupeIds), and the router maps each unique id
//    to (PS, shard name, id on that shard):
//      - a fixed vocabulary, unpartitioned: (its PS, its name, id);
//      - a fixed vocabulary in row shards: the shard holding row `id`
//        (ShardForRow), with the LOCAL row id - row_offset;
//      - a hash table: shard HashTableShard(id, n) ("<name>/part_<i>"),
//        with the id itself as the key.
//    ReadPull places the returned rows at the unique ids' positions, so the
//    model sees rows in request order whatever the order of the ids and
//    however the PS order their shards (TF returns rows in shard order when
//    ids are unsorted; this does not). BuildPush sends each unique row's
//    gradient back to the same (PS, shard, id), as a SparseGradient with
//    distinct ids.
// Every step makes exactly one PullRequest and one PushRequest per PS, with
// the dense names / gradients and the lookups / sparse gradients fused.
//
// Thread-safety: a ParamRouter is immutable after Create and thread-safe;
// each RoutedStep is used by one thread at a time.
#ifndef PSCLUSTER_WORKER_CORE_PARAM_ROUTER_H_
#define PSCLUSTER_WORKER_CORE_PARAM_ROUTER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tensor.h"
#include "protos/ps.pb.h"
#include "protos/worker.pb.h"

namespace pscluster {

// The distinct values of `ids` in first-occurrence order (`unique`), and for
// each ids[k] its position in `unique` (`index`, same length as ids).
void DedupeIds(absl::Span<const uint64_t> ids, std::vector<uint64_t>* unique,
               std::vector<int64_t>* index);

// One step's requests, and what ReadPull/BuildPush need to map the answers
// back. Reused across steps (PlanStep resets it).
struct RoutedStep {
  // Where one unique id's row comes back: pull[ps].lookups(lookup), row pos.
  struct Slot {
    int ps = 0;
    int lookup = 0;
    int64_t pos = 0;
  };
  // One request per PS; a PS with nothing to do has an empty request, which
  // the caller skips (HasWork).
  std::vector<PullRequest> pull;
  bool with_dense = false;
  // Per table: the unique ids planned, and where each one's row comes back.
  std::vector<int64_t> unique_count;
  std::vector<std::vector<Slot>> slots;
  // Per PS, per lookup: the table it reads.
  std::vector<std::vector<int>> lookup_table;
};

// True if `request` names a variable or a lookup.
bool HasWork(const PullRequest& request);
bool HasWork(const PushRequest& request);

class ParamRouter {
 public:
  // Checks `placement` against the model's `variables` (ModelVariables
  // order) and `num_ps`. INVALID_ARGUMENT, naming the variable, when a
  // variable has no placement or two, a PS index is outside [0, num_ps), a
  // partitioned variable's shards are not contiguous from row 0 or do not
  // cover all its rows, a shard has no name, or a hash table has no shards.
  static absl::StatusOr<std::unique_ptr<ParamRouter>> Create(
      const std::vector<VariableSpecProto>& variables,
      const std::vector<VariablePlacementProto>& placement, int num_ps);

  int num_ps() const { return num_ps_; }
  // Number of embedding tables (row-accessed variables) and the row width
  // of table t.
  int num_tables() const { return static_cast<int>(tables_.size()); }
  int64_t row_width(int t) const { return tables_[t].dim; }
  // Index into `variables` of table t.
  int table_variable(int t) const { return tables_[t].var; }

  // Plans one step: the names of every whole-read variable (shards included)
  // if `with_dense`, and a lookup of `unique_ids[t]` in table t for every
  // table. Each (PS, shard) gets at most one RowIds per request.
  // INVALID_ARGUMENT, naming the table, for an id outside a fixed
  // vocabulary. REQUIRES: unique_ids.size() == num_tables(); the ids of a
  // table are distinct (DedupeIds).
  absl::Status PlanStep(bool with_dense, const std::vector<std::vector<uint64_t>>& unique_ids,
                        RoutedStep* step) const;

  // Reads the answers to step.pull ((*responses)[ps], one per PS; those for
  // skipped requests are ignored). If step.with_dense, writes every
  // whole-read variable into params[v] (index as `variables`, resized to
  // fit; embedding entries untouched): an unpartitioned variable's bytes are
  // swapped out of its answer, not copied, so that answer's tensor then
  // holds the tensor's previous bytes (same size, reused by the next parse).
  // Writes rows[t] = [unique_count[t], row_width(t)], row u holding unique id
  // u's row. INTERNAL when a response does not answer its request (count,
  // shape or dtype).
  absl::Status ReadPull(const RoutedStep& step, std::vector<PullResponse>* responses,
                        std::vector<Tensor>* params, std::vector<Tensor>* rows) const;

  // Builds one PushRequest per PS into `push` (resized to num_ps()): the
  // whole-read variables' gradients grads[v] (split into shard gradients)
  // and, per table, the rows of row_grads[t] ([unique_count[t], width]) as
  // SparseGradients to the shards and ids the step read them from.
  // REQUIRES: step.with_dense and grads shaped as the variables, or
  // `grads` empty to push no dense gradient; row_grads match the step.
  // A whole (unpartitioned) variable's gradient is not copied when `push`
  // still holds the previous step's requests: the gradient's bytes move into
  // the request and (*grads)[v] takes that request's old buffer of the same
  // size, so its values are then stale (Model::TrainStep overwrites them).
  void BuildPush(const RoutedStep& step, std::vector<Tensor>* grads,
                 const std::vector<Tensor>& row_grads, std::vector<PushRequest>* push) const;

 private:
  struct Piece {  // one shard (or the whole) of a variable
    std::string name;
    int ps = 0;
    int64_t row_offset = 0;
    int64_t rows = 0;
  };
  struct Dense {
    int var = 0;
    Shape shape;
    int64_t row_elems = 0;  // elements per row (axis 0)
    std::vector<Piece> pieces;
    bool partitioned = false;
  };
  struct Table {
    int var = 0;
    std::string name;
    bool hashed = false;
    int64_t vocab = 0;  // fixed vocabulary only
    int64_t dim = 0;
    std::vector<Piece> pieces;  // one unpartitioned piece, row shards or hash shards
  };

  ParamRouter() = default;

  int num_ps_ = 0;
  std::vector<Dense> dense_;
  std::vector<Table> tables_;
  // Per PS: (dense index, piece index) in the order PlanStep names them.
  std::vector<std::vector<std::pair<int, int>>> dense_by_ps_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_PARAM_ROUTER_H_
