#include "worker/core/model.h"

#include <cmath>
#include <random>

#include "common/initializer.h"
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
    Tensor t(Shape(v.shape().begin(), v.shape().end()));
    InitializerProto init;
    init.set_type("random_normal");
    init.set_stddev(0.5f);
    init.set_seed(3);
    RunInitializer(init, v.name(), t.shape(), absl::MakeSpan(t.values()));
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
  std::vector<float> x(batch * 5);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  for (float& v : x) v = dist(rng);
  std::vector<int32_t> y = {0, 2, 1, 2};

  ModelScratch scratch;
  std::vector<Tensor> grads;
  StepResult r;
  model.TrainStep(backend.get(), params, x.data(), y.data(), batch, &scratch, &grads, &r);
  EXPECT_EQ(r.examples, batch);

  auto mean_loss = [&]() {
    StepResult e;
    ModelScratch s;
    model.EvalStep(backend.get(), params, x.data(), y.data(), batch, &s, &e);
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
  std::vector<float> x(n * 5);
  std::vector<int32_t> y(n);
  std::mt19937 rng(2);
  std::normal_distribution<float> dist;
  for (int64_t i = 0; i < n; ++i) {
    y[i] = static_cast<int32_t>(i % 3);
    for (int j = 0; j < 5; ++j) x[i * 5 + j] = 0.3f * dist(rng) + (j == y[i] ? 2.0f : 0.0f);
  }
  ModelScratch scratch;
  std::vector<Tensor> grads;
  StepResult first, last;
  for (int step = 0; step < 300; ++step) {
    StepResult r;
    model.TrainStep(backend.get(), params, x.data(), y.data(), n, &scratch, &grads, &r);
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

}  // namespace
}  // namespace pscluster
