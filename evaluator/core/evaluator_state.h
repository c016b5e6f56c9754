// EvaluatorState: the sidecar evaluator's progress, persisted in the job's
// checkpoint directory (<checkpoint dir>/evaluator/state) so that a
// restarted evaluator resumes after the last checkpoint it evaluated instead
// of starting over.
//
// The file is text, one "key value" per line (docs/checkpoint_format.md,
// "Sidecar evaluator"), written atomically (temp file, fsync, rename, fsync
// of the directory): a crash leaves the old state or the new one, never a
// mix.
//
// Free functions; thread-safe for different paths.
#ifndef PSCLUSTER_EVALUATOR_CORE_EVALUATOR_STATE_H_
#define PSCLUSTER_EVALUATOR_CORE_EVALUATOR_STATE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace pscluster {

struct EvaluatorState {
  // The newest checkpoint evaluated (or passed over as damaged); -1: none.
  int64_t last_evaluated = -1;
  // Checkpoints evaluated so far, over every run of the evaluator.
  int64_t evaluations = 0;
  // The best checkpoint by eval.keep_best so far (-1: none yet), its metric
  // value and its global step.
  int64_t best_checkpoint = -1;
  double best_value = 0;
  int64_t best_step = 0;

  bool operator==(const EvaluatorState& o) const {
    return last_evaluated == o.last_evaluated && evaluations == o.evaluations &&
           best_checkpoint == o.best_checkpoint && best_value == o.best_value &&
           best_step == o.best_step;
  }
};

// <checkpoint_dir>/evaluator/state.
std::string EvaluatorStatePath(const std::string& checkpoint_dir);

// The state at `path`; a fresh EvaluatorState when there is no file.
// DATA_LOSS naming the file and line for a malformed one (an unknown key, a
// value that is not a number); other I/O errors with the errno's code.
absl::StatusOr<EvaluatorState> LoadEvaluatorState(const std::string& path);

// Writes `state` to `path` atomically, creating its directory. Errors name
// the file.
absl::Status SaveEvaluatorState(const std::string& path, const EvaluatorState& state);

// The file's text for `state`.
std::string FormatEvaluatorState(const EvaluatorState& state);

}  // namespace pscluster

#endif  // PSCLUSTER_EVALUATOR_CORE_EVALUATOR_STATE_H_
