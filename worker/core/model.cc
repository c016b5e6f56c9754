#include "worker/core/model.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/model_variables.h"

namespace pscluster {

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const JobSpec& spec) {
  if (spec.model.loss != "softmax_cross_entropy") {
    return absl::InvalidArgumentError(absl::StrCat("unknown loss '", spec.model.loss, "'"));
  }
  auto model = std::unique_ptr<Model>(new Model());
  model->variables_ = ModelVariables(spec);
  model->input_size_ = spec.model.dense_inputs;
  int64_t width = spec.model.dense_inputs;
  int param = 0;
  for (const LayerSpec& layer : spec.model.layers) {
    Op op;
    if (layer.kind == LayerSpec::Kind::kDense) {
      op.dense = true;
      op.relu = layer.activation == Activation::kRelu;
      op.kernel = param++;
      op.bias = param++;
      op.in = width;
      op.out = layer.units;
      width = layer.units;
    } else {
      op.dense = false;
      op.relu = true;
      op.in = op.out = width;
    }
    model->ops_.push_back(op);
  }
  model->num_classes_ = width;
  return model;
}

const float* Model::Forward(Backend* backend, const std::vector<Tensor>& params, const float* x,
                            int64_t batch, ModelScratch* scratch) const {
  scratch->activations.resize(ops_.size());
  const float* input = x;
  for (size_t i = 0; i < ops_.size(); ++i) {
    const Op& op = ops_[i];
    std::vector<float>& out = scratch->activations[i];
    out.resize(batch * op.out);
    if (op.dense) {
      backend->Gemm(false, false, batch, op.out, op.in, 1.0f, input, params[op.kernel].data(),
                    0.0f, out.data());
      backend->AddBias(batch, op.out, params[op.bias].data(), out.data());
    } else {
      std::memcpy(out.data(), input, sizeof(float) * batch * op.out);
    }
    if (op.relu) backend->Relu(batch * op.out, out.data());
    input = out.data();
  }
  return input;
}

void Model::TrainStep(Backend* backend, const std::vector<Tensor>& params, const float* x,
                      const int32_t* y, int64_t batch, ModelScratch* scratch,
                      std::vector<Tensor>* grads, StepResult* result) const {
  grads->resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    if ((*grads)[i].shape() != params[i].shape()) (*grads)[i] = Tensor(params[i].shape());
  }
  const float* logits = Forward(backend, params, x, batch, scratch);
  scratch->logits_grad.resize(batch * num_classes_);
  backend->SoftmaxCrossEntropy(batch, num_classes_, logits, y, scratch->logits_grad.data(),
                               &result->loss_sum, &result->correct);
  result->examples = batch;

  // Walk back through the ops; `dy` is the gradient w.r.t. op i's output.
  std::vector<float>* dy = &scratch->logits_grad;
  std::vector<float>* spare = &scratch->grad_a;
  for (int i = static_cast<int>(ops_.size()) - 1; i >= 0; --i) {
    const Op& op = ops_[i];
    if (op.relu) backend->ReluGrad(batch * op.out, scratch->activations[i].data(), dy->data());
    if (!op.dense) continue;  // a bare ReLU passes dy through
    const float* input = i == 0 ? x : scratch->activations[i - 1].data();
    // dW = input^T · dy, db = column sums of dy.
    backend->Gemm(true, false, op.in, op.out, batch, 1.0f, input, dy->data(), 0.0f,
                  (*grads)[op.kernel].data());
    backend->BiasGrad(batch, op.out, dy->data(), (*grads)[op.bias].data());
    if (i == 0) break;
    // d(input) = dy · W^T.
    spare->resize(batch * op.in);
    backend->Gemm(false, true, batch, op.in, op.out, 1.0f, dy->data(), params[op.kernel].data(),
                  0.0f, spare->data());
    std::swap(dy, spare);
    if (spare == &scratch->logits_grad) spare = &scratch->grad_b;
  }
}

void Model::EvalStep(Backend* backend, const std::vector<Tensor>& params, const float* x,
                     const int32_t* y, int64_t batch, ModelScratch* scratch,
                     StepResult* result) const {
  const float* logits = Forward(backend, params, x, batch, scratch);
  backend->SoftmaxCrossEntropy(batch, num_classes_, logits, y, nullptr, &result->loss_sum,
                               &result->correct);
  result->examples = batch;
}

}  // namespace pscluster
