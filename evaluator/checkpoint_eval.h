// CheckpointEval: the sidecar evaluator's evaluation of one committed
// checkpoint, in this process and with no PS or worker process: the
// checkpoint is restored into N in-process VariableStores (N = the
// manifest's num_ps, the layout that wrote it) through the coordinator's own
// CheckpointManager::Restore (each store verifies every file's size and
// checksum before it loads anything), and data.eval is evaluated by
// worker/core's Trainer against those stores — the same eval path a worker
// runs for an inline eval, embeddings and batch norm included — in closures
// of `eval_closure_examples` examples, merged as the coordinator merges them.
//
// The stores and the Trainer (with its loaded eval data) are kept from one
// checkpoint to the next; each restore replaces the stores' contents. The
// Trainer is given data.eval only (as its train data too), so the training
// set is never loaded; it runs strategy parameter_server on one replica with
// device auto (eval results do not depend on either).
//
// Thread-compatible: one caller at a time.
#ifndef PSCLUSTER_EVALUATOR_CHECKPOINT_EVAL_H_
#define PSCLUSTER_EVALUATOR_CHECKPOINT_EVAL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "common/model_variables.h"
#include "common/ps_client.h"
#include "evaluator/core/sidecar_evaluator.h"
#include "protos/checkpoint.pb.h"

namespace pscluster {

class Trainer;
class VariableStore;

class CheckpointEval {
 public:
  struct Options {
    // The job's checkpoint directory (real path): the stores' checkpoint
    // root, so the manifest's files are read from <dir>/ckpt-<id>/.
    std::string checkpoint_dir;
    // The job's spec as its job log records it (unresolved).
    JobSpec spec;
    // The job's id (the namespace the Trainer's pulls name).
    std::string job_id;
    // The directories data.eval must lie under (--data_root); nullopt: any.
    std::optional<std::vector<std::string>> data_roots;
    int64_t eval_closure_examples = 2000;
  };

  // Checks the spec (ResolveReplicas for one replica, the data roots);
  // INVALID_ARGUMENT naming the problem. Data is loaded at the first
  // Evaluate.
  static absl::StatusOr<std::unique_ptr<CheckpointEval>> Create(Options options);
  ~CheckpointEval();

  // Restores `manifest` and evaluates data.eval. Errors: the restore's
  // (NOT_FOUND: a file is gone; DATA_LOSS: a file is damaged;
  // FAILED_PRECONDITION: it does not fit the model), the Trainer's
  // (NOT_FOUND for a missing data file, INVALID_ARGUMENT for data that does
  // not fit the model), and FAILED_PRECONDITION for a checkpoint whose eval
  // loss is not finite (a diverged model).
  absl::StatusOr<EvalMetrics> Evaluate(const CheckpointManifest& manifest);

 private:
  explicit CheckpointEval(Options options, JobSpec eval_spec);
  // Builds `num_ps` stores, the variable plan over them and the Trainer.
  absl::Status Prepare(int num_ps);

  const Options options_;
  const JobSpec eval_spec_;  // resolved, data.train = data.eval
  int num_ps_ = 0;
  VariablePlan plan_;
  std::vector<std::unique_ptr<VariableStore>> stores_;
  std::vector<std::unique_ptr<PsClient>> clients_;  // for the restore
  std::unique_ptr<Trainer> trainer_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_EVALUATOR_CHECKPOINT_EVAL_H_
