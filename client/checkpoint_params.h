// The trained values in a job's checkpoint directory, as the model reads
// them: what `psctl export` turns into a model file, and what its tests run
// through worker/core's Model to get pscluster's own predictions.
//
// RestoredCheckpoint reads the spec from the job log (CheckpointJobSpec),
// restores the newest good checkpoint into in-process VariableStores, one per
// PS of the layout that wrote it, through CheckpointManager::RestoreLatest
// (the coordinator's own recovery path, as `psctl checkpoint verify`), and
// then reads them three ways:
//  - ReadDense: every whole-read variable, pulled through worker/core's
//    ParamRouter, which assembles partitioned variables from their shards —
//    the exact tensors a worker's eval step sees;
//  - ReadTables: every embedding table whole — a fixed vocabulary's
//    [vocab_size, dim] rows pulled through the ParamRouter (so the
//    partitioner's row shards are assembled as a worker sees them), a hash
//    table's every key and row, from each PS's shard (VariableStore::
//    ReadTable, which creates nothing);
//  - Lookup: the rows of given ids, exactly as a worker's step pulls them
//    (ParamRouter + Pull), so a hash key the table does not hold is created
//    from the table's initializer, as a PS creates it.
//
// Runs entirely in this process (no gRPC); thread-compatible.
#ifndef PSCLUSTER_CLIENT_CHECKPOINT_PARAMS_H_
#define PSCLUSTER_CLIENT_CHECKPOINT_PARAMS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/embedding_table.h"
#include "common/job_spec.h"
#include "common/model_variables.h"
#include "common/ps_client.h"
#include "common/tensor.h"
#include "protos/ps.pb.h"

namespace pscluster {

class InProcessPsClient;
class ParamRouter;
class VariableStore;

class RestoredCheckpoint {
 public:
  // Restores the newest checkpoint in `dir` that restores. NOT_FOUND if
  // `dir` is not a directory, holds no committed checkpoint or no job log
  // (the message says which); INVALID_ARGUMENT if the logged spec does not
  // parse; the restore's error (DATA_LOSS, ...) if no checkpoint restores.
  static absl::StatusOr<std::unique_ptr<RestoredCheckpoint>> Open(const std::string& dir);
  ~RestoredCheckpoint();

  const JobSpec& spec() const { return spec_; }          // as the job log records it
  const std::string& job_id() const { return job_id_; }  // the job the spec came from
  int64_t checkpoint_id() const { return checkpoint_id_; }
  // ModelVariables(spec()).
  const std::vector<VariableSpecProto>& variables() const { return variables_; }

  // One tensor per variables() entry: whole-read variables (kernels, biases,
  // batch norm's parameters and moving statistics) hold their values;
  // embedding tables are left empty (see ReadTables). Errors of the pull.
  absl::StatusOr<std::vector<Tensor>> ReadDense();

  // One EmbeddingTable per categorical feature, in spec order, holding what
  // the stores hold now: right after Open, the checkpoint's rows (a hash
  // table's include the keys eval looked up before the checkpoint, with the
  // initializer's values). Creates no row. Errors of the pull or the read.
  absl::StatusOr<std::vector<EmbeddingTable>> ReadTables();

  // A worker step's lookup: rows[t] = [unique_ids[t].size(), dim of table
  // t], row u for unique_ids[t][u]. Hash keys the stores do not hold are
  // created from the table's initializer, as a PS does; `created` (may be
  // null) is set to how many. INVALID_ARGUMENT for an id outside a fixed
  // vocabulary. REQUIRES: unique_ids.size() == number of categorical
  // features; each table's ids distinct.
  absl::Status Lookup(const std::vector<std::vector<uint64_t>>& unique_ids,
                      std::vector<Tensor>* rows, int64_t* created);

 private:
  RestoredCheckpoint();
  // Pulls `unique_ids` (and the whole-read variables if `with_dense`) as one
  // worker step: one PullRequest per PS, read back through the router.
  // `params` may be null without `with_dense`.
  absl::Status Pull(bool with_dense, const std::vector<std::vector<uint64_t>>& unique_ids,
                    std::vector<Tensor>* params, std::vector<Tensor>* rows);
  // Rows held by every hash-table shard of every store.
  absl::StatusOr<int64_t> HashRows();

  JobSpec spec_;
  std::string job_id_;
  int64_t checkpoint_id_ = 0;
  std::vector<VariableSpecProto> variables_;
  VariablePlan plan_;
  std::vector<std::unique_ptr<VariableStore>> stores_;
  std::vector<std::unique_ptr<InProcessPsClient>> clients_;
  std::vector<PsClient*> ps_;
  std::unique_ptr<ParamRouter> router_;
};

struct CheckpointParams {
  JobSpec spec;               // as the job log records it
  std::string job_id;         // the job the spec came from
  int64_t checkpoint_id = 0;  // the checkpoint restored
  // ModelVariables(spec), and RestoredCheckpoint::ReadDense: one tensor per
  // variable, embedding tables empty.
  std::vector<VariableSpecProto> variables;
  std::vector<Tensor> params;
  // RestoredCheckpoint::ReadTables: one per categorical feature.
  std::vector<EmbeddingTable> tables;
};

// Open, ReadDense and ReadTables in one: everything a model file needs.
// Errors as those.
absl::StatusOr<CheckpointParams> LoadCheckpointParams(const std::string& dir);

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_CHECKPOINT_PARAMS_H_
