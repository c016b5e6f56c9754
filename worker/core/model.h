// Model: the network a job spec describes, with forward and backward passes
// on a Backend.
//
// The input of the first layer is [dense x | one combined embedding per
// categorical feature, in spec order], or, with model.inputs.image, the dense
// x as NHWC images. The layers (common/job_spec.h LayerSpec) are dense and
// conv2d (im2col + GEMM, with a fused activation), max/avg pooling, flatten,
// bare activations (relu, tanh, sigmoid, gelu), dropout (training only),
// batch norm, and DCN-v2 cross layers (model_interactions.h: x0 * (x W + b)
// + x, x0 being the first layer's input; their gradient reaches x0 and so
// the embeddings).
//
// Heads (ModelSpec::fm, wide_*) add scalars to the last layer's single
// output before the loss: DeepFM's factorization machine term over the
// deep features' embeddings, and the wide part's 1-dim embeddings (the
// features of model.wide.categorical, which are not in the first layer's
// input) and linear term over the dense inputs.
//
// DLRM (ModelSpec::bottom): the bottom ops read the dense inputs x alone;
// the dot interaction (model_interactions.h) joins their output and the
// embeddings; the ops of model.layers read its output. The loss is softmax cross-entropy (multi-class), sigmoid
// cross-entropy (binary, one output unit), or mse / huber against the
// one-hot label; model.l2 adds l2 / 2 * sum(w^2) of the kernels to it.
//
// Batch norm: a training step normalizes with the batch's statistics and
// returns, as the "gradients" of the layer's moving_mean and
// moving_variance, the batch mean and (biased) variance, which the PS folds
// into its moving averages (common/model_variables.h); evaluation
// normalizes with the pulled moving statistics.
//
// The model holds no parameters. A step takes the dense variables pulled from
// the PS (`params`: one tensor per ModelVariables() entry, in that order; the
// entries of embedding tables are not read and may be empty) and, per
// categorical feature, the rows looked up for the batch's UNIQUE ids. It
// returns gradients for the dense variables (same indexing) and, per
// feature, for those unique rows, already summed over duplicate ids, so they
// can be pushed as they are.
//
// Scratch activations live in a ModelScratch, one per concurrent step, so a
// Model is immutable and thread-safe while each ModelScratch and Backend is
// used by one thread at a time.
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

// Which looked-up rows each example of a batch combines for one feature:
// example e uses rows index[offsets[e], offsets[e+1]) of the feature's
// unique rows (an index may repeat, within or across examples).
struct FeatureRows {
  std::vector<int64_t> offsets;  // batch size + 1 entries, offsets[0] == 0
  std::vector<int64_t> index;    // each in [0, number of unique rows)
};

// One batch of examples.
struct ModelBatch {
  int64_t size = 0;
  std::vector<float> x;    // [size, dense_inputs], row-major
  std::vector<int32_t> y;  // [size]: a class index, or 0/1 for sigmoid
  // One per ModelSpec::categorical feature, in spec order.
  std::vector<FeatureRows> features;
  // Training only: seeds the dropout masks. The same seed gives the same
  // masks, so the trainer passes StepSeed(job seed, global step) and a
  // retried closure repeats its steps exactly.
  uint64_t seed = 0;
};

// The dropout seed of one training step.
uint64_t StepSeed(uint64_t job_seed, int64_t global_step);

struct StepResult {
  int64_t examples = 0;
  double loss_sum = 0;  // summed over examples
  int64_t correct = 0;
  // EvalStep with sigmoid loss only: this batch's examples counted by
  // predicted probability in kAucBuckets buckets (common/metrics.h).
  // Empty otherwise.
  std::vector<int64_t> positive_histogram;
  std::vector<int64_t> negative_histogram;
};

// Per-step buffers, reused across steps to avoid reallocation. Entries of
// the per-op vectors are empty for ops that do not use them.
struct ModelScratch {
  std::vector<float> input;  // [batch, input_width] when embeddings exist
  std::vector<std::vector<float>> activations;  // output of each op
  std::vector<std::vector<float>> pre;          // fused gelu: its input; cross: x W + b
  std::vector<std::vector<float>> cols;         // conv2d: im2col patches
  std::vector<std::vector<int32_t>> argmax;     // max_pool
  std::vector<std::vector<float>> mask;         // dropout
  std::vector<std::vector<float>> xhat;         // batch_norm: normalized input
  std::vector<std::vector<float>> stats;        // batch_norm: mean | var | inv_std
  std::vector<float> logits_grad;
  std::vector<float> grad_a;
  std::vector<float> grad_b;
  std::vector<float> grad_cols;
  std::vector<float> grad_x0;  // cross: d(loss)/d(model input) through x0
  std::vector<float> grad_u;   // cross: d(loss)/d(x W + b)
  std::vector<float> grad_t;   // low-rank cross: d(loss)/d(x U)
  std::vector<float> logits;   // with heads: the last layer's output plus theirs
  std::vector<float> head_grad;  // with heads: d(loss)/d(logits)
};

class Model {
 public:
  // INVALID_ARGUMENT if the spec's model cannot be built: an unknown loss,
  // sigmoid_cross_entropy without a 1-unit last layer, or layers whose
  // shapes (filled by ParseJobSpec) do not chain.
  static absl::StatusOr<std::unique_ptr<Model>> Create(const JobSpec& spec);

  const std::vector<VariableSpecProto>& variables() const { return variables_; }
  // Dense float inputs per example (ModelSpec::dense_inputs).
  int64_t input_size() const { return input_size_; }
  // Labels lie in [0, num_classes()): the last layer's width for softmax, 2
  // for sigmoid.
  int64_t num_classes() const { return num_classes_; }
  bool sigmoid() const { return sigmoid_; }
  // Number of categorical features and the embedding width of feature f.
  int num_features() const { return static_cast<int>(features_.size()); }
  int64_t embedding_dim(int f) const { return features_[f].dim; }

  // Forward + backward on `batch`. `rows[f]` is [unique_f, embedding_dim(f)]
  // for feature f. Resizes `grads` to match `params` and fills the dense
  // variables' entries with d(mean loss)/dparam (batch norm's moving
  // statistics get the batch's statistics instead; embedding entries are
  // left empty); resizes `row_grads` to one [unique_f, dim] tensor per
  // feature, summed over every use of each unique row. Dropout masks come
  // from batch.seed.
  // REQUIRES: dense params match variables() in shape; rows.size() ==
  // num_features(); batch.features[f].index within rows[f]; labels valid.
  void TrainStep(Backend* backend, const std::vector<Tensor>& params, const ModelBatch& batch,
                 const std::vector<Tensor>& rows, ModelScratch* scratch,
                 std::vector<Tensor>* grads, std::vector<Tensor>* row_grads,
                 StepResult* result) const;

  // Forward only: loss and accuracy, and the probability histograms for a
  // sigmoid model. REQUIRES: as TrainStep.
  void EvalStep(Backend* backend, const std::vector<Tensor>& params, const ModelBatch& batch,
                const std::vector<Tensor>& rows, ModelScratch* scratch,
                StepResult* result) const;

  // Forward only, in inference form (dropout is the identity, batch norm
  // uses the moving statistics): resizes `outputs` to [batch.size, width of
  // the last layer] and fills it with the last layer's outputs — the logits
  // the loss reads (apply softmax or sigmoid for probabilities). For
  // exports and batch prediction, which must agree with EvalStep.
  // REQUIRES: as TrainStep.
  void Predict(Backend* backend, const std::vector<Tensor>& params, const ModelBatch& batch,
               const std::vector<Tensor>& rows, ModelScratch* scratch,
               std::vector<float>* outputs) const;

 private:
  // One op of the network: one layer of the spec.
  struct Op {
    LayerSpec::Kind kind = LayerSpec::Kind::kDense;
    bool has_act = false;  // dense/conv2d: a fused activation; kActivation: true
    ActivationFn act = ActivationFn::kRelu;
    // Indices into params (-1: none).
    int kernel = -1;
    int bias = -1;
    int gamma = -1;
    int beta = -1;
    int moving_mean = -1;
    int moving_var = -1;
    int kernel_v = -1;  // low-rank cross: V (kernel is U)
    int64_t rank = 0;   // low-rank cross: r
    int64_t in = 0;   // input elements per example
    int64_t out = 0;  // output elements per example
    Window2d window;  // conv2d and pooling; batch set per step
    int64_t channels = 0;  // batch_norm: the normalized (last) axis
    float rate = 0;        // dropout
    float epsilon = 0;     // batch_norm
    float l2 = 0;          // dense/conv2d kernel
  };
  struct Feature {
    int64_t dim = 0;
    bool mean = false;
    int64_t column = 0;  // first column of its embedding in the input; -1: wide
    bool wide = false;   // model.wide.categorical: a 1-dim weight added to the logit
  };
  enum class LossKind { kSoftmax, kSigmoid, kMse, kHuber };

  Model() = default;
  // Fills the input [x | embeddings] and runs the ops; scratch->activations[i]
  // holds op i's output. Returns the logits [batch, outputs_]. `training`
  // turns on dropout and batch statistics.
  const float* Forward(Backend* backend, const std::vector<Tensor>& params,
                       const ModelBatch& batch, const std::vector<Tensor>& rows, bool training,
                       ModelScratch* scratch) const;
  // The loss on `logits`; `logits_grad` may be null.
  void Loss(Backend* backend, const float* logits, const ModelBatch& batch, float* logits_grad,
            StepResult* result) const;
  // Adds the heads (fm, wide) to `logits` [batch.size]; x0 is the first
  // layer's input.
  void Heads(const std::vector<Tensor>& params, const ModelBatch& batch,
             const std::vector<Tensor>& rows, const float* x0, float* logits) const;
  // Their backward pass given g = d(loss)/d(logits): the wide dense
  // kernel's gradient (overwritten), the fm term's into dx0 and the wide
  // features' rows into row_grads (both accumulated).
  void HeadsGrad(const ModelBatch& batch, const float* x0,
                 const float* g, std::vector<Tensor>* grads, float* dx0,
                 std::vector<Tensor>* row_grads) const;
  // l2 / 2 * sum(w^2) over the regularized kernels; with `grads`, adds
  // l2 * w to each kernel's gradient.
  double L2Penalty(const std::vector<Tensor>& params, std::vector<Tensor>* grads) const;

  std::vector<VariableSpecProto> variables_;
  std::vector<Op> ops_;
  std::vector<Feature> features_;
  int64_t input_size_ = 0;
  int64_t input_width_ = 0;  // dense inputs + every embedding_dim but the wide ones
  int64_t outputs_ = 0;      // width of the last layer
  int64_t num_classes_ = 0;
  LossKind loss_ = LossKind::kSoftmax;
  float huber_delta_ = 1.0f;
  bool sigmoid_ = false;
  bool has_cross_ = false;
  // Heads added to the logit.
  bool has_heads_ = false;
  std::vector<int64_t> fm_columns_;  // model.fm: the deep features' columns
  int64_t fm_dim_ = 0;
  int wide_dense_kernel_ = -1;  // index into params, or -1
  // model.bottom: ops_ = bottom ops, the dot interaction, the top ops; the
  // dot interaction reads the embeddings at dot_columns_ of the input.
  bool dlrm_ = false;
  std::vector<int64_t> dot_columns_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_MODEL_H_
