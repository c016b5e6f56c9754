// Model: the network a job spec describes (Dense layers, ReLU, softmax
// cross-entropy), with forward and backward passes on a Backend.
//
// The model holds no parameters: a step takes the current values pulled from
// the PS (one tensor per ModelVariables() entry, in that order) and returns
// gradients in the same order. Scratch activations live in a ModelScratch,
// one per concurrent step, so a Model is immutable and thread-safe while each
// ModelScratch and Backend is used by one thread at a time.
#ifndef PSCLUSTER_WORKER_CORE_MODEL_H_
#define PSCLUSTER_WORKER_CORE_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "common/tensor.h"
#include "protos/ps.pb.h"
#include "worker/core/backend.h"

namespace pscluster {

struct StepResult {
  int64_t examples = 0;
  double loss_sum = 0;  // summed over examples
  int64_t correct = 0;
};

// Per-step activations, reused across steps to avoid reallocation.
struct ModelScratch {
  std::vector<std::vector<float>> activations;  // output of each op
  std::vector<float> logits_grad;
  std::vector<float> grad_a;
  std::vector<float> grad_b;
};

class Model {
 public:
  // INVALID_ARGUMENT if the spec's model cannot be built.
  static absl::StatusOr<std::unique_ptr<Model>> Create(const JobSpec& spec);

  const std::vector<VariableSpecProto>& variables() const { return variables_; }
  int64_t input_size() const { return input_size_; }
  int64_t num_classes() const { return num_classes_; }

  // Forward + backward on `batch` rows of x [batch, input_size] with labels y.
  // Resizes `grads` to match `params` and fills them with d(mean loss)/dparam.
  // REQUIRES: params match variables() in count and shape; labels in
  // [0, num_classes).
  void TrainStep(Backend* backend, const std::vector<Tensor>& params, const float* x,
                 const int32_t* y, int64_t batch, ModelScratch* scratch,
                 std::vector<Tensor>* grads, StepResult* result) const;

  // Forward only: loss and accuracy on `batch` rows.
  void EvalStep(Backend* backend, const std::vector<Tensor>& params, const float* x,
                const int32_t* y, int64_t batch, ModelScratch* scratch,
                StepResult* result) const;

 private:
  // One op of the network: a dense layer (with optional fused ReLU) or a ReLU.
  struct Op {
    bool dense = true;
    bool relu = false;
    int kernel = -1;  // index into params
    int bias = -1;
    int64_t in = 0;
    int64_t out = 0;
  };

  Model() = default;
  // Runs the ops; scratch->activations[i] holds op i's output. Returns logits.
  const float* Forward(Backend* backend, const std::vector<Tensor>& params, const float* x,
                       int64_t batch, ModelScratch* scratch) const;

  std::vector<VariableSpecProto> variables_;
  std::vector<Op> ops_;
  int64_t input_size_ = 0;
  int64_t num_classes_ = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_MODEL_H_
