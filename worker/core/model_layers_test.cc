// Model tests for the conv-net layers, activations, losses and L2: every
// new layer's gradients against central finite differences of the training
// loss, dropout's determinism, and batch norm's moving statistics.
#include <cmath>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/initializer.h"
#include "common/model_variables.h"
#include "gtest/gtest.h"
#include "worker/core/cpu_backend.h"
#include "worker/core/model.h"

namespace pscluster {
namespace {

JobSpec Spec(const std::string& model_yaml) {
  auto spec = ParseJobSpec("model:\n" + model_yaml + R"(
optimizer: {type: sgd, learning_rate: 0.1}
data:
  train: {images: a, labels: b}
  eval: {images: a, labels: b}
)",
                           "layers.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : JobSpec();
}

std::vector<Tensor> InitParams(const Model& model, float stddev = 0.5f) {
  std::vector<Tensor> params;
  for (const VariableSpecProto& v : model.variables()) {
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

ModelBatch RandomBatch(int64_t n, int64_t inputs, int32_t classes, uint32_t seed) {
  ModelBatch b;
  b.size = n;
  b.x.resize(n * inputs);
  b.y.resize(n);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  for (float& v : b.x) v = dist(rng);
  for (int64_t i = 0; i < n; ++i) b.y[i] = static_cast<int32_t>(i % classes);
  b.seed = 77;
  return b;
}

bool IsMovingStatistic(const std::string& name) {
  return name.find("/moving_") != std::string::npos;
}

// Checks every trainable parameter's gradient against central differences
// of the training loss (same batch, same dropout seed). The loss is summed
// in double; the step 1e-2 and the tolerance allow for float activations.
// Elements whose two sides disagree by a kink (relu, max) are rare with
// random inputs; at most `max_kinks` mismatches are tolerated.
void CheckGradients(const std::string& model_yaml, int64_t batch_size, int64_t inputs,
                    int32_t classes, int max_kinks = 0) {
  SCOPED_TRACE(model_yaml);
  auto model_or = Model::Create(Spec(model_yaml));
  ASSERT_TRUE(model_or.ok()) << model_or.status();
  const Model& model = **model_or;
  auto backend = CreateCpuBackend();
  std::vector<Tensor> params = InitParams(model);
  const ModelBatch b = RandomBatch(batch_size, inputs, classes, 5);
  ModelScratch scratch;
  std::vector<Tensor> grads, row_grads;
  StepResult r;
  model.TrainStep(backend.get(), params, b, {}, &scratch, &grads, &row_grads, &r);
  ASSERT_TRUE(std::isfinite(r.loss_sum));
  auto mean_loss = [&]() {
    ModelScratch s;
    std::vector<Tensor> g, rg;
    StepResult e;
    model.TrainStep(backend.get(), params, b, {}, &s, &g, &rg, &e);
    return e.loss_sum / static_cast<double>(batch_size);
  };
  const float h = 1e-2f;
  int checked = 0, mismatches = 0;
  for (size_t p = 0; p < params.size(); ++p) {
    const std::string& name = model.variables()[p].name();
    if (IsMovingStatistic(name)) continue;
    const int64_t stride = std::max<int64_t>(1, params[p].num_elements() / 40);
    for (int64_t i = 0; i < params[p].num_elements(); i += stride) {
      float& w = params[p].values()[i];
      const float saved = w;
      w = saved + h;
      const double up = mean_loss();
      w = saved - h;
      const double down = mean_loss();
      w = saved;
      const double numeric = (up - down) / (2 * h);
      const double got = grads[p].values()[i];
      ++checked;
      if (std::fabs(got - numeric) > 2e-3 + 2e-2 * std::fabs(numeric)) {
        ++mismatches;
        ADD_FAILURE_AT(__FILE__, __LINE__)
            << name << "[" << i << "]: analytic " << got << " numeric " << numeric;
      }
    }
  }
  EXPECT_GT(checked, 10);
  EXPECT_LE(mismatches, max_kinks);
}

TEST(ModelLayersTest, ActivationGradients) {
  CheckGradients(R"(
  inputs: {dense: 6}
  layers:
    - dense: {units: 5, activation: tanh}
    - dense: {units: 5, activation: sigmoid}
    - dense: {units: 4, activation: gelu}
    - tanh
    - dense: {units: 4}
    - gelu
    - sigmoid
    - dense: {units: 3}
)",
                 5, 6, 3);
}

TEST(ModelLayersTest, MseAndHuberGradients) {
  for (const char* loss : {"mse", "{type: huber, delta: 0.3}"}) {
    CheckGradients(absl::StrCat(R"(
  inputs: {dense: 4}
  layers:
    - dense: {units: 6, activation: tanh}
    - dense: {units: 3}
  loss: )",
                                loss, "\n"),
                   6, 4, 3);
  }
  // One output unit: the target is the 0/1 label.
  CheckGradients(R"(
  inputs: {dense: 4}
  layers:
    - dense: {units: 5, activation: gelu}
    - dense: {units: 1}
  loss: mse
)",
                 6, 4, 2);
}

TEST(ModelLayersTest, L2IsInTheLossAndTheGradient) {
  const std::string yaml = R"(
  inputs: {dense: 4}
  layers:
    - dense: {units: 5, activation: tanh, l2: 0.5}
    - dense: {units: 3}
  l2: 0.1
)";
  CheckGradients(yaml, 4, 4, 3);
  // The penalty: 0.5/2 * |W0|^2 + 0.1/2 * |W1|^2, biases excluded, in the
  // reported loss (train and eval alike).
  auto with = Model::Create(Spec(yaml));
  auto without = Model::Create(Spec(R"(
  inputs: {dense: 4}
  layers:
    - dense: {units: 5, activation: tanh}
    - dense: {units: 3}
)"));
  ASSERT_TRUE(with.ok() && without.ok());
  auto backend = CreateCpuBackend();
  const std::vector<Tensor> params = InitParams(**with);
  const ModelBatch b = RandomBatch(4, 4, 3, 6);
  double sq0 = 0, sq1 = 0;
  for (float v : params[0].values()) sq0 += static_cast<double>(v) * v;
  for (float v : params[2].values()) sq1 += static_cast<double>(v) * v;
  ModelScratch s;
  StepResult a, c;
  (*with)->EvalStep(backend.get(), params, b, {}, &s, &a);
  (*without)->EvalStep(backend.get(), params, b, {}, &s, &c);
  EXPECT_NEAR(a.loss_sum / 4 - c.loss_sum / 4, 0.25 * sq0 + 0.05 * sq1, 1e-5);
}

TEST(ModelLayersTest, ConvPoolFlattenGradients) {
  // Two convs (same and valid padding, a non-square kernel), both poolings,
  // so the first conv's gradient flows through max_pool, col2im and
  // avg_pool.
  CheckGradients(R"(
  inputs: {image: [7, 6, 2]}
  layers:
    - conv2d: {filters: 3, kernel: 3, padding: same, activation: tanh}
    - max_pool: {pool: 2, stride: 1}
    - conv2d: {filters: 4, kernel: [2, 3], stride: [1, 2], activation: gelu}
    - avg_pool: {pool: 2, padding: same}
    - flatten
    - dense: {units: 3}
)",
                 3, 7 * 6 * 2, 3, /*max_kinks=*/1);
}

TEST(ModelLayersTest, ReluConvGradients) {
  CheckGradients(R"(
  inputs: {image: [6, 6, 1]}
  layers:
    - conv2d: {filters: 4, kernel: 3, activation: relu}
    - max_pool: {pool: 2}
    - flatten
    - dense: {units: 4, activation: relu}
    - dense: {units: 3}
)",
                 4, 36, 3, /*max_kinks=*/1);
}

TEST(ModelLayersTest, DropoutGradientsAndDeterminism) {
  const std::string yaml = R"(
  inputs: {dense: 6}
  layers:
    - dense: {units: 8, activation: tanh}
    - dropout: {rate: 0.5}
    - dense: {units: 3}
)";
  CheckGradients(yaml, 5, 6, 3);
  auto model = Model::Create(Spec(yaml));
  ASSERT_TRUE(model.ok());
  auto backend = CreateCpuBackend();
  const std::vector<Tensor> params = InitParams(**model);
  ModelBatch b = RandomBatch(5, 6, 3, 7);
  auto step = [&](uint64_t seed) {
    b.seed = seed;
    ModelScratch s;
    std::vector<Tensor> g, rg;
    StepResult r;
    (*model)->TrainStep(backend.get(), params, b, {}, &s, &g, &rg, &r);
    return std::make_pair(r.loss_sum,
                          std::vector<float>(g[0].values().begin(), g[0].values().end()));
  };
  // A retried step (same seed) repeats its gradients exactly; another step differs.
  EXPECT_EQ(step(StepSeed(42, 10)), step(StepSeed(42, 10)));
  EXPECT_NE(step(StepSeed(42, 10)).second, step(StepSeed(42, 11)).second);
  EXPECT_NE(StepSeed(42, 10), StepSeed(43, 10));
  // Evaluation has no dropout: it equals the same model without the layer.
  auto plain = Model::Create(Spec(R"(
  inputs: {dense: 6}
  layers:
    - dense: {units: 8, activation: tanh}
    - dense: {units: 3}
)"));
  ASSERT_TRUE(plain.ok());
  ModelScratch s;
  StepResult with, without;
  (*model)->EvalStep(backend.get(), params, b, {}, &s, &with);
  (*plain)->EvalStep(backend.get(), params, b, {}, &s, &without);
  EXPECT_EQ(with.loss_sum, without.loss_sum);
}

TEST(ModelLayersTest, BatchNormGradientsAndMovingStatistics) {
  CheckGradients(R"(
  inputs: {dense: 5}
  layers:
    - dense: {units: 6}
    - batch_norm
    - tanh
    - dense: {units: 3}
)",
                 8, 5, 3);
  CheckGradients(R"(
  inputs: {image: [5, 5, 2]}
  layers:
    - conv2d: {filters: 3, kernel: 3}
    - batch_norm: {momentum: 0.9}
    - gelu
    - flatten
    - dense: {units: 3}
)",
                 3, 50, 3);

  auto model = Model::Create(Spec(R"(
  inputs: {dense: 3}
  layers:
    - batch_norm: {momentum: 0.9, epsilon: 0.01}
    - dense: {units: 2}
)"));
  ASSERT_TRUE(model.ok()) << model.status();
  const auto& vars = (*model)->variables();
  ASSERT_EQ(vars.size(), 6u);
  EXPECT_EQ(vars[0].name(), "batch_norm_0/gamma");
  EXPECT_EQ(vars[2].name(), "batch_norm_0/moving_mean");
  EXPECT_EQ(vars[3].name(), "batch_norm_0/moving_variance");
  EXPECT_EQ(vars[2].optimizer().type(), "moving_average");
  EXPECT_FLOAT_EQ(vars[3].optimizer().momentum(), 0.9f);
  EXPECT_EQ(vars[3].initializer().type(), "ones");
  EXPECT_EQ(vars[0].optimizer().type(), "sgd");
  auto backend = CreateCpuBackend();
  std::vector<Tensor> params = InitParams(**model);
  ModelBatch b = RandomBatch(10, 3, 2, 8);
  ModelScratch s;
  std::vector<Tensor> grads, rg;
  StepResult r;
  (*model)->TrainStep(backend.get(), params, b, {}, &s, &grads, &rg, &r);
  // The moving statistics' "gradients" are the batch's mean and biased variance.
  for (int c = 0; c < 3; ++c) {
    double m = 0, v = 0;
    for (int e = 0; e < 10; ++e) m += b.x[e * 3 + c];
    m /= 10;
    for (int e = 0; e < 10; ++e) v += (b.x[e * 3 + c] - m) * (b.x[e * 3 + c] - m);
    EXPECT_NEAR(grads[2].values()[c], m, 1e-5);
    EXPECT_NEAR(grads[3].values()[c], v / 10, 1e-5);
  }
  // Evaluation normalizes with the (pulled) moving statistics: with the
  // batch's own statistics in them it matches training's forward pass.
  StepResult train_fwd = r, eval_fwd;
  for (int c = 0; c < 3; ++c) {
    params[2].values()[c] = grads[2].values()[c];
    params[3].values()[c] = grads[3].values()[c];
  }
  (*model)->EvalStep(backend.get(), params, b, {}, &s, &eval_fwd);
  EXPECT_NEAR(eval_fwd.loss_sum, train_fwd.loss_sum, 1e-4);
  params[2].values()[0] += 1.0f;
  StepResult shifted;
  (*model)->EvalStep(backend.get(), params, b, {}, &s, &shifted);
  EXPECT_GT(std::fabs(shifted.loss_sum - eval_fwd.loss_sum), 1e-3);
}

TEST(ModelLayersTest, ConvVariablesFollowKerasShapes) {
  auto model = Model::Create(Spec(R"(
  inputs: {image: [28, 28, 1]}
  layers:
    - conv2d: {filters: 32, kernel: 3, activation: relu}
    - max_pool: {pool: 2}
    - conv2d: {filters: 64, kernel: 3, padding: same}
    - flatten
    - dense: {units: 10}
)"));
  ASSERT_TRUE(model.ok()) << model.status();
  const auto& vars = (*model)->variables();
  ASSERT_EQ(vars.size(), 6u);
  EXPECT_EQ(vars[0].name(), "conv2d_0/kernel");
  EXPECT_EQ(Shape(vars[0].shape().begin(), vars[0].shape().end()), (Shape{3, 3, 1, 32}));
  EXPECT_EQ(vars[2].name(), "conv2d_1/kernel");
  EXPECT_EQ(Shape(vars[2].shape().begin(), vars[2].shape().end()), (Shape{3, 3, 32, 64}));
  EXPECT_EQ(vars[4].name(), "dense_0/kernel");
  // 26x26 -> pool 13x13 -> same conv 13x13x64.
  EXPECT_EQ(Shape(vars[4].shape().begin(), vars[4].shape().end()), (Shape{13 * 13 * 64, 10}));
  EXPECT_EQ((*model)->input_size(), 784);
  EXPECT_EQ((*model)->num_classes(), 10);
}

}  // namespace
}  // namespace pscluster
