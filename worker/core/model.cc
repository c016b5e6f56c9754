#include "worker/core/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/metrics.h"
#include "common/model_variables.h"

namespace pscluster {

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const JobSpec& spec) {
  const ModelSpec& m = spec.model;
  if (m.loss != "softmax_cross_entropy" && m.loss != "sigmoid_cross_entropy") {
    return absl::InvalidArgumentError(absl::StrCat("unknown loss '", m.loss, "'"));
  }
  auto model = std::unique_ptr<Model>(new Model());
  model->variables_ = ModelVariables(spec);
  model->sigmoid_ = m.loss == "sigmoid_cross_entropy";
  model->input_size_ = m.dense_inputs;
  int64_t column = m.dense_inputs;
  for (const CategoricalFeatureSpec& f : m.categorical) {
    model->features_.push_back({f.embedding_dim, f.combiner == Combiner::kMean, column});
    column += f.embedding_dim;
  }
  model->input_width_ = column;

  // Dense variables are found by name: ModelVariables puts the embedding
  // tables first.
  absl::flat_hash_map<std::string, int> index;
  for (size_t i = 0; i < model->variables_.size(); ++i) {
    index[model->variables_[i].name()] = static_cast<int>(i);
  }
  int64_t width = model->input_width_;
  int dense_index = 0;
  for (const LayerSpec& layer : m.layers) {
    Op op;
    if (layer.kind == LayerSpec::Kind::kDense) {
      const std::string prefix = absl::StrCat("dense_", dense_index++);
      op.dense = true;
      op.relu = layer.activation == Activation::kRelu;
      op.kernel = index.at(prefix + "/kernel");
      op.bias = index.at(prefix + "/bias");
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
  model->outputs_ = width;
  if (model->sigmoid_ && width != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sigmoid_cross_entropy needs a last layer of 1 unit, not ", width));
  }
  model->num_classes_ = model->sigmoid_ ? 2 : width;
  return model;
}

const float* Model::Forward(Backend* backend, const std::vector<Tensor>& params,
                            const ModelBatch& batch, const std::vector<Tensor>& rows,
                            ModelScratch* scratch) const {
  const int64_t n = batch.size;
  const float* input = batch.x.data();
  if (!features_.empty()) {
    // [x | combined embedding of each feature].
    std::vector<float>& in = scratch->input;
    in.assign(n * input_width_, 0.0f);
    for (int64_t e = 0; e < n; ++e) {
      std::memcpy(in.data() + e * input_width_, batch.x.data() + e * input_size_,
                  sizeof(float) * input_size_);
    }
    for (size_t f = 0; f < features_.size(); ++f) {
      const Feature& feat = features_[f];
      const FeatureRows& fr = batch.features[f];
      const float* table = rows[f].data();
      for (int64_t e = 0; e < n; ++e) {
        const int64_t begin = fr.offsets[e], end = fr.offsets[e + 1];
        if (begin == end) continue;  // no ids: zeros
        float* out = in.data() + e * input_width_ + feat.column;
        for (int64_t k = begin; k < end; ++k) {
          const float* row = table + fr.index[k] * feat.dim;
          for (int64_t d = 0; d < feat.dim; ++d) out[d] += row[d];
        }
        if (feat.mean) {
          const float scale = 1.0f / static_cast<float>(end - begin);
          for (int64_t d = 0; d < feat.dim; ++d) out[d] *= scale;
        }
      }
    }
    input = in.data();
  }
  scratch->activations.resize(ops_.size());
  for (size_t i = 0; i < ops_.size(); ++i) {
    const Op& op = ops_[i];
    std::vector<float>& out = scratch->activations[i];
    out.resize(n * op.out);
    if (op.dense) {
      backend->Gemm(false, false, n, op.out, op.in, 1.0f, input, params[op.kernel].data(), 0.0f,
                    out.data());
      backend->AddBias(n, op.out, params[op.bias].data(), out.data());
    } else {
      std::memcpy(out.data(), input, sizeof(float) * n * op.out);
    }
    if (op.relu) backend->Relu(n * op.out, out.data());
    input = out.data();
  }
  return input;
}

void Model::Loss(Backend* backend, const float* logits, const ModelBatch& batch,
                 float* logits_grad, StepResult* result) const {
  if (sigmoid_) {
    backend->SigmoidCrossEntropy(batch.size, logits, batch.y.data(), logits_grad,
                                 &result->loss_sum, &result->correct);
  } else {
    backend->SoftmaxCrossEntropy(batch.size, outputs_, logits, batch.y.data(), logits_grad,
                                 &result->loss_sum, &result->correct);
  }
  result->examples = batch.size;
}

void Model::TrainStep(Backend* backend, const std::vector<Tensor>& params,
                      const ModelBatch& batch, const std::vector<Tensor>& rows,
                      ModelScratch* scratch, std::vector<Tensor>* grads,
                      std::vector<Tensor>* row_grads, StepResult* result) const {
  const int64_t n = batch.size;
  grads->resize(params.size());
  for (const Op& op : ops_) {
    if (!op.dense) continue;
    for (int p : {op.kernel, op.bias}) {
      if ((*grads)[p].shape() != params[p].shape()) (*grads)[p] = Tensor(params[p].shape());
    }
  }
  const float* logits = Forward(backend, params, batch, rows, scratch);
  scratch->logits_grad.resize(n * outputs_);
  Loss(backend, logits, batch, scratch->logits_grad.data(), result);

  // Walk back through the ops; `dy` is the gradient w.r.t. op i's output,
  // and after op i, w.r.t. its input.
  const bool need_input_grad = !features_.empty();
  std::vector<float>* dy = &scratch->logits_grad;
  std::vector<float>* spare = &scratch->grad_a;
  for (int i = static_cast<int>(ops_.size()) - 1; i >= 0; --i) {
    const Op& op = ops_[i];
    if (op.relu) backend->ReluGrad(n * op.out, scratch->activations[i].data(), dy->data());
    if (!op.dense) continue;  // a bare ReLU passes dy through
    const float* input = i > 0 ? scratch->activations[i - 1].data()
                               : (need_input_grad ? scratch->input.data() : batch.x.data());
    // dW = input^T · dy, db = column sums of dy.
    backend->Gemm(true, false, op.in, op.out, n, 1.0f, input, dy->data(), 0.0f,
                  (*grads)[op.kernel].data());
    backend->BiasGrad(n, op.out, dy->data(), (*grads)[op.bias].data());
    if (i == 0 && !need_input_grad) break;
    // d(input) = dy · W^T.
    spare->resize(n * op.in);
    backend->Gemm(false, true, n, op.in, op.out, 1.0f, dy->data(), params[op.kernel].data(), 0.0f,
                  spare->data());
    std::swap(dy, spare);
    if (spare == &scratch->logits_grad) spare = &scratch->grad_b;
  }
  if (!need_input_grad) return;

  // dy is now d(loss)/d(input) [n, input_width]: scatter each feature's
  // columns into its unique rows, summing over every use of a row.
  row_grads->resize(features_.size());
  for (size_t f = 0; f < features_.size(); ++f) {
    const Feature& feat = features_[f];
    const FeatureRows& fr = batch.features[f];
    Tensor& g = (*row_grads)[f];
    if (g.shape() != rows[f].shape()) {
      g = Tensor(rows[f].shape());
    } else {
      std::fill(g.values().begin(), g.values().end(), 0.0f);
    }
    for (int64_t e = 0; e < n; ++e) {
      const int64_t begin = fr.offsets[e], end = fr.offsets[e + 1];
      if (begin == end) continue;
      const float* d_in = dy->data() + e * input_width_ + feat.column;
      const float scale = feat.mean ? 1.0f / static_cast<float>(end - begin) : 1.0f;
      for (int64_t k = begin; k < end; ++k) {
        float* out = g.data() + fr.index[k] * feat.dim;
        for (int64_t d = 0; d < feat.dim; ++d) out[d] += scale * d_in[d];
      }
    }
  }
}

void Model::EvalStep(Backend* backend, const std::vector<Tensor>& params,
                     const ModelBatch& batch, const std::vector<Tensor>& rows,
                     ModelScratch* scratch, StepResult* result) const {
  const float* logits = Forward(backend, params, batch, rows, scratch);
  Loss(backend, logits, batch, nullptr, result);
  if (!sigmoid_) return;
  result->positive_histogram.assign(kAucBuckets, 0);
  result->negative_histogram.assign(kAucBuckets, 0);
  for (int64_t e = 0; e < batch.size; ++e) {
    const double x = logits[e];
    const double p = x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x));
    const int b = AucBucket(p);
    ++(batch.y[e] == 1 ? result->positive_histogram : result->negative_histogram)[b];
  }
}

}  // namespace pscluster
