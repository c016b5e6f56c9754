// Model's heads (model.fm, model.wide): scalars added to the logit of the
// last layer, and their backward pass. See model.h.
#include <algorithm>

#include "worker/core/model.h"
#include "worker/core/model_interactions.h"

namespace pscluster {

void Model::Heads(const std::vector<Tensor>& params, const ModelBatch& batch,
                  const std::vector<Tensor>& rows, const float* x0, float* logits) const {
  const int64_t n = batch.size;
  if (!fm_columns_.empty()) FmForward(n, input_width_, fm_columns_, fm_dim_, x0, logits);
  for (size_t f = 0; f < features_.size(); ++f) {
    if (!features_[f].wide) continue;
    const FeatureRows& fr = batch.features[f];
    const float* w = rows[f].data();
    for (int64_t e = 0; e < n; ++e) {
      const int64_t begin = fr.offsets[e], end = fr.offsets[e + 1];
      if (begin == end) continue;
      float sum = 0;
      for (int64_t k = begin; k < end; ++k) sum += w[fr.index[k]];
      logits[e] += features_[f].mean ? sum / static_cast<float>(end - begin) : sum;
    }
  }
  if (wide_dense_kernel_ >= 0) {
    const float* w = params[wide_dense_kernel_].data();
    for (int64_t e = 0; e < n; ++e) {
      const float* x = batch.x.data() + e * input_size_;
      float dot = 0;
      for (int64_t j = 0; j < input_size_; ++j) dot += x[j] * w[j];
      logits[e] += dot;
    }
  }
}

void Model::HeadsGrad(const ModelBatch& batch, const float* x0,
                      const float* g, std::vector<Tensor>* grads, float* dx0,
                      std::vector<Tensor>* row_grads) const {
  const int64_t n = batch.size;
  if (!fm_columns_.empty()) FmBackward(n, input_width_, fm_columns_, fm_dim_, x0, g, dx0);
  for (size_t f = 0; f < features_.size(); ++f) {
    if (!features_[f].wide) continue;
    const FeatureRows& fr = batch.features[f];
    float* dw = (*row_grads)[f].data();
    for (int64_t e = 0; e < n; ++e) {
      const int64_t begin = fr.offsets[e], end = fr.offsets[e + 1];
      if (begin == end) continue;
      const float d = features_[f].mean ? g[e] / static_cast<float>(end - begin) : g[e];
      for (int64_t k = begin; k < end; ++k) dw[fr.index[k]] += d;
    }
  }
  if (wide_dense_kernel_ >= 0) {
    float* dw = (*grads)[wide_dense_kernel_].data();
    std::fill(dw, dw + input_size_, 0.0f);
    for (int64_t e = 0; e < n; ++e) {
      const float* x = batch.x.data() + e * input_size_;
      for (int64_t j = 0; j < input_size_; ++j) dw[j] += g[e] * x[j];
    }
  }
}

}  // namespace pscluster
