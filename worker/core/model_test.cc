#include "worker/core/model.h"

#include <cmath>
#include <random>

#include "common/initializer.h"
#include "common/metrics.h"
#include "common/model_variables.h"
#include "gtest/gtest.h"
#include "worker/core/cpu_backend.h"

namespace pscluster {
namespace {

JobSpec SmallSpec() {
  auto spec = ParseJobSpec(R"(
model:
  inputs: {dense: 5}
  layers:
    - dense: {units: 7, activation: relu}
    - dense: {units: 6}
    - relu
    - dense: {units: 3}
optimizer: {type: sgd, learning_rate: 0.1}
data:
  train: {images: a, labels: b}
  eval: {images: a, labels: b}
)",
                           "small.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

std::vector<Tensor> InitParams(const Model& model) {
  std::vector<Tensor> params;
  for (const VariableSpecProto& v : model.variables()) {
    if (IsRowAccessed(v)) {  // embedding tables are looked up, not pulled
      params.emplace_back();
      continue;
    }
    Tensor t(Shape(v.shape().begin(), v.shape().end()));
    InitializerProto init;
    init.set_type("random_normal");
    init.set_stddev(0.5f);
    init.set_seed(3);
    RunInitializer(init, v.name(), t.shape(), t.values());
    params.push_back(std::move(t));
  }
  return params;
}

TEST(ModelTest, VariablesFollowTheLayers) {
  auto model = Model::Create(SmallSpec());
  ASSERT_TRUE(model.ok());
  const auto& vars = (*model)->variables();
  ASSERT_EQ(vars.size(), 6u);
  EXPECT_EQ(vars[0].name(), "dense_0/kernel");
  EXPECT_EQ(Shape(vars[0].shape().begin(), vars[0].shape().end()), (Shape{5, 7}));
  EXPECT_EQ(vars[3].name(), "dense_1/bias");
  EXPECT_EQ(Shape(vars[4].shape().begin(), vars[4].shape().end()), (Shape{6, 3}));
  EXPECT_EQ((*model)->num_classes(), 3);
}

// The analytic gradient of every parameter matches central finite differences.
TEST(ModelTest, GradientsMatchFiniteDifferences) {
  auto model_or = Model::Create(SmallSpec());
  ASSERT_TRUE(model_or.ok());
  const Model& model = **model_or;
  auto backend = CreateCpuBackend();
  std::vector<Tensor> params = InitParams(model);
  const int64_t batch = 4;
  ModelBatch b;
  b.size = batch;
  b.x.resize(batch * 5);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  for (float& v : b.x) v = dist(rng);
  b.y = {0, 2, 1, 2};

  ModelScratch scratch;
  std::vector<Tensor> grads, row_grads;
  StepResult r;
  model.TrainStep(backend.get(), params, b, {}, &scratch, &grads, &row_grads, &r);
  EXPECT_EQ(r.examples, batch);
  EXPECT_TRUE(r.positive_histogram.empty());

  auto mean_loss = [&]() {
    StepResult e;
    ModelScratch s;
    model.EvalStep(backend.get(), params, b, {}, &s, &e);
    EXPECT_TRUE(e.positive_histogram.empty());  // softmax: no AUC
    return e.loss_sum / batch;
  };
  const float h = 1e-2f;
  int checked = 0;
  for (size_t p = 0; p < params.size(); ++p) {
    for (int64_t i = 0; i < params[p].num_elements(); i += 3) {
      float& w = params[p].values()[i];
      const float saved = w;
      w = saved + h;
      const double up = mean_loss();
      w = saved - h;
      const double down = mean_loss();
      w = saved;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(grads[p].values()[i], numeric, 2e-3 + 2e-2 * std::fabs(numeric))
          << model.variables()[p].name() << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 30);
}

// Plain SGD on a linearly separable problem drives the loss down and the
// accuracy up: the forward/backward pieces compose into learning.
TEST(ModelTest, SgdLearnsASeparableProblem) {
  auto model_or = Model::Create(SmallSpec());
  ASSERT_TRUE(model_or.ok());
  const Model& model = **model_or;
  auto backend = CreateCpuBackend();
  std::vector<Tensor> params = InitParams(model);
  const int64_t n = 96;
  ModelBatch b;
  b.size = n;
  b.x.resize(n * 5);
  b.y.resize(n);
  std::mt19937 rng(2);
  std::normal_distribution<float> dist;
  for (int64_t i = 0; i < n; ++i) {
    b.y[i] = static_cast<int32_t>(i % 3);
    for (int j = 0; j < 5; ++j) b.x[i * 5 + j] = 0.3f * dist(rng) + (j == b.y[i] ? 2.0f : 0.0f);
  }
  ModelScratch scratch;
  std::vector<Tensor> grads, row_grads;
  StepResult first, last;
  for (int step = 0; step < 300; ++step) {
    StepResult r;
    model.TrainStep(backend.get(), params, b, {}, &scratch, &grads, &row_grads, &r);
    if (step == 0) first = r;
    last = r;
    for (size_t p = 0; p < params.size(); ++p) {
      for (int64_t i = 0; i < params[p].num_elements(); ++i) {
        params[p].values()[i] -= 0.1f * grads[p].values()[i];
      }
    }
  }
  EXPECT_LT(last.loss_sum, 0.2 * first.loss_sum);
  EXPECT_GE(last.correct, n - 2);
}

// Two categorical features (sum, mean) + dense inputs + sigmoid loss.
JobSpec CtrSpec() {
  auto spec = ParseJobSpec(R"(
model:
  inputs:
    dense: 3
    categorical:
      - {name: user, vocab_size: 50, embedding_dim: 4, combiner: sum}
      - {name: tags, hashed: true, embedding_dim: 2, combiner: mean}
  layers:
    - dense: {units: 5, activation: relu}
    - dense: {units: 1}
  loss: sigmoid_cross_entropy
optimizer: {type: sgd, learning_rate: 0.1}
data:
  train: {format: synthetic_ctr, num_examples: 10}
  eval: {format: synthetic_ctr, num_examples: 10}
)",
                           "ctr.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// A batch of 4 examples. user: duplicates within example 0 and across
// examples, example 2 has no id. tags: duplicates within example 1, example
// 3 has no id.
ModelBatch CtrBatch(std::vector<Tensor>* rows) {
  ModelBatch b;
  b.size = 4;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist;
  b.x.resize(4 * 3);
  for (float& v : b.x) v = dist(rng);
  b.y = {1, 0, 1, 0};
  b.features.resize(2);
  b.features[0].offsets = {0, 3, 4, 4, 6};
  b.features[0].index = {0, 1, 0, /**/ 2, /**/ /**/ 1, 2};
  b.features[1].offsets = {0, 1, 4, 5, 5};
  b.features[1].index = {1, /**/ 0, 0, 1, /**/ 0 /**/};
  rows->clear();
  rows->emplace_back(Shape{3, 4});
  rows->emplace_back(Shape{2, 2});
  for (Tensor& t : *rows) {
    for (float& v : t.values()) v = dist(rng);
  }
  return b;
}

TEST(ModelTest, EmbeddingsComeFirstInTheVariables) {
  auto model = Model::Create(CtrSpec());
  ASSERT_TRUE(model.ok()) << model.status();
  const auto& vars = (*model)->variables();
  ASSERT_EQ(vars.size(), 6u);
  EXPECT_EQ(vars[0].name(), "embedding/user");
  EXPECT_EQ(vars[1].name(), "embedding/tags");
  EXPECT_EQ(vars[2].name(), "dense_0/kernel");
  // Input width: 3 dense + 4 + 2.
  EXPECT_EQ(Shape(vars[2].shape().begin(), vars[2].shape().end()), (Shape{9, 5}));
  EXPECT_TRUE((*model)->sigmoid());
  EXPECT_EQ((*model)->num_classes(), 2);
  EXPECT_EQ((*model)->num_features(), 2);
  EXPECT_EQ((*model)->embedding_dim(1), 2);
}

TEST(ModelTest, SigmoidNeedsOneOutputUnit) {
  JobSpec spec = CtrSpec();
  spec.model.layers.back().units = 2;
  EXPECT_EQ(Model::Create(spec).status().code(), absl::StatusCode::kInvalidArgument);
}

// Dense parameters and the looked-up rows both match central finite
// differences; a row used several times gets the sum of its uses.
TEST(ModelTest, CategoricalGradientsMatchFiniteDifferences) {
  auto model_or = Model::Create(CtrSpec());
  ASSERT_TRUE(model_or.ok()) << model_or.status();
  const Model& model = **model_or;
  auto backend = CreateCpuBackend();
  std::vector<Tensor> params = InitParams(model);
  std::vector<Tensor> rows;
  const ModelBatch b = CtrBatch(&rows);

  ModelScratch scratch;
  std::vector<Tensor> grads, row_grads;
  StepResult r;
  model.TrainStep(backend.get(), params, b, rows, &scratch, &grads, &row_grads, &r);
  EXPECT_EQ(r.examples, 4);
  ASSERT_EQ(row_grads.size(), 2u);
  EXPECT_EQ(row_grads[0].shape(), (Shape{3, 4}));
  EXPECT_EQ(row_grads[1].shape(), (Shape{2, 2}));
  EXPECT_TRUE(grads[0].values().empty());  // embedding entries stay empty

  auto mean_loss = [&]() {
    StepResult e;
    ModelScratch s;
    model.EvalStep(backend.get(), params, b, rows, &s, &e);
    return e.loss_sum / b.size;
  };
  const float h = 1e-2f;
  auto check = [&](float* w, float analytic, const std::string& what) {
    const float saved = *w;
    *w = saved + h;
    const double up = mean_loss();
    *w = saved - h;
    const double down = mean_loss();
    *w = saved;
    const double numeric = (up - down) / (2 * h);
    EXPECT_NEAR(analytic, numeric, 2e-3 + 2e-2 * std::fabs(numeric)) << what;
    return std::fabs(numeric) > 1e-4;
  };
  int nonzero = 0;
  for (size_t p = 2; p < params.size(); ++p) {
    for (int64_t i = 0; i < params[p].num_elements(); ++i) {
      nonzero += check(&params[p].values()[i], grads[p].values()[i],
                       absl::StrCat(model.variables()[p].name(), "[", i, "]"));
    }
  }
  for (size_t f = 0; f < rows.size(); ++f) {
    for (int64_t i = 0; i < rows[f].num_elements(); ++i) {
      nonzero += check(&rows[f].values()[i], row_grads[f].values()[i],
                       absl::StrCat("rows of feature ", f, "[", i, "]"));
    }
  }
  EXPECT_GT(nonzero, 40);
}

// Mean divides by the example's id count and an example without ids adds
// nothing: with a zero dense input, identity-like weights make the logit of
// each example readable.
TEST(ModelTest, CombinersSumAndMean) {
  auto spec = ParseJobSpec(R"(
model:
  inputs:
    dense: 1
    categorical:
      - {name: a, vocab_size: 10, embedding_dim: 1, combiner: sum}
      - {name: b, vocab_size: 10, embedding_dim: 1, combiner: mean}
  layers:
    - dense: {units: 1}
  loss: sigmoid_cross_entropy
optimizer: {type: sgd, learning_rate: 0.1}
data:
  train: {format: synthetic_ctr, num_examples: 10}
  eval: {format: synthetic_ctr, num_examples: 10}
)",
                           "comb.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto model = Model::Create(*spec);
  ASSERT_TRUE(model.ok());
  std::vector<Tensor> params(4);
  params[2] = Tensor({3, 1}, {0.0f, 1.0f, 10.0f});  // logit = sum_a + 10 * mean_b
  params[3] = Tensor({1}, {0.0f});
  std::vector<Tensor> rows = {Tensor({2, 1}, {1.0f, 2.0f}), Tensor({2, 1}, {0.5f, 0.25f})};
  ModelBatch b;
  b.size = 2;
  b.x = {0.0f, 0.0f};
  b.y = {1, 1};
  b.features.resize(2);
  b.features[0].offsets = {0, 3, 3};  // example 0: a = 1 + 2 + 2; example 1: none
  b.features[0].index = {0, 1, 1};
  b.features[1].offsets = {0, 2, 5};  // example 0: mean(0.5, 0.25); 1: mean(0.5, 0.5, 0.25)
  b.features[1].index = {0, 1, 0, 0, 1};
  auto backend = CreateCpuBackend();
  ModelScratch scratch;
  std::vector<Tensor> grads, row_grads;
  StepResult r;
  (*model)->TrainStep(backend.get(), params, b, rows, &scratch, &grads, &row_grads, &r);
  const double logit0 = 5.0 + 10 * 0.375;
  const double logit1 = 0.0 + 10 * (1.25 / 3);
  auto nll = [](double x) { return std::log1p(std::exp(-x)); };  // label 1
  EXPECT_NEAR(r.loss_sum, nll(logit0) + nll(logit1), 1e-5);
  // d(mean loss)/d(logit_e) = (sigmoid - 1) / 2.
  auto dl = [](double x) { return (1.0 / (1.0 + std::exp(-x)) - 1.0) / 2; };
  // Feature a (sum, kernel weight 1): row 0 used once, row 1 twice, by example 0.
  EXPECT_NEAR(row_grads[0].values()[0], dl(logit0), 1e-6);
  EXPECT_NEAR(row_grads[0].values()[1], 2 * dl(logit0), 1e-6);
  // Feature b (mean, kernel weight 10).
  EXPECT_NEAR(row_grads[1].values()[0], 10 * (dl(logit0) / 2 + 2 * dl(logit1) / 3), 1e-5);
  EXPECT_NEAR(row_grads[1].values()[1], 10 * (dl(logit0) / 2 + dl(logit1) / 3), 1e-5);
}

// EvalStep counts each example in the histogram of its label at the bucket
// of its predicted probability.
TEST(ModelTest, SigmoidEvalFillsProbabilityHistograms) {
  auto model_or = Model::Create(CtrSpec());
  ASSERT_TRUE(model_or.ok());
  const Model& model = **model_or;
  auto backend = CreateCpuBackend();
  std::vector<Tensor> params = InitParams(model);
  std::vector<Tensor> rows;
  const ModelBatch b = CtrBatch(&rows);
  ModelScratch scratch;
  StepResult r;
  model.EvalStep(backend.get(), params, b, rows, &scratch, &r);
  ASSERT_EQ(r.positive_histogram.size(), static_cast<size_t>(kAucBuckets));
  ASSERT_EQ(r.negative_histogram.size(), static_cast<size_t>(kAucBuckets));
  int64_t pos = 0, neg = 0;
  for (int i = 0; i < kAucBuckets; ++i) {
    pos += r.positive_histogram[i];
    neg += r.negative_histogram[i];
  }
  EXPECT_EQ(pos, 2);
  EXPECT_EQ(neg, 2);
  // The last layer's logits, recomputed through TrainStep's loss: each bucket
  // holds a probability consistent with the loss of its example.
  double want_loss = 0;
  for (int i = 0; i < kAucBuckets; ++i) {
    const double centre = (i + 0.5) / kAucBuckets;
    want_loss -= r.positive_histogram[i] * std::log(centre);
    want_loss -= r.negative_histogram[i] * std::log(1 - centre);
  }
  EXPECT_NEAR(r.loss_sum, want_loss, 0.02);
}

}  // namespace
}  // namespace pscluster
