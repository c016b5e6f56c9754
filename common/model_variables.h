// The variables a job's model needs, and how they are laid out over the PS
// tasks.
//
// Both the coordinator (which creates them) and the worker (which reads them)
// derive them from the job spec through these functions, so the two always
// agree on names, shapes and shards.
#ifndef PSCLUSTER_COMMON_MODEL_VARIABLES_H_
#define PSCLUSTER_COMMON_MODEL_VARIABLES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "common/partitioner.h"
#include "protos/ps.pb.h"
#include "protos/worker.pb.h"

namespace pscluster {

// The logical variables, in creation order (as Keras builds the model):
// first one embedding table per categorical feature, "embedding/<feature>" —
// a DENSE [vocab_size, dim] variable for a fixed vocabulary, or a HASH_TABLE
// whose shape is the row shape [dim] — then, layer by layer:
//  - dense layer i: "dense_<i>/kernel" [fan_in, units], "dense_<i>/bias"
//    [units];
//  - conv2d layer i: "conv2d_<i>/kernel" [kernel_h, kernel_w, in_channels,
//    filters] (as Keras; row-major it is the [patch, filters] matrix that
//    multiplies im2col patches ordered (row, column, channel)), and
//    "conv2d_<i>/bias" [filters];
//  - batch_norm layer i over C channels: "batch_norm_<i>/gamma" (ones) and
//    "/beta" (zeros), trained by the job's optimizer, and the non-trainable
//    "/moving_mean" (zeros) and "/moving_variance" (ones), whose optimizer is
//    {type: moving_average, momentum: the layer's momentum}: a worker pushes
//    the batch's mean and (biased) variance in their place and the PS folds
//    them in, w = momentum * w + (1 - momentum) * batch_stat, under the
//    variable's lock. So every push, even from a stale pull, is one EMA step
//    of the current value, and the exactly-once key of the push makes a
//    retried step fold in once;
//  - cross layer i over an input of width d: "cross_<i>/kernel" [d, d] (with
//    rank r: "cross_<i>/kernel_u" [d, r] and "/kernel_v" [r, d]) and
//    "cross_<i>/bias" [d];
//  - with model.wide.dense: "wide/dense_kernel" [dense_inputs, 1] (zeros),
//    last;
//  - model.bottom layer i (DLRM): "bottom_<i>/kernel" [in, units] and
//    "bottom_<i>/bias" [units], after the embedding tables and before the
//    layers'.
// Kernels and biases carry the model's initializers and the job's optimizer.
std::vector<VariableSpecProto> ModelVariables(const JobSpec& spec);

// Width of the first layer's input: dense inputs plus every categorical
// feature's embedding_dim, except those of model.wide.categorical; with
// model.bottom, the width of the dot interaction's output.
int64_t ModelInputWidth(const ModelSpec& model);

// True for variables read by row (embedding tables), false for those read
// whole.
bool IsRowAccessed(const VariableSpecProto& var);

struct VariablePlan {
  // One entry per logical variable, in ModelVariables order.
  std::vector<VariablePlacementProto> placement;
  // The concrete variables (whole variables or shards) each PS creates.
  std::vector<CreateVariablesRequest> per_ps;
};

// Lays `vars` out over `num_ps` tasks with TF's rules: each DENSE variable is
// split along axis 0 by `partitioner` into contiguous "div" shards named
// "<name>/part_<i>", and variables and shards are placed round-robin in
// creation order. A HASH_TABLE always gets one shard per PS,
// "<name>/part_<i>" on PS i, and an id goes to shard HashTableShard(id, n).
// INVALID_ARGUMENT from the partitioner. REQUIRES: num_ps >= 1.
absl::StatusOr<VariablePlan> PlanVariables(const std::vector<VariableSpecProto>& vars,
                                           const PartitionerSpec& partitioner, int num_ps);

// The shard of a hash table with `num_shards` shards that owns `id`.
int HashTableShard(uint64_t id, int num_shards);

// The partitioner's decision for one variable, in words, for `describe`.
std::string DescribePlacement(const VariableSpecProto& var, const VariablePlacementProto& placement);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_MODEL_VARIABLES_H_
