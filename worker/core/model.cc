#include "worker/core/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/metrics.h"
#include "common/model_variables.h"
#include "worker/core/model_interactions.h"

namespace pscluster {

namespace {

ActivationFn ToFn(Activation a) {
  switch (a) {
    case Activation::kTanh: return ActivationFn::kTanh;
    case Activation::kSigmoid: return ActivationFn::kSigmoid;
    case Activation::kGelu: return ActivationFn::kGelu;
    default: return ActivationFn::kRelu;
  }
}

// TF's padding: `same` pads (total) so that out = ceil(in / stride), half
// of it (rounded down) before.
void Pad(int64_t in, int64_t window, int64_t stride, Padding padding, int64_t* out,
         int64_t* before) {
  if (padding == Padding::kSame) {
    *out = (in + stride - 1) / stride;
    *before = std::max<int64_t>((*out - 1) * stride + window - in, 0) / 2;
  } else {
    *out = in < window ? 0 : (in - window) / stride + 1;
    *before = 0;
  }
}

}  // namespace

uint64_t StepSeed(uint64_t job_seed, int64_t global_step) {
  uint64_t z = job_seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(global_step);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const JobSpec& spec) {
  const ModelSpec& m = spec.model;
  auto model = std::unique_ptr<Model>(new Model());
  if (m.loss == "softmax_cross_entropy") {
    model->loss_ = LossKind::kSoftmax;
  } else if (m.loss == "sigmoid_cross_entropy") {
    model->loss_ = LossKind::kSigmoid;
  } else if (m.loss == "mse") {
    model->loss_ = LossKind::kMse;
  } else if (m.loss == "huber") {
    model->loss_ = LossKind::kHuber;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown loss '", m.loss, "'"));
  }
  model->huber_delta_ = m.huber_delta;
  model->variables_ = ModelVariables(spec);
  model->sigmoid_ = model->loss_ == LossKind::kSigmoid;
  model->input_size_ = m.dense_inputs;
  int64_t column = m.dense_inputs;
  for (const CategoricalFeatureSpec& f : m.categorical) {
    const bool wide = std::count(m.wide_categorical.begin(), m.wide_categorical.end(), f.name) > 0;
    if (wide && f.embedding_dim != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.wide.categorical: feature '", f.name, "' needs embedding_dim 1"));
    }
    model->features_.push_back(
        {f.embedding_dim, f.combiner == Combiner::kMean, wide ? -1 : column, wide});
    if (wide) continue;
    if (m.fm) {
      if (!model->fm_columns_.empty() && f.embedding_dim != model->fm_dim_) {
        return absl::InvalidArgumentError("model.fm needs one embedding_dim for its features");
      }
      model->fm_columns_.push_back(column);
      model->fm_dim_ = f.embedding_dim;
    }
    column += f.embedding_dim;
  }
  model->input_width_ = column;
  if (m.fm && model->fm_columns_.size() < 2) {
    return absl::InvalidArgumentError("model.fm needs at least 2 categorical features");
  }
  model->has_heads_ = m.fm || m.wide_dense || !m.wide_categorical.empty();

  // Variables are found by name: ModelVariables puts the embedding tables
  // first.
  absl::flat_hash_map<std::string, int> index;
  for (size_t i = 0; i < model->variables_.size(); ++i) {
    index[model->variables_[i].name()] = static_cast<int>(i);
  }
  int64_t width = model->input_width_;
  if (!m.bottom.empty()) {
    // DLRM: the bottom ops read the dense inputs, then the dot interaction.
    model->dlrm_ = true;
    width = model->input_size_;
    for (size_t i = 0; i < m.bottom.size(); ++i) {
      const LayerSpec& layer = m.bottom[i];
      Op op;
      op.in = width;
      op.out = layer.units;
      op.has_act = layer.activation != Activation::kNone;
      op.act = ToFn(layer.activation);
      op.l2 = layer.has_l2 ? layer.l2 : m.l2;
      op.kernel = index.at(absl::StrCat("bottom_", i, "/kernel"));
      op.bias = index.at(absl::StrCat("bottom_", i, "/bias"));
      width = op.out;
      model->ops_.push_back(op);
    }
    for (const Feature& f : model->features_) {
      if (f.dim != width) {
        return absl::InvalidArgumentError(absl::StrCat(
            "model.bottom ends in ", width, " units: every embedding_dim must be that"));
      }
      model->dot_columns_.push_back(f.column);
    }
    Op dot;
    dot.kind = LayerSpec::Kind::kDotInteraction;
    dot.in = width;
    const int64_t vectors = static_cast<int64_t>(model->features_.size()) + 1;
    dot.out = width + vectors * (vectors - 1) / 2;
    width = dot.out;
    model->ops_.push_back(dot);
  }
  int dense_index = 0, conv_index = 0, norm_index = 0, cross_index = 0;
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const LayerSpec& layer = m.layers[i];
    Op op;
    op.kind = layer.kind;
    op.in = width;
    op.out = width;
    op.has_act = layer.activation != Activation::kNone;
    op.act = ToFn(layer.activation);
    op.l2 = layer.has_l2 ? layer.l2 : m.l2;
    const bool image_op = layer.kind == LayerSpec::Kind::kConv2d ||
                          layer.kind == LayerSpec::Kind::kMaxPool ||
                          layer.kind == LayerSpec::Kind::kAvgPool;
    if (image_op || layer.kind == LayerSpec::Kind::kFlatten ||
        layer.kind == LayerSpec::Kind::kBatchNorm || layer.kind == LayerSpec::Kind::kCross) {
      // Shapes from ParseJobSpec; they must chain with the ops before.
      if (layer.input.size() != width || (image_op && !layer.input.image)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "model.layers[", i, "]: its input shape does not match the layers before it"));
      }
    }
    switch (layer.kind) {
      case LayerSpec::Kind::kDense: {
        const std::string prefix = absl::StrCat("dense_", dense_index++);
        op.kernel = index.at(prefix + "/kernel");
        op.bias = index.at(prefix + "/bias");
        op.out = layer.units;
        break;
      }
      case LayerSpec::Kind::kConv2d:
      case LayerSpec::Kind::kMaxPool:
      case LayerSpec::Kind::kAvgPool: {
        Window2d& g = op.window;
        g.height = layer.input.height;
        g.width = layer.input.width;
        g.channels = layer.input.channels;
        g.window_h = layer.window_h;
        g.window_w = layer.window_w;
        g.stride_h = layer.stride_h;
        g.stride_w = layer.stride_w;
        Pad(g.height, g.window_h, g.stride_h, layer.padding, &g.out_h, &g.pad_top);
        Pad(g.width, g.window_w, g.stride_w, layer.padding, &g.out_w, &g.pad_left);
        if (g.out_h < 1 || g.out_w < 1) {
          return absl::InvalidArgumentError(
              absl::StrCat("model.layers[", i, "]: its window does not fit its input"));
        }
        const int64_t out_channels =
            layer.kind == LayerSpec::Kind::kConv2d ? layer.units : g.channels;
        op.out = g.out_h * g.out_w * out_channels;
        if (layer.kind == LayerSpec::Kind::kConv2d) {
          const std::string prefix = absl::StrCat("conv2d_", conv_index++);
          op.kernel = index.at(prefix + "/kernel");
          op.bias = index.at(prefix + "/bias");
        }
        break;
      }
      case LayerSpec::Kind::kActivation:
        op.has_act = true;
        break;
      case LayerSpec::Kind::kDropout:
        op.rate = static_cast<float>(layer.rate);
        break;
      case LayerSpec::Kind::kBatchNorm: {
        const std::string prefix = absl::StrCat("batch_norm_", norm_index++);
        op.channels = layer.input.channels;
        op.epsilon = layer.epsilon;
        op.gamma = index.at(prefix + "/gamma");
        op.beta = index.at(prefix + "/beta");
        op.moving_mean = index.at(prefix + "/moving_mean");
        op.moving_var = index.at(prefix + "/moving_variance");
        break;
      }
      case LayerSpec::Kind::kDotInteraction:
        return absl::InvalidArgumentError(
            absl::StrCat("model.layers[", i, "]: the dot interaction is not a layer"));
      case LayerSpec::Kind::kCross: {
        if (width != model->input_width_ || layer.input.image || model->dlrm_) {
          return absl::InvalidArgumentError(absl::StrCat(
              "model.layers[", i, "]: cross needs an input as wide as the model's input (",
              model->input_width_, "), not ", width));
        }
        const std::string prefix = absl::StrCat("cross_", cross_index++);
        op.rank = layer.rank;
        op.kernel = index.at(prefix + (op.rank > 0 ? "/kernel_u" : "/kernel"));
        if (op.rank > 0) op.kernel_v = index.at(prefix + "/kernel_v");
        op.bias = index.at(prefix + "/bias");
        model->has_cross_ = true;
        break;
      }
      case LayerSpec::Kind::kFlatten:
        break;
    }
    width = op.out;
    model->ops_.push_back(op);
  }
  model->outputs_ = width;
  if (m.wide_dense) model->wide_dense_kernel_ = index.at("wide/dense_kernel");
  if (model->has_heads_ && width != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.fm and model.wide need a last layer of 1 unit, not ", width));
  }
  if (model->sigmoid_ && width != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sigmoid_cross_entropy needs a last layer of 1 unit, not ", width));
  }
  model->num_classes_ = model->sigmoid_ || width == 1 ? 2 : width;
  return model;
}

const float* Model::Forward(Backend* backend, const std::vector<Tensor>& params,
                            const ModelBatch& batch, const std::vector<Tensor>& rows,
                            bool training, ModelScratch* scratch) const {
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
      if (feat.wide) continue;  // added to the logit (Heads)
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
  const float* x0 = input;  // the cross layers' x0, the embeddings' rows
  if (dlrm_) input = batch.x.data();  // the bottom MLP's input
  const size_t num_ops = ops_.size();
  for (auto* v : {&scratch->activations, &scratch->pre, &scratch->cols, &scratch->mask,
                  &scratch->xhat, &scratch->stats}) {
    v->resize(num_ops);
  }
  scratch->argmax.resize(num_ops);
  for (size_t i = 0; i < num_ops; ++i) {
    const Op& op = ops_[i];
    std::vector<float>& out = scratch->activations[i];
    out.resize(n * op.out);
    Window2d g = op.window;
    g.batch = n;
    switch (op.kind) {
      case LayerSpec::Kind::kDense:
        backend->Gemm(false, false, n, op.out, op.in, 1.0f, input, params[op.kernel].data(), 0.0f,
                      out.data());
        backend->AddBias(n, op.out, params[op.bias].data(), out.data());
        break;
      case LayerSpec::Kind::kConv2d: {
        // [patches, patch_size] x [patch_size, filters] = NHWC output.
        std::vector<float>& cols = scratch->cols[i];
        cols.resize(g.patches() * g.patch_size());
        backend->Im2Col(g, input, cols.data());
        const int64_t filters = op.out / (g.out_h * g.out_w);
        backend->Gemm(false, false, g.patches(), filters, g.patch_size(), 1.0f, cols.data(),
                      params[op.kernel].data(), 0.0f, out.data());
        backend->AddBias(g.patches(), filters, params[op.bias].data(), out.data());
        break;
      }
      case LayerSpec::Kind::kMaxPool:
        scratch->argmax[i].resize(n * op.out);
        backend->MaxPool(g, input, out.data(), scratch->argmax[i].data());
        break;
      case LayerSpec::Kind::kAvgPool:
        backend->AvgPool(g, input, out.data());
        break;
      case LayerSpec::Kind::kDropout:
        if (training && op.rate > 0) {
          scratch->mask[i].resize(n * op.out);
          const uint64_t seed = batch.seed ^ (0xD1B54A32D192ED03ull * (i + 1));
          backend->Dropout(n * op.out, op.rate, seed, input, out.data(), scratch->mask[i].data());
        } else {
          std::memcpy(out.data(), input, sizeof(float) * n * op.out);
        }
        break;
      case LayerSpec::Kind::kBatchNorm: {
        const int64_t bn_rows = n * (op.in / op.channels);
        const int64_t c = op.channels;
        if (training) {
          scratch->xhat[i].resize(n * op.in);
          std::vector<float>& st = scratch->stats[i];
          st.resize(3 * c);
          backend->BatchNormTrain(bn_rows, c, input, params[op.gamma].data(),
                                  params[op.beta].data(), op.epsilon, out.data(),
                                  scratch->xhat[i].data(), st.data(), st.data() + c,
                                  st.data() + 2 * c);
        } else {
          backend->BatchNormInfer(bn_rows, c, input, params[op.gamma].data(),
                                  params[op.beta].data(), params[op.moving_mean].data(),
                                  params[op.moving_var].data(), op.epsilon, out.data());
        }
        break;
      }
      case LayerSpec::Kind::kActivation:
        // The input (the previous output) is kept: gelu's gradient reads it.
        backend->Activate(op.act, n * op.out, input, out.data());
        break;
      case LayerSpec::Kind::kFlatten:
        std::memcpy(out.data(), input, sizeof(float) * n * op.out);
        break;
      case LayerSpec::Kind::kDotInteraction:
        DotInteractionForward(n, op.in, input, input_width_, dot_columns_, x0, out.data());
        break;
      case LayerSpec::Kind::kCross:
        scratch->pre[i].resize(n * op.out);
        if (op.rank > 0) {
          scratch->cols[i].resize(n * op.rank);
          LowRankCrossForward(backend, n, op.out, op.rank, x0, input, params[op.kernel].data(),
                              params[op.kernel_v].data(), params[op.bias].data(),
                              scratch->cols[i].data(), scratch->pre[i].data(), out.data());
          break;
        }
        CrossForward(backend, n, op.out, x0, input, params[op.kernel].data(),
                     params[op.bias].data(), scratch->pre[i].data(), out.data());
        break;
    }
    if (op.has_act && op.kind != LayerSpec::Kind::kActivation) {
      if (op.act == ActivationFn::kRelu) {
        backend->Relu(n * op.out, out.data());
      } else if (op.act == ActivationFn::kGelu) {
        scratch->pre[i] = out;
        backend->Activate(op.act, n * op.out, scratch->pre[i].data(), out.data());
      } else {
        backend->Activate(op.act, n * op.out, out.data(), out.data());
      }
    }
    input = out.data();
  }
  if (!has_heads_) return input;
  scratch->logits.assign(input, input + n);
  Heads(params, batch, rows, x0, scratch->logits.data());
  return scratch->logits.data();
}

void Model::Loss(Backend* backend, const float* logits, const ModelBatch& batch,
                 float* logits_grad, StepResult* result) const {
  switch (loss_) {
    case LossKind::kSigmoid:
      backend->SigmoidCrossEntropy(batch.size, logits, batch.y.data(), logits_grad,
                                   &result->loss_sum, &result->correct);
      break;
    case LossKind::kSoftmax:
      backend->SoftmaxCrossEntropy(batch.size, outputs_, logits, batch.y.data(), logits_grad,
                                   &result->loss_sum, &result->correct);
      break;
    case LossKind::kMse:
    case LossKind::kHuber:
      backend->RegressionLoss(loss_ == LossKind::kMse ? RegressionLossFn::kMse
                                                      : RegressionLossFn::kHuber,
                              huber_delta_, batch.size, outputs_, logits, batch.y.data(),
                              logits_grad, &result->loss_sum, &result->correct);
      break;
  }
  result->examples = batch.size;
}

double Model::L2Penalty(const std::vector<Tensor>& params, std::vector<Tensor>* grads) const {
  double penalty = 0;
  for (const Op& op : ops_) {
    if (op.l2 == 0) continue;
    for (int kernel : {op.kernel, op.kernel_v}) {  // a low-rank cross has two
      if (kernel < 0) continue;
      const Tensor& w = params[kernel];
      const float* v = w.data();
      double sum = 0;
      for (int64_t j = 0; j < w.num_elements(); ++j) sum += static_cast<double>(v[j]) * v[j];
      penalty += 0.5 * op.l2 * sum;
      if (grads != nullptr) {
        float* g = (*grads)[kernel].data();
        for (int64_t j = 0; j < w.num_elements(); ++j) g[j] += op.l2 * v[j];
      }
    }
  }
  return penalty;
}

void Model::TrainStep(Backend* backend, const std::vector<Tensor>& params,
                      const ModelBatch& batch, const std::vector<Tensor>& rows,
                      ModelScratch* scratch, std::vector<Tensor>* grads,
                      std::vector<Tensor>* row_grads, StepResult* result) const {
  const int64_t n = batch.size;
  grads->resize(params.size());
  for (const Op& op : ops_) {
    for (int p : {op.kernel, op.kernel_v, op.bias, op.gamma, op.beta, op.moving_mean,
                  op.moving_var}) {
      if (p >= 0 && (*grads)[p].shape() != params[p].shape()) (*grads)[p] = Tensor(params[p].shape());
    }
  }
  if (wide_dense_kernel_ >= 0 && (*grads)[wide_dense_kernel_].shape() !=
                                     params[wide_dense_kernel_].shape()) {
    (*grads)[wide_dense_kernel_] = Tensor(params[wide_dense_kernel_].shape());
  }
  const float* logits = Forward(backend, params, batch, rows, /*training=*/true, scratch);
  scratch->logits_grad.resize(n * outputs_);
  Loss(backend, logits, batch, scratch->logits_grad.data(), result);
  // The heads read d(loss)/d(logits) after the ops' pass, which may scale
  // it in place.
  if (has_heads_) scratch->head_grad = scratch->logits_grad;

  // Walk back through the ops; `dy` is the gradient w.r.t. op i's output,
  // and after op i, w.r.t. its input. Ops that make a new gradient write it
  // to the buffer `dy` is not in.
  const bool need_input_grad = !features_.empty();
  const float* x0 = need_input_grad ? scratch->input.data() : batch.x.data();
  // Cross layers add their x0 gradients here; it joins the input's gradient
  // at the end.
  float* dx0 = nullptr;
  if ((has_cross_ || !fm_columns_.empty() || dlrm_) && need_input_grad) {
    scratch->grad_x0.assign(n * input_width_, 0.0f);
    dx0 = scratch->grad_x0.data();
  }
  std::vector<float>* dy = &scratch->logits_grad;
  auto next = [&]() {
    std::vector<float>* d = dy == &scratch->grad_a ? &scratch->grad_b : &scratch->grad_a;
    return d;
  };
  for (int i = static_cast<int>(ops_.size()) - 1; i >= 0; --i) {
    const Op& op = ops_[i];
    const float* input = i > 0 ? scratch->activations[i - 1].data()
                               : (need_input_grad && !dlrm_ ? scratch->input.data()
                                                            : batch.x.data());
    const bool input_grad = i > 0 || (need_input_grad && !dlrm_);
    const float* out = scratch->activations[i].data();
    if (op.has_act) {
      const float* x = op.kind == LayerSpec::Kind::kActivation ? input : scratch->pre[i].data();
      if (op.act == ActivationFn::kRelu) {
        backend->ReluGrad(n * op.out, out, dy->data());
      } else {
        backend->ActivateGrad(op.act, n * op.out, op.act == ActivationFn::kGelu ? x : nullptr,
                              out, dy->data());
      }
    }
    Window2d g = op.window;
    g.batch = n;
    std::vector<float>* dx = next();
    switch (op.kind) {
      case LayerSpec::Kind::kDense:
        // dW = input^T · dy, db = column sums of dy, d(input) = dy · W^T.
        backend->Gemm(true, false, op.in, op.out, n, 1.0f, input, dy->data(), 0.0f,
                      (*grads)[op.kernel].data());
        backend->BiasGrad(n, op.out, dy->data(), (*grads)[op.bias].data());
        if (!input_grad) break;
        dx->resize(n * op.in);
        backend->Gemm(false, true, n, op.in, op.out, 1.0f, dy->data(), params[op.kernel].data(),
                      0.0f, dx->data());
        dy = dx;
        break;
      case LayerSpec::Kind::kConv2d: {
        const int64_t filters = op.out / (g.out_h * g.out_w);
        const std::vector<float>& cols = scratch->cols[i];
        backend->Gemm(true, false, g.patch_size(), filters, g.patches(), 1.0f, cols.data(),
                      dy->data(), 0.0f, (*grads)[op.kernel].data());
        backend->BiasGrad(g.patches(), filters, dy->data(), (*grads)[op.bias].data());
        if (!input_grad) break;
        scratch->grad_cols.resize(g.patches() * g.patch_size());
        backend->Gemm(false, true, g.patches(), g.patch_size(), filters, 1.0f, dy->data(),
                      params[op.kernel].data(), 0.0f, scratch->grad_cols.data());
        dx->resize(n * op.in);
        backend->Col2Im(g, scratch->grad_cols.data(), dx->data());
        dy = dx;
        break;
      }
      case LayerSpec::Kind::kMaxPool:
        if (!input_grad) break;
        dx->resize(n * op.in);
        backend->MaxPoolGrad(g, dy->data(), scratch->argmax[i].data(), dx->data());
        dy = dx;
        break;
      case LayerSpec::Kind::kAvgPool:
        if (!input_grad) break;
        dx->resize(n * op.in);
        backend->AvgPoolGrad(g, dy->data(), dx->data());
        dy = dx;
        break;
      case LayerSpec::Kind::kDropout:
        if (op.rate > 0) backend->Multiply(n * op.out, scratch->mask[i].data(), dy->data());
        break;
      case LayerSpec::Kind::kBatchNorm: {
        const int64_t c = op.channels;
        const std::vector<float>& st = scratch->stats[i];
        dx->resize(n * op.in);
        backend->BatchNormGrad(n * (op.in / c), c, scratch->xhat[i].data(),
                               params[op.gamma].data(), st.data() + 2 * c, dy->data(), dx->data(),
                               (*grads)[op.gamma].data(), (*grads)[op.beta].data());
        // Not gradients: the batch statistics the PS averages in.
        std::memcpy((*grads)[op.moving_mean].data(), st.data(), sizeof(float) * c);
        std::memcpy((*grads)[op.moving_var].data(), st.data() + c, sizeof(float) * c);
        dy = dx;
        break;
      }
      case LayerSpec::Kind::kDotInteraction:
        dx->resize(n * op.in);
        DotInteractionBackward(n, op.in, input, input_width_, dot_columns_, x0, dy->data(),
                               dx->data(), dx0);
        dy = dx;
        break;
      case LayerSpec::Kind::kCross:
        scratch->grad_u.resize(n * op.out);
        if (input_grad) dx->resize(n * op.in);
        if (op.rank > 0) {
          scratch->grad_t.resize(n * op.rank);
          LowRankCrossBackward(backend, n, op.out, op.rank, x0, input, params[op.kernel].data(),
                               params[op.kernel_v].data(), scratch->cols[i].data(),
                               scratch->pre[i].data(), dy->data(), scratch->grad_u.data(),
                               scratch->grad_t.data(), (*grads)[op.kernel].data(),
                               (*grads)[op.kernel_v].data(), (*grads)[op.bias].data(),
                               input_grad ? dx->data() : nullptr, dx0);
          if (input_grad) dy = dx;
          break;
        }
        CrossBackward(backend, n, op.out, x0, input, params[op.kernel].data(),
                      scratch->pre[i].data(), dy->data(), scratch->grad_u.data(),
                      (*grads)[op.kernel].data(), (*grads)[op.bias].data(),
                      input_grad ? dx->data() : nullptr, dx0);
        if (input_grad) dy = dx;
        break;
      case LayerSpec::Kind::kActivation:
      case LayerSpec::Kind::kFlatten:
        break;  // dy already is the input's gradient (same layout)
    }
  }
  const double penalty = L2Penalty(params, grads);
  result->loss_sum += penalty * static_cast<double>(n);
  if (!need_input_grad) {
    if (has_heads_) HeadsGrad(batch, x0, scratch->head_grad.data(), grads, dx0, row_grads);
    return;
  }

  // dy is now d(loss)/d(input) [n, input_width]: scatter each feature's
  // columns into its unique rows, summing over every use of a row.
  row_grads->resize(features_.size());
  for (size_t f = 0; f < features_.size(); ++f) {
    Tensor& g = (*row_grads)[f];
    if (g.shape() != rows[f].shape()) {
      g = Tensor(rows[f].shape());
    } else {
      std::fill(g.values().begin(), g.values().end(), 0.0f);
    }
  }
  if (has_heads_) HeadsGrad(batch, x0, scratch->head_grad.data(), grads, dx0, row_grads);
  // d(loss)/d(model input): with DLRM, only what the dot interaction sent
  // (op 0 reads the dense inputs alone).
  const float* d_input = dx0;
  if (!dlrm_) {
    if (dx0 != nullptr) {
      // The model input fed op 0 (dy), every cross layer's x0 and the fm term.
      float* d = dy->data();
      for (int64_t j = 0; j < n * input_width_; ++j) d[j] += dx0[j];
    }
    d_input = dy->data();
  }
  for (size_t f = 0; f < features_.size(); ++f) {
    const Feature& feat = features_[f];
    if (feat.wide) continue;  // HeadsGrad
    const FeatureRows& fr = batch.features[f];
    Tensor& g = (*row_grads)[f];
    for (int64_t e = 0; e < n; ++e) {
      const int64_t begin = fr.offsets[e], end = fr.offsets[e + 1];
      if (begin == end) continue;
      const float* d_in = d_input + e * input_width_ + feat.column;
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
  const float* logits = Forward(backend, params, batch, rows, /*training=*/false, scratch);
  Loss(backend, logits, batch, nullptr, result);
  result->loss_sum += L2Penalty(params, nullptr) * static_cast<double>(batch.size);
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

void Model::Predict(Backend* backend, const std::vector<Tensor>& params, const ModelBatch& batch,
                    const std::vector<Tensor>& rows, ModelScratch* scratch,
                    std::vector<float>* outputs) const {
  const float* logits = Forward(backend, params, batch, rows, /*training=*/false, scratch);
  outputs->assign(logits, logits + batch.size * outputs_);
}

}  // namespace pscluster
