// The trained values in a job's checkpoint directory, as the model reads
// them: what `psctl export` turns into a model file, and what its tests run
// through worker/core's Model to get pscluster's own predictions.
//
// Reads the spec from the job log (CheckpointJobSpec), restores the newest
// good checkpoint into in-process VariableStores through
// CheckpointManager::RestoreLatest (the coordinator's own recovery path, as
// `psctl checkpoint verify`), and pulls every whole-read variable back
// through worker/core's ParamRouter, which assembles partitioned variables
// from their shards — the exact tensors a worker's eval step sees.
//
// Runs entirely in this process (no gRPC); thread-compatible.
#ifndef PSCLUSTER_CLIENT_CHECKPOINT_PARAMS_H_
#define PSCLUSTER_CLIENT_CHECKPOINT_PARAMS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "common/tensor.h"
#include "protos/ps.pb.h"

namespace pscluster {

struct CheckpointParams {
  JobSpec spec;              // as the job log records it
  std::string job_id;        // the job the spec came from
  int64_t checkpoint_id = 0;  // the checkpoint restored
  // ModelVariables(spec), and one tensor per variable in that order:
  // whole-read variables (kernels, biases, batch norm's parameters and
  // moving statistics) hold their values; embedding tables are left empty
  // (never read whole).
  std::vector<VariableSpecProto> variables;
  std::vector<Tensor> params;
};

// Loads the newest checkpoint in `dir` that restores. NOT_FOUND if `dir` is
// not a directory, holds no committed checkpoint or no job log (the message
// says which); INVALID_ARGUMENT if the logged spec does not parse; the
// restore's error (DATA_LOSS, ...) if no checkpoint restores.
absl::StatusOr<CheckpointParams> LoadCheckpointParams(const std::string& dir);

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_CHECKPOINT_PARAMS_H_
