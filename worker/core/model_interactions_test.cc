// Model tests for the recommendation-model interaction layers
// (model_interactions.h): their values on hand-computable inputs, and every
// dense parameter's and looked-up embedding row's gradient against central
// finite differences of the loss.
#include "worker/core/model_interactions.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/initializer.h"
#include "common/model_variables.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/core/cpu_backend.h"
#include "worker/core/model.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;

// Synthetic CTR data for models with categorical inputs, idx otherwise
// (neither is read).
absl::StatusOr<JobSpec> TryParse(const std::string& model_yaml) {
  const bool ctr = model_yaml.find("categorical") != std::string::npos;
  return ParseJobSpec("model:\n" + model_yaml + "optimizer: {type: sgd, learning_rate: 0.1}\n" +
                          (ctr ? "data:\n  train: {format: synthetic_ctr, num_examples: 10}\n"
                                 "  eval: {format: synthetic_ctr, num_examples: 10}\n"
                               : "data:\n  train: {images: a, labels: b}\n"
                                 "  eval: {images: a, labels: b}\n"),
                      "rec.yaml");
}

JobSpec Spec(const std::string& model_yaml) {
  absl::StatusOr<JobSpec> spec = TryParse(model_yaml);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : JobSpec();
}

std::vector<Tensor> InitParams(const Model& model, float stddev) {
  std::vector<Tensor> params;
  for (const VariableSpecProto& v : model.variables()) {
    if (IsRowAccessed(v)) {
      params.emplace_back();
      continue;
    }
    Tensor t(Shape(v.shape().begin(), v.shape().end()));
    InitializerProto init;
    init.set_type("random_normal");
    init.set_stddev(stddev);
    init.set_seed(3);
    RunInitializer(init, v.name(), t.shape(), t.values());
    params.push_back(std::move(t));
  }
  return params;
}

// A batch of 4 examples over `dense` inputs and one categorical feature per
// entry of `dims` (its embedding dim). Even features have 3 unique rows,
// odd ones 2: duplicates within and across examples, and examples without
// ids.
ModelBatch Batch(int64_t dense, const std::vector<int64_t>& dims, std::vector<Tensor>* rows) {
  ModelBatch b;
  b.size = 4;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist;
  b.x.resize(4 * dense);
  for (float& v : b.x) v = dist(rng);
  b.y = {1, 0, 1, 0};
  b.features.resize(dims.size());
  rows->clear();
  for (size_t f = 0; f < dims.size(); ++f) {
    if (f % 2 == 0) {
      b.features[f].offsets = {0, 3, 4, 4, 6};
      b.features[f].index = {0, 1, 0, /**/ 2, /**/ /**/ 1, 2};
      rows->emplace_back(Shape{3, dims[f]});
    } else {
      b.features[f].offsets = {0, 1, 4, 5, 5};
      b.features[f].index = {1, /**/ 0, 0, 1, /**/ 0 /**/};
      rows->emplace_back(Shape{2, dims[f]});
    }
  }
  for (Tensor& t : *rows) {
    for (float& v : t.values()) v = dist(rng);
  }
  return b;
}

// Checks every dense parameter and every looked-up row against central
// differences of the mean loss; returns how many were clearly nonzero.
int CheckGradients(const Model& model, std::vector<Tensor>* params, const ModelBatch& b,
                   std::vector<Tensor>* rows) {
  auto backend = CreateCpuBackend();
  ModelScratch scratch;
  std::vector<Tensor> grads, row_grads;
  StepResult r;
  model.TrainStep(backend.get(), *params, b, *rows, &scratch, &grads, &row_grads, &r);
  EXPECT_TRUE(std::isfinite(r.loss_sum));
  auto mean_loss = [&]() {
    StepResult e;
    ModelScratch s;
    model.EvalStep(backend.get(), *params, b, *rows, &s, &e);
    return e.loss_sum / b.size;
  };
  const float h = 1e-2f;
  int nonzero = 0;
  auto check = [&](float* w, float analytic, const std::string& what) {
    const float saved = *w;
    *w = saved + h;
    const double up = mean_loss();
    *w = saved - h;
    const double down = mean_loss();
    *w = saved;
    const double numeric = (up - down) / (2 * h);
    EXPECT_NEAR(analytic, numeric, 2e-3 + 2e-2 * std::fabs(numeric)) << what;
    nonzero += std::fabs(numeric) > 1e-4;
  };
  for (size_t p = 0; p < params->size(); ++p) {
    if (IsRowAccessed(model.variables()[p])) continue;
    for (int64_t i = 0; i < (*params)[p].num_elements(); ++i) {
      check(&(*params)[p].values()[i], grads[p].values()[i],
            absl::StrCat(model.variables()[p].name(), "[", i, "]"));
    }
  }
  EXPECT_EQ(row_grads.size(), rows->size());
  for (size_t f = 0; f < rows->size() && f < row_grads.size(); ++f) {
    for (int64_t i = 0; i < (*rows)[f].num_elements(); ++i) {
      check(&(*rows)[f].values()[i], row_grads[f].values()[i],
            absl::StrCat("rows of feature ", f, "[", i, "]"));
    }
  }
  return nonzero;
}

constexpr char kDcn[] = R"(
  inputs:
    dense: 3
    categorical:
      - {name: user, vocab_size: 50, embedding_dim: 4, combiner: sum}
      - {name: tags, hashed: true, embedding_dim: 2, combiner: mean}
  layers:
    - cross
    - cross: {}
    - dense: {units: 5, activation: tanh}
    - dense: {units: 1}
  loss: sigmoid_cross_entropy
)";

TEST(CrossLayerTest, VariablesAreSquareKernelsOverTheInput) {
  auto model = Model::Create(Spec(kDcn));
  ASSERT_TRUE(model.ok()) << model.status();
  const auto& vars = (*model)->variables();
  ASSERT_EQ(vars.size(), 10u);
  EXPECT_EQ(vars[2].name(), "cross_0/kernel");
  EXPECT_EQ(Shape(vars[2].shape().begin(), vars[2].shape().end()), (Shape{9, 9}));
  EXPECT_EQ(vars[3].name(), "cross_0/bias");
  EXPECT_EQ(Shape(vars[3].shape().begin(), vars[3].shape().end()), (Shape{9}));
  EXPECT_EQ(vars[4].name(), "cross_1/kernel");
  EXPECT_EQ(vars[6].name(), "dense_0/kernel");
  EXPECT_EQ(Shape(vars[6].shape().begin(), vars[6].shape().end()), (Shape{9, 5}));
}

// y = x0 * (x W + b) + x by hand: two stacked layers on [x0 = (1, 2)].
TEST(CrossLayerTest, ComputesX0TimesLinearPlusX) {
  auto model_or = Model::Create(Spec(R"(
  inputs: {dense: 2}
  layers: [cross, cross, {dense: {units: 1}}]
  loss: mse
)"));
  ASSERT_TRUE(model_or.ok()) << model_or.status();
  const Model& model = **model_or;
  std::vector<Tensor> params = InitParams(model, 0.5f);
  // cross_0: W = [[1, 0], [0, 2]], b = (0.5, 0); cross_1: W = 0, b = (1, -1);
  // dense: kernel (1, 1), bias 0.
  auto set = [](Tensor* t, std::vector<float> v) {
    ASSERT_EQ(t->num_elements(), static_cast<int64_t>(v.size()));
    std::copy(v.begin(), v.end(), t->data());
  };
  set(&params[0], {1, 0, 0, 2});
  set(&params[1], {0.5f, 0});
  set(&params[2], {0, 0, 0, 0});
  set(&params[3], {1, -1});
  set(&params[4], {1, 1});
  set(&params[5], {0});
  ModelBatch b;
  b.size = 1;
  b.x = {1, 2};
  b.y = {0};
  auto backend = CreateCpuBackend();
  ModelScratch scratch;
  std::vector<float> out;
  model.Predict(backend.get(), params, b, {}, &scratch, &out);
  // x1 = x0 * (x0 W0 + b0) + x0 = (1 * 1.5 + 1, 2 * 4 + 2) = (2.5, 10);
  // x2 = x0 * (0 + b1) + x1 = (1 + 2.5, -2 + 10) = (3.5, 8); logit 11.5.
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FLOAT_EQ(out[0], 11.5f);
}

// The gradient flows through x (the stack) and x0 (every layer's x0 is the
// model input) into the dense parameters and the embedding rows.
TEST(CrossLayerTest, GradientsMatchFiniteDifferencesIntoEmbeddings) {
  auto model_or = Model::Create(Spec(kDcn));
  ASSERT_TRUE(model_or.ok()) << model_or.status();
  std::vector<Tensor> params = InitParams(**model_or, 0.3f);
  std::vector<Tensor> rows;
  const ModelBatch b = Batch(3, {4, 2}, &rows);
  EXPECT_GT(CheckGradients(**model_or, &params, b, &rows), 100);
}

// Dense inputs only (x0 is the batch itself), softmax, a cross layer after
// dropout (rate 0) and with its own L2.
TEST(CrossLayerTest, GradientsMatchFiniteDifferencesOnDenseInputs) {
  auto model_or = Model::Create(Spec(R"(
  inputs: {dense: 4}
  layers:
    - cross: {l2: 0.1}
    - dropout: {rate: 0}
    - cross
    - dense: {units: 3}
  loss: softmax_cross_entropy
)"));
  ASSERT_TRUE(model_or.ok()) << model_or.status();
  std::vector<Tensor> params = InitParams(**model_or, 0.3f);
  std::vector<Tensor> rows;
  ModelBatch b = Batch(4, {}, &rows);
  b.y = {0, 1, 2, 1};
  EXPECT_GT(CheckGradients(**model_or, &params, b, &rows), 40);
}

// The low-rank form W = U V (rank 2 of 9), stacked on a full-rank layer,
// with L2 on both factors; the gradient reaches the embeddings.
TEST(CrossLayerTest, LowRankGradientsMatchFiniteDifferences) {
  auto model_or = Model::Create(Spec(R"(
  inputs:
    dense: 3
    categorical:
      - {name: user, vocab_size: 50, embedding_dim: 4, combiner: sum}
      - {name: tags, hashed: true, embedding_dim: 2, combiner: mean}
  layers:
    - cross: {rank: 2, l2: 0.1}
    - cross
    - dense: {units: 1}
  loss: sigmoid_cross_entropy
)"));
  ASSERT_TRUE(model_or.ok()) << model_or.status();
  const auto& vars = (*model_or)->variables();
  ASSERT_EQ(vars.size(), 9u);
  EXPECT_EQ(vars[2].name(), "cross_0/kernel_u");
  EXPECT_EQ(Shape(vars[2].shape().begin(), vars[2].shape().end()), (Shape{9, 2}));
  EXPECT_EQ(vars[3].name(), "cross_0/kernel_v");
  EXPECT_EQ(Shape(vars[3].shape().begin(), vars[3].shape().end()), (Shape{2, 9}));
  EXPECT_EQ(vars[5].name(), "cross_1/kernel");
  std::vector<Tensor> params = InitParams(**model_or, 0.3f);
  std::vector<Tensor> rows;
  const ModelBatch b = Batch(3, {4, 2}, &rows);
  EXPECT_GT(CheckGradients(**model_or, &params, b, &rows), 100);
}

TEST(CrossLayerTest, RefusesInputsNotAsWideAsTheModelInput) {
  absl::StatusOr<JobSpec> spec = TryParse(R"(
  inputs: {dense: 4}
  layers: [{dense: {units: 3}}, cross, {dense: {units: 1}}]
  loss: sigmoid_cross_entropy
)");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()),
              HasSubstr("rec.yaml:4:33: model.layers[1]: cross needs an input as wide as the "
                        "model's input (4"));
  spec = TryParse(R"(
  inputs: {image: [4, 4, 1]}
  layers: [cross, {dense: {units: 1}}]
  loss: sigmoid_cross_entropy
)");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("not on images"));
  spec = TryParse(R"(
  inputs: {dense: 4}
  layers: [{cross: {rank: 4}}, {dense: {units: 1}}]
  loss: sigmoid_cross_entropy
)");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()),
              HasSubstr("cross rank 4 must be below its width 4"));
  spec = TryParse(R"(
  inputs: {dense: 4}
  layers: [{cross: {ranks: 2}}, {dense: {units: 1}}]
  loss: sigmoid_cross_entropy
)");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("ranks"));
  // A spec built in code is checked again by Model::Create.
  JobSpec built = Spec(kDcn);
  built.model.layers[1].input.channels = 5;
  EXPECT_EQ(Model::Create(built).status().code(), absl::StatusCode::kInvalidArgument);
}

// DeepFM: fm over user and tags (dim 3), the wide part over their 1-dim
// twins and the dense inputs, a deep MLP.
constexpr char kDeepFm[] = R"(
  inputs:
    dense: 3
    categorical:
      - {name: user, vocab_size: 50, embedding_dim: 3, combiner: sum}
      - {name: tags, hashed: true, embedding_dim: 3, combiner: mean}
      - {name: user_w, column: user, vocab_size: 50, embedding_dim: 1, combiner: sum}
      - {name: tags_w, column: tags, hashed: true, embedding_dim: 1, combiner: mean}
  layers:
    - dense: {units: 5, activation: tanh}
    - dense: {units: 1}
  loss: sigmoid_cross_entropy
  fm: true
  wide: {categorical: [user_w, tags_w], dense: true}
)";

TEST(HeadsTest, WideFeaturesLeaveTheDeepInput) {
  auto model = Model::Create(Spec(kDeepFm));
  ASSERT_TRUE(model.ok()) << model.status();
  const auto& vars = (*model)->variables();
  ASSERT_EQ(vars.size(), 9u);
  EXPECT_EQ(vars[2].name(), "embedding/user_w");
  EXPECT_EQ(Shape(vars[2].shape().begin(), vars[2].shape().end()), (Shape{50, 1}));
  EXPECT_EQ(vars[4].name(), "dense_0/kernel");
  // 3 dense + 3 + 3: the wide features are not in it.
  EXPECT_EQ(Shape(vars[4].shape().begin(), vars[4].shape().end()), (Shape{9, 5}));
  EXPECT_EQ(vars[8].name(), "wide/dense_kernel");
  EXPECT_EQ(Shape(vars[8].shape().begin(), vars[8].shape().end()), (Shape{3, 1}));
}

// With the deep part and the wide dense kernel at zero, the logit is the fm
// term plus the wide rows: the sum of the pairwise dot products of the
// combined embeddings, plus the combined 1-dim weights.
TEST(HeadsTest, LogitIsFmPlusWidePlusDeep) {
  auto model_or = Model::Create(Spec(kDeepFm));
  ASSERT_TRUE(model_or.ok()) << model_or.status();
  const Model& model = **model_or;
  std::vector<Tensor> params = InitParams(model, 0.5f);
  for (size_t p = 4; p < params.size(); ++p) {
    std::fill(params[p].data(), params[p].data() + params[p].num_elements(), 0.0f);
  }
  std::vector<Tensor> rows;
  const ModelBatch b = Batch(3, {3, 3, 1, 1}, &rows);
  auto backend = CreateCpuBackend();
  ModelScratch scratch;
  std::vector<float> out;
  model.Predict(backend.get(), params, b, rows, &scratch, &out);
  ASSERT_EQ(out.size(), 4u);
  for (int64_t e = 0; e < 4; ++e) {
    // Combined embeddings: user sums its rows, tags averages them.
    std::vector<std::vector<double>> v(4);
    for (int f = 0; f < 4; ++f) {
      const int64_t dim = f < 2 ? 3 : 1;
      const FeatureRows& fr = b.features[f];
      v[f].assign(dim, 0.0);
      const int64_t count = fr.offsets[e + 1] - fr.offsets[e];
      for (int64_t k = fr.offsets[e]; k < fr.offsets[e + 1]; ++k) {
        for (int64_t d = 0; d < dim; ++d) {
          v[f][d] += rows[f].data()[fr.index[k] * dim + d] / (f % 2 == 1 ? count : 1);
        }
      }
    }
    double want = v[2][0] + v[3][0];
    for (int d = 0; d < 3; ++d) want += v[0][d] * v[1][d];
    EXPECT_NEAR(out[e], want, 1e-5) << "example " << e;
  }
}

TEST(HeadsTest, DeepFmGradientsMatchFiniteDifferences) {
  auto model_or = Model::Create(Spec(kDeepFm));
  ASSERT_TRUE(model_or.ok()) << model_or.status();
  std::vector<Tensor> params = InitParams(**model_or, 0.3f);
  std::vector<Tensor> rows;
  const ModelBatch b = Batch(3, {3, 3, 1, 1}, &rows);
  EXPECT_GT(CheckGradients(**model_or, &params, b, &rows), 60);
}

// Wide & Deep without fm, on top of a cross layer (whose x0 then holds no
// wide feature), with a softplus-free mse loss on one output.
TEST(HeadsTest, WideAndDeepGradientsMatchFiniteDifferences) {
  auto model_or = Model::Create(Spec(R"(
  inputs:
    dense: 2
    categorical:
      - {name: user, vocab_size: 50, embedding_dim: 2}
      - {name: tags_w, column: tags, hashed: true, embedding_dim: 1, combiner: mean}
  layers: [cross, {dense: {units: 4, activation: relu}}, {dense: {units: 1}}]
  loss: sigmoid_cross_entropy
  wide: {categorical: [tags_w]}
)"));
  ASSERT_TRUE(model_or.ok()) << model_or.status();
  std::vector<Tensor> params = InitParams(**model_or, 0.3f);
  std::vector<Tensor> rows;
  const ModelBatch b = Batch(2, {2, 1}, &rows);
  EXPECT_GT(CheckGradients(**model_or, &params, b, &rows), 30);
}

TEST(HeadsTest, RefusesWhatTheyCannotCompute) {
  const std::string two = R"(
  inputs:
    dense: 2
    categorical:
      - {name: a, vocab_size: 5, embedding_dim: 2}
      - {name: b, vocab_size: 5, embedding_dim: DIM}
  layers: [{dense: {units: UNITS}}]
  loss: LOSS
)";
  auto parse = [&](const std::string& dim, const std::string& units, const std::string& loss,
                   const std::string& extra) {
    std::string y = two;
    y.replace(y.find("DIM"), 3, dim);
    y.replace(y.find("UNITS"), 5, units);
    y.replace(y.find("LOSS"), 4, loss);
    absl::StatusOr<JobSpec> spec = TryParse(y + extra);
    EXPECT_FALSE(spec.ok()) << extra;
    return std::string(spec.status().message());
  };
  EXPECT_THAT(parse("3", "1", "sigmoid_cross_entropy", "  fm: true\n"),
              HasSubstr("model.fm needs one embedding_dim for every categorical feature outside "
                        "model.wide, but 'b' has 3"));
  EXPECT_THAT(parse("1", "1", "sigmoid_cross_entropy", "  fm: true\n  wide: {categorical: [b]}\n"),
              HasSubstr("model.fm needs at least 2 categorical features outside model.wide"));
  EXPECT_THAT(parse("2", "1", "sigmoid_cross_entropy", "  wide: {categorical: [c]}\n"),
              HasSubstr("names 'c', which is not a feature"));
  EXPECT_THAT(parse("2", "1", "sigmoid_cross_entropy", "  wide: {categorical: [b]}\n"),
              HasSubstr("feature 'b' needs embedding_dim: 1"));
  EXPECT_THAT(parse("2", "2", "softmax_cross_entropy", "  fm: true\n"),
              HasSubstr("rec.yaml:10:7: model.fm adds to a single logit: the last layer needs 1 "
                        "unit, not 2"));
  EXPECT_THAT(parse("2", "1", "sigmoid_cross_entropy", "  wide: {}\n"),
              HasSubstr("model.wide needs categorical: [names] or dense: true"));
  EXPECT_THAT(parse("2", "1", "sigmoid_cross_entropy", "  wide: {density: true}\n"),
              HasSubstr("density"));
}

// DLRM: a bottom MLP over the 3 dense inputs to dim 2, two features of dim
// 2, the top MLP over [z0 | 3 pairwise dots].
constexpr char kDlrm[] = R"(
  inputs:
    dense: 3
    categorical:
      - {name: user, vocab_size: 50, embedding_dim: 2, combiner: sum}
      - {name: tags, hashed: true, embedding_dim: 2, combiner: mean}
  bottom:
    - dense: {units: 4, activation: tanh}
    - dense: {units: 2}
  layers:
    - dense: {units: 3, activation: tanh}
    - dense: {units: 1}
  loss: sigmoid_cross_entropy
)";

TEST(DlrmTest, VariablesOfBottomAndTop) {
  auto model = Model::Create(Spec(kDlrm));
  ASSERT_TRUE(model.ok()) << model.status();
  const auto& vars = (*model)->variables();
  ASSERT_EQ(vars.size(), 10u);
  EXPECT_EQ(vars[2].name(), "bottom_0/kernel");
  EXPECT_EQ(Shape(vars[2].shape().begin(), vars[2].shape().end()), (Shape{3, 4}));
  EXPECT_EQ(vars[4].name(), "bottom_1/kernel");
  EXPECT_EQ(Shape(vars[4].shape().begin(), vars[4].shape().end()), (Shape{4, 2}));
  EXPECT_EQ(vars[6].name(), "dense_0/kernel");
  // z0 (2) + pairs of 3 vectors (3).
  EXPECT_EQ(Shape(vars[6].shape().begin(), vars[6].shape().end()), (Shape{5, 3}));
}

TEST(DlrmTest, DotInteractionIsBottomThenPairwiseDots) {
  // One example: z0 = (1, 2); embeddings at columns 1 and 3 of a width-5
  // input row: z1 = (3, 4), z2 = (5, 6).
  const float bottom[] = {1, 2};
  const float x0[] = {9, 3, 4, 5, 6};
  float y[5];
  DotInteractionForward(1, 2, bottom, 5, {1, 3}, x0, y);
  EXPECT_EQ(std::vector<float>(y, y + 5), (std::vector<float>{1, 2, 11, 17, 39}));
  // Backward of sum(y * dy).
  const float dy[] = {1, 0, 1, 0, 2};
  float dbottom[2];
  float dx0[5] = {0, 0, 0, 0, 0};
  DotInteractionBackward(1, 2, bottom, 5, {1, 3}, x0, dy, dbottom, dx0);
  // d z0 = (1, 0) + 1 * z1 = (4, 4); d z1 = 1 * z0 + 2 * z2 = (11, 14);
  // d z2 = 2 * z1 = (6, 8).
  EXPECT_EQ(std::vector<float>(dbottom, dbottom + 2), (std::vector<float>{4, 4}));
  EXPECT_EQ(std::vector<float>(dx0, dx0 + 5), (std::vector<float>{0, 11, 14, 6, 8}));
}

TEST(DlrmTest, GradientsMatchFiniteDifferences) {
  auto model_or = Model::Create(Spec(kDlrm));
  ASSERT_TRUE(model_or.ok()) << model_or.status();
  std::vector<Tensor> params = InitParams(**model_or, 0.5f);
  std::vector<Tensor> rows;
  const ModelBatch b = Batch(3, {2, 2}, &rows);
  EXPECT_GT(CheckGradients(**model_or, &params, b, &rows), 50);
}

TEST(DlrmTest, RefusesWhatItCannotCompute) {
  auto message = [](const std::string& y) {
    absl::StatusOr<JobSpec> spec = TryParse(y);
    EXPECT_FALSE(spec.ok()) << y;
    return std::string(spec.status().message());
  };
  EXPECT_THAT(message(R"(
  inputs:
    dense: 3
    categorical: [{name: user, vocab_size: 50, embedding_dim: 4}]
  bottom: [{dense: {units: 2}}]
  layers: [{dense: {units: 1}}]
  loss: sigmoid_cross_entropy
)"),
              HasSubstr("rec.yaml:6:12: model.bottom ends in 2 units, but feature 'user' has "
                        "embedding_dim 4"));
  EXPECT_THAT(message(R"(
  inputs:
    categorical: [{name: user, vocab_size: 50, embedding_dim: 2}]
  bottom: [{dense: {units: 2}}]
  layers: [{dense: {units: 1}}]
  loss: sigmoid_cross_entropy
)"),
              HasSubstr("model.bottom (DLRM) needs dense inputs"));
  EXPECT_THAT(message(R"(
  inputs:
    dense: 3
    categorical: [{name: user, vocab_size: 50, embedding_dim: 2}]
  bottom: [{dense: {units: 2}}, relu]
  layers: [{dense: {units: 1}}]
  loss: sigmoid_cross_entropy
)"),
              HasSubstr("model.bottom[1]: model.bottom takes dense layers only"));
  EXPECT_THAT(message(R"(
  inputs:
    dense: 3
    categorical: [{name: user, vocab_size: 50, embedding_dim: 2}]
  bottom: [{dense: {units: 2}}]
  layers: [cross, {dense: {units: 1}}]
  loss: sigmoid_cross_entropy
)"),
              HasSubstr("cross cannot follow model.bottom"));
}

}  // namespace
}  // namespace pscluster
