#include "common/gradient_sum.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pscluster {
namespace {

void AddScaled(const char* bytes, float weight, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, bytes + i * sizeof(float), sizeof(float));
    out[i] += weight * v;
  }
}

}  // namespace

std::string GradientSum::FloatBytes(const float* values, size_t n, float scale) {
  std::string out(n * sizeof(float), '\0');
  for (size_t i = 0; i < n; ++i) {
    const float v = values[i] * scale;
    std::memcpy(out.data() + i * sizeof(float), &v, sizeof(float));
  }
  return out;
}

absl::Status GradientSum::AddDense(const NamedTensor& g, float weight) {
  const std::string& data = g.tensor().data();
  const size_t n = data.size() / sizeof(float);
  Dense& sum = dense_[g.name()];
  if (sum.sum.empty()) {
    sum.like = g.tensor();
    sum.like.clear_data();
    sum.sum.assign(n, 0.0f);
  } else if (sum.sum.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat("gradient for variable '", g.name(), "' has ", n,
                                                   " elements; the step's other replicas "
                                                   "pushed ",
                                                   sum.sum.size()));
  }
  AddScaled(data.data(), weight, sum.sum.data(), n);
  return absl::OkStatus();
}

absl::Status GradientSum::AddRows(const SparseGradient& g, float weight) {
  const size_t ids = g.ids().size() / sizeof(uint64_t);
  if (ids == 0) return absl::OkStatus();
  const std::string& rows = g.rows().data();
  const int64_t width = static_cast<int64_t>(rows.size() / sizeof(float) / ids);
  Rows& sum = rows_[g.name()];
  if (sum.width == 0) sum.width = width;
  if (sum.width != width || rows.size() != ids * static_cast<size_t>(width) * sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrCat("gradient rows for variable '", g.name(),
                                                   "' are ", width,
                                                   " wide; the step's other "
                                                   "replicas pushed ",
                                                   sum.width));
  }
  for (size_t i = 0; i < ids; ++i) {
    uint64_t id;
    std::memcpy(&id, g.ids().data() + i * sizeof(uint64_t), sizeof(uint64_t));
    auto [it, inserted] = sum.index.emplace(id, sum.ids.size());
    if (inserted) {
      sum.ids.push_back(id);
      sum.rows.resize(sum.rows.size() + static_cast<size_t>(width), 0.0f);
    }
    AddScaled(rows.data() + i * width * sizeof(float), weight, sum.rows.data() + it->second * width,
              static_cast<size_t>(width));
  }
  return absl::OkStatus();
}

absl::Status GradientSum::Add(const PushRequest& request, float weight) {
  for (const NamedTensor& g : request.gradients()) RETURN_IF_ERROR(AddDense(g, weight));
  for (const SparseGradient& g : request.sparse()) RETURN_IF_ERROR(AddRows(g, weight));
  return absl::OkStatus();
}

void GradientSum::WriteTo(float scale, PushRequest* out) const {
  for (const auto& [name, sum] : dense_) {
    NamedTensor* t = out->add_gradients();
    t->set_name(name);
    *t->mutable_tensor() = sum.like;
    t->mutable_tensor()->set_data(FloatBytes(sum.sum.data(), sum.sum.size(), scale));
  }
  for (const auto& [name, sum] : rows_) {
    if (sum.ids.empty()) continue;
    SparseGradient* g = out->add_sparse();
    g->set_name(name);
    std::string ids(sum.ids.size() * sizeof(uint64_t), '\0');
    std::memcpy(ids.data(), sum.ids.data(), ids.size());
    g->set_ids(std::move(ids));
    TensorProto* t = g->mutable_rows();
    t->set_dtype(DT_FLOAT32);
    t->add_shape(static_cast<int64_t>(sum.ids.size()));
    t->add_shape(sum.width);
    t->set_data(FloatBytes(sum.rows.data(), sum.rows.size(), scale));
  }
}

}  // namespace pscluster
